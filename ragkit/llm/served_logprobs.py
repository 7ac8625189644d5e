"""Log-probabilities from an OpenAI-compatible server: a reply's own tokens, and servers that refuse them.

* **A reply's own tokens.** The chat API's ``"logprobs": true`` (OpenAI, llama.cpp's ``llama-server``, vLLM,
  recent Ollama) lists each chosen token with its log-probability: under greedy decoding the same numbers
  llama.cpp's logits give in-process (:class:`ragkit.llm.structured.TokenProbabilities`), summarised the
  same way (:func:`token_summary`). An answer's token probabilities are the calibrated confidence's
  strongest signals; a served answer without them has the fit's means in their place.
* **A server that refuses the parameter** (HTTP 400 naming ``logprobs``: OpenAI's reasoning models do) is
  remembered by endpoint and model, and its calls are made without it — an answer without its token
  probabilities, a yes/no judgment as a constrained reply (:mod:`ragkit.llm.judgments`) — never a failed call.

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


def refuses_logprobs(exc: BaseException) -> bool:
    """Whether a failed call is a server refusing the parameter (a 400 that names it), not a failure of its own."""
    return getattr(exc, "status_code", None) == 400 and "logprobs" in str(exc).lower()


def without_refused(generator: Any, generation_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``generation_kwargs`` without the log-probability parameters where this server refused them before."""
    if any(k in generation_kwargs for k in LOGPROB_KEYS) and endpoint(generator) in REFUSES_LOGPROBS:
        return {k: v for k, v in generation_kwargs.items() if k not in LOGPROB_KEYS}
    return generation_kwargs
