"""QueryDecomposer: split a multi-part or comparison question into sub-questions, or leave it alone.

"Where was Nikola Tesla born, and what did he study?" asks two things; retrieval for the whole
sentence finds the birthplace paragraph, and the answer step copies one span — the second part is
lost. This step splits such a question before retrieval so each part gets its own sources, evidence
and answer (:class:`~ragkit.components.per_part.PerPartAnswerer` runs the rest of the graph once per
part and attributes each answer).

Rules first, in microseconds and with no LLM call: a question splits where a new question starts —
after a "?", or after ", and" / "; " / " and also" / ", as well as" when what follows opens like a
question ("what", "where", "how many", "did", …). A later part that refers back with a pronoun
("what did **he** study?") gets the first part's subject instead ("what did Nikola Tesla study?"),
since it is retrieved on its own. A comparison ("compare X and Y", "how does X differ from Y",
"X vs Y") becomes one sub-question per side, kind ``comparison``.

With ``backend="llm"`` (or ``"auto"``, the LLM only when the rules found one part but the question
still looks like several asks — two question words joined by "and"), one grammar-constrained call
returns a JSON list of 1–3 sub-questions; a reply that fails to parse, or parts that repeat the
question or invent words of their own, fall back to the question unsplit, traced. A question that
needs no split costs nothing.

Usage::

    decomposer = QueryDecomposer()
    decomposer.run(query="Where was Tesla born, and what did he study?")
    # {"parts": ["Where was Tesla born?", "what did Tesla study?"], "kind": "multi", ...}
"""

from __future__ import annotations

import json
import re
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.llm.structured import backend_of, call_llm, gbnf_grammar, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

BACKENDS = ("rules", "llm", "auto")
_QUESTION_OPENERS = (
    r"what|where|when|who|whom|whose|which|why|how|is|are|was|were|did|does|do|can|could|has|have|had|will|would|should|"
    r"in what|in which|on what|at what|for what|from what|to what|by what|with what|name|list"
)
# a new question starts after one of these joints, when what follows opens like a question
# a bare "and" (no comma) starts a new question only before a wh-word: "... visited space and were
# rewarded ..." continues the clause ("were" opens questions too, but not after "and")
_WH_OPENERS = r"what|where|when|who|whom|whose|which|why|how"
_JOINT = re.compile(rf"(?:\?\s+|,\s*and\s+|;\s*(?:and\s+)?|\s+and\s+also\s+|,\s*as\s+well\s+as\s+|,\s*plus\s+|\s+and\s+(?=(?:{_WH_OPENERS})\b))(?=(?:{_QUESTION_OPENERS})\b)", re.I)
_COMPARISON = [
    re.compile(r"^\s*(?:please\s+)?compare\s+(?P<a>.+?)\s+(?:and|with|to|vs\.?|versus)\s+(?P<b>.+?)[\s?.!]*$", re.I),
    re.compile(r"^\s*(?:what\s+is|what's|what\s+are)\s+the\s+differences?\s+between\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)[\s?.!]*$", re.I),
    re.compile(r"^\s*how\s+(?:does|do|did|is|are)\s+(?P<a>.+?)\s+(?:differ|compare)\s+(?:from|to|with)\s+(?P<b>.+?)[\s?.!]*$", re.I),
    re.compile(r"^\s*(?P<a>[^?]+?)\s+(?:vs\.?|versus)\s+(?P<b>[^?]+?)[\s?.!]*$", re.I),
]
_PRONOUN = re.compile(r"\b(he|she|they|it|him|her|them|his|its|their|hers)\b", re.I)
_POSSESSIVE = {"his", "its", "their", "her", "hers"}
# a proper-name run: capitalised words, allowing "of"/"the"/"de" inside ("Super Bowl 50", "University of Prague")
_NAME = re.compile(r"\b([A-Z][\w'’.-]*(?:\s+(?:(?:of|the|de|von|van|da|del)\s+)?[A-Z0-9][\w'’.-]*)*)")
_WH = re.compile(rf"\b(?:{_QUESTION_OPENERS})\b", re.I)


def _subject(question: str) -> str | None:
    """The first part's subject, for a later part's pronoun: its first proper-name run (an English
    question names its subject before its objects: "When did Tesla move to New York?"), ignoring a
    capitalised question word at the start."""
    names = [m.group(1) for m in _NAME.finditer(question) if not _WH.fullmatch(m.group(1).split()[0])]
    names = [n for n in names if n.lower() not in {"i", "what", "where", "when", "who", "which", "how", "why"}]
    return names[0] if names else None


def _resolve(part: str, subject: str | None) -> str:
    if not subject:
        return part

    def swap(m: re.Match) -> str:
        return f"{subject}'s" if m.group(1).lower() in _POSSESSIVE else subject

    return _PRONOUN.sub(swap, part, count=1)


def _as_question(text: str) -> str:
    text = text.strip().rstrip(",;").strip()
    if not text:
        return text
    return text if text.endswith(("?", ".", "!")) else text + "?"


def split_by_rules(question: str, max_parts: int = 4) -> tuple[list[str], str]:
    """(parts, kind): kind is "single", "multi" or "comparison"."""
    for pattern in _COMPARISON:
        m = pattern.match(question)
        if m and len(m.group("a").split()) <= 8 and len(m.group("b").split()) <= 8:
            a, b = m.group("a").strip(" ,"), m.group("b").strip(" ,")
            return [f"What is {a}?", f"What is {b}?"], "comparison"
    pieces = [p for p in _JOINT.split(question.strip()) if p and p.strip()]
    parts = [_as_question(p) for p in pieces if len(p.split()) >= 2]
    if len(parts) < 2:
        return [question], "single"
    subject = _subject(parts[0])
    parts = [parts[0]] + [_resolve(p, subject) for p in parts[1:]]
    parts = [p[0].upper() + p[1:] for p in parts[:max_parts]]
    return parts, "multi"


def looks_multi(question: str) -> bool:
    """Two question words joined by "and" or a comma: possibly two asks the joints above did not cut."""
    return len(_WH.findall(question)) >= 2 and bool(re.search(r"\band\b|,|;", question))


DECOMPOSE_SYSTEM = "You split questions for a search engine. Reply with JSON only."


def decompose_task(question: str) -> str:
    return (
        "Split the question into the separate questions it asks (1 to 3), each complete on its own, using the question's own words. "
        f"A question that asks one thing stays as it is.\nQuestion: {question}\nReply with a JSON list of strings."
    )


def _list_constraint(chat_generator: Any, max_parts: int) -> dict[str, Any]:
    if backend_of(chat_generator) == "llama.cpp":
        items = " ".join(['("," ws item)?'] * (max_parts - 1))
        grammar = (
            f'root ::= "[" ws item {items} ws "]"\n'
            'item ::= "\\"" char{3,200} "\\""\n'
            'char ::= [^"\\\\\\n]\n'
            'ws ::= [ ]?'
        )
        return {"grammar": gbnf_grammar(grammar)}
    if backend_of(chat_generator) == "openai":
        schema = {"type": "object", "properties": {"parts": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": max_parts}}, "required": ["parts"], "additionalProperties": False}
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "parts", "strict": True, "schema": schema}}}
    return {}


def parse_parts(text: str, question: str, max_parts: int) -> list[str]:
    """The LLM's parts, or ValueError: not a list of strings, too many, or parts using words the question does not have."""
    value = json.loads(text)
    if isinstance(value, dict):
        value = value.get("parts")
    if not isinstance(value, list) or not value or len(value) > max_parts or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"expected a list of 1-{max_parts} questions, got {text[:80]!r}")
    asked = {w.lower() for w in re.findall(r"\w+", question)}
    for part in value:
        words = [w.lower() for w in re.findall(r"\w+", part)]
        new = [w for w in words if w not in asked]
        if len(new) > max(2, len(words) // 3):  # a sub-question may add a wh-word, not a new subject
            raise ValueError(f"sub-question {part!r} adds words the question does not have: {new[:5]}")
    return [_as_question(v) for v in value]


@component
class QueryDecomposer:
    def __init__(self, backend: str = "rules", chat_generator: Any = None, max_parts: int = 3, prompt: str | None = None):
        """``prompt``: a custom task template with ``{question}`` (the LLM backend's), replacing :func:`decompose_task`."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if backend != "rules" and chat_generator is None:
            raise ValueError(f"the {backend} backend needs a chat generator")
        if max_parts < 2:
            raise ValueError("max_parts must be >= 2")
        if prompt is not None and "{question}" not in prompt:
            raise ValueError("a custom decomposition prompt needs a {question} placeholder")
        self.backend, self.chat_generator, self.max_parts, self.prompt = backend, chat_generator, max_parts, prompt

    def warm_up(self) -> None:
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator), max_parts=self.max_parts, prompt=self.prompt)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QueryDecomposer":
        return default_from_dict(cls, generator_from_dict(data))

    def _llm_parts(self, question: str) -> list[str] | None:
        task = self.prompt.format(question=question) if self.prompt else decompose_task(question)
        messages = [ChatMessage.from_system(DECOMPOSE_SYSTEM), ChatMessage.from_user(task)]
        kwargs = {**_list_constraint(self.chat_generator, self.max_parts), "max_tokens": 160, "temperature": 0.0}
        reply = call_llm(self.chat_generator, messages, lambda text: parse_parts(text, question, self.max_parts), kwargs, step="decompose")
        return reply.value if reply.ok else None

    @component.output_types(parts=list[str], kind=str, decomposition=dict)
    def run(self, query: str) -> dict[str, Any]:
        parts, kind = split_by_rules(query, self.max_parts)
        how = "rules"
        if self.backend == "llm" or (self.backend == "auto" and kind == "single" and looks_multi(query)):
            llm_parts = self._llm_parts(query)
            if llm_parts is None:  # the failure is on the trace (call_llm recorded it); keep the rules' answer
                how = "rules (the LLM's split was unusable)"
            elif len(llm_parts) > 1:
                parts, kind, how = llm_parts, "multi", "llm"
            elif kind == "single":
                how = "llm (one part)"
        record(decision={"parts": len(parts), "kind": kind, "by": how})
        return {"parts": parts, "kind": kind, "decomposition": {"parts": parts, "kind": kind, "by": how}}
