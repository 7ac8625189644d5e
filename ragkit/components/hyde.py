"""HyDE: embed a hypothetical answer passage together with the question (Gao et al., 2022).

The LLM writes ``n_passages`` short passages that would answer the question; each is embedded with
the same embedder as the documents, and the query vector becomes the mean of the question's and
the passages' embeddings (the paper averages the hypothetical documents' vectors; keeping the
question's own vector guards against a passage that drifts off-topic). Passages are cached per
(question, model, n_passages), so re-asking costs no LLM call. If the LLM fails, the plain
question embedding is returned and the output says why.

Usage::

    hyde = HyDEEmbedder(chat_generator=llm, n_passages=1)
    out = hyde.run(query="Where was Tesla born?", query_embedding=question_vector)
    out["embedding"], out["hyde"]["passages"]
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

import numpy as np
from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.llm.structured import call_llm, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

HYDE_SYSTEM = "Write a short, factual encyclopedia-style passage (2-3 sentences) that answers the question. No preamble."


def _model_name(chat_generator: Any) -> str:
    return str(getattr(chat_generator, "model", None) or getattr(chat_generator, "model_path", None) or type(chat_generator).__name__)


def _nonempty(text: str) -> str:
    text = text.strip()
    if len(text) < 10:
        raise ValueError("passage too short to embed")
    return text


@component
class HyDEEmbedder:
    def __init__(self, chat_generator: Any, embedder_model: str = "all-MiniLM-L6-v2", n_passages: int = 1, max_tokens: int = 80, cache_size: int = 1024, prompt: Optional[str] = None):
        if n_passages < 1:
            raise ValueError("n_passages must be at least 1")
        self.chat_generator = chat_generator
        self.embedder_model = embedder_model
        self.n_passages = n_passages
        self.max_tokens = max_tokens
        self.cache_size = cache_size
        self.prompt = prompt  # the system prompt (HYDE_SYSTEM when None)
        self._cache: OrderedDict[tuple, list[str]] = OrderedDict()
        self._embedder = None

    def warm_up(self) -> None:
        if self._embedder is None:
            from ragkit.llm.generators import shared_text_embedder

            self._embedder = shared_text_embedder(self.embedder_model)
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator), embedder_model=self.embedder_model,
            n_passages=self.n_passages, max_tokens=self.max_tokens, cache_size=self.cache_size, prompt=self.prompt,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HyDEEmbedder":
        return default_from_dict(cls, generator_from_dict(data))

    def passages(self, query: str) -> tuple[list[str], list[str]]:
        """(passages, errors) for ``query``, from the cache when possible."""
        key = (query, _model_name(self.chat_generator), self.n_passages, self.prompt)
        if key in self._cache:
            self._cache.move_to_end(key)
            record(decision={"hyde_cache": "hit"})
            return self._cache[key], []
        passages, errors = [], []
        for i in range(self.n_passages):
            # Different seeds give different passages; temperature 0 would repeat the first one.
            kwargs = {"max_tokens": self.max_tokens, "temperature": 0.0 if i == 0 else 0.7, "seed": i}
            reply = call_llm(self.chat_generator, [ChatMessage.from_system(self.prompt or HYDE_SYSTEM), ChatMessage.from_user(query)], _nonempty, kwargs, step="hyde")
            if reply.ok:
                passages.append(reply.value)
            else:
                errors.append(reply.error)
        if passages and not errors:
            self._cache[key] = passages
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return passages, errors

    @component.output_types(embedding=list[float], hyde=dict)
    def run(self, query: str, query_embedding: Optional[list[float]] = None) -> dict[str, Any]:
        self.warm_up()
        if query_embedding is None:  # in the engine's graph HyDE embeds the question itself
            query_embedding = self._embedder.run(text=query)["embedding"]
        passages, errors = self.passages(query)
        info: dict[str, Any] = {"passages": passages}
        if errors:
            info["fallback"] = errors[0]
        if not passages:
            record(decision={"hyde": "off (no passage)"})
            return {"embedding": list(query_embedding), "hyde": info}
        vectors = np.asarray(self._embedder.embedding_backend.embed(passages, normalize_embeddings=True, show_progress_bar=False), dtype="float32")
        query_vec = np.asarray(query_embedding, dtype="float32")
        mean = np.vstack([query_vec / np.linalg.norm(query_vec), vectors]).mean(axis=0)
        mean /= np.linalg.norm(mean)
        record(decision={"hyde_passages": len(passages)})
        return {"embedding": mean.tolist(), "hyde": info}
