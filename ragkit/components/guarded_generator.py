"""GuardedGenerator: a chat generator inside a pipeline that never takes the pipeline down.

A bare ``ChatGenerator`` in a ``Pipeline`` raises on a dead server or a timeout, and its token
counts stay in reply metadata no tracer reads. This wrapper calls the generator through
:func:`ragkit.llm.structured.call_llm`, so each call is recorded on the trace (calls, prompt tokens,
tokens reused from llama.cpp's prompt cache, completion tokens) and a failure or an empty reply
becomes a traced fallback: the ``fallback`` input if one was sent (e.g. the previous answer in a
self-correction loop), else "The documents don't say.".

With ``answer_format=True`` (the default) the reply is read as an answer: on llama.cpp its first token may
not be a citation mark (:func:`ragkit.llm.structured.answer_constraint`), and on any backend a reply that is only
citation marks is a fallback too (:func:`ragkit.llm.structured.parse_answer`).

Usage::

    pipe.add_component("answer", GuardedGenerator(generator=llm, max_tokens=256))
    pipe.connect("prompt.prompt", "answer.messages")        # -> answer.text, answer.ok, answer.tokens
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.llm.prompts import NO_ANSWER
from ragkit.llm.structured import answer_constraint, call_llm, generator_from_dict, generator_to_dict, parse_answer


def _nonempty(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("empty reply")
    return text


@component
class GuardedGenerator:
    def __init__(self, generator: Any, max_tokens: int = 256, step: str = "answer", answer_format: bool = True):
        self.generator = generator
        self.max_tokens = max_tokens
        self.step = step
        self.answer_format = answer_format

    def warm_up(self) -> None:
        if hasattr(self.generator, "warm_up"):
            self.generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, generator=generator_to_dict(self.generator), max_tokens=self.max_tokens, step=self.step, answer_format=self.answer_format)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GuardedGenerator":
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(text=str, ok=bool, tokens=dict)
    def run(self, messages: list[ChatMessage], fallback: Optional[str] = None) -> dict[str, Any]:
        kwargs = {"max_tokens": self.max_tokens, "temperature": 0.0}
        if self.answer_format:
            kwargs.update(answer_constraint(self.generator))
        reply = call_llm(self.generator, messages, parse_answer if self.answer_format else _nonempty, kwargs, step=self.step)
        tokens = dict(reply.tokens or {})  # the reply's token probabilities, a confidence signal (llama.cpp only)
        if reply.ok:
            return {"text": reply.value, "ok": True, "tokens": tokens}
        return {"text": fallback if fallback else NO_ANSWER, "ok": False, "tokens": {}}
