"""Label probabilities from a local llama.cpp model in one forward pass, reusing its prompt cache.

``LlamaCppChatGenerator`` samples text; a judge or a pointwise reranker needs P("yes") instead.
llama-cpp-python only returns log-probabilities when the model was loaded with ``logits_all=True``,
which computes the 150k-way output layer for *every* prompt token — far too slow on a CPU. This
probe formats the chat exactly as ``create_chat_completion`` does (the GGUF's own chat template),
evaluates only the tokens after the prefix already in the KV cache, and reads the last position's
logits. Consecutive probes that share a prefix (the sources, the question) therefore cost only
their differing tail, and so do answer/grade calls made through the generator, since they share
the same cache. The prefix is reused in whole blocks (:mod:`ragkit.llm.aligned_reuse`), so a
probability depends on its prompt alone, not on what was asked before it.

While an LLM cache is active (:mod:`ragkit.llm.cache`), a probe already made with the same model,
prompt and labels is answered from it: ``usage_since`` then reports a cache hit, not an LLM call.

Usage::

    probe = LlamaProbe(llama_cpp_chat_generator)
    mark = probe.mark()
    p = probe.choice_probs(messages, {"yes": ["yes", "Yes"], "no": ["no", "No"]})   # {"yes": 0.83, "no": 0.17}
    logp = probe.continuation_logprobs(messages, "Smiljan")   # log P of each token of that reply: [-0.05, -0.31]
    record(**probe.usage_since(mark))    # llm_calls (or cache_hits), prompt tokens evaluated and reused
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np
from haystack.dataclasses import ChatMessage

from ragkit.llm.aligned_reuse import attach
from ragkit.llm.cache import active_cache, call_key
from ragkit.llm.faults import is_llama_cpp


class LlamaProbe:
    def __init__(self, generator: Any):
        self.generator = generator
        self.evaluated_tokens = 0
        self.reused_tokens = 0
        self.forward_passes = 0
        self.cache_hits = 0
        self.cache_seconds = 0.0
        self._started = 0.0
        self._formatter = None
        self._leading_citation_ids: np.ndarray | None = None

    @staticmethod
    def supports(generator: Any) -> bool:
        return is_llama_cpp(generator)

    def mark(self) -> tuple[int, int, int, int, float]:
        return self.evaluated_tokens, self.reused_tokens, self.forward_passes, self.cache_hits, self.cache_seconds

    def usage_since(self, mark: tuple[int, int, int, int, float], calls: int = 1) -> dict[str, Any]:
        """What the probes since ``mark`` cost, for ``record``: ``calls`` LLM calls if any forward pass ran,
        else ``calls`` cache hits (with the seconds they took when made); prompt tokens evaluated and reused."""
        evaluated, reused, passes, hits, cached_seconds = mark
        usage: dict[str, Any] = {"prompt_tokens": (self.evaluated_tokens - evaluated) + (self.reused_tokens - reused), "prompt_tokens_reused": self.reused_tokens - reused}
        if self.forward_passes > passes:
            usage["llm_calls"] = calls
        elif self.cache_hits > hits:
            usage.update(cache_hits=calls, cache_seconds=round(self.cache_seconds - cached_seconds, 4))
        return usage

    def _cached(self, kind: str, prompt: str, parameters: dict[str, Any]) -> tuple[str | None, Any]:
        """(key, the cached result or None); a hit adds the seconds the call took when it was made to ``cache_seconds``."""
        key = call_key(kind, self.generator, prompt, parameters)
        entry = active_cache().get(key) if key else None
        if entry is None:
            self._started = time.perf_counter()
            return key, None
        self.cache_hits += 1
        if not (isinstance(entry, dict) and "value" in entry):  # written before replies kept their seconds
            return key, entry
        self.cache_seconds += entry.get("seconds", 0.0)
        return key, entry["value"]

    def _store(self, key: str | None, kind: str, value: Any) -> None:
        if key:
            active_cache().put(key, kind, {"value": value, "seconds": round(time.perf_counter() - self._started, 4)})

    @property
    def llm(self):
        if getattr(self.generator, "_model", None) is None:
            self.generator.warm_up()
        return self.generator._model

    def format(self, messages: list[ChatMessage]) -> str:
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            llm = self.llm
            template = llm.metadata.get("tokenizer.chat_template")
            if not template:
                raise RuntimeError("this GGUF has no chat template; the probe needs one")
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=llm._model.token_get_text(llm.token_eos()),
                bos_token=llm._model.token_get_text(llm.token_bos()),
            )
        chat = [{"role": m.role.value, "content": m.text or ""} for m in messages]
        return self._formatter(messages=chat).prompt

    def next_token_logits(self, prompt: str, continues_call: bool = False) -> np.ndarray:
        """The logits of the token after ``prompt``. A new prompt reuses the KV cache block-aligned
        (:mod:`ragkit.llm.aligned_reuse`), so they depend on the prompt alone; ``continues_call`` is for
        the same call decoding on (the prompt plus its own reply so far), which reuses all of it."""
        llm = self.llm
        tokens = llm.tokenize(prompt.encode("utf-8"), special=True)
        if len(tokens) >= llm.n_ctx():
            raise ValueError(f"prompt of {len(tokens)} tokens does not fit the {llm.n_ctx()}-token context")
        if continues_call:
            prefix = min(llm.longest_token_prefix(llm._input_ids.tolist(), tokens), len(tokens) - 1)  # >= 1 token for logits
            llm.n_tokens = prefix
            llm.eval(tokens[prefix:])
        else:
            reuse = attach(llm)
            prefix = reuse.start_for(tokens)
            reuse.evaluate(tokens, prefix)
        self.forward_passes += 1
        self.reused_tokens += prefix
        self.evaluated_tokens += len(tokens) - prefix
        return self._last_logits()

    def _last_logits(self) -> np.ndarray:
        """A copy of the logits after the last evaluated token."""
        import llama_cpp

        llm = self.llm
        pointer = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(llm.n_vocab(),)).copy()

    def _first_token_ids(self, words: list[str]) -> list[int]:
        ids = set()
        for word in words:
            pieces = self.llm.tokenize(word.encode("utf-8"), add_bos=False, special=False)
            if pieces:
                ids.add(pieces[0])
        return sorted(ids)

    def choice_probs(self, messages: list[ChatMessage], choices: dict[str, list[str]], assistant_prefix: str = "") -> dict[str, float]:
        """P(label) for each label, from the next-token distribution, renormalised over the labels.

        ``choices`` maps a label to the words that express it (first tokens are used)."""
        prompt = self.format(messages) + assistant_prefix
        key, cached = self._cached("choice_probs", prompt, {"choices": choices})
        if cached is not None:
            return cached
        logits = self.next_token_logits(prompt)
        label_logits = {}
        for label, words in choices.items():
            ids = self._first_token_ids(words)
            label_logits[label] = np.logaddexp.reduce(logits[ids]) if ids else -np.inf
        values = np.array(list(label_logits.values()), dtype="float64")
        probs = np.exp(values - values.max())
        probs /= probs.sum()
        result = {label: float(p) for label, p in zip(label_logits, probs)}
        self._store(key, "choice_probs", result)
        return result

    def continuation_logprobs(self, messages: list[ChatMessage], continuation: str) -> list[float]:
        """log P of each token of ``continuation`` as the model's reply to ``messages``: how likely the
        model finds a given reply, one forward pass for the prompt, then one a token.

        The tokens are those of the formatted prompt followed by the continuation, so a reply the
        model would itself decode greedily gets the probabilities its decoding saw."""
        prompt = self.format(messages)
        key, cached = self._cached("continuation_logprobs", prompt, {"continuation": continuation})
        if cached is not None:
            return cached
        llm = self.llm
        prompt_tokens = llm.tokenize(prompt.encode("utf-8"), special=True)
        full = llm.tokenize((prompt + continuation).encode("utf-8"), special=True)
        if full[: len(prompt_tokens)] != prompt_tokens:  # a merge across the boundary: the reply's own tokens
            full = prompt_tokens + llm.tokenize(continuation.encode("utf-8"), add_bos=False, special=False)
        tail = full[len(prompt_tokens):]
        if not tail:
            raise ValueError("the continuation to score is empty")
        if len(full) >= llm.n_ctx():
            raise ValueError(f"prompt and continuation of {len(full)} tokens do not fit the {llm.n_ctx()}-token context")
        logits = self.next_token_logits(prompt)
        scores = []
        for i, token in enumerate(tail):
            scores.append(float(logits[token] - np.logaddexp.reduce(logits.astype("float64"))))
            if i < len(tail) - 1:
                llm.eval([token])  # decoding: never reused by another prompt (aligned_reuse)
                self.forward_passes += 1
                self.evaluated_tokens += 1
                logits = self._last_logits()
        self._store(key, "continuation_logprobs", scores)
        return scores

    def leading_citation_token_ids(self) -> np.ndarray:
        """Token ids that would open a reply with "[" or with nothing but whitespace (computed once per model)."""
        if self._leading_citation_ids is None:
            llm = self.llm
            texts = (llm.detokenize([i]).decode("utf-8", "replace") for i in range(llm.n_vocab()))
            self._leading_citation_ids = np.array([i for i, t in enumerate(texts) if not t.strip() or t.lstrip().startswith("[")], dtype=np.intc)
        return self._leading_citation_ids

    def _single_token(self, text: str) -> int:
        pieces = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        if len(pieces) != 1:
            raise RuntimeError(f"{text!r} is not one token in this model's vocabulary")
        return pieces[0]

    def score_list(self, messages: list[ChatMessage], n: int) -> dict[str, Any]:
        """``n`` scores 0–10 as the reply ``[a,b,…]``: what greedy decoding under the grammar
        ``"[" score ("," score)* "]"``, ``score ::= "10" | [0-9]`` picks, read from the logits of the
        allowed tokens only (one forward pass per score, over the cached prompt).

        Only the digits matter, so there is no need for llama-cpp-python's grammar sampler, which
        checks the 151k-token vocabulary at every step: on 12 SQuAD questions with the 0.5B the grade
        step's median went 3.52 → 3.45 s, with the same scores (tests/test_llm_efficiency.py checks
        them against the grammar). Returns the scores, the prompt's tokens (and how many came from
        the cache) and the reply tokens fed back while decoding."""
        prompt = self.format(messages)
        key, cached = self._cached("score_list", prompt, {"n": n})
        if cached is not None:
            return {"scores": cached, "prompt_tokens": 0, "prompt_tokens_reused": 0, "reply_tokens": 0}
        digit_ids = [self._single_token(str(d)) for d in range(10)]
        comma, close = self._single_token(","), self._single_token("]")
        start_eval, start_reused = self.evaluated_tokens, self.reused_tokens
        reply, scores, prompt_counts = "[", [], None
        for i in range(n):
            logits = self.next_token_logits(prompt + reply, continues_call=i > 0)
            if prompt_counts is None:
                prompt_counts = (self.evaluated_tokens - start_eval, self.reused_tokens - start_reused)
            score = int(np.argmax(logits[digit_ids]))
            if score == 1:  # "1" may start "10": the grammar allows "0" or the separator next
                after_one = self.next_token_logits(prompt + reply + "1", continues_call=True)
                if after_one[digit_ids[0]] > after_one[close if i == n - 1 else comma]:
                    score = 10
            scores.append(score)
            reply += str(score) + ("," if i < n - 1 else "]")
        evaluated, reused = prompt_counts or (0, 0)
        decoded = self.evaluated_tokens - start_eval - evaluated
        self.reused_tokens = start_reused + reused  # decoding passes re-read their own reply, not the prompt's cache
        self._store(key, "score_list", scores)
        return {"scores": scores, "prompt_tokens": evaluated + reused, "prompt_tokens_reused": reused, "reply_tokens": decoded}


_PROBES: "weakref.WeakKeyDictionary[Any, LlamaProbe]" = weakref.WeakKeyDictionary()


def probe_for(generator: Any) -> LlamaProbe:
    """One probe (and chat formatter) per generator, shared by every caller."""
    try:
        return _PROBES.setdefault(generator, LlamaProbe(generator))
    except TypeError:  # not weak-referenceable or unhashable: a fresh probe still works
        return LlamaProbe(generator)


def prompt_cache_split(generator: Any, messages: list[ChatMessage]) -> tuple[int, int] | None:
    """(prompt tokens, tokens llama.cpp will reuse from its KV cache) for a chat call about to be made.

    llama.cpp keeps the common token prefix of the previous and the new prompt, cut to whole blocks
    (:mod:`ragkit.llm.aligned_reuse`), and evaluates only the rest (at least one token, for fresh logits). None when the generator is not a
    loaded llama.cpp model, or the prompt cannot be formatted."""
    if not LlamaProbe.supports(generator) or getattr(generator, "_model", None) is None:
        return None
    try:
        probe = probe_for(generator)
        llm = probe.llm
        tokens = llm.tokenize(probe.format(messages).encode("utf-8"), special=True)
        reused = attach(llm).start_for(tokens)
    except Exception:  # counting is diagnostics; it must never break the call it describes
        return None
    return len(tokens), max(reused, 0)
