"""Log-probabilities from an OpenAI-compatible server: a reply's own tokens, and servers that refuse them (or a grammar).

* **A reply's own tokens.** The chat API's ``"logprobs": true`` (OpenAI, llama.cpp's ``llama-server``, vLLM,
  recent Ollama) lists each chosen token with its log-probability: under greedy decoding the same numbers
  llama.cpp's logits give in-process (:class:`ragkit.llm.structured.TokenProbabilities`), summarised the
  same way (:func:`token_summary`). An answer's token probabilities are the calibrated confidence's
  strongest signals; a served answer without them has the fit's means in their place.
* **A server that refuses the parameter** (HTTP 400 naming ``logprobs``: OpenAI's reasoning models do) is
  remembered by endpoint and model, and its calls are made without it — an answer without its token
  probabilities, a yes/no judgment as a constrained reply (:mod:`ragkit.llm.judgments`) — never a failed call.
  A server that refuses a grounded answer's request — a GBNF ``grammar`` (llama-server's extension, sent in
  ``extra_body``: the span rule, :mod:`ragkit.llm.span_grammar`) with more top alternatives than OpenAI's 20 — is
  remembered the same way and asked for a free draft instead.

Written here because Haystack's ``OpenAIChatGenerator`` passes ``logprobs`` through to its reply's ``meta``
(a dict, or a streamed reply's list of one per chunk) but nothing in Haystack reads them.

Usage::

    token_summary(served_token_probabilities(reply.meta["logprobs"]))   # {"token_p_mean": 0.85, "token_p_min": 0.36, ...}
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# (base URL, model) of servers that answered a request with logprobs by refusing it: asked without them since
REFUSES_LOGPROBS: set[tuple[str, str]] = set()
REFUSES_GRAMMAR: set[tuple[str, str]] = set()  # the same, for a ``grammar`` in ``extra_body``
LOGPROB_KEYS = ("logprobs", "top_logprobs")


def endpoint(generator: Any) -> tuple[str, str]:
    return str(getattr(generator, "api_base_url", "") or ""), str(getattr(generator, "model", "") or "")


def token_summary(probabilities: list[float]) -> dict[str, float] | None:
    """Geometric-mean, minimum and first-token probability of a reply's tokens (None for no token)."""
    p = np.clip(np.asarray(probabilities, dtype="float64"), 1e-12, 1.0)
    if not p.size:
        return None
    return {"token_p_mean": float(np.exp(np.log(p).mean())), "token_p_min": float(p.min()), "token_p_first": float(p[0]), "tokens": int(p.size)}


def served_token_probabilities(logprobs: Any) -> list[float]:
    """Each chosen token's probability from an OpenAI-style ``logprobs`` (a reply's dict, or a streamed reply's list of them)."""
    parts = logprobs if isinstance(logprobs, list) else [logprobs]
    content = [t for part in parts if isinstance(part, dict) for t in part.get("content") or [] if isinstance(t, dict)]
    return [math.exp(t["logprob"]) for t in content if isinstance(t.get("logprob"), (int, float)) and math.isfinite(t["logprob"])]


# A yes/no judgment reads at most 20 alternatives (OpenAI's most): those are kept whole. Past them (a grounded
# span's 100) an alternative e^12 (160,000x) less likely than the chosen token adds under 0.1 % to any
# renormalisation, and a span reply's list was 110-170 kB in the LLM cache before they were dropped.
KEPT_ALTERNATIVES = 20
NEGLIGIBLE_LOGPROB = 12.0


def slim_logprobs(logprobs: Any) -> Any:
    """What ragkit reads of an OpenAI-style ``logprobs`` (a dict, or a streamed reply's list of them): each token and
    log-probability with its alternatives, without their byte lists, and past the first 20 alternatives without
    those ``NEGLIGIBLE_LOGPROB`` below the chosen token. Done before the first reading, so a cached reply reads the same."""

    def step(token: dict) -> dict:
        chosen = token.get("logprob")
        alternatives = [a for a in token.get("top_logprobs") or [] if isinstance(a, dict)]
        kept = [{"token": a.get("token"), "logprob": a.get("logprob")} for i, a in enumerate(alternatives)
                if i < KEPT_ALTERNATIVES or not isinstance(chosen, (int, float)) or not isinstance(a.get("logprob"), (int, float))
                or a["logprob"] >= chosen - NEGLIGIBLE_LOGPROB]
        return {"token": token.get("token"), "logprob": chosen, "top_logprobs": kept}

    def part(value: Any) -> Any:
        if not isinstance(value, dict) or not isinstance(value.get("content"), list):
            return value
        return {**value, "content": [step(t) if isinstance(t, dict) else t for t in value["content"]]}

    return [part(p) for p in logprobs] if isinstance(logprobs, list) else part(logprobs)


def refused_parameter(exc: BaseException, generation_kwargs: dict[str, Any]) -> set[tuple[str, str]] | None:
    """Which memo a failed call belongs in when it is a server refusing a parameter it was sent (a 400 naming
    it), not a failure of its own: :data:`REFUSES_LOGPROBS`, :data:`REFUSES_GRAMMAR`, or None."""
    if getattr(exc, "status_code", None) != 400:
        return None
    message = str(exc).lower()
    if "grammar" in (generation_kwargs.get("extra_body") or {}) and ("grammar" in message or "logprobs" in message):
        return REFUSES_GRAMMAR  # a span answer's request (a grammar, many alternatives) is llama-server's: not the others'
    if any(k in generation_kwargs for k in LOGPROB_KEYS) and "logprobs" in message:
        return REFUSES_LOGPROBS
    return None


def without_refused(generator: Any, generation_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``generation_kwargs`` without the parameters this server refused before."""
    kwargs = dict(generation_kwargs)
    if endpoint(generator) in REFUSES_LOGPROBS:
        kwargs = {k: v for k, v in kwargs.items() if k not in LOGPROB_KEYS}
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict) and "grammar" in extra and endpoint(generator) in REFUSES_GRAMMAR:
        # the alternatives were asked for to read the span's tokens under the grammar: a free draft's are not read
        extra = {k: v for k, v in extra.items() if k != "grammar"}
        kwargs = {k: v for k, v in kwargs.items() if k != "extra_body" and k not in LOGPROB_KEYS} | ({"extra_body": extra} if extra else {})
    return kwargs
