"""``Features``: every agentic toggle and threshold in one dataclass, loadable from YAML.

``Features()`` is plain RAG (hybrid retrieval, top 5, answer). Each toggle adds one step; the
notebook widgets and the benchmark flip exactly these fields, so "what does grading do?" is
``replace(features, grading=True)``.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ragkit.config import reject_unknown_keys

# Per route: retrieve at all, how many chunks reach the LLM, whether HyDE runs (when on), how the
# answer is written: "grounded" (a span copied from a source, for a fact) or "free" (text with citations),
# and (when grading is on) how chunks are graded: "embedding" caps a route at the no-LLM grader, "off"
# leaves its chunks ungraded.
# HyDE pays off when a question's words are not the documents' words (analytical, comparative,
# summary questions); a factual lookup names its entity, which BM25 already finds, so there HyDE
# would only add an LLM call (bench/results/agentic_squad.json, "hyde" row).
DEFAULT_ROUTE_POLICY: dict[str, dict[str, Any]] = {
    "SIMPLE": {"retrieve": False, "top_k": 0, "hyde": False},  # answer from the model's own knowledge
    # A grounded answer reads one evidence sentence (~1 s with the 0.5B), chosen by the evidence step
    # from every sentence of the chunks. Grading the chunks first only removes candidates: the 0.5B's
    # LLM grades (an extra ~4 s over the whole chunks) dropped the answer's paragraph from a quarter of
    # the development questions and did not pick the sentence better than the evidence step; embedding
    # grades took F1 0.543 -> 0.485 on 120 of them (bench/evidence_dev.py). Fact lookups are not graded.
    "FACTUAL": {"retrieve": True, "top_k": 5, "hyde": False, "answer": "grounded", "grader": "off"},
    "ANALYTICAL": {"retrieve": True, "top_k": 5, "hyde": True, "answer": "free"},  # deeper; a why/how needs sentences
    "COMPARISON": {"retrieve": True, "top_k": 5, "hyde": True, "answer": "free"},  # deeper: both sides must be in the context
    "SUMMARY": {"retrieve": True, "top_k": 6, "hyde": True, "answer": "free"},  # broader
}


# Features.all_on()'s decline floor on the calibrated P(correct): decline answers with under a 1-in-10
# chance of being right. Chosen on the calibration set only (SQuAD-Shifts new_wiki, 0.5B, `floor_analysis`
# in ragkit/data/confidence_calibration.json): with the 150-question fit 0.1 costs 0.011 F1 there (0.2 costs
# 0.061, 0.35 costs 0.137); chosen at 0.004 with the first 85-question fit and kept, not re-tuned.
ALL_ON_FLOOR = 0.1

# The allowed values of the string fields (the notebook's dropdowns are built from this).
CHOICES: dict[str, tuple[str, ...]] = {
    "router_backend": ("rules", "embedding", "llm"),
    "retrieval_mode": ("dense", "sparse", "hybrid"),
    "rerank_backend": ("bi-encoder", "llm", "cross-encoder"),
    "grader_backend": ("llm", "embedding"),
    "hallucination_backend": ("llm_judge", "hhem"),
    "answer_mode": ("auto", "grounded", "free"),
    "decomposer_backend": ("rules", "llm", "auto"),
    "gate_backend": ("rules", "llm"),
    "rewrite_backend": ("rules", "llm"),
    "fallback_check": ("coverage", "llm"),
    "hop_check": ("coverage", "llm"),
    "select_collections": ("off", "embedding", "llm"),
    "expand_backend": ("prf", "llm"),
    "follow_up_backend": ("llm", "rules"),
}


# The steps that call the LLM (step_models' keys). The answer's model also writes the self-correction retries.
LLM_STEPS = ("follow_up", "rewrite", "gate", "decompose", "select", "expand", "router", "hyde", "rerank", "grade", "sql", "fallback", "multi_hop", "answer", "hallucination", "direct_answer")
# The steps whose prompt can be replaced (step_prompts' keys). For the answer (free mode), the grader and
# multi_hop it is the task after the shared sources prefix (so llama.cpp still evaluates the sources once a
# question); for the rest the system prompt. The hallucination judge's is fixed: its yes/no probabilities
# are read against a threshold calibrated for that wording (support_threshold_for); so is the grounded
# answer's, which the span decoding and its measured F1 depend on, and the LLM reranker's yes/no.
PROMPT_STEPS = ("rewrite", "gate", "decompose", "router", "hyde", "grade", "sql", "multi_hop", "answer", "direct_answer")
# Those whose prompt is a task template rather than a system prompt, and what it must contain
PROMPT_PLACEHOLDERS = {"decompose": "{question}", "multi_hop": "{question}", "grade": "{question}", "answer": "{question}", "sql": "{schema}"}


@dataclass
class Features:
    routing: bool = False
    router_backend: str = "rules"  # rules | embedding | llm (measured: bench/results/routing.json)
    route_policy: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(DEFAULT_ROUTE_POLICY))
    hyde: bool = False
    hyde_passages: int = 1
    retrieval_mode: str = "hybrid"  # dense | sparse | hybrid
    # Set aside retrieved chunks that address the model ("ignore the question", "grade this 10"):
    # a guard, not an agentic feature, so it is on in plain RAG too (components/injection_guard.py)
    injection_guard: bool = True
    # Collections (`ragkit index PATH --collection NAME --description "…"`): search only those whose description
    # fits the question — "embedding" (cosine, no LLM) or "llm" (one constrained choice); "off" searches all.
    # `collections` names them outright and overrides the selector (components/collection_selector.py)
    select_collections: str = "off"
    collections: list[str] = field(default_factory=list)
    # The question's own words narrow the search by metadata: "in the PDF" -> file_type pdf, "in Rhine.md" ->
    # that source, "in the wiki collection"; `route_filters` maps a route to a filter (components/intent_filter.py)
    intent_filters: bool = False
    route_filters: dict[str, dict] = field(default_factory=dict)
    # More words for the keyword side: "prf" adds the top terms of BM25's own best chunks (no LLM, ~ms),
    # "llm" writes `expansions` rephrasings under a grammar (one call); BM25 runs each and fuses the lists
    # (components/query_expander.py; measured in bench/results/expansion.json)
    expand: bool = False
    expand_backend: str = "prf"
    # How answers are written: "grounded" copies a span of a source (decoding that cannot do anything
    # else, components/guarded_generator.py), "free" writes text with citations, "auto" picks per
    # question — the route's policy with routing on, else grounded when the rules router reads the
    # question as a fact lookup (a microsecond check, no LLM)
    answer_mode: str = "auto"
    # chunks retrieved: a grounded answer ranks all their sentences (no LLM cost; 5 rather than 3 found
    # the answer's sentence on 0.5 % more new_wiki dev questions, 95.6 % hold it somewhere), a free
    # answer reads them all (each SQuAD-sized chunk ~1 s of prompt evaluation on 2 cores)
    top_k: int = 5
    rerank: bool = False
    rerank_backend: str = "bi-encoder"  # bi-encoder | llm | cross-encoder
    rerank_model: str | None = None
    rerank_candidates: int = 10
    grading: bool = False
    grader_backend: str = "llm"  # llm | embedding
    grade_threshold: float = 4.0
    hallucination_check: bool = False
    hallucination_backend: str = "llm_judge"  # llm_judge | hhem
    hhem_model: str = "vectara/hallucination_evaluation_model"
    support_threshold: float | None = None  # None: the judge's threshold calibrated for the model (support_threshold_for)
    # Whether the hallucination check asks the LLM about a grounded span too. A span is copied verbatim
    # from its evidence sentence, so it is checked in microseconds (verbatim or not) instead: on 200 SQuAD
    # dev questions the judge changed no span answer and cost ~0.3 s (0.5B) / ~0.6 s (1.5B) a question;
    # its score does sharpen the 1.5B's confidence (bench/results/calibration.json) — turn it on for that
    judge_spans: bool = False
    self_correction: bool = False
    max_corrections: int = 1
    confidence_floor: float = 0.0  # 0: never decline
    # Planning, before retrieval: strip conversational noise from the question (only deletes words:
    # names and technical terms stay), and ask whether it needs the documents at all — "no" answers
    # with the no-context prompt, skipping search, rerank and grading (components/query_rewriter.py,
    # retrieval_gate.py)
    rewrite: bool = False
    rewrite_backend: str = "rules"  # rules (microseconds) | llm (one call, a grammar of the question's own words)
    gate: bool = False
    # rules (the router's chit-chat / arithmetic patterns) | llm (one forward pass). Not llm with the 0.5B: its
    # P(needs the documents) was 0.35 for "Hi there, how are you?" and 0.44 for "Where was Nikola Tesla born?" —
    # no cut separates them, and under 0.5 both skip retrieval
    gate_backend: str = "rules"
    # Planning: split a question that asks several things ("Where was Tesla born, and what did he
    # study?") and answer each part with everything above (components/query_decomposer.py, per_part.py)
    decompose: bool = False
    decomposer_backend: str = "rules"  # rules (microseconds) | llm (one grammar-constrained call) | auto (llm only when the rules see a join)
    max_parts: int = 3
    # After retrieval: do the sources answer it? If not, retrieve again for the bridge entity found
    # ("the emperor who founded the Yuan dynasty" -> "Kublai Khan"), never repeating a query, at most
    # max_iterations follow-ups and hop_llm_calls LLM calls (components/multi_hop.py)
    # Whether the sources suffice, hop_check: "coverage" (no LLM: the IDF-weighted share of the question's
    # terms the best chunk holds >= hop_coverage; after a hop, of the follow-up query's terms in the new
    # chunks) or "llm" (one forward pass, P(yes) >= sufficiency_threshold; the 0.5B's P(yes) did not separate
    # answerable evidence from not, so every question hopped); 0.7 chosen on dev questions (bench/hop_threshold.py)
    multi_hop: bool = False
    max_iterations: int = 2
    hop_llm_calls: int = 4
    hop_check: str = "coverage"
    hop_coverage: float = 0.7
    sufficiency_threshold: float = 0.5
    # A question that counts, sums or compares numbers of a table ("How many cars from Japan ...?",
    # a microsecond rules check) gets one read-only SQL query over it, written by the LLM under a grammar
    # built from the table's schema; the result is source [1] of the answer (components/sql_answerer.py)
    sql_route: bool = False
    sql_tables: dict[str, str] = field(default_factory=lambda: {"cars": "vega_datasets:cars"})
    # When the evidence looks insufficient after the guard and grading (question-term coverage of the best
    # chunk, or with fallback_check="llm" one forward pass), try the next retrieval strategy: another mode,
    # HyDE, expansion, all collections, the SQL route — at most max_fallbacks attempts and fallback_llm_calls
    # LLM calls, each attempt traced with why it ran and how it ended (components/fallback_retriever.py)
    fallback: bool = False
    fallback_strategies: list[str] = field(default_factory=lambda: ["sparse", "dense"])
    fallback_check: str = "coverage"  # coverage (no LLM) | llm
    fallback_coverage: float = 0.6
    max_fallbacks: int = 2
    fallback_llm_calls: int = 2
    # Customisation, per LLM step (names in LLM_STEPS): its own model — a fast one for planning, a better
    # one for the answer: {"decompose": "qwen2.5-coder-0.5b", "answer": "qwen2.5-coder-1.5b"}, each loaded
    # once by the engine, same backend as the config's — and its own system prompt (PROMPT_STEPS; a task
    # template with a placeholder for those in PROMPT_PLACEHOLDERS, e.g. multi_hop's sufficiency question). A step
    # can also be replaced outright: AgenticRAG(replace_steps={...}) (ragkit/pipeline/custom_steps.py)
    step_models: dict[str, str] = field(default_factory=dict)
    step_prompts: dict[str, str] = field(default_factory=dict)
    # Conversations (ragkit.conversation.session.ChatSession turns both on). follow_ups: a question that leans on
    # the history ("and what did he study?", a rules check) is rewritten with it — "llm" under a grammar of the
    # question's and the history's words, "rules" by putting the history's latest name in the pronoun's place —
    # and the rewrite is dropped if its retrieval is clearly less sure (components/follow_up_rewriter.py).
    # clarify: a question the evidence reads as several things (two documents about different subjects with the
    # same name, none named apart) is asked back with 2-4 options instead of answered (components/ambiguity_check.py)
    follow_ups: bool = False
    follow_up_backend: str = "rules"  # as good as the 0.5B's rewrite on squad_dev half A, in microseconds
    history_tokens: int = 400
    clarify: bool = False
    clarify_ratio: float = 0.3  # chosen on squad_dev half A (bench/results/conversation.json)

    def validate(self) -> "Features":
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")
        if not 2 <= self.max_parts <= 6:
            raise ValueError("max_parts must be between 2 and 6")
        if not 1 <= self.max_iterations <= 5 or not 1 <= self.hop_llm_calls <= 12 or not 0 <= self.sufficiency_threshold <= 1:
            raise ValueError("max_iterations must be 1-5, hop_llm_calls 1-12, sufficiency_threshold in [0, 1]")
        if not 0 <= self.hop_coverage <= 1:
            raise ValueError("hop_coverage must be in [0, 1]")
        if self.top_k < 1 or self.rerank_candidates < 1 or self.hyde_passages < 1 or self.max_corrections < 0:
            raise ValueError("top_k, rerank_candidates and hyde_passages must be >= 1, max_corrections >= 0")
        if not 0 <= self.confidence_floor <= 1 or not (self.support_threshold is None or 0 <= self.support_threshold <= 1):
            raise ValueError("confidence_floor and support_threshold must be in [0, 1]")
        if self.sql_route and (not self.sql_tables or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in self.sql_tables.items())):
            raise ValueError("sql_route needs sql_tables: table name -> source ('vega_datasets:cars', a .json/.jsonl/.csv file)")
        for name, allowed_steps in (("step_models", LLM_STEPS), ("step_prompts", PROMPT_STEPS)):
            value = getattr(self, name)
            unknown = sorted(set(value) - set(allowed_steps)) if isinstance(value, dict) else ["(not a dict)"]
            if unknown or not all(isinstance(v, str) and v.strip() for v in value.values()):
                raise ValueError(f"{name} maps a step in {allowed_steps} to a non-empty string; not {unknown or value}")
        if not isinstance(self.collections, list) or not all(isinstance(c, str) and c for c in self.collections):
            raise ValueError(f"collections must be a list of collection names, not {self.collections!r}")
        if not isinstance(self.route_filters, dict) or set(self.route_filters) - set(DEFAULT_ROUTE_POLICY) or not all(isinstance(v, dict) for v in self.route_filters.values()):
            raise ValueError(f"route_filters maps routes {sorted(DEFAULT_ROUTE_POLICY)} to filters like {{'file_type': ['pdf']}}, not {self.route_filters!r}")
        if self.fallback:
            from ragkit.components.fallback_retriever import STRATEGIES

            if not self.fallback_strategies or any(s not in STRATEGIES for s in self.fallback_strategies):
                raise ValueError(f"fallback_strategies must be a non-empty list from {STRATEGIES}, not {self.fallback_strategies!r}")
            if not 1 <= self.max_fallbacks <= 6 or not 0 <= self.fallback_llm_calls <= 12 or not 0 <= self.fallback_coverage <= 1:
                raise ValueError("max_fallbacks must be 1-6, fallback_llm_calls 0-12, fallback_coverage in [0, 1]")
            if "sql" in self.fallback_strategies and not self.sql_tables:
                raise ValueError("the sql fallback needs sql_tables")
        for step, placeholder in PROMPT_PLACEHOLDERS.items():
            if step in self.step_prompts and placeholder not in self.step_prompts[step]:
                raise ValueError(f"step_prompts[{step!r}] is a task template: it needs a {placeholder} placeholder")
        if set(self.route_policy) != set(DEFAULT_ROUTE_POLICY):
            raise ValueError(f"route_policy needs exactly the routes {sorted(DEFAULT_ROUTE_POLICY)}")
        for route, policy in self.route_policy.items():
            if policy.get("answer", "free") not in ("grounded", "free"):
                raise ValueError(f"route_policy[{route!r}]['answer'] must be 'grounded' or 'free', not {policy.get('answer')!r}")
            if policy.get("grader") not in (None, "off", *CHOICES["grader_backend"]):
                raise ValueError(f"route_policy[{route!r}]['grader'] must be 'off' or one of {CHOICES['grader_backend']}, not {policy.get('grader')!r}")
        if not 0 < self.clarify_ratio <= 1 or self.history_tokens < 1:
            raise ValueError("clarify_ratio must be in (0, 1] and history_tokens >= 1")
        if self.self_correction and not self.hallucination_check:
            raise ValueError("self_correction needs hallucination_check: the loop acts on its score")
        if self.rerank and self.rerank_backend == "cross-encoder" and not self.rerank_model:
            raise ValueError("the cross-encoder reranker needs rerank_model (a local folder or hub id)")
        return self

    @classmethod
    def all_on(cls, **overrides: Any) -> "Features":
        on = dict(routing=True, hyde=True, rerank=True, grading=True, hallucination_check=True, self_correction=True, confidence_floor=ALL_ON_FLOOR)
        return cls(**{**on, **overrides}).validate()

    def answer_mode_for(self, route: str | None) -> str:
        """The answer mode for a question on ``route`` (None: no router ran)."""
        if self.answer_mode != "auto":
            return self.answer_mode
        if route is None:
            return "grounded"
        return (self.route_policy.get(route) or {}).get("answer", "free")

    def grader_for(self, route: str | None) -> str:
        """The grader for a question on ``route``: "off" or the no-LLM "embedding" when the route's
        policy caps it there, else ``grader_backend``."""
        capped = (self.route_policy.get(route) or {}).get("grader") if route else None
        if capped == "off":
            return "off"
        return "embedding" if "embedding" in (capped, self.grader_backend) else self.grader_backend

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Features":
        data = dict(data or {})
        reject_unknown_keys(cls, data, "Features")
        return cls(**data).validate()

    @classmethod
    def from_yaml(cls, path: str | Path) -> "Features":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(yaml.safe_load(fh))
