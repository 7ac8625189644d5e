"""FollowUpRewriter: turn a follow-up ("and what did he study?") into a question that stands alone,
only when it needs the conversation, and only when the rewrite retrieves at least as confidently.

1. **Detect** (:func:`ragkit.conversation.follow_ups.detect`, rules, microseconds): an elliptical opener,
   a pronoun with no name before it, a very short question. A self-contained question passes through
   untouched — no LLM call, no second retrieval.
2. **Rewrite** with the history (the most recent turns within ``history_tokens``; what is dropped is
   on the trace): ``backend="llm"`` asks the model at temperature 0 under a GBNF grammar whose words
   are the question's and the history's (plus "'s"), so it can move names into the question but not
   bring new facts; a rewrite that loses one of the question's own content words or cannot be parsed
   falls back to the rules. ``backend="rules"`` puts the history's latest name in the pronoun's place
   (:func:`ragkit.conversation.follow_ups.rules_rewrite`), no LLM.
3. **Keep it only if retrieval agrees**: the raw question and the rewrite are both retrieved (hybrid,
   top 5) and the rewrite is kept unless its ``keep_signal`` falls more than ``keep_margin`` below the
   raw question's — ``"dense_top"``, the best chunk's cosine similarity, margin 0.1 (both chosen on
   squad_dev half A, bench/results/conversation.json); ``"always"`` keeps every rewrite. So a rewrite
   cannot make a good question's retrieval clearly less sure of itself.

``rewrite`` in the output says what happened: ``needed`` and why, the ``rewritten`` question, whether it
was ``kept``, both signals, the history kept and dropped. The step runs at the front of the graph
(``Features(follow_ups=True)``), its ``query`` feeding every step that reads the question.

Usage::

    step = FollowUpRewriter(chat_generator=llm, index_path=".ragkit/index")
    history = [ChatMessage.from_user("Where was Nikola Tesla born?"), ChatMessage.from_assistant("Smiljan [1]")]
    out = step.run(query="and what did he study?", history=history)
    out["query"]        # "What did Nikola Tesla study?"
    out["rewrite"]      # {"needed": True, "reason": "opens with 'and'", "rewritten": ..., "kept": True, ...}
"""

from __future__ import annotations

import re
from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.config import ModelConfig
from ragkit.conversation.follow_ups import PRONOUNS, allowed_words, bounded, detect, rules_rewrite, strip_citations, uses_only, words
from ragkit.eval.metrics import STOPWORDS
from ragkit.index.handle import IndexHandle
from ragkit.index.retrieval import HybridRetriever, QueryError
from ragkit.index.store import RagIndex
from ragkit.llm.structured import backend_of, call_llm, count_tokens, gbnf_grammar, gbnf_literal, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

BACKENDS = ("llm", "rules")
KEEP_SIGNALS = ("dense_top", "always")
REWRITE_SYSTEM = (
    "You rewrite the user's last question so that it can be understood without the conversation: put the name "
    "a pronoun (he, she, it, they, his, its, there, this) refers to in its place, and keep every other word of the question. "
    "Reply with the rewritten question only.\n"
    "Example. Conversation: User: Who founded the Ford Motor Company? Assistant: Henry Ford. "
    "Last question: when did he die? Rewritten: When did Henry Ford die?"
)
MAX_REWRITE_TOKENS = 48
# A rewrite is kept unless its best dense cosine falls more than this below the raw question's: on squad_dev
# half A a margin of 0 dropped rewrites that found the paragraph; 0.1 is the smallest that kept them all
# (bench/conversation.py; reported on half B and new_wiki).
KEEP_MARGIN = 0.1
_LEADING_CONJUNCTION = re.compile(r"^(?:and|also|plus|but|so|then|or)\b[\s,]*", re.I)


def _conversation(history: list[ChatMessage]) -> str:
    lines = []
    for message in history:
        who = "User" if message.role.value == "user" else "Assistant"
        lines.append(f"{who}: {strip_citations(message.text or '')}")
    return "\n".join(lines)


def rewrite_grammar(allowed: list[str]) -> str:
    """GBNF: up to 40 of the allowed words (each may take "'s" or a comma), then "?"."""
    alternatives = " | ".join(gbnf_literal(w) for w in sorted(set(allowed)))
    return f"root ::= word (\" \" word){{0,39}} \"?\"\nword ::= ({alternatives}) (\"'s\" | \",\")?"


def _same_question(a: str, b: str) -> bool:
    """The same question but for case, spacing, a leading "and"/"so"… and the question mark."""
    def norm(text: str) -> str:
        return " ".join(_LEADING_CONJUNCTION.sub("", text.strip()).rstrip(" ?").lower().split())
    return norm(a) == norm(b)


def _content(text: str) -> set[str]:
    return {w.lower() for w in words(text) if w.lower() not in STOPWORDS and w.lower() not in PRONOUNS}


@component
class FollowUpRewriter:
    def __init__(
        self, chat_generator: Any = None, backend: str = "llm", index: RagIndex | None = None, index_path: str | None = None,
        embedder: str = "all-MiniLM-L6-v2", history_tokens: int = 400, keep_signal: str = "dense_top", keep_margin: float = KEEP_MARGIN,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("backend='llm' needs a chat_generator")
        if keep_signal not in KEEP_SIGNALS:
            raise ValueError(f"keep_signal must be one of {KEEP_SIGNALS}, not {keep_signal!r}")
        if not 0.0 <= keep_margin <= 1.0:
            raise ValueError("keep_margin must be in [0, 1]")
        if history_tokens < 1:
            raise ValueError("history_tokens must be >= 1")
        self.chat_generator, self.backend, self.embedder = chat_generator, backend, embedder
        self.history_tokens, self.keep_signal, self.keep_margin = history_tokens, keep_signal, keep_margin
        self._handle = IndexHandle(index, index_path)
        self._retriever: HybridRetriever | None = None

    def warm_up(self) -> None:
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator) if self.chat_generator is not None else None, backend=self.backend,
            index_path=self._handle.index_path, embedder=self.embedder, history_tokens=self.history_tokens, keep_signal=self.keep_signal,
            keep_margin=self.keep_margin,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FollowUpRewriter":
        return default_from_dict(cls, generator_from_dict(data) if data["init_parameters"].get("chat_generator") else data)

    # -- the pieces ---------------------------------------------------------------------------------
    def _signal(self, query: str) -> float | None:
        if self._handle.index_path is None and self._handle.index is None:
            return None
        if self._retriever is None:
            self._retriever = HybridRetriever(self._handle.get(), ModelConfig(embedder=self.embedder))
        try:
            found = self._retriever.retrieve(query, top_k=5, mode="hybrid")
        except QueryError:
            return None
        return found.signals.get("dense_top")

    def _llm_rewrite(self, query: str, history: list[ChatMessage]) -> tuple[str | None, str | None]:
        """(rewrite, None) or (None, why not)."""
        allowed = allowed_words(query, history)
        messages = [ChatMessage.from_system(REWRITE_SYSTEM),
                    ChatMessage.from_user(f"Conversation:\n{_conversation(history)}\n\nLast question: {query}\nRewritten:")]
        kwargs: dict[str, Any] = {"max_tokens": MAX_REWRITE_TOKENS, "temperature": 0.0}
        if backend_of(self.chat_generator) == "llama.cpp":
            kwargs["grammar"] = gbnf_grammar(rewrite_grammar(allowed))

        def parse(text: str) -> str:
            question = " ".join(text.strip().split())
            if not question:
                raise ValueError("empty rewrite")
            if not uses_only(re.sub(r"'s\b", "", question), allowed):  # a backend without grammars
                raise ValueError(f"the rewrite uses words from neither the question nor the history: {question[:80]!r}")
            return question if question.endswith("?") else question + "?"

        reply = call_llm(self.chat_generator, messages, parse, kwargs, step="follow_up")
        if not reply.ok:
            return None, reply.error
        lost = _content(query) - _content(reply.value)
        if lost:
            return None, f"the rewrite dropped the question's own words {sorted(lost)}"
        rewrite = _LEADING_CONJUNCTION.sub("", reply.value)  # "And what did Tesla study?" stands alone without its "and"
        return rewrite[:1].upper() + rewrite[1:], None

    # -- the step -----------------------------------------------------------------------------------
    @component.output_types(query=str, rewrite=dict)
    def run(self, query: str, history: Optional[list[ChatMessage]] = None) -> dict[str, Any]:
        """``history``: the conversation before this question, oldest first (user and assistant messages;
        an assistant message's ``meta["titles"]`` may name its sources)."""
        history = [m for m in (history or []) if m.text and m.role.value in ("user", "assistant")]
        if not history:
            record(decision={"follow_up": "no history"})
            return {"query": query, "rewrite": {"needed": False, "reason": "no history"}}
        count = (lambda text: count_tokens(self.chat_generator, text)) if self.chat_generator is not None else None
        kept, tokens, dropped = bounded(history, self.history_tokens, count) if count else bounded(history, self.history_tokens)
        info: dict[str, Any] = {"history_messages": len(kept), "history_tokens": tokens, "history_dropped": dropped}
        if dropped:
            record(decision={"history": f"kept the last {len(kept)} messages ({tokens} tokens), dropped {dropped} older"})
        found = detect(query)
        info.update(needed=found.needed, reason=found.reason)
        if not found.needed:
            record(decision={"follow_up": "self-contained, unchanged"})
            return {"query": query, "rewrite": info}
        rewritten, how = None, self.backend
        if self.backend == "llm":
            rewritten, failure = self._llm_rewrite(query, kept)
            if rewritten is None:
                record(fallback=f"follow_up: {failure}; used the rules' rewrite")
                how = "rules (the LLM's rewrite was unusable)"
            elif _same_question(rewritten, query):  # "and what did he study?" back as "What did he study?" is no rewrite
                rewritten, how = None, "rules (the LLM left the question as it was)"
        if rewritten is None:
            rewritten = rules_rewrite(query, kept)
        if rewritten is None or _same_question(rewritten, query):
            record(decision={"follow_up": f"{found.reason}; nothing in the history to add"})
            return {"query": query, "rewrite": {**info, "rewritten": None, "kept": False}}
        raw_signal = rewritten_signal = None
        keep = True
        if self.keep_signal == "dense_top":
            raw_signal, rewritten_signal = self._signal(query), self._signal(rewritten)
            keep = raw_signal is None or rewritten_signal is None or rewritten_signal >= raw_signal - self.keep_margin
        info.update(rewritten=rewritten, kept=keep, by=how, signal=self.keep_signal, raw_signal=raw_signal, rewritten_signal=rewritten_signal)
        verdict = "kept" if keep else "dropped (retrieval was surer of the raw question)"
        scores = f" ({rewritten_signal:.3f} vs {raw_signal:.3f})" if raw_signal is not None and rewritten_signal is not None else ""
        record(decision={"follow_up": found.reason, "rewrite": rewritten, "by": how, "verdict": verdict + scores})
        return {"query": rewritten if keep else query, "rewrite": info}
