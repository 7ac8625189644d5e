"""An LLM-response cache in SQLite: the same model, prompt and decoding give the same reply, without a call.

Every LLM call ragkit makes goes through one of two places — :func:`ragkit.llm.structured.call_llm`
(generation: answers, grades, rewrites, test-set questions) and :class:`ragkit.llm.probe.LlamaProbe`
(one forward pass: P(yes) of the judge, the gate, the sufficiency check; the grader's scores) — and
both look here first while a cache is active (``with llm_cache(cache): …``). The key is the model's
fingerprint (the sha256 of its GGUF, or the endpoint and model name of a server), the full prompt,
the decoding parameters and the constraint (a grammar's text, a logits mask's description); the value
is what the call returned. So re-scoring a finished evaluation with new metrics makes no LLM call, and
a rerun reproduces every answer byte for byte. A cached reply is traced as a cache hit, not an LLM call.

What cannot be keyed is not cached: a generator with no stable fingerprint (a scripted mock), a logits
processor that cannot describe itself. ``ragkit eval --no-cache`` (or not entering the context) bypasses it.

Written here because neither Haystack nor llama-cpp-python keeps replies across processes keyed by the
constraint they were decoded under (llama-cpp-python's cache keeps KV states, not replies).

Usage::

    cache = LLMCache("~/.cache/ragkit/llm_cache.sqlite")
    with llm_cache(cache):
        rag.ask("Where was Tesla born?")    # the second time: zero LLM calls, the same answer
    cache.stats()                            # {"hits": …, "misses": …, "entries": …}
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from ragkit.llm.faults import is_llama_cpp
from ragkit.llm.models import EMBEDDED_LLMS

_ACTIVE: contextvars.ContextVar["LLMCache | None"] = contextvars.ContextVar("ragkit_llm_cache", default=None)
_FILE_HASHES: dict[tuple[str, int, float], str] = {}


class LLMCache:
    """Replies by key, in one SQLite file shared by processes (WAL mode; a writer waits for another)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, kind TEXT NOT NULL, value TEXT NOT NULL, created REAL NOT NULL)")
        self.hits = self.misses = 0

    def get(self, key: str) -> Any | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def put(self, key: str, kind: str, value: Any) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO replies (key, kind, value, created) VALUES (?, ?, ?, ?)", (key, kind, json.dumps(value), time.time()))

    def stats(self) -> dict[str, int]:
        with self._lock:
            entries = self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
        return {"hits": self.hits, "misses": self.misses, "entries": entries}

    def close(self) -> None:
        with self._lock:
            self._db.close()


@contextlib.contextmanager
def llm_cache(cache: LLMCache | None) -> Iterator[LLMCache | None]:
    """Serve the LLM calls made inside this block from ``cache`` (None: no cache, the calls are made)."""
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


def active_cache() -> LLMCache | None:
    return _ACTIVE.get()


def file_sha256(path: str | Path) -> str:
    """sha256 of a model file, computed once per process per (path, size, mtime)."""
    stat = os.stat(path)
    key = (str(path), stat.st_size, stat.st_mtime)
    if key not in _FILE_HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
        _FILE_HASHES[key] = digest.hexdigest()
    return _FILE_HASHES[key]


def model_fingerprint(generator: Any) -> str | None:
    """What identifies the model behind ``generator``; None when nothing stable does (no caching then)."""
    if is_llama_cpp(generator):
        name = getattr(generator, "model_name", None)
        if name in EMBEDDED_LLMS:
            return "gguf:" + EMBEDDED_LLMS[name].sha256
        path = getattr(generator, "model_path", None) or name
        try:
            return "gguf:" + file_sha256(path)
        except OSError:
            return None
    url, model = getattr(generator, "api_base_url", None), getattr(generator, "model", None)
    if url and model:
        return f"openai:{url}:{model}"
    fingerprint = getattr(generator, "cache_fingerprint", None)  # a test double may name itself
    return fingerprint() if callable(fingerprint) else None


def describe(value: Any) -> Any | None:
    """A JSON-able description of a decoding parameter; None when it has none (the call is not cached)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        parts = [describe(v) for v in value]
        return None if any(p is None and v is not None for p, v in zip(parts, value)) else parts
    if isinstance(value, dict):
        parts = {k: describe(v) for k, v in value.items()}
        return None if any(parts[k] is None and value[k] is not None for k in value) else parts
    key = getattr(value, "cache_key", None)
    if callable(key):
        return key()
    source = getattr(value, "ragkit_source", None)  # a grammar made by ragkit.llm.structured.gbnf_grammar
    if isinstance(source, str):
        return {"grammar": source}
    return None


def call_key(kind: str, generator: Any, prompt: Any, parameters: dict[str, Any]) -> str | None:
    """The cache key of one call, or None if it cannot be keyed (then it is made, and not stored)."""
    if active_cache() is None:
        return None
    fingerprint = model_fingerprint(generator)
    described = describe(parameters)
    if fingerprint is None or described is None:
        return None
    payload = json.dumps({"kind": kind, "model": fingerprint, "prompt": prompt, "parameters": described}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
