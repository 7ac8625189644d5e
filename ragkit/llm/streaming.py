"""Streaming an answer's tokens to whoever is watching: the terminal chat, the notebook's chat widget,
the Hayhooks server.

Haystack's chat generators take a ``streaming_callback`` at run time and call it with a
``StreamingChunk`` per token. An answer in ragkit may take several calls (a self-correction retry,
one call per part of a decomposed question), so the watcher needs to know which call a chunk
belongs to: :class:`StepStream` wraps the caller's callback for one call, names the step on every
chunk (``component_info.name``, ``meta["ragkit_step"]``, ``meta["attempt"]``), marks the call's first
chunk ``start=True`` (a watcher restarts the message there) and records on the trace when the first
token came (``Step.first_token``), which is how time to first token is measured. A reply served by
ragkit's LLM cache arrives as one chunk.

Hand-written because Haystack's chunks carry the generator's own component name, and inside
:class:`~ragkit.components.guarded_generator.GuardedGenerator` the generator is not a pipeline
component: the chunk would name nothing.

Usage::

    out = rag.ask("Where was Tesla born?", streaming_callback=lambda chunk: print(chunk.content, end=""))
    out.first_token_s
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Optional

from haystack.dataclasses import ComponentInfo, StreamingChunk

from ragkit.pipeline.trace import record

StreamingCallback = Callable[[StreamingChunk], None]


def accepts_streaming(generator: Any) -> bool:
    """Whether ``generator.run`` takes a ``streaming_callback`` (Haystack's chat generators do)."""
    try:
        return "streaming_callback" in inspect.signature(generator.run).parameters
    except (TypeError, ValueError, AttributeError):
        return False


class StepStream:
    """The caller's callback, for one LLM call of ``step``: chunks named, the first one marked."""

    def __init__(self, callback: StreamingCallback, step: str, attempt: int = 0, label: Optional[str] = None):
        self.callback, self.step, self.attempt, self.label = callback, step, attempt, label
        self.first_at: float | None = None
        self.text = ""

    def __call__(self, chunk: StreamingChunk) -> None:
        content = chunk.content or ""
        if not content and self.first_at is None:
            return  # a role-only or empty opening chunk is not the first token
        first = self.first_at is None
        if first:
            self.first_at = time.perf_counter()
            record(first_token=self.first_at)
        self.text += content
        meta = {**(chunk.meta or {}), "ragkit_step": self.step, "attempt": self.attempt}
        if self.label:
            meta["part"] = self.label
        self.callback(StreamingChunk(
            content=content, meta=meta, component_info=ComponentInfo(type="GuardedGenerator", name=self.step),
            start=first, finish_reason=chunk.finish_reason,
        ))

    def replay(self, text: str) -> None:
        """A reply that was not generated now (ragkit's LLM cache): one chunk with all of it."""
        self(StreamingChunk(content=text, meta={"cached": True}, finish_reason="stop"))


def labelled(callback: Optional[StreamingCallback], label: str) -> Optional[StreamingCallback]:
    """``callback`` with ``meta["part"] = label`` on every chunk (a decomposed question's parts)."""
    if callback is None:
        return None

    def forward(chunk: StreamingChunk) -> None:
        callback(StreamingChunk(content=chunk.content, meta={**(chunk.meta or {}), "part": label}, component_info=chunk.component_info,
                                start=chunk.start, finish_reason=chunk.finish_reason))

    return forward
