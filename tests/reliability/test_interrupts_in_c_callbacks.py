"""A Ctrl-C that lands while C code calls back into Python (llama.cpp logging through llama-cpp-python's
ctypes callback while a model loads) is not lost: ragkit holds it and raises it when the load returns.

libc's ``qsort`` stands in for llama.cpp here: a C function that calls a Python ctypes callback, in which
the test sends itself SIGINT, exactly where a user's Ctrl-C lands during a model load."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

import pytest

from ragkit.llm.portable import PortableLlamaCppChatGenerator, interrupts_held_until_return

pytestmark = [pytest.mark.fault("hidden_failure"), pytest.mark.usefixtures("ctrl_c_delivered")]

_COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def _sort_in_c_with_ctrl_c_in_its_callback() -> list[int]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    interrupted = []

    def compare(a, b):
        if not interrupted:
            interrupted.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # Python runs its handler here, inside the callback
        return a[0] - b[0]

    values = (ctypes.c_int * 5)(5, 1, 4, 2, 3)
    libc.qsort(values, len(values), ctypes.sizeof(ctypes.c_int), _COMPARE(compare))
    return list(values)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the "Exception ignored" it shows
def test_without_holding_a_ctrl_c_inside_a_ctypes_callback_is_lost():
    """The premise: ctypes prints and drops an exception raised in a callback, so the C call just goes on
    (with the interrupted comparison's result undefined) and no KeyboardInterrupt ever reaches the caller."""
    assert sorted(_sort_in_c_with_ctrl_c_in_its_callback()) == [1, 2, 3, 4, 5]


def test_held_the_ctrl_c_is_raised_once_the_c_call_returns():
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held_until_return():
            finished.append(_sort_in_c_with_ctrl_c_in_its_callback())
    assert finished == [[1, 2, 3, 4, 5]]  # the C call completed (a model load is not left half-done)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored


def test_without_a_ctrl_c_nothing_is_raised_and_the_program_handler_stays():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        handler = signal.getsignal(signal.SIGINT)
        with interrupts_held_until_return():
            pass
        assert signal.getsignal(signal.SIGINT) is handler and seen == []
        with interrupts_held_until_return():  # a program's own handler gets the held signal, once
            os.kill(os.getpid(), signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_model_load_is_run_with_interrupts_held(monkeypatch):
    from haystack_integrations.components.generators.llama_cpp import LlamaCppChatGenerator

    handlers = []
    monkeypatch.setattr("ragkit.llm.portable.resolve_gguf", lambda name: "/models/m.gguf")
    monkeypatch.setattr(LlamaCppChatGenerator, "warm_up", lambda self: handlers.append(signal.getsignal(signal.SIGINT)))
    PortableLlamaCppChatGenerator(model="m.gguf").warm_up()
    assert len(handlers) == 1 and handlers[0] is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
