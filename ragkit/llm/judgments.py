"""Yes/no judgments as probabilities, in-process or from an OpenAI-compatible server.

A yes/no step (the retrieval gate, the sufficiency checks, the LLM reranker, the evaluation judge, the
test-set answerability filter) wants P(yes), not a bare "yes": a threshold, a ranking and a calibrated
confidence all need the number.

* **llama.cpp in-process** — one forward pass; P(yes) read from the next-token distribution
  (:meth:`ragkit.llm.probe.LlamaProbe.choice_probs`): the labels' words' probabilities, renormalised.
* **an OpenAI-compatible server** — the chat API's ``logprobs`` / ``top_logprobs`` (OpenAI, llama.cpp's
  ``llama-server``, vLLM, recent Ollama) give the log-probabilities of the 20 most likely first tokens of
  the reply: one call for one token, and the same renormalisation. That is the in-process number (the
  softmax's normaliser cancels) as long as the words are among the 20; a label none of whose words is
  listed gets at most what the least listed token has, for each of its words — so a near-certain
  judgment is never exactly certain. (``bench/server_judgments.py`` measures both against each other.)
* **otherwise** — a server that sends no log-probabilities or refuses to (it is remembered, so later
  judgments make one call, not two), or a top 20 holding neither label: a yes/no reply under a JSON-schema constraint,
  1.0 or 0.0; the step's trace says so (``decision["p_yes"]``: a coarser number, not a failure).

A failed call or an unusable reply raises RuntimeError with its reason; the caller decides what that
costs (a counted failure, a lower confidence). Written here because Haystack's ``OpenAIChatGenerator``
passes ``logprobs`` through to its reply's ``meta`` but nothing in Haystack reads a choice from it.

Usage::

    p = yes_probability(chat_generator, messages, step="gate")   # 0.83, whichever backend
    server_choice_probs(openai_generator, messages, {"yes": ["yes", "Yes"], "no": ["no", "No"]}, step="rerank")
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from haystack.dataclasses import ChatMessage

from ragkit.llm.probe import LlamaProbe, probe_for
from ragkit.llm.served_logprobs import REFUSES_LOGPROBS, endpoint
from ragkit.llm.structured import backend_of, call_llm, choice_constraint, json_reply_max_tokens, parse_choice
from ragkit.pipeline.trace import record

YES_NO_WORDS = {"yes": ["yes", "Yes", " yes"], "no": ["no", "No", " no"]}
TOP_LOGPROBS = 20  # the most the OpenAI API lets a call ask for
# (base URL, model) of servers that answered a log-probability request without any: asked no more
_WITHOUT_LOGPROBS: set[tuple[str, str]] = set()
_reading = threading.local()
# what the trace says where a judgment is a 1 or a 0: not a failure (the reply is used), a coarser number
NO_LOGPROBS = "a constrained reply, 1 or 0 (the server sends no log-probabilities)"


class _OneTokenReads(logging.Filter):
    """Haystack warns that a reply stopped at max_tokens; a one-token read stops there by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(_reading, "active", False) and "truncated before reaching a natural stopping point" in str(record.msg))


logging.getLogger("haystack.components.generators.chat.openai").addFilter(_OneTokenReads())


def first_token_logprobs(logprobs: Any) -> dict[str, float] | None:
    """{token text: log-probability} of the reply's first token's top alternatives, from an OpenAI chat reply's
    ``logprobs`` (as Haystack's generator keeps it in ``meta``); None if fewer than two are listed."""
    content = (logprobs or {}).get("content") if isinstance(logprobs, dict) else None
    if not content or not isinstance(content[0], dict):
        return None
    # the alternatives, not the chosen token alone: with one token listed, "at most the least listed" bounds nothing
    listed = content[0].get("top_logprobs")
    if not isinstance(listed, list) or len(listed) < 2:
        return None
    top: dict[str, float] = {}
    for entry in (e for e in listed if isinstance(e, dict)):
        token, value = entry.get("token"), entry.get("logprob")
        if isinstance(token, str) and isinstance(value, (int, float)) and math.isfinite(value):
            top[token] = max(top.get(token, -math.inf), float(value))
    return top or None


def label_probabilities(top: dict[str, float], choices: dict[str, list[str]]) -> dict[str, float] | None:
    """P(label) renormalised over the labels, from the listed first tokens; a label with none of its words
    listed gets the least listed token's probability for each word (its most). None if no label is listed."""
    floor = math.exp(min(top.values()))
    mass = {label: sum(math.exp(top[w]) for w in words if w in top) for label, words in choices.items()}
    if not any(mass.values()):
        return None
    mass = {label: m or floor * len(choices[label]) for label, m in mass.items()}
    total = sum(mass.values())
    return {label: m / total for label, m in mass.items()}


def server_choice_probs(generator: Any, messages: list[ChatMessage], choices: dict[str, list[str]], step: str) -> dict[str, float] | None:
    """P(label) from an OpenAI-compatible server's top log-probabilities of a one-token reply; None where the
    server gives none or lists no label (the caller falls back to a constrained reply). Raises RuntimeError
    on a failed call. Cached and traced like every call (:func:`ragkit.llm.structured.call_llm`)."""
    if backend_of(generator) != "openai":
        return None
    if endpoint(generator) in _WITHOUT_LOGPROBS | REFUSES_LOGPROBS:
        record(decision={"p_yes": NO_LOGPROBS})
        return None
    kwargs = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": TOP_LOGPROBS}
    _reading.active = True
    try:
        reply = call_llm(generator, messages, lambda text: text, kwargs, step=step)
    finally:
        _reading.active = False
    if not reply.ok:
        raise RuntimeError(reply.error)
    top = first_token_logprobs(reply.logprobs)
    if top is None:
        _WITHOUT_LOGPROBS.add(endpoint(generator))
        record(decision={"p_yes": NO_LOGPROBS})
        return None
    probs = label_probabilities(top, choices)
    if probs is None:
        record(decision={"p_yes": f"a constrained reply (none of {sorted(choices)} among the server's {len(top)} most likely first tokens)"})
    return probs


def yes_probability(generator: Any, messages: list[ChatMessage], step: str) -> float:
    """P(yes) for a yes/no question: llama.cpp's next-token distribution in-process, a server's top
    log-probabilities, else a constrained yes/no reply (1.0 or 0.0). Raises RuntimeError with the reason on a
    failed call or an unusable reply (the caller decides the fallback)."""
    if LlamaProbe.supports(generator):
        probe = probe_for(generator)
        mark = probe.mark()
        p_yes = probe.choice_probs(messages, YES_NO_WORDS)["yes"]
        record(**probe.usage_since(mark))
        return p_yes
    probs = server_choice_probs(generator, messages, YES_NO_WORDS, step)
    return probs["yes"] if probs is not None else constrained_yes(generator, messages, step)


def constrained_yes(generator: Any, messages: list[ChatMessage], step: str) -> float:
    """1.0 or 0.0: a yes/no reply under the backend's constraint (a grammar, a JSON schema), where no
    probability can be read. Raises RuntimeError with the reason on a failed call or an unusable reply."""
    kwargs = {**choice_constraint(generator, ["yes", "no"]), "max_tokens": json_reply_max_tokens(generator, 4, items=2), "temperature": 0.0}
    reply = call_llm(generator, messages, lambda text: parse_choice(text, ["yes", "no"]), kwargs, step=step)
    if not reply.ok:
        raise RuntimeError(reply.error)
    return 1.0 if reply.value == "yes" else 0.0
