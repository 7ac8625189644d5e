"""FallbackRetriever: when the evidence looks insufficient, try the next retrieval strategy — bounded,
each attempt traced with why it was tried and why it stopped.

Self-reflection, ``check``:

``coverage`` (no LLM, well under a millisecond)
    the IDF-weighted share of the question's terms — as the index's BM25 tokenizes them; a term no chunk
    has gets the highest IDF — that the best single chunk contains. Nothing left after the guard and the grader is coverage 0. Below
    ``coverage_threshold`` the evidence is insufficient.
``llm``
    one forward pass: P(the sources state the answer) (the multi-hop step's sufficiency question,
    :func:`ragkit.llm.judgments.yes_probability`); an unusable reply stops the fallbacks (``check_failed``).

Strategies, tried in the order given (one the main retrieval already used is skipped):

``sparse`` / ``dense`` / ``hybrid``  the index searched in another mode;
``hyde``             a hypothetical passage's embedding, searched densely (one LLM call);
``expand``           BM25 over the question plus pseudo-relevance-feedback terms (:mod:`ragkit.components.query_expander`);
``all_collections``  the main mode without the collection / intent filters that narrowed the first search;
``sql``              the SQL route over the configured tables, whatever the question's wording (one LLM call).

A strategy's new chunks join the held ones and the ``top_k`` that cover most of the question stay
(ties: the held first), so a new chunk displaces one only by covering more — on SQuAD dev questions,
putting the new chunks first instead pushed the answer's chunk out often enough to lower Recall@5. It stops at the first sufficient evidence (``recovered``), when the
strategies run out (``exhausted``), at ``max_attempts`` or when the next attempt could pass
``max_llm_calls`` (``budget``). Exit ``sufficient``: the first retrieval was enough and nothing ran.

Written here because Haystack has no retriever fallback chain with a sufficiency test between tries;
the retrieval itself is ragkit's :class:`~ragkit.components.index_retriever.IndexRetriever`.

Usage::

    fallback = FallbackRetriever(index_path=".ragkit/index", main_mode="hybrid", strategies=["sparse", "dense"])
    out = fallback.run(query="Where was Tesla born?", documents=graded, top_k=5)
    out["documents"], out["fallback"]["exit_reason"], out["fallback"]["attempts"]
"""

from __future__ import annotations

import time
from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.components.index_retriever import IndexRetriever
from ragkit.components.injection_guard import InjectionGuard
from ragkit.index.coverage import coverage, question_weights
from ragkit.index.filters import scoped
from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex
from ragkit.llm.prompts import context_messages, sufficiency_task
from ragkit.llm.judgments import yes_probability
from ragkit.llm.structured import generator_from_dict, generator_to_dict, llm_error
from ragkit.pipeline.trace import record

STRATEGIES = ("sparse", "dense", "hybrid", "hyde", "expand", "all_collections", "sql")
LLM_STRATEGIES = {"hyde": 1, "sql": 1}
CHECKS = ("coverage", "llm")


@component
class FallbackRetriever:
    def __init__(
        self,
        index: RagIndex | None = None,
        index_path: str | None = None,
        main_mode: str = "hybrid",
        strategies: list[str] | None = None,
        check: str = "coverage",
        coverage_threshold: float = 0.6,
        sufficiency_threshold: float = 0.5,
        max_attempts: int = 2,
        max_llm_calls: int = 2,
        chat_generator: Any = None,
        embedder: str = "all-MiniLM-L6-v2",
        sql_tables: dict[str, str] | None = None,
    ):
        strategies = list(strategies if strategies is not None else ["sparse", "dense"])
        unknown = [s for s in strategies if s not in STRATEGIES]
        if unknown or check not in CHECKS:
            raise ValueError(f"strategies must be among {STRATEGIES} (not {unknown}) and check one of {CHECKS}")
        if (check == "llm" or any(s in LLM_STRATEGIES for s in strategies)) and chat_generator is None:
            raise ValueError("the llm check and the hyde / sql strategies need a chat generator")
        if "sql" in strategies and not sql_tables:
            raise ValueError("the sql strategy needs sql_tables")
        if max_attempts < 1 or max_llm_calls < 0 or not 0 <= coverage_threshold <= 1 or not 0 <= sufficiency_threshold <= 1:
            raise ValueError("max_attempts must be >= 1, max_llm_calls >= 0, thresholds in [0, 1]")
        self._handle = IndexHandle(index, index_path)
        self.index_path, self.main_mode, self.strategies, self.check = index_path, main_mode, strategies, check
        self.coverage_threshold, self.sufficiency_threshold = coverage_threshold, sufficiency_threshold
        self.max_attempts, self.max_llm_calls = max_attempts, max_llm_calls
        self.chat_generator, self.embedder, self.sql_tables = chat_generator, embedder, dict(sql_tables or {})
        self._retrievers: dict[str, IndexRetriever] = {}
        self._steps: dict[str, Any] = {}  # the hyde / expand / sql components, built on first use and kept (tables load once)
        self._terms: dict[str, set[str]] = {}  # one question's chunk terms by id: assess and merge read the same chunks
        self._weights: dict[str, float] = {}  # one question's term weights (question_weights)
        self._guard = InjectionGuard()

    def warm_up(self) -> None:
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, index_path=self._handle.index_path, main_mode=self.main_mode, strategies=self.strategies, check=self.check,
            coverage_threshold=self.coverage_threshold, sufficiency_threshold=self.sufficiency_threshold, max_attempts=self.max_attempts,
            max_llm_calls=self.max_llm_calls, chat_generator=generator_to_dict(self.chat_generator) if self.chat_generator is not None else None,
            embedder=self.embedder, sql_tables=self.sql_tables,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FallbackRetriever":
        return default_from_dict(cls, generator_from_dict(data) if data["init_parameters"].get("chat_generator") else data)

    # -- is it enough? ----------------------------------------------------------------------------
    def _assess(self, question: str, documents: list[Document]) -> tuple[bool, dict[str, Any], int]:
        """(sufficient, what was measured, LLM calls spent); raises on an unusable LLM reply."""
        cov = round(coverage(self._weights, self._chunk_terms(documents)), 3) if documents else 0.0
        if self.check == "coverage" or not documents:
            return cov >= self.coverage_threshold, {"coverage": cov}, 0
        p = yes_probability(self.chat_generator, context_messages(documents[:3], sufficiency_task(question)), step="fallback_check")
        return p >= self.sufficiency_threshold, {"coverage": cov, "p_sufficient": round(p, 3)}, 1

    def _merge(self, held: list[Document], new: list[Document], top_k: int) -> list[Document]:
        """The ``top_k`` chunks of both lists that hold most of the question (ties: the first retrieval's
        first): a new chunk displaces a held one only by covering more of the question, so an unsure check
        cannot push the chunk that answered out of the evidence."""
        pool = held + new
        covers = [coverage(self._weights, [terms]) for terms in self._chunk_terms(pool)]
        order = sorted(range(len(pool)), key=lambda i: -covers[i])  # sorted() is stable: ties keep held first
        return [pool[i] for i in order[:top_k]]

    def _chunk_terms(self, documents: list[Document]) -> list[set[str]]:
        """Each chunk's terms as the index's BM25 tokenizes them, each chunk tokenized once a question."""
        fresh = [d for d in documents if d.id not in self._terms]
        if fresh:
            self._terms.update(zip((d.id for d in fresh), self._handle.get().terms([d.content or "" for d in fresh])))
        return [self._terms[d.id] for d in documents]

    def _step(self, name: str, build) -> Any:
        if name not in self._steps:
            self._steps[name] = build()
        return self._steps[name]

    def _why(self, measured: dict[str, Any], documents: list[Document]) -> str:
        if not documents:
            return "no chunks left to answer from"
        if "p_sufficient" in measured:
            return f"P(sources answer it) {measured['p_sufficient']} < {self.sufficiency_threshold}"
        return f"question-term coverage {measured['coverage']} < {self.coverage_threshold}"

    # -- the strategies -----------------------------------------------------------------------------
    def _retriever(self, mode: str) -> IndexRetriever:
        if mode not in self._retrievers:
            self._retrievers[mode] = IndexRetriever(index=self._handle.get(), mode=mode, embedder=self.embedder)
        return self._retrievers[mode]

    def _search(self, strategy: str, question: str, top_k: int, filters: dict | None) -> list[Document]:
        if strategy in ("sparse", "dense", "hybrid", "all_collections"):
            mode = self.main_mode if strategy == "all_collections" else strategy
            return self._retriever(mode).run(query=question, top_k=top_k, filters=None if strategy == "all_collections" else filters)["documents"]
        if strategy == "hyde":
            from ragkit.components.hyde import HyDEEmbedder

            out = self._step("hyde", lambda: HyDEEmbedder(chat_generator=self.chat_generator, embedder_model=self.embedder)).run(query=question)
            if not out["hyde"]["passages"]:  # no passage: it would only repeat a dense search of the question
                raise RuntimeError(f"HyDE wrote no passage ({out['hyde'].get('fallback', 'empty')})")
            embedding = out["embedding"]
            return self._retriever("dense").run(query=question, top_k=top_k, query_embedding=embedding, filters=filters)["documents"]
        if strategy == "expand":
            from ragkit.components.query_expander import KeywordExpander, expanded_sparse_search

            queries = self._step("expand", lambda: KeywordExpander(backend="prf", index=self._handle.get())).run(query=question, filters=filters)["queries"]
            return expanded_sparse_search(self._handle.get(), queries, top_k, filters=filters or None)
        from ragkit.components.sql_answerer import SqlAnswerer

        return self._step("sql", lambda: SqlAnswerer(chat_generator=self.chat_generator, tables=self.sql_tables)).run(query=question, documents=[])["documents"]

    @component.output_types(documents=list[Document], fallback=dict)
    def run(self, query: str, documents: list[Document], top_k: Optional[int] = None, filters: Optional[dict] = None, scope: Optional[dict] = None) -> dict[str, Any]:
        """``filters``: the collection / intent filters of the first search (every strategy keeps them but
        ``all_collections``, which exists to drop them)."""
        filters, clash = scoped(filters, scope)  # a clarification's answer narrows the search
        if clash:
            record(warning=clash)
        top_k = top_k or max(len(documents), 5)
        held = list(documents)
        self._weights, self._terms = question_weights(self._handle.get(), query), {}
        info: dict[str, Any] = {"check": self.check, "attempts": [], "llm_calls": 0}
        try:
            enough, measured, calls = self._assess(query, held)
        except Exception as exc:  # an unusable check: keep what we have, say so
            info["exit_reason"], info["error"] = "check_failed", llm_error(exc)
            record(fallback=f"fallback: check failed ({info['error']})", decision={"exit_reason": "check_failed"})
            return {"documents": held, "fallback": info}
        info["llm_calls"] += calls
        info["initial"] = measured
        tried = {self.main_mode}
        queue = [s for s in self.strategies if s not in tried and (s != "all_collections" or filters)]  # nothing to drop: the same search
        exit_reason = "sufficient" if enough else "exhausted"
        while not enough and queue:
            if len(info["attempts"]) >= self.max_attempts:
                exit_reason = "max_attempts"
                break
            strategy = queue.pop(0)
            cost = LLM_STRATEGIES.get(strategy, 0) + (1 if self.check == "llm" else 0)
            if info["llm_calls"] + cost > self.max_llm_calls:
                exit_reason = "budget"
                break
            attempt: dict[str, Any] = {"strategy": strategy, "why": self._why(measured, held)}
            started = time.perf_counter()
            try:
                found = self._guard.run(documents=self._search(strategy, query, top_k, filters))["documents"]
            except Exception as exc:  # a strategy that fails is one attempt spent, and the next is tried
                attempt.update(result="failed", error=llm_error(exc), seconds=round(time.perf_counter() - started, 3))
                info["llm_calls"] += LLM_STRATEGIES.get(strategy, 0)
                info["attempts"].append(attempt)
                record(fallback=f"fallback {strategy}: {attempt['error']}")
                continue
            info["llm_calls"] += LLM_STRATEGIES.get(strategy, 0)
            have = {d.id for d in held}
            new = [d for d in found if d.id not in have]
            candidate = self._merge(held, new, top_k)
            try:
                enough, measured, calls = self._assess(query, candidate)
            except Exception as exc:
                attempt.update(result="check_failed", error=llm_error(exc))
                info["attempts"].append(attempt)
                exit_reason = "check_failed"
                break
            info["llm_calls"] += calls
            attempt.update(new_documents=len(new), after=measured, seconds=round(time.perf_counter() - started, 3),
                           result="sufficient" if enough else "still insufficient")
            info["attempts"].append(attempt)
            if new:
                held = candidate
            if enough:
                exit_reason = "recovered"
        info["exit_reason"] = exit_reason
        # the LLM calls are counted on this step by the helpers that make them (yes_probability, HyDE, the SQL step)
        record(decision={"exit_reason": exit_reason, "tried": ",".join(a["strategy"] for a in info["attempts"]) or "-"})
        return {"documents": held, "fallback": info}
