"""What the ``ragkit`` commands share: the config their flags make, the LLM-reply cache flags, and one way to print user text.

:func:`shown` is :func:`ragkit.ui.text_safety.terminal_text`, the escaping every command applies to user
and document text: rich markup escaped, control characters and bidi overrides shown (``\\x1b``) rather
than obeyed, so a file name or an answer cannot clear the screen or fake output.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ragkit.config import RagConfig
from ragkit.ui.text_safety import terminal_text as shown  # noqa: F401  (the commands import it from here)


def config_from_args(args) -> RagConfig:
    """``--config`` FILE (else ``RagConfig()``), then ``RAGKIT_*`` variables, then the command's own flags."""
    config = RagConfig.from_yaml(args.config) if args.config else RagConfig()
    config = RagConfig.from_env(config)
    if getattr(args, "store", None):
        config.store = args.store
    if getattr(args, "llm", None):
        config.models.llm = args.llm
    if getattr(args, "top_k", None):
        config.top_k = args.top_k
    if getattr(args, "mode", None):
        config.retrieval_mode = args.mode
    if getattr(args, "hierarchical", False):
        config.index.hierarchical = True
    config.validate()
    return config


def print_files_not_read(report, console) -> None:
    """Each file an indexing run skipped, with its reason, and one line counting the files of types ragkit does not
    read (``ragkit index`` and ``ragkit testset generate PATH``: a user must see what their index leaves out)."""
    from ragkit.index.ingest import SUPPORTED_SUFFIXES

    for source, reason in report.skipped:
        console.print(f"[yellow]skipped[/] {shown(source)}: {shown(reason)}")
    if report.other_types:
        counts = [f"{n} {shown(suffix)}" for suffix, n in report.other_types.items()]
        listed = ", ".join(counts[:6]) + (f" and {len(counts) - 6} other types" if len(counts) > 6 else "")
        console.print(f"[yellow]not read[/] {sum(report.other_types.values())} file(s) of other types ({listed}); "
                      f"ragkit reads {' '.join(sorted(SUPPORTED_SUFFIXES))}")


def index_location(args, config: RagConfig) -> str:
    """Where the command's index lives: ``--store`` / ``RAGKIT_STORE`` / the config's ``store`` URL, else ``--index-dir``."""
    return config.store or args.index_dir


def default_cache_path() -> Path:
    from ragkit.llm.models import cache_dir

    return cache_dir() / "llm_cache.sqlite"


def cache_options() -> argparse.ArgumentParser:
    """The LLM-reply cache and progress flags of the commands that ask the LLM many questions (a parent parser)."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--cache", help=f"LLM-reply cache file (default {default_cache_path()})")
    options.add_argument("--no-cache", action="store_true", help="ask the LLM every time")
    options.add_argument("--quiet", action="store_true", help="no progress bar")
    return options


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what it left behind (printed after "interrupted: ")."""


def live_version(where: str) -> str | None:
    from ragkit.index.stores import is_store_url
    from ragkit.index.versions import IndexError_, live_dir

    if is_store_url(where):
        return None
    try:
        live = live_dir(where)
    except (OSError, IndexError_):
        return None
    return str(live) if live else None


def forget_interrupt_seen_in_c_code() -> None:
    """Let ``return 130`` be the exit code after a Ctrl-C that was handled.

    CPython marks a KeyboardInterrupt as *unhandled* when it escapes code run through ``PyRun_String``, which
    pybind11 calls while an extension (torch, faiss, …) defines its classes, even if ragkit catches it further
    up; at exit the interpreter then kills itself with SIGINT (seen as -2, not 130, by a parent process, in about
    one Ctrl-C in four while the embedding model loads). Each ``PyRun_String`` call resets that mark first, so one
    empty call clears it; no Python API does."""
    import ctypes

    try:
        ctypes.pythonapi.PyRun_SimpleString(b"")
    except (AttributeError, OSError):  # an interpreter without the C API symbol: the exit code is the only cost
        pass


def quiet_model_loading() -> None:
    """Turn off transformers' "Loading weights: 100%|…| 103/103" bar: it takes no visible time when the
    embedder loads, and in a terminal it is a line of noise above every command's output (and draws over
    the chat's prompt)."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # a remote-only setup without transformers has no such bar
        return
    transformers_logging.disable_progress_bar()
