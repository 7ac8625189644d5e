"""llama.cpp prompt-cache reuse that cannot change a result: whole blocks only, evaluated at fixed positions.

llama.cpp keeps the longest token prefix the new prompt shares with its KV cache and evaluates the
rest in batches that start wherever that prefix ends. The matrix kernels it picks, and the order
in which they add, depend on a batch's size, so the same prompt gets slightly different logits
depending on what was asked before it (measured on the 0.5B and the 1.5B: P(yes) of the same judge
prompt moved by up to 0.05 with the previous call; a greedy answer can flip a token). A judge
score that depends on call order is a score that changes between identical questions — so a
resumed, ``--limit``-ed or reordered evaluation would not reproduce a clean one.

This module makes a prompt's logits a function of the prompt alone, while keeping most of the
reuse: the prompt is evaluated in blocks of ``block`` tokens at fixed positions (``[0, b)``,
``[b, 2b)``, …, then the short remainder), and a later prompt reuses the KV cache only up to the
last whole block that such an evaluation computed *and* that the two prompts share. Every block is
then computed from the same tokens over the same cached prefix, in a batch of the same size, as it
would be from an empty cache. Tokens decoded one at a time (a reply) are never reused by another
prompt; a call's own decoding continues from its prompt as before.

No library does this: llama-cpp-python's ``Llama.generate`` and ``Llama.eval`` reuse the exact
prefix; llama.cpp's server has the same behaviour (its ``cache_prompt`` can only be switched off
whole). :func:`attach` therefore wraps those two methods on one ``Llama`` object, so
``create_chat_completion`` (llama-cpp-haystack's generator), ragkit's probe
(:mod:`ragkit.llm.probe`) and anyone else using that object all reuse the same way.

Usage::

    reuse = attach(llm)                      # idempotent; llm is a llama_cpp.Llama
    start = reuse.start_for(tokens)          # how much of the cache this prompt may reuse
    reuse.evaluate(tokens, start)            # the rest, block-aligned; logits of the last token are ready
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

# 64 keeps a prompt's batches large enough for llama.cpp's matrix kernels (measured: the 0.5B's
# prompt evaluation within a few percent of 512-token batches) and loses at most 63 reusable tokens.
DEFAULT_BLOCK = 64


class AlignedReuse:
    """The reuse state of one ``llama_cpp.Llama``: how far its KV cache holds block-aligned, reusable work.

    ``block=None`` is llama.cpp's own exact-prefix reuse (faster by the few tokens it keeps, not
    reproducible across call orders): what ``bench/prefix_reuse.py`` compares against."""

    def __init__(self, llm: Any, block: int | None = DEFAULT_BLOCK):
        if block is not None and not 1 <= block <= llm.n_batch:
            raise ValueError(f"block must be between 1 and n_batch={llm.n_batch}, not {block}")
        self.llm, self.block = llm, block
        self.reusable = 0  # positions below were computed by a block-aligned prompt evaluation
        self._logits_end: int | None = None  # the logits in the context are a block-aligned evaluation's, ending here
        self._next_eval_is_prompt = False
        self._eval = llm.eval
        self._generate = llm.generate

    def start_for(self, tokens: Sequence[int]) -> int:
        """The position a prompt's evaluation starts from: the shared, reusable prefix cut to whole blocks."""
        llm = self.llm
        shared = llm.longest_token_prefix(llm._input_ids.tolist(), tokens)
        if self.block is None:
            return min(shared, len(tokens) - 1)
        return min(shared, self.reusable, len(tokens) - 1) // self.block * self.block

    def evaluate(self, tokens: Sequence[int], start: int) -> None:
        """Evaluate ``tokens[start:]`` (``start`` from :meth:`start_for`) in blocks at fixed positions."""
        llm, block = self.llm, self.block
        tokens = list(tokens)
        if start % (block or 1) or start >= len(tokens):
            raise ValueError(f"start {start} is not a block boundary inside the {len(tokens)}-token prompt")
        llm.n_tokens = start
        if block is None:
            self._eval(tokens[start:])
            return
        self.reusable = min(self.reusable, start)
        position = start
        while position < len(tokens):
            end = min(len(tokens), position + block)
            self._eval(tokens[position:end])
            position = end
        self.reusable = len(tokens) // block * block
        self._logits_end = len(tokens)

    def _wrapped_eval(self, tokens: Sequence[int]) -> None:
        llm = self.llm
        if self.block is None:
            self._eval(tokens)
            return
        if not self._next_eval_is_prompt:  # decoding, or a caller that manages the cache itself
            self.reusable = min(self.reusable, llm.n_tokens)
            self._logits_end = None
            self._eval(tokens)
            return
        self._next_eval_is_prompt = False
        end = llm.n_tokens + len(tokens)
        if len(tokens) == 0 and self._logits_end == end:  # generate found this very prompt evaluated, aligned: sample from it
            return
        prompt = llm.input_ids[: llm.n_tokens].tolist() + list(tokens)
        self.evaluate(prompt, min(llm.n_tokens, self.reusable, end - 1) // self.block * self.block)

    def _wrapped_generate(self, *args: Any, **kwargs: Any) -> Iterator[int]:
        # generate() sets the cache to the exact shared prefix, then evaluates the prompt's rest in its
        # first eval(); that one eval is redone block-aligned. yield from passes send() through.
        self._next_eval_is_prompt = True
        try:
            return (yield from self._generate(*args, **kwargs))
        finally:
            self._next_eval_is_prompt = False


def attach(llm: Any, block: int = DEFAULT_BLOCK) -> AlignedReuse:
    """The :class:`AlignedReuse` of ``llm``, wrapping its ``eval`` and ``generate`` the first time."""
    reuse = getattr(llm, "_ragkit_aligned_reuse", None)
    if reuse is None:
        reuse = AlignedReuse(llm, block)
        llm.eval, llm.generate = reuse._wrapped_eval, reuse._wrapped_generate
        llm._ragkit_aligned_reuse = reuse
    return reuse
