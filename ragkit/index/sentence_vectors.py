"""Sentence vectors for the bi-encoder reranker, computed once per sentence instead of per question.

The bi-encoder reranker scores a chunk by its best sentence's cosine to the question. Embedding
the ~50 sentences of 10 candidates costs ~0.5–0.8 s per question on 2 cores, most of the
reranking step, and the same chunks come back question after question. So sentence vectors are
content-addressed (blake2b of the sentence text → vector) and kept:

* in memory, shared per embedder model by every reranker in the process;
* optionally on disk next to an index (``<index>/sentence_vectors-<model>.npz``, float16, loaded
  with ``allow_pickle=False``), filled for every chunk of the index by :meth:`precompute` — the
  index-time cost (SQuAD dev, 2,067 paragraphs: see bench/README.md) that makes reranking a
  lookup and a dot product at question time.

A damaged or foreign file is ignored with a warning and rebuilt; keys are hashes of the text, so a
vector can never belong to another sentence. No library keeps per-sentence vectors of a
document store, hence this small module.

Usage::

    cache = SentenceVectorCache.for_model("all-MiniLM-L6-v2")
    cache.vectors(["Tesla was born in Smiljan.", "He moved to Graz."])   # (2, 384) float32, unit norm
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Iterable

import numpy as np

log = logging.getLogger(__name__)
_KEY_BYTES = 16
_SHARED: dict[str, "SentenceVectorCache"] = {}
_LOCK = threading.Lock()


def sentence_key(sentence: str) -> bytes:
    return hashlib.blake2b(sentence.encode("utf-8", "surrogatepass"), digest_size=_KEY_BYTES).digest()


class SentenceVectorCache:
    def __init__(self, embedder_model: str = "all-MiniLM-L6-v2"):
        self.embedder_model = embedder_model
        self._rows: dict[bytes, int] = {}
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._embedder = None
        self._loaded_files: set[str] = set()
        self.embedded = 0  # sentences this cache had to embed (the cost the cache exists to avoid)

    @classmethod
    def for_model(cls, embedder_model: str) -> "SentenceVectorCache":
        with _LOCK:
            if embedder_model not in _SHARED:
                _SHARED[embedder_model] = cls(embedder_model)
            return _SHARED[embedder_model]

    def __len__(self) -> int:
        return len(self._rows)

    def _embed(self, sentences: list[str]) -> np.ndarray:
        if self._embedder is None:
            from ragkit.llm.generators import shared_text_embedder

            self._embedder = shared_text_embedder(self.embedder_model).embedding_backend
        self.embedded += len(sentences)
        return np.asarray(self._embedder.embed(sentences, normalize_embeddings=True, show_progress_bar=False, batch_size=64), dtype=np.float32)

    def _add(self, keys: list[bytes], vectors: np.ndarray) -> None:
        if not keys:
            return
        if self._vectors.size == 0:
            self._vectors = np.zeros((0, vectors.shape[1]), dtype=np.float32)
        if vectors.shape[1] != self._vectors.shape[1]:
            raise ValueError(f"vector width {vectors.shape[1]} does not match this cache's {self._vectors.shape[1]}")
        start = len(self._vectors)
        # stored as float16 on disk: round fresh vectors the same way so a score never depends on
        # whether its vector came from the file or was just computed
        self._vectors = np.concatenate([self._vectors, vectors.astype(np.float16).astype(np.float32)])
        for offset, key in enumerate(keys):
            self._rows[key] = start + offset

    def vectors(self, sentences: list[str]) -> np.ndarray:
        """Unit vectors of ``sentences`` (embedding only those never seen)."""
        keys = [sentence_key(s) for s in sentences]
        missing: dict[bytes, str] = {}
        for key, sentence in zip(keys, sentences):
            if key not in self._rows:
                missing.setdefault(key, sentence)
        if missing:
            self._add(list(missing), self._embed(list(missing.values())))
        return self._vectors[[self._rows[k] for k in keys]] if keys else np.zeros((0, self._vectors.shape[1] if self._vectors.size else 0), dtype=np.float32)

    def precompute(self, sentences: Iterable[str], progress: bool = False) -> int:
        """Embed every sentence not cached yet; returns how many were embedded."""
        todo: dict[bytes, str] = {}
        for s in sentences:
            key = sentence_key(s)
            if key not in self._rows:
                todo.setdefault(key, s)
        if not todo:
            return 0
        keys, texts = list(todo), list(todo.values())
        batch = 512
        steps = range(0, len(texts), batch)
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc="sentence vectors", unit="batch")
        for i in steps:
            self._add(keys[i : i + batch], self._embed(texts[i : i + batch]))
        return len(todo)

    # -- disk -------------------------------------------------------------------------------------
    @staticmethod
    def file_for(index_dir: str | Path, embedder_model: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in embedder_model)
        return Path(index_dir) / f"sentence_vectors-{safe}.npz"

    def load(self, path: str | Path) -> int:
        """Merge vectors from ``path``; returns how many were read (0 for a missing or bad file)."""
        path = Path(path)
        if not path.is_file() or str(path) in self._loaded_files:
            return 0
        try:
            with np.load(path, allow_pickle=False) as data:
                keys, vectors, model = data["keys"], data["vectors"], str(data["embedder"])
            if model != self.embedder_model or keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != _KEY_BYTES or vectors.ndim != 2 or len(keys) != len(vectors):
                raise ValueError("not a sentence-vector file of this embedder")
            as_bytes = [row.tobytes() for row in keys]
            new = [i for i, k in enumerate(as_bytes) if k not in self._rows]
            self._add([as_bytes[i] for i in new], vectors[new].astype(np.float32))
        except Exception as exc:  # a cache: a bad file costs a rebuild, never a wrong vector
            log.warning("ignoring sentence-vector cache %s (%s); it will be rebuilt", path, exc)
            return 0
        self._loaded_files.add(str(path))
        return len(keys)

    def save(self, path: str | Path) -> None:
        """Write every cached vector (float16) atomically."""
        path = Path(path)
        keys = np.frombuffer(b"".join(self._rows), dtype=np.uint8).reshape(len(self._rows), _KEY_BYTES)
        vectors = self._vectors[list(self._rows.values())].astype(np.float16) if self._rows else np.zeros((0, 0), np.float16)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
        os.close(fd)
        try:
            np.savez(tmp, keys=keys, vectors=vectors, embedder=np.array(self.embedder_model))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self._loaded_files.add(str(path))
