"""What can go wrong with an LLM call, named so a user can act on it: endpoint, step, cause.

Every ragkit LLM call goes through :func:`ragkit.llm.structured.call_llm`; this module gives it

* :func:`describe_failure` — one line for a failed call that names the endpoint (the server URL, or
  the local GGUF) and the cause in words ("connection refused", "timed out", "returned no choices",
  "sent a reply that is not valid JSON"), instead of a client library's exception text;
* a per-question **deadline** (:func:`question_deadline`, :func:`remaining_seconds`): the engine sets
  one for each question (``RagConfig.deadline_s``, ``RAGKIT_DEADLINE_S``); a call made after it passed
  fails at once, a remote call gets at most the time left as its timeout, and a local llama.cpp
  answer stops generating when it passes (:class:`DeadlineStop`, a logits processor, because
  llama-cpp-python's chat API takes no stopping criteria);
* :func:`reply_char_bound` — the most characters ``max_tokens`` can produce: a server that ignores
  ``max_tokens`` and sends megabytes has its reply cut there and the call counted as failed;
* :func:`fit_to_context` — a prompt that would not fit llama.cpp's context window is trimmed in the
  middle of its longest message (the sources; the system message and the task at the end stay) with
  a note on the trace, instead of being sent and refused.

Hand-written because these are policies of this pipeline, not library features: Haystack's
generators raise their client's exceptions and take one fixed timeout at construction.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from typing import Any, Iterator

import numpy as np
from haystack.dataclasses import ChatMessage

# Qwen2.5 averages ~4 characters per token on English; 16 leaves room for long words and code.
CHARS_PER_TOKEN_BOUND = 16
DEFAULT_MAX_TOKENS = 512
CONTEXT_MARGIN_TOKENS = 16  # what chat templates add around a reply

_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar("ragkit_deadline", default=None)


class DeadlineExceeded(RuntimeError):
    """The question's deadline passed before (or while) this call ran."""


class EmptyReply(RuntimeError):
    """The backend answered, but with no reply message at all."""


def is_llama_cpp(generator: Any) -> bool:
    """A llama-cpp-haystack chat generator, or a subclass (ragkit's own resolves the model by name)."""
    return any(c.__name__ == "LlamaCppChatGenerator" for c in type(generator).__mro__)


# -- naming failures --------------------------------------------------------------------------
def describe_endpoint(generator: Any) -> str:
    """Where a generator's calls go: the server URL, the local model file, or the class name."""
    url = getattr(generator, "api_base_url", None)
    if url:
        return str(url)
    model = getattr(generator, "model_name", None) or getattr(generator, "model_path", None) or getattr(generator, "model", None)
    if is_llama_cpp(generator) and model:
        return f"local llama.cpp model {model}"
    return type(generator).__name__


def describe_failure(exc: BaseException, generator: Any) -> str:
    """``"<endpoint> <what happened> (<ExceptionType>: <message>)"`` in one line."""
    name = type(exc).__name__
    detail = " ".join(str(exc).split())[:160]
    if isinstance(exc, DeadlineExceeded):
        what = str(exc)
    elif name == "APITimeoutError" or isinstance(exc, TimeoutError):
        what = "did not answer in time"
    elif name == "APIConnectionError":
        what = "could not be reached (is the server running?)"
    elif isinstance(exc, json.JSONDecodeError):
        what = "sent a reply that is not valid JSON"
    elif name in ("APIStatusError", "InternalServerError", "BadRequestError", "NotFoundError", "AuthenticationError",
                  "PermissionDeniedError", "RateLimitError", "UnprocessableEntityError", "ConflictError"):
        what = f"answered with HTTP {getattr(exc, 'status_code', '?')}"
    elif isinstance(exc, EmptyReply):
        what = "returned no choices"
    else:
        what = "failed"
    if isinstance(exc, (DeadlineExceeded, EmptyReply)) or not detail:  # the words say it all
        return f"{describe_endpoint(generator)} {what}"
    return f"{describe_endpoint(generator)} {what} ({name}: {detail})"


# -- the per-question deadline ------------------------------------------------------------------
@contextlib.contextmanager
def question_deadline(seconds: float | None) -> Iterator[None]:
    """Every LLM call inside the block shares one budget of ``seconds`` (None or <= 0: no deadline)."""
    token = _DEADLINE.set((time.monotonic() + seconds, float(seconds)) if seconds and seconds > 0 else None)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining_seconds() -> float | None:
    """Seconds left before the current question's deadline (negative once passed); None without one."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline[0] - time.monotonic()


def deadline_seconds() -> float | None:
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline[1]


def check_deadline() -> None:
    left = remaining_seconds()
    if left is not None and left <= 0:
        raise DeadlineExceeded(f"the question's {deadline_seconds():g} s deadline had passed")


class DeadlineStop:
    """A llama-cpp-python logits processor that ends generation once the question's deadline passes:
    from then on only the end-of-text token may be chosen. ``stopped`` says whether it fired."""

    def __init__(self, end_token_ids: list[int], deadline: float):
        self.end_token_ids = end_token_ids
        self.deadline = deadline
        self.stopped = False

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if time.monotonic() >= self.deadline:
            self.stopped = True
            kept = scores[self.end_token_ids].copy()
            scores[:] = -np.inf
            scores[self.end_token_ids] = np.maximum(kept, 0.0)
        return scores


def deadline_kwargs(generator: Any, generation_kwargs: dict[str, Any], free_text: bool) -> tuple[dict[str, Any], DeadlineStop | None]:
    """``generation_kwargs`` bounded by the time left: a remote call's timeout, a local free-text
    call's stop processor (grammar-constrained calls are a few tokens long and may not end early)."""
    left = remaining_seconds()
    if left is None:
        return generation_kwargs, None
    kwargs = dict(generation_kwargs)
    kind = type(generator).__name__
    if "OpenAI" in kind:
        retries = int(getattr(generator, "max_retries", 0) or 0)
        configured = getattr(generator, "timeout", None) or left
        kwargs["timeout"] = max(min(configured, left / (retries + 1)), 0.1)
        return kwargs, None
    if is_llama_cpp(generator) and free_text and getattr(generator, "_model", None) is not None:
        from llama_cpp import LogitsProcessorList

        llm = generator._model
        ends = sorted({int(llm.token_eos())} | {int(t) for t in _end_of_turn_ids(llm)})
        stop = DeadlineStop(ends, time.monotonic() + left)
        # first, so the probability recorder after it sees the stop
        kwargs["logits_processor"] = LogitsProcessorList([stop, *(kwargs.get("logits_processor") or [])])
        return kwargs, stop
    return kwargs, None


def _end_of_turn_ids(llm: Any) -> list[int]:
    ids = []
    for text in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        try:
            tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        except Exception:  # a vocabulary without this marker
            continue
        if len(tokens) == 1:
            ids.append(tokens[0])
    return ids


# -- bounded replies and prompts ----------------------------------------------------------------
def max_tokens_of(generator: Any, generation_kwargs: dict[str, Any] | None) -> int:
    for source in (generation_kwargs or {}, getattr(generator, "generation_kwargs", None) or {}):
        value = source.get("max_tokens") or source.get("max_completion_tokens")
        if value:
            return int(value)
    return DEFAULT_MAX_TOKENS


def reply_char_bound(generator: Any, generation_kwargs: dict[str, Any] | None) -> int:
    return max_tokens_of(generator, generation_kwargs) * CHARS_PER_TOKEN_BOUND + 64


def fit_to_context(messages: list[ChatMessage], prompt_tokens: int, n_ctx: int, max_tokens: int, count) -> tuple[list[ChatMessage], str | None]:
    """(messages that fit ``n_ctx`` with room for ``max_tokens``, a note saying what was cut, or None).

    ``count(messages) -> int`` counts a candidate's prompt tokens. The longest message loses its
    middle (the sources; its opening and its closing task and question stay)."""
    budget = n_ctx - max_tokens - CONTEXT_MARGIN_TOKENS
    if prompt_tokens <= budget:
        return messages, None
    if budget <= 0:
        raise ValueError(f"max_tokens={max_tokens} leaves no room for a prompt in the {n_ctx}-token context")
    longest = max(range(len(messages)), key=lambda i: len(messages[i].text or ""))
    text = messages[longest].text or ""
    share = budget / prompt_tokens * 0.9
    for _ in range(4):  # tokens per character vary along the text: cut harder until it fits
        keep = int(len(text) * share)
        head, tail = keep * 2 // 3, keep // 3
        cut = text[:head] + f"\n… [{len(text) - head - tail} characters cut to fit the context] …\n" + text[len(text) - tail:]
        trimmed = list(messages)
        trimmed[longest] = ChatMessage.from_user(cut) if messages[longest].role.value == "user" else ChatMessage.from_system(cut)
        tokens = count(trimmed)
        if tokens <= budget:
            return trimmed, f"prompt trimmed from {prompt_tokens} to {tokens} tokens to fit the {n_ctx}-token context"
        share *= budget / tokens * 0.9
    raise ValueError(f"the prompt ({prompt_tokens} tokens) could not be trimmed to fit the {n_ctx}-token context")
