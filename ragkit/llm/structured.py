"""Constrained LLM calls that never crash the pipeline.

Small local models break free-text parsing, so every ragkit LLM call asks the backend to make only
valid output possible: a GBNF grammar for llama.cpp (a choice of labels, a list of scores), a JSON
schema ``response_format`` for OpenAI-compatible servers; a free-text answer may not open with a
citation mark (a first-token logits mask, :class:`FirstTokenMask`). Whatever still goes wrong — the LLM
raises, times out, or returns something the parser refuses — comes back as an :class:`LLMReply`
with ``ok=False`` and a reason, recorded on the trace as a fallback for the caller to act on.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from haystack.dataclasses import ChatMessage

from ragkit.llm.cache import active_cache, call_key
from ragkit.llm.faults import (
    DeadlineExceeded, EmptyReply, check_deadline, is_llama_cpp, deadline_kwargs, deadline_seconds, describe_endpoint, describe_failure, fit_to_context,
    max_tokens_of, reply_char_bound,
)
from ragkit.llm.probe import LlamaProbe, probe_for, prompt_cache_split
from ragkit.llm.prompts import NO_ANSWER
from ragkit.llm.served_logprobs import REFUSES_LOGPROBS, endpoint, refused_parameter, served_token_probabilities, slim_logprobs, token_summary, without_refused
from ragkit.llm.streaming import accepts_streaming
from ragkit.pipeline.trace import record


@dataclass
class LLMReply:
    ok: bool
    value: Any = None
    text: str | None = None
    error: str | None = None  # "llm_error: …" or "parse_failed: …"
    seconds: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, float] | None = None  # chosen-token probabilities (token_summary: llama.cpp's, or a server's logprobs)
    logprobs: dict[str, Any] | None = None  # a server's log-probabilities of the reply, where the call asked for them


def generator_to_dict(generator: Any) -> dict[str, Any] | None:
    """Serialize a component's optional ``chat_generator`` for its ``to_dict``: a fresh copy each time, so
    a pipeline whose steps share one generator dumps plain YAML (no ``&id001`` anchors)."""
    return copy.deepcopy(generator.to_dict()) if generator is not None else None


def generator_from_dict(data: dict[str, Any]) -> dict[str, Any]:
    """Deserialize ``init_parameters["chat_generator"]`` in place (if present) and return ``data``.

    Each component gets its own instance, as with any Haystack component; to load a pipeline whose
    steps share one model (one llama.cpp prompt cache), load it with
    :func:`ragkit.pipeline.export.load_exported` or pass :func:`ragkit.pipeline.export.shared_generators`
    as ``Pipeline.loads(..., callbacks=...)``."""
    from haystack.utils import deserialize_chatgenerator_inplace

    params = data.get("init_parameters", {})
    if params.get("chat_generator") and isinstance(params["chat_generator"], dict):
        deserialize_chatgenerator_inplace(params, key="chat_generator")
    return data


def gbnf_grammar(text: str) -> Any:
    """A llama.cpp GBNF grammar that keeps its source text (``ragkit_source``): the LLM cache keys a
    constrained call by it (:mod:`ragkit.llm.cache`)."""
    from llama_cpp import LlamaGrammar

    grammar = LlamaGrammar.from_string(text, verbose=False)
    grammar.ragkit_source = text
    return grammar


def backend_of(generator: Any) -> str:
    name = type(generator).__name__
    if is_llama_cpp(generator):
        return "llama.cpp"
    if "OpenAI" in name:
        return "openai"
    return "other"


def gbnf_literal(text: str) -> str:
    return json.dumps(text)  # GBNF string literals use JSON escaping


def choice_constraint(generator: Any, labels: list[str]) -> dict[str, Any]:
    """generation_kwargs that let the model emit exactly one of ``labels``."""
    kind = backend_of(generator)
    if kind == "llama.cpp":
        grammar = "root ::= " + " | ".join(gbnf_literal(label) for label in labels)
        return {"grammar": gbnf_grammar(grammar)}
    if kind == "openai":
        schema = {"type": "object", "properties": {"label": {"type": "string", "enum": labels}}, "required": ["label"], "additionalProperties": False}
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "label", "strict": True, "schema": schema}}}
    return {}


def json_reply_max_tokens(generator: Any, llama_cpp_tokens: int, items: int = 1) -> int:
    """max_tokens for a constrained reply: what the llama.cpp grammar needs, or, for a server's JSON-schema
    reply, room for its layout. llama-server lays it out over lines, in short tokens under the schema's grammar
    ('{\\n  "label": "yes"\\n}' took 14 tokens, five scores 36; even '{"label":"yes"}' is 5), so the grammar's budget
    cuts it (a failed call): 16 + 8 an item. A cap, not a cost: generation stops at the closing brace."""
    return max(llama_cpp_tokens, 16 + 8 * items) if backend_of(generator) == "openai" else llama_cpp_tokens


def parse_choice(text: str, labels: list[str]) -> str:
    """The label in ``text`` (bare, quoted, or as {"label": …}); ValueError if there is none or several."""
    stripped = text.strip().strip("`").strip()
    try:
        loaded = json.loads(stripped)
        if isinstance(loaded, dict):
            loaded = loaded.get("label", "")
        stripped = str(loaded).strip()
    except (json.JSONDecodeError, TypeError):
        pass
    for label in labels:
        if stripped.upper() == label.upper():
            return label
    found = {label for label in labels if re.search(rf"\b{re.escape(label)}\b", stripped, re.IGNORECASE)}
    if len(found) == 1:
        return found.pop()
    raise ValueError(f"expected one of {labels}, got {text[:80]!r}")


def int_list_constraint(generator: Any, n: int, low: int = 0, high: int = 10) -> dict[str, Any]:
    """generation_kwargs for exactly ``n`` integers in [low, high] as a JSON array."""
    kind = backend_of(generator)
    if kind == "llama.cpp" and low == 0 and high == 10:
        items = ' "," '.join(["score"] * n) if n else ""
        grammar = f'root ::= "[" {items} "]"\nscore ::= "10" | [0-9]'
        return {"grammar": gbnf_grammar(grammar)}
    if kind == "openai":
        schema = {
            "type": "object",
            "properties": {"scores": {"type": "array", "items": {"type": "integer", "minimum": low, "maximum": high}, "minItems": n, "maxItems": n}},
            "required": ["scores"],
            "additionalProperties": False,
        }
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "scores", "strict": True, "schema": schema}}}
    return {}


def parse_int_list(text: str, n: int, low: int = 0, high: int = 10) -> list[int]:
    stripped = text.strip()
    try:
        loaded = json.loads(stripped)
    except json.JSONDecodeError:
        match = re.search(r"\[[^\]]*\]", stripped)
        if not match:
            raise ValueError(f"no list of scores in {text[:80]!r}") from None
        loaded = json.loads(match.group(0))
    if isinstance(loaded, dict):
        loaded = loaded.get("scores")
    if not isinstance(loaded, list) or len(loaded) != n:
        raise ValueError(f"expected {n} scores, got {text[:80]!r}")
    scores = []
    for value in loaded:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"score {value!r} is not a number in [{low}, {high}]")
        scores.append(int(round(value)))
    return scores


# An answer must begin with its content. Asked to cite "like [1]", the 1.5B replied with nothing but
# "[1]" to 18 of 100 SQuAD questions (bench/results/agentic_squad.large.answers.jsonl at 6e95b88);
# keeping "[" out of the first token removed all of them on 40 of those questions (F1 0.356 -> 0.422),
# and left the 0.5B's answers unchanged on 39 of 40.
_ONLY_CITATIONS = re.compile(r"^(\s*\[\s*\d+(\s*,\s*\d+)*\s*\]\s*[.,;]?)+$")


class FirstTokenMask:
    """A llama-cpp-python logits processor that bans ``token_ids`` at the first generated position only.

    A GBNF grammar (``[^[ \\t\\n] [^\\x00]*``) says the same, but llama-cpp-python applies a grammar to the
    whole vocabulary at every step: on 20 SQuAD answers of the 0.5B it made an answer 1.83x slower
    (22.9 -> 42.4 ms per token) for a rule about one token; this mask 1.01x, same text on all 20
    (bench/answer_constraint.py).
    """

    def __init__(self, token_ids: np.ndarray):
        self.token_ids = token_ids
        self.first_position: int | None = None

    def cache_key(self) -> dict[str, str]:
        """What the mask bans, for the LLM cache's key (:mod:`ragkit.llm.cache`)."""
        return {"first_token_mask": hashlib.sha256(np.asarray(self.token_ids, dtype=np.int64).tobytes()).hexdigest()}

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.first_position is None:
            self.first_position = len(input_ids)
        if len(input_ids) == self.first_position:
            scores[self.token_ids] = -np.inf
        return scores


class TokenProbabilities:
    """A llama-cpp-python logits processor that records how sure the model was of each token it chose.

    Answers are decoded greedily (temperature 0), so the chosen token is the arg-max of the scores this
    processor sees (put it last, after any mask); its softmax probability is what llama.cpp's
    ``logprobs`` would report, which llama-cpp-python only gives for models loaded with
    ``logits_all=True`` (the output layer for every prompt token: far too slow on a CPU). One softmax
    over the vocabulary per generated token costs ~0.3 ms against ~25 ms for the token itself.
    Their :func:`token_summary` is a free confidence signal (:mod:`ragkit.components.confidence`).
    """

    def __init__(self) -> None:
        self.probabilities: list[float] = []

    def cache_key(self) -> str:
        return "token_probabilities"  # it only records: a cached reply keeps the summary it recorded

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        finite = scores[np.isfinite(scores)]
        if finite.size:
            top = float(finite.max())
            self.probabilities.append(float(1.0 / np.exp(finite - top).sum()))
        return scores


def answer_constraint(generator: Any) -> dict[str, Any]:
    """generation_kwargs for a free-text answer: with llama.cpp it starts with its content, not a citation
    mark, and each chosen token's probability is recorded (:class:`TokenProbabilities`); a server is asked
    for its chosen tokens' log-probabilities, the same numbers. :func:`call_llm` puts them on the trace and the reply."""
    if backend_of(generator) == "llama.cpp":
        from llama_cpp import LogitsProcessorList

        mask = FirstTokenMask(probe_for(generator).leading_citation_token_ids())
        return {"logits_processor": LogitsProcessorList([mask, TokenProbabilities()])}
    return {"logprobs": True} if backend_of(generator) == "openai" else {}


def token_recorder(generation_kwargs: dict[str, Any] | None) -> TokenProbabilities | None:
    for processor in (generation_kwargs or {}).get("logits_processor") or []:
        if isinstance(processor, TokenProbabilities):
            return processor
    return None


def parse_answer(text: str) -> str:
    """A usable answer from a reply: ValueError for an empty reply or one that is only citation marks;
    a reply that opens with the decline phrase is the decline phrase (small models echo the instruction after it)."""
    text = text.strip()
    if not text:
        raise ValueError("empty reply")
    if _ONLY_CITATIONS.match(text):
        raise ValueError(f"the reply is only a citation mark: {text[:40]!r}")
    if text.lower().startswith(NO_ANSWER.lower()):
        return NO_ANSWER
    return text


def llm_error(exc: BaseException, generator: Any = None) -> str:
    """How a failed LLM call is named in results and traces (one wording for every step): with the
    generator, the endpoint and the cause in words (:func:`ragkit.llm.faults.describe_failure`)."""
    if generator is not None:
        return f"llm_error: {describe_failure(exc, generator)}"
    return f"llm_error: {type(exc).__name__}: {str(exc)[:200]}"


def _failed(step: str, error: str, t0: float, **extra: Any) -> LLMReply:
    record(fallback=f"{step}: {error}", error=error)
    return LLMReply(ok=False, error=error, seconds=time.perf_counter() - t0, **extra)


def _fit_prompt(generator: Any, messages: list[ChatMessage], generation_kwargs: dict[str, Any], split: tuple[int, int] | None) -> tuple[list[ChatMessage], str | None]:
    """A llama.cpp prompt trimmed to its context window (:func:`ragkit.llm.faults.fit_to_context`);
    ``split`` is :func:`prompt_cache_split` of ``messages`` (None: not a loaded llama.cpp model)."""
    if split is None:
        return messages, None
    n_ctx = generator._model.n_ctx()
    return fit_to_context(messages, split[0], n_ctx, max_tokens_of(generator, generation_kwargs), lambda m: (prompt_cache_split(generator, m) or (0, 0))[0])


def call_llm(
    generator: Any,
    messages: list[ChatMessage],
    parse: Callable[[str], Any],
    generation_kwargs: dict[str, Any] | None = None,
    step: str = "llm",
    streaming_callback: Callable | None = None,
) -> LLMReply:
    """Run one chat call, parse its reply, and record calls, tokens and any fallback on the trace.

    Never raises for the LLM's sake: an unreachable or failing endpoint, the question's deadline, a
    reply longer than ``max_tokens`` allows (cut, never passed on) or one ``parse`` refuses is an
    ``ok=False`` reply with the reason (:mod:`ragkit.llm.faults`); a reply that stopped at
    ``max_tokens`` and a prompt trimmed to fit the context are kept, with a warning on the trace.
    ``streaming_callback`` (a :class:`ragkit.llm.streaming.StepStream`) gets the reply's tokens as they
    come, when the generator can stream; a cached reply arrives as one chunk."""
    t0 = time.perf_counter()
    generation_kwargs = without_refused(generator, dict(generation_kwargs or {}))
    # a one-token read of a server's top log-probabilities is not a reply to cut or warn about
    free_text = not any(k in generation_kwargs for k in ("grammar", "response_format", "top_logprobs"))
    cache_split = prompt_cache_split(generator, messages)
    try:
        check_deadline()
        messages, trimmed = _fit_prompt(generator, messages, generation_kwargs, cache_split)
    except DeadlineExceeded as exc:
        return _failed(step, f"deadline_exceeded: call to {describe_endpoint(generator)} skipped: {exc}", t0)
    except ValueError as exc:  # the prompt cannot fit at all
        return _failed(step, f"prompt_too_long: {exc}", t0)
    if trimmed:
        record(warning=trimmed)
        cache_split = prompt_cache_split(generator, messages)
    key = call_key("chat", generator, [[m.role.value, m.text] for m in messages], generation_kwargs)
    cached = active_cache().get(key) if key else None
    if cached is not None:  # the same model, prompt and decoding answered this before: no call
        record(cache_hits=1, cache_seconds=cached.get("seconds", 0.0))
        text, usage, tokens, finish_reason, deadline_stop = cached["text"], {}, cached["tokens"], cached["finish_reason"], None
        logprobs = cached.get("logprobs")
        if streaming_callback is not None and hasattr(streaming_callback, "replay"):
            streaming_callback.replay(text)
        seconds = time.perf_counter() - t0
    else:
        bounded, deadline_stop = deadline_kwargs(generator, generation_kwargs, free_text)
        kwargs: dict[str, Any] = {"generation_kwargs": bounded} if bounded else {}
        if streaming_callback is not None and accepts_streaming(generator):
            kwargs["streaming_callback"] = streaming_callback
        try:
            replies = generator.run(messages=messages, **kwargs)["replies"]
            if not replies:
                raise EmptyReply("no reply")
            reply = replies[0]
        except Exception as exc:  # an LLM backend can fail in many ways; all of them degrade the same
            record(llm_calls=1)
            refused = refused_parameter(exc, generation_kwargs)
            if refused is not None and endpoint(generator) not in refused:  # asked again without it, as from now on
                refused.add(endpoint(generator))
                name = "logprobs" if refused is REFUSES_LOGPROBS else "grammar"
                record(decision={name: f"refused by {describe_endpoint(generator)}: not sent since"})
                return call_llm(generator, messages, parse, generation_kwargs, step, streaming_callback)
            return _failed(step, llm_error(exc, generator), t0)
        seconds = time.perf_counter() - t0
        text, finish_reason = reply.text or "", (reply.meta or {}).get("finish_reason")
        logprobs = (reply.meta or {}).get("logprobs") if generation_kwargs.get("logprobs") else None
        usage = {k: int(v) for k, v in ((reply.meta or {}).get("usage") or {}).items() if isinstance(v, (int, float))}
        server_reused = (((reply.meta or {}).get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        if isinstance(server_reused, int):  # a server's own prompt cache (llama-server, OpenAI): the prompt's reused tokens
            usage["prompt_tokens_reused"] = server_reused
        recorder = token_recorder(generation_kwargs)
        tokens = token_summary(recorder.probabilities if recorder is not None else served_token_probabilities(logprobs))
        # a reply's own tokens are kept as their summary; only a judgment's or a span's alternatives are read later
        logprobs = slim_logprobs(logprobs) if generation_kwargs.get("top_logprobs") else None
        # A streamed llama.cpp reply carries no usage: count what was sent and generated ourselves.
        if cache_split is not None:
            usage.setdefault("prompt_tokens", cache_split[0])
            usage["prompt_tokens_reused"] = min(cache_split[1], usage["prompt_tokens"])
        if "completion_tokens" not in usage and text:
            usage["completion_tokens"] = tokens["tokens"] if tokens else count_tokens(generator, text[:reply_char_bound(generator, generation_kwargs)])
        record(
            llm_calls=1,
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
            prompt_tokens_reused=usage.get("prompt_tokens_reused", 0),
        )
        if key and not (deadline_stop is not None and deadline_stop.stopped):
            active_cache().put(key, "chat", {"text": text, "tokens": tokens, "finish_reason": finish_reason, "seconds": round(seconds, 4), "logprobs": logprobs})
    bound = reply_char_bound(generator, generation_kwargs)
    if tokens:
        record(decision={k: (round(v, 4) if isinstance(v, float) else v) for k, v in tokens.items() if k != "tokens"})
    if deadline_stop is not None and deadline_stop.stopped:
        return _failed(step, f"deadline_exceeded: {describe_endpoint(generator)} stopped generating at the question's {deadline_seconds():g} s deadline", t0, text=text[:bound], usage=usage)
    if len(text) > bound:
        error = (f"unusable_reply: {describe_endpoint(generator)} sent {len(text):,} characters, more than "
                 f"max_tokens={max_tokens_of(generator, generation_kwargs)} allows; cut at {bound:,}")
        return _failed(step, error, t0, text=text[:bound], usage=usage)
    if finish_reason == "length" and free_text:
        record(warning=f"reply cut at max_tokens={max_tokens_of(generator, generation_kwargs)}")
    try:
        value = parse(text)
    except (ValueError, TypeError, KeyError) as exc:
        error = f"parse_failed: {exc}"
        record(fallback=f"{step}: {error}")
        return LLMReply(ok=False, text=text, error=error, seconds=seconds, usage=usage, tokens=tokens)
    return LLMReply(ok=True, value=value, text=text, seconds=seconds, usage=usage, tokens=tokens, logprobs=logprobs)


def count_tokens(generator: Any, text: str) -> int:
    """Tokens of ``text`` in a loaded llama.cpp model's vocabulary; else a words-based estimate."""
    if LlamaProbe.supports(generator) and getattr(generator, "_model", None) is not None:
        try:
            return len(generator._model.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        except Exception:  # counting is diagnostics; never fail the call it describes
            pass
    return max(1, round(len(text.split()) * 1.3))
