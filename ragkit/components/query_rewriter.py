"""QueryRewriter: strip conversational noise from a question before it is searched.

"Hey, I want to compare functools.cache and lru_cache, thanks!" searches better as "compare
functools.cache and lru_cache": the greeting and the "I want to" add BM25 terms and blur the
embedding. The rewrite may only *delete* words — never add or reorder — so entity names and technical
terms cannot be lost or invented:

* ``"rules"`` — a fixed list of openers and fillers ("hey", "I was wondering", "can you tell me",
  "please", "thanks"); microseconds; a question without them is returned unchanged.
* ``"llm"`` — the LLM chooses which words to keep, under a grammar that allows only an in-order
  subsequence of the question's own words (llama.cpp), checked again in Python (other backends); a
  rewrite that drops a name or technical term (capitalised, with digits, ``_``, ``.`` or ``()``), keeps
  under two words, or cannot be parsed falls back to the rules' rewrite and the trace says so.

Usage::

    QueryRewriter().run(query="Hey, I want to compare X and Y")["query"]   # "compare X and Y"
"""

from __future__ import annotations

import re
from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.llm.structured import backend_of, call_llm, gbnf_grammar, gbnf_literal, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

REWRITE_BACKENDS = ("rules", "llm")
_OPENERS = re.compile(
    r"^\s*(?:(?:hey|hi|hello|ok(?:ay)?|so|well|um+|uh+|excuse me)\b[\s,!.:;-]*)+", re.I)
_FILLERS = re.compile(
    r"\b(?:i\s+(?:was|am)\s+wondering(?:\s+(?:if|whether))?|i(?:'d| would)\s+like\s+to\s+(?:know|understand|learn|find\s+out)(?:\s+about)?"
    r"|i\s+(?:want|need)\s+to\s+(?:know|understand|learn|find\s+out)(?:\s+about)?|i\s+(?:want|need|would\s+like)\s+to(?=\s+(?:compare|see|check))"
    r"|(?:can|could|would)\s+you\s+(?:please\s+)?(?:tell\s+me|explain(?:\s+to\s+me)?|help\s+me\s+(?:understand|with)|let\s+me\s+know)"
    r"|do\s+you\s+(?:happen\s+to\s+)?know|please|tell\s+me|quick\s+question|just\s+curious)\b[\s,:]*", re.I)
_CLOSERS = re.compile(r"[\s,.;-]*\b(?:thanks?(?:\s+(?:you|a\s+lot|in\s+advance))?|thx|cheers|please)\b[\s!.]*$", re.I)
REWRITE_SYSTEM = "You remove greetings, politeness and filler from a search question, keeping every name and technical term."


def protected_words(question: str) -> list[str]:
    """Words a rewrite must keep: names (capitalised after the first word) and technical terms."""
    words = question.split()
    out = []
    for i, word in enumerate(words):
        bare = word.strip(",.!?;:\"'")
        if not bare:
            continue
        technical = bool(re.search(r"[\d_.()]|[a-z][A-Z]", bare))
        named = i > 0 and bare[0].isupper() and bare.lower() not in {"i", "i'm", "i'd"}
        if technical or named:
            out.append(bare)
    return out


def rewrite_by_rules(question: str) -> str:
    text = _OPENERS.sub("", question)
    text = _FILLERS.sub("", text)
    text = _CLOSERS.sub("", text)
    text = re.sub(r"\s+", " ", text).strip(" ,;:-")
    if len(text.split()) < 2:  # nothing but noise was found, or the rules ate the question
        return question.strip()
    return text  # not re-capitalised: "functools.cache" must stay as written


def _keeps(rewrite: str, question: str) -> str:
    words = question.split()
    kept = rewrite.split()
    i = 0
    for word in kept:  # an in-order subsequence of the question's words
        while i < len(words) and words[i] != word:
            i += 1
        if i == len(words):
            raise ValueError(f"the rewrite adds or reorders words: {rewrite[:80]!r}")
        i += 1
    missing = [w for w in protected_words(question) if w not in {k.strip(",.!?;:\"'") for k in kept}]
    if missing:
        raise ValueError(f"the rewrite drops {', '.join(missing[:3])}")
    if len(kept) < 2:
        raise ValueError("the rewrite keeps under two words")
    return " ".join(kept)


def subsequence_grammar(question: str) -> str:
    """GBNF: any in-order subsequence of the question's words, separated by single spaces."""
    words = question.split()[:48]
    rules = ["root ::= w0"]
    for i, word in enumerate(words):
        if i + 1 == len(words):
            rules.append(f"w{i} ::= {gbnf_literal(word)} | \"\"")
        else:
            rules.append(f"w{i} ::= {gbnf_literal(word)} (\" \" w{i + 1} | \"\") | w{i + 1}")
    return "\n".join(rules)


@component
class QueryRewriter:
    def __init__(self, backend: str = "rules", chat_generator: Any = None, prompt: Optional[str] = None):
        if backend not in REWRITE_BACKENDS:
            raise ValueError(f"backend must be one of {REWRITE_BACKENDS}, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm rewriter needs a chat generator")
        self.backend, self.chat_generator, self.prompt = backend, chat_generator, prompt

    def warm_up(self) -> None:
        if self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator), prompt=self.prompt)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QueryRewriter":
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(query=str, rewrite=dict)
    def run(self, query: str) -> dict[str, Any]:
        ruled = rewrite_by_rules(query)
        info: dict[str, Any] = {"backend": self.backend, "original": query}
        rewritten = ruled
        if self.backend == "llm":
            self.warm_up()
            messages = [ChatMessage.from_system(self.prompt or REWRITE_SYSTEM), ChatMessage.from_user(f"Question: {query}\nThe question without filler:")]
            kwargs: dict[str, Any] = {"max_tokens": 2 * len(query.split()) + 8, "temperature": 0.0}
            if backend_of(self.chat_generator) == "llama.cpp":
                kwargs["grammar"] = gbnf_grammar(subsequence_grammar(query))
            reply = call_llm(self.chat_generator, messages, lambda text: _keeps(text.strip(), query), kwargs, step="rewrite")
            if reply.ok:
                rewritten = reply.value
            else:
                info["fallback"] = f"{reply.error}; the rules' rewrite kept"
        info["query"] = rewritten
        record(decision={"rewritten": rewritten != query.strip()})
        return {"query": rewritten, "rewrite": info}
