"""Haystack's local LLM generator and text embedder, made portable: a model is kept by its name.

llama-cpp-haystack's ``LlamaCppChatGenerator`` and sentence-transformers-haystack's text embedder
serialize the model's resolved file path (inside this machine's ``~/.cache`` and virtualenv), the
thread count and the device of the machine that wrote the YAML, so an exported ragkit pipeline
would load only where it was written. These thin subclasses keep the *name* the user gave
(``qwen2.5-coder-0.5b``, ``all-MiniLM-L6-v2``, a hub id or a path) and resolve it when the model
loads (``warm_up``), with the threads and device of the machine that loads it. Everything else —
generation, streaming, embedding — is the stock component's.

Usage::

    llm = PortableLlamaCppChatGenerator(model="qwen2.5-coder-0.5b")   # n_threads=None: every core
    llm.to_dict()["init_parameters"]["model"]                          # "qwen2.5-coder-0.5b"
    llm.warm_up()                                                      # assembles / finds the GGUF, loads it
"""

from __future__ import annotations

import copy
import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from haystack import component, default_from_dict, default_to_dict
from haystack.utils import deserialize_callable, serialize_callable
from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersTextEmbedder
from haystack_integrations.components.generators.llama_cpp import LlamaCppChatGenerator

from ragkit.llm.aligned_reuse import attach
from ragkit.llm.models import hub_offline, quiet_weight_loading, resolve_embedder, resolve_gguf


_LOADING = threading.Lock()


@contextmanager
def model_params(**fields: Any) -> Iterator[None]:
    """While a model loads, llama.cpp's default model parameters with ``fields`` set: llama-cpp-python's
    ``Llama`` reads the defaults and has no argument for some of them (``use_extra_bufts``). One load at a time."""
    import llama_cpp.llama_cpp as low_level

    original = low_level.llama_model_default_params

    def with_fields():
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    with _LOADING:
        low_level.llama_model_default_params = with_fields
        try:
            yield
        finally:
            low_level.llama_model_default_params = original


@contextmanager
def interrupts_held_until_return() -> Iterator[None]:
    """Hold a Ctrl-C that lands inside the block and raise it when the block returns.

    llama-cpp-python sends llama.cpp's log lines to Python through a ctypes callback, and llama.cpp
    logs all through a model load. A ``KeyboardInterrupt`` raised inside a ctypes callback is printed
    as "Exception ignored" (to a stderr the load silences) and dropped, so a Ctrl-C during the load
    was lost and the run went on to answer (measured: SIGINT the moment the GGUF was mapped → exit 0,
    15 s later). Only the main thread receives signals, so elsewhere this does nothing; so does a
    SIGINT disposition Python does not own (ignored, or the OS default)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        previous(signal.SIGINT, None)  # the program's own handler: Python's default raises KeyboardInterrupt


@component
class PortableLlamaCppChatGenerator(LlamaCppChatGenerator):
    """llama-cpp-haystack's ``LlamaCppChatGenerator`` for a model named by ragkit's name or a ``.gguf`` path.

    The name is resolved when the model loads (an embedded model is assembled from its packages on
    first use, :func:`ragkit.llm.models.resolve_gguf`), and ``n_threads=None`` means every core of the
    machine that loads it; ``to_dict`` keeps the name, so the YAML is the same on every machine."""

    def __init__(
        self, model: str, n_ctx: int = 4096, n_batch: int = 512, n_threads: int | None = None, seed: int = 0, flash_attn: bool = True,
        generation_kwargs: dict[str, Any] | None = None, streaming_callback: Any = None, repack_weights: bool = False,
    ):
        # flash attention: +19% prompt tokens/s for the 0.5B on 2 cores (184 -> 219), same outputs
        # (the base class by name: @component rebuilds the class, which zero-argument super() cannot follow)
        LlamaCppChatGenerator.__init__(
            self, model=model, n_ctx=n_ctx, n_batch=n_batch, model_kwargs={"verbose": False, "seed": seed, "flash_attn": flash_attn},
            generation_kwargs={"seed": seed, **(generation_kwargs or {})}, streaming_callback=streaming_callback,
        )
        self.model_name, self.n_threads, self.seed, self.flash_attn = model, n_threads, seed, flash_attn
        # llama.cpp's CPU backend copies the weights it can repack (Q4_K → interleaved rows) into anonymous
        # memory while the mapped file stays resident too: +600 MB for the 1.5B. Off by default (measured in
        # bench/results/memory.json: the same outputs, the peak ~0.6 GB lower); True restores llama.cpp's default.
        self.repack_weights = repack_weights

    def warm_up(self) -> None:
        if self._model is None:
            self.model_path = str(resolve_gguf(self.model_name))
            self.model_kwargs.update(model_path=self.model_path, n_threads=self.n_threads or os.cpu_count() or 2)
            with model_params(use_extra_bufts=self.repack_weights), interrupts_held_until_return():
                LlamaCppChatGenerator.warm_up(self)
            if self._model is not None:  # None only where a test stands in for llama-cpp-haystack's load
                attach(self._model)  # reuse the prompt cache in whole blocks: a reply depends on its prompt alone

    def to_dict(self) -> dict[str, Any]:
        generation = {k: v for k, v in self.generation_kwargs.items() if k != "seed"}
        return default_to_dict(
            self, model=self.model_name, n_ctx=self.n_ctx, n_batch=self.n_batch, n_threads=self.n_threads, seed=self.seed,
            flash_attn=self.flash_attn, generation_kwargs=copy.deepcopy(generation), repack_weights=self.repack_weights,
            streaming_callback=serialize_callable(self.streaming_callback) if self.streaming_callback else None,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PortableLlamaCppChatGenerator":
        params = data["init_parameters"]
        if params.get("streaming_callback"):
            params["streaming_callback"] = deserialize_callable(params["streaming_callback"])
        return default_from_dict(cls, data)


@component
class PortableTextEmbedder(SentenceTransformersTextEmbedder):
    """sentence-transformers-haystack's text embedder for a model named by ragkit's name, a hub id or a
    folder, resolved when it loads (:func:`ragkit.llm.models.resolve_embedder`); ``to_dict`` keeps the
    name and the device is chosen by the machine that loads it."""

    def __init__(self, model: str = "all-MiniLM-L6-v2", normalize_embeddings: bool = True, progress_bar: bool = False, batch_size: int = 32):
        SentenceTransformersTextEmbedder.__init__(self, model=model, normalize_embeddings=normalize_embeddings, progress_bar=progress_bar, batch_size=batch_size)
        self.model_name = model

    def warm_up(self) -> None:
        if self.embedding_backend is None:
            self.model, self.local_files_only = resolve_embedder(self.model_name), hub_offline()
        with quiet_weight_loading():
            SentenceTransformersTextEmbedder.warm_up(self)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, model=self.model_name, normalize_embeddings=self.normalize_embeddings, progress_bar=self.progress_bar, batch_size=self.batch_size,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PortableTextEmbedder":
        return default_from_dict(cls, data)
