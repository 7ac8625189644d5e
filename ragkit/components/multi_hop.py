"""MultiHopReasoner: after retrieval, do the sources answer the question? If not, follow the bridge.

"Who was the grandfather of the emperor who founded the Yuan dynasty?" names neither Kublai Khan nor
Genghis Khan, so one retrieval finds the sentence about the founding and nothing about the
grandfather. Each iteration of this step:

1. takes the best evidence sentences for the question (:class:`EvidenceSelector`, no LLM);
2. checks whether they answer it (``check``): ``coverage`` (the default, no LLM, under a millisecond)
   — the IDF-weighted share of the query's terms the best chunk holds, the fallback retriever's
   measure (:func:`ragkit.components.fallback_retriever.coverage`), against ``coverage_threshold``;
   after a hop the query is the follow-up, so the check asks whether what was still unknown was
   found — or ``llm``: one forward pass, P(yes) read from the next-token distribution with llama.cpp
   (a server: from its top log-probabilities, :mod:`ragkit.llm.judgments`), against ``threshold``; ``sufficient`` ends it;
3. otherwise asks for the *bridge* — the name the question describes without giving it — as a span
   copied from the evidence (the grounded decoding of :class:`GuardedGenerator`, so it cannot be
   invented);
4. retrieves again with a follow-up query built from what was found: the bridge plus the question's
   words the evidence did not cover ("Kublai Khan grandfather"), sets aside chunks that address the
   model (:class:`InjectionGuard`), and puts the new chunks before the ones already held.

Why coverage is the default: on the development bridge questions the 0.5B's P(yes) was 0.25–0.36
whatever the evidence held, so every question hopped twice, and on two-part questions the follow-up
chunks displaced the evidence a part was answered from (``bench/planning.py``; the README has the figures).
The coverage threshold, 0.7, separates two-hop from single-hop questions best on development questions
(``bench/hop_threshold.py``: 7 of 12 dev bridge questions hop, 58 of 200 single-hop SQuAD questions do); coverage
is a weak signal for bridge questions, whose words mostly sit in the first chunk — which is why it is a threshold
you can see and move (``Features.hop_coverage``, the panel).

Bounded three ways, each an exit reason: ``max_iterations`` (hops), ``budget`` (LLM calls, counted
before each call), ``no_new_query`` (no bridge was found, or the follow-up was already tried — a query
is never sent twice); a check that fails ends it as ``check_failed`` with the error traced, keeping
what was found. ``query`` comes out as the question plus the bridges, for the evidence step that picks
the sentence the answer is copied from.

Hand-written: Haystack has the loop pieces (``ConditionalRouter``, ``BranchJoiner``) but the state
that makes the loop safe — the queries already tried, the calls spent, the chunks gathered — would
have to travel on edges that Haystack consumes once per run; one component holds it in a few lines.

Usage::

    hop = MultiHopReasoner(chat_generator=llm, index_path=".ragkit/index", max_iterations=2, max_llm_calls=4)
    out = hop.run(query="Who was the grandfather of the emperor who founded the Yuan dynasty?", documents=docs, top_k=5)
    out["exit_reason"], [h["query"] for h in out["hops"]], out["documents"]
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.index_retriever import IndexRetriever
from ragkit.components.injection_guard import InjectionGuard
from ragkit.eval.metrics import content_words, strip_citations
from ragkit.index.coverage import coverage, question_weights
from ragkit.index.store import RagIndex
from ragkit.llm.prompts import NO_ANSWER, context_messages, reply_text, sufficiency_task
from ragkit.llm.judgments import yes_probability
from ragkit.llm.structured import generator_from_dict, generator_to_dict, llm_error
from ragkit.pipeline.trace import record

EXIT_REASONS = ("sufficient", "max_iterations", "no_new_query", "budget", "check_failed")
CHECKS = ("coverage", "llm")


def bridge_task(question: str) -> str:
    return (
        "Task: the question describes someone or something without naming it (like \"the emperor who founded the "
        "dynasty\"). Copy that name from the sources.\n"
        f"Question: {question}"
    )


def normalized(query: str) -> str:
    return " ".join(sorted(set(content_words(query))))


def follow_up_query(question: str, bridge: str, evidence: str) -> str:
    """The bridge plus the question's content words the evidence did not contain: what is still unknown."""
    seen = set(content_words(evidence)) | set(content_words(bridge))
    missing = [w for w in dict.fromkeys(content_words(question)) if w not in seen]
    return " ".join([bridge, *missing]).strip()


@component
class MultiHopReasoner:
    def __init__(
        self,
        chat_generator: Any,
        index: RagIndex | None = None,
        index_path: str | None = None,
        retrieval_mode: str = "hybrid",
        embedder: str = "all-MiniLM-L6-v2",
        sparse_weight: float | None = None,
        max_iterations: int = 2,
        max_llm_calls: int = 4,
        threshold: float = 0.5,
        evidence_sentences: int = 2,
        prompt: str | None = None,
        check: str = "coverage",
        coverage_threshold: float = 0.7,
    ):
        if max_iterations < 1 or max_llm_calls < 1 or not 0 <= threshold <= 1 or evidence_sentences < 1 or not 0 <= coverage_threshold <= 1:
            raise ValueError("max_iterations and max_llm_calls must be >= 1, evidence_sentences >= 1, thresholds in [0, 1]")
        if check not in CHECKS:
            raise ValueError(f"check must be one of {CHECKS}, not {check!r}")
        self.check = check
        self.coverage_threshold = coverage_threshold
        self.chat_generator = chat_generator
        self.index_path = index_path
        self.retrieval_mode = retrieval_mode
        self.embedder = embedder
        self.sparse_weight = sparse_weight
        self.max_iterations = max_iterations
        self.max_llm_calls = max_llm_calls
        self.threshold = threshold
        self.evidence_sentences = evidence_sentences
        if prompt is not None and "{question}" not in prompt:
            raise ValueError("the sufficiency prompt needs a {question} placeholder")
        self.prompt = prompt  # the sufficiency task after the sources (sufficiency_task when None)
        extra = {"sparse_weight": sparse_weight} if sparse_weight is not None else {}
        self._retriever = IndexRetriever(index=index, index_path=index_path, mode=retrieval_mode, embedder=embedder, **extra)
        self._selector = EvidenceSelector(index=index, index_path=index_path, embedder=embedder)
        self._span = GuardedGenerator(chat_generator=chat_generator, max_tokens=24, step="bridge", answer_mode="grounded")
        self._guard = InjectionGuard()

    def warm_up(self) -> None:
        self._retriever.warm_up()
        self._selector.warm_up()
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator), index_path=self.index_path, retrieval_mode=self.retrieval_mode,
            embedder=self.embedder, sparse_weight=self.sparse_weight, max_iterations=self.max_iterations,
            max_llm_calls=self.max_llm_calls, threshold=self.threshold, evidence_sentences=self.evidence_sentences, prompt=self.prompt,
            check=self.check, coverage_threshold=self.coverage_threshold,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MultiHopReasoner":
        return default_from_dict(cls, generator_from_dict(data))

    # -- the two LLM questions ----------------------------------------------------------------------
    def _sufficient(self, question: str, evidence: list[Document]) -> float:
        """P(the evidence states the answer); raises on an unusable reply."""
        messages = context_messages(evidence, self.prompt.format(question=question) if self.prompt else sufficiency_task(question), numbers=[int(e.meta.get("cite", i)) for i, e in enumerate(evidence, 1)])
        return yes_probability(self.chat_generator, messages, step="sufficiency")

    def _check(self, question: str, evidence: list[Document], query: str, documents: list[Document], hop: dict[str, Any]) -> bool:
        """Whether the evidence suffices (``check``), what was measured written on ``hop``; the llm check raises
        on an unusable reply. ``query``/``documents``: the question and the first retrieval, then each follow-up
        query and the chunks it found."""
        if self.check == "coverage":
            hop["coverage"] = round(self._coverage(query, documents), 3)
            return hop["coverage"] >= self.coverage_threshold
        hop["p_sufficient"] = round(self._sufficient(question, evidence), 3)
        return hop["p_sufficient"] >= self.threshold

    def _coverage(self, query: str, documents: list[Document]) -> float:
        """IDF-weighted share of ``query``'s terms the best single chunk of ``documents`` holds."""

        index = self._selector._handle.get()
        return coverage(question_weights(index, query), index.terms([d.content or "" for d in documents])) if documents else 0.0

    def _bridge(self, question: str, documents: list[Document], evidence: list[Document]) -> str:
        numbers = [int(e.meta.get("cite", i)) for i, e in enumerate(evidence, 1)]
        out = self._span.run(messages=context_messages(evidence, bridge_task(question), numbers=numbers), documents=documents, mode="grounded", evidence=evidence)
        text = strip_citations(reply_text(out["replies"])).strip(" .")
        return "" if not out["ok"] or text == strip_citations(NO_ANSWER).strip(" .") else text

    def follow_up(self, question: str, documents: list[Document]) -> dict[str, Any]:
        """One hop proposed, not taken: the evidence sentences for ``question`` among ``documents``, the
        bridge copied from them (one LLM call) and the follow-up query built from it, as the first
        iteration of :meth:`run` makes them; ``bridge`` and ``query`` are empty when no bridge was found.
        Agent mode offers the query as its follow-up search (:func:`ragkit.pipeline.agent_tools.search_tool`)."""
        self.warm_up()
        evidence = self._selector.rank(question, documents)[: self.evidence_sentences]
        bridge = self._bridge(question, documents, evidence) if evidence else ""
        query = follow_up_query(question, bridge, " ".join(e.content for e in evidence)) if bridge else ""
        return {"bridge": bridge, "query": query, "evidence": evidence}

    @component.output_types(documents=list[Document], query=str, hops=list[dict], exit_reason=str)
    def run(self, query: str, documents: list[Document], top_k: Optional[int] = None) -> dict[str, Any]:
        """``documents``: what the first retrieval found; ``top_k``: chunks per follow-up retrieval."""
        self.warm_up()
        top_k = top_k or max(len(documents), 1)
        held = list(documents)
        tried = {normalized(query)}
        bridges: list[str] = []
        hops: list[dict[str, Any]] = []
        calls, exit_reason, iteration = 0, "max_iterations", 0
        focus = query
        checked_query, checked_docs = query, held
        while iteration < self.max_iterations:
            evidence = self._selector.rank(focus, held)[: self.evidence_sentences]
            if not evidence:
                exit_reason = "no_new_query"
                break
            asks_llm = self.check == "llm"
            if asks_llm and calls >= self.max_llm_calls:
                exit_reason = "budget"
                break
            hop: dict[str, Any] = {"iteration": iteration, "evidence": evidence[0].content}
            hops.append(hop)
            calls += asks_llm
            try:
                if self._check(query, evidence, checked_query, checked_docs, hop):
                    exit_reason = "sufficient"
                    break
            except Exception as exc:  # an unusable check keeps what was found and says why it stopped
                hop["error"] = llm_error(exc, self.chat_generator)
                record(fallback=f"multi_hop: sufficiency check failed ({hop['error']})")
                exit_reason = "check_failed"
                break
            if calls >= self.max_llm_calls:
                exit_reason = "budget"
                break
            calls += 1
            bridge = self._bridge(query, held, evidence)
            follow_up = follow_up_query(query, bridge, " ".join(e.content for e in evidence)) if bridge else ""
            hop.update(bridge=bridge, query=follow_up)
            if not bridge or normalized(follow_up) in tried or bridge in bridges:
                exit_reason = "no_new_query"
                break
            tried.add(normalized(follow_up))
            bridges.append(bridge)
            found = self._retriever.run(query=follow_up, top_k=top_k)["documents"]
            found = self._guard.run(documents=found)["documents"]
            known = {d.id for d in held}
            new = [d for d in found if d.id not in known]
            hop["new_documents"] = len(new)
            held = new + held
            checked_query, checked_docs = follow_up, new  # the next check: was what was still unknown found?
            focus = f"{query} {' '.join(bridges)}"
            iteration += 1
        record(decision={"exit_reason": exit_reason, "hops": iteration, "calls": calls})
        return {"documents": held, "query": focus, "hops": hops, "exit_reason": exit_reason}
