"""CollectionSelector: route a question to the document collections whose descriptions fit it.

An index can hold several collections (``ragkit index docs/wiki --collection wiki --description
"…"``, :mod:`ragkit.index.indexer`); this component decides which of them a question should be
answered from and emits the metadata filter that restricts retrieval to them
(``filters={"collection": [...]}`` for :class:`~ragkit.components.index_retriever.IndexRetriever`).
Nothing in Haystack routes by collection descriptions (its routers route on a fixed label set or a
Jinja condition, not on texts stored with an index), hence this component. Two backends:

* ``"embedding"`` — cosine of the question's embedding (the project's shared sentence-transformers
  embedder) with each description's (``"name: description"``, embedded once and cached). Every
  described collection within ``margin`` of the best is kept; collections without a description
  cannot be judged and are always kept; when no description reaches ``min_similarity`` (a question
  about none of them: "hello", "what is the capital of France?") or none has a description, every
  collection is kept. Milliseconds, no LLM. The defaults (margin 0.10, floor 0.15) were read off
  all-MiniLM-L6-v2 on sample_docs' three collections: a question about one of them scored it
  0.19-0.41 and the others at least 0.12 lower; off-topic questions scored at most 0.10 (0.21 for
  "hello" against "Personal notes"). They are not tuned on a labelled set.
* ``"llm"`` — one call that lists the collections (names and descriptions) in the system prompt
  (a fixed prefix: llama.cpp reuses its cache across questions) and is constrained
  (:func:`ragkit.llm.structured.choice_constraint`: a llama.cpp grammar or a JSON-schema enum) so the
  model can only emit one of the collection names. A failed call or a reply that names no
  collection keeps every collection and says so in ``selection["fallback"]`` (and on the trace).

An explicit ``collections`` list overrides both: its names are checked against the index; unknown
names are listed in ``selection["errors"]`` (the known ones are kept; if none is known, every
collection is), never raised. With zero or one collection in the index the component does nothing
and costs nothing (no embedding, no LLM call). Whenever every collection is kept the filter is
``{}``, so retrieval takes its unfiltered path.

Outputs: ``collections`` (chosen names), ``filters`` (``{"collection": [...]}`` or ``{}``),
``scores`` (per collection: cosine, or 1.0 / 0.0 for the LLM's choice) and ``selection`` (backend,
reason, errors, fallback, ms).

Usage::

    selector = CollectionSelector(index_path=".ragkit/index", backend="embedding")
    selector.warm_up()
    out = selector.run(query="How do I catch an exception in Python?")
    out["collections"], out["filters"]          # ["python-docs"], {"collection": ["python-docs"]}
    retriever.run(query=..., top_k=5, filters=out["filters"])
    selector.run(query="...", collections=["wiki"])   # the caller's choice wins
"""

from __future__ import annotations

import time
from typing import Any, Literal, Optional

import numpy as np
from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex
from ragkit.llm.structured import call_llm, choice_constraint, generator_from_dict, generator_to_dict, json_reply_max_tokens, parse_choice
from ragkit.pipeline.trace import record

SelectorBackend = Literal["embedding", "llm"]
DEFAULT_MARGIN = 0.10
DEFAULT_MIN_SIMILARITY = 0.15

SELECTOR_SYSTEM = (
    "You route questions to document collections. Pick the one collection most likely to hold the "
    "answer to the user's question. The collections:\n{listing}\nReply with the collection name only."
)


@component
class CollectionSelector:
    def __init__(
        self,
        index: RagIndex | None = None,
        index_path: str | None = None,
        backend: SelectorBackend = "embedding",
        chat_generator: Any = None,
        embedder_model: str = "all-MiniLM-L6-v2",
        margin: float = DEFAULT_MARGIN,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
    ):
        if backend not in ("embedding", "llm"):
            raise ValueError(f"backend must be embedding or llm, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm backend needs a chat generator")
        if not 0.0 <= margin <= 2.0:
            raise ValueError("margin must be between 0 and 2 (a difference of cosines)")
        if not -1.0 <= min_similarity <= 1.0:
            raise ValueError("min_similarity must be a cosine, between -1 and 1")
        self._handle = IndexHandle(index, index_path)
        self.backend, self.chat_generator, self.embedder_model = backend, chat_generator, embedder_model
        self.margin, self.min_similarity = margin, min_similarity
        self._embedder = None
        self._vectors: dict[tuple[str, str], np.ndarray] = {}  # (name, description) -> unit vector

    def warm_up(self) -> None:
        if self.backend == "embedding" and self._embedder is None:
            from ragkit.llm.generators import shared_text_embedder

            self._embedder = shared_text_embedder(self.embedder_model)
        if self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        if self._handle.index_path is None:
            raise ValueError("an in-memory index cannot be serialized; save it first (RagIndex.save)")
        return default_to_dict(
            self, index_path=self._handle.index_path, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator),
            embedder_model=self.embedder_model, margin=self.margin, min_similarity=self.min_similarity,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CollectionSelector":
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(collections=list[str], filters=dict, scores=dict, selection=dict)
    def run(self, query: str, collections: Optional[list[str]] = None, query_embedding: Optional[list[float]] = None) -> dict[str, Any]:
        """``collections``: the caller's choice (overrides the backend); ``query_embedding``: the
        question's embedding if the pipeline already has it (saves the embedder a call)."""
        t0 = time.perf_counter()
        index = self._handle.get()
        held = sorted(index.collection_counts())
        selection: dict[str, Any] = {"backend": self.backend, "errors": []}
        scores: dict[str, float] = {}
        if collections:
            chosen = self._explicit(collections, held, selection)
        elif len(held) <= 1:
            chosen, selection["reason"] = held, "the index holds one collection" if held else "the index is empty"
        elif self.backend == "embedding":
            chosen, scores = self._by_embedding(query, query_embedding, held, index.collections, selection)
        else:
            chosen, scores = self._by_llm(query, held, index.collections, selection)
        narrowed = bool(chosen) and set(chosen) != set(held)
        filters = {"collection": list(chosen)} if narrowed else {}
        selection["ms"] = round((time.perf_counter() - t0) * 1000, 2)
        record(decision={"collections": ",".join(chosen) if narrowed else "all"})
        return {"collections": list(chosen), "filters": filters, "scores": scores, "selection": selection}

    def _explicit(self, asked: list[str], held: list[str], selection: dict) -> list[str]:
        selection["reason"] = "explicit"
        if isinstance(asked, str):  # a bare name, not a list of letters
            asked = [asked]
        known = [name for name in dict.fromkeys(asked) if name in held]
        unknown = [name for name in dict.fromkeys(asked) if name not in held]
        if unknown:
            listed = ", ".join(held) or "none"
            selection["errors"].append(f"unknown collection(s) {', '.join(map(repr, unknown))}; this index holds: {listed}")
            record(warning=selection["errors"][-1])
        if not known:
            selection["reason"] = "explicit, but no name is a collection of this index: every collection kept"
            return list(held)
        return known

    def _description_vectors(self, described: dict[str, str]) -> np.ndarray:
        missing = [(name, text) for name, text in described.items() if (name, text) not in self._vectors]
        if missing:
            texts = [f"{name.replace('-', ' ').replace('_', ' ')}: {text}" for name, text in missing]
            vectors = np.asarray(self._embedder.embedding_backend.embed(texts, normalize_embeddings=True, show_progress_bar=False), dtype="float32")
            self._vectors.update({key: vector for key, vector in zip(missing, vectors)})
        return np.vstack([self._vectors[(name, text)] for name, text in described.items()])

    def _by_embedding(self, query: str, query_embedding, held: list[str], descriptions: dict[str, str], selection: dict) -> tuple[list[str], dict]:
        described = {name: descriptions[name] for name in held if descriptions.get(name)}
        if not described:
            selection["reason"] = "no collection has a description: every collection kept"
            return list(held), {}
        self.warm_up()
        matrix = self._description_vectors(described)
        vector = np.asarray(query_embedding if query_embedding is not None else self._embedder.run(text=query)["embedding"], dtype="float32")
        if vector.shape != (matrix.shape[1],):
            raise ValueError(f"query_embedding has {vector.size} dimensions; {self.embedder_model} gives {matrix.shape[1]}")
        norm = float(np.linalg.norm(vector))
        sims = matrix @ (vector / norm) if norm else np.zeros(len(described), dtype="float32")
        scores = {name: round(float(s), 4) for name, s in zip(described, sims)}
        best = max(scores.values())
        if best < self.min_similarity:
            selection["reason"] = f"no description matches the question (best cosine {best:.2f} < {self.min_similarity}): every collection kept"
            return list(held), scores
        kept = [name for name in held if name not in described or scores[name] >= best - self.margin]
        undescribed = [name for name in held if name not in described]
        selection["reason"] = f"within {self.margin} of the best cosine {best:.2f}" + (
            f"; kept without a description: {', '.join(undescribed)}" if undescribed else "")
        return kept, scores

    def _by_llm(self, query: str, held: list[str], descriptions: dict[str, str], selection: dict) -> tuple[list[str], dict]:
        if not any(descriptions.get(name) for name in held):
            selection["reason"] = "no collection has a description: every collection kept"
            return list(held), {}
        listing = "\n".join(f"- {name}: {descriptions.get(name) or '(no description)'}" for name in held)
        messages = [ChatMessage.from_system(SELECTOR_SYSTEM.format(listing=listing)), ChatMessage.from_user(query)]
        reply = call_llm(
            self.chat_generator, messages, lambda text: parse_choice(text, held),
            generation_kwargs={**choice_constraint(self.chat_generator, held), "max_tokens": json_reply_max_tokens(self.chat_generator, 24, items=2), "temperature": 0.0},
            step="collection_selector",
        )
        if not reply.ok:
            selection["fallback"] = reply.error
            selection["reason"] = "the LLM's choice failed: every collection kept"
            return list(held), {}
        selection["reason"] = "the LLM's choice"
        return [reply.value], {name: 1.0 if name == reply.value else 0.0 for name in held}
