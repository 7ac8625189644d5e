"""TextToolCallGenerator: tool calls that a small local model writes as text, turned into ``ToolCall`` s.

Haystack's ``Agent`` acts on ``ChatMessage.tool_calls``. Through llama-cpp-python those never arrive
for a GGUF model: the model's own chat template (Qwen2.5's) renders the tools into the system prompt,
but llama-cpp-python's template handler returns whatever the model writes as plain text unless one
tool is *forced* (``tool_choice`` naming it, a JSON-schema grammar) — ``tool_choice="auto"`` has no
parser. Measured with the 0.5B coder model (``bench/agent_mode.py`` module docstring): every reply
came back with ``tool_calls == []`` and the call in the text, and not even in Qwen's
``<tool_call>{"name": …, "arguments": …}</tool_call>`` form but as a fenced ```json block.
:func:`parse_tool_calls` reads all three shapes (tagged, fenced, bare JSON object); nothing in
Haystack or llama-cpp-python does. A reply that *tries* a tool call (``{"name": …`` with no usable
``arguments``, broken JSON) is not guessed at: it stays a plain-text reply — so the Agent stops —
with the reason in ``meta["tool_call_error"]`` and a fallback on the trace.

The way back is broken too: llama-cpp-haystack sends a tool's result as ``role="function"``, which
Qwen's template has no branch for, so the model never sees the search results. For a llama.cpp
generator the conversation is therefore rewritten to what the template itself renders for
``role="tool"``: an assistant turn with the ``<tool_call>`` JSON, and a user turn of
``<tool_response>`` blocks (:func:`qwen_history`). Tool results are fenced like every document
text (``<`` → ``&lt;``), so a retrieved chunk cannot close the block or write a control token.

No grammar constrains the reply: the point of agent mode is to measure how well a small model
drives tools on its own.

Usage::

    llm = TextToolCallGenerator(chat_generator=build_chat_generator(ModelConfig()), step_name="agent_llm")
    agent = Agent(chat_generator=llm, tools=[search_tool(index)], max_agent_steps=4)
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict, tracing
from haystack.dataclasses import ChatMessage, ChatRole, ToolCall
from haystack.tools import flatten_tools_or_toolsets

from ragkit.llm.faults import check_deadline
from ragkit.llm.prompts import fence
from ragkit.llm.structured import backend_of, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json|JSON)?\s*(\{.*?\})\s*```", re.DOTALL)
_LOOKS_LIKE_A_CALL = re.compile(r"""\{\s*["']name["']\s*:""")


@dataclass
class ParsedReply:
    calls: list[ToolCall] = field(default_factory=list)
    text: str | None = None  # what the reply says outside its tool calls
    format: str | None = None  # "tagged" | "fenced" | "bare" | None (no tool call in the text)
    error: str | None = None  # the reply tried a tool call that could not be read


def _one_call(body: str, index: int) -> ToolCall:
    """One ``{"name": ..., "arguments": {...}}`` object (trailing text ignored); ValueError otherwise."""
    body = body.strip().strip("`")
    if body.lower().startswith("json"):
        body = body[4:]
    start = body.find("{")
    if start < 0:
        raise ValueError(f"no JSON object in {body[:60]!r}")
    try:
        loaded, _ = json.JSONDecoder().raw_decode(body[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg}) in {body[:60]!r}") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("name"), str) or not loaded["name"].strip():
        raise ValueError(f"no tool name in {body[:60]!r}")
    arguments = loaded.get("arguments")
    if isinstance(arguments, str):  # some templates double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise ValueError(f"arguments of {loaded['name']!r} are not a JSON object") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"the call to {loaded['name']!r} has no arguments object (keys: {sorted(loaded)})")
    return ToolCall(tool_name=loaded["name"].strip(), arguments=arguments, id=f"call_{index}")


def parse_tool_calls(text: str | None, max_calls: int = 2) -> ParsedReply:
    """Tool calls written as text: ``<tool_call>`` blocks (Qwen's format), else fenced ```json blocks,
    else a reply that is one bare JSON object — each ``{"name": ..., "arguments": {...}}``. At most
    ``max_calls`` are kept. A reply with none of these is plain text; one that has them but cannot be
    read gets ``error`` (and no calls: a half-read reply is not acted on)."""
    text = (text or "").strip()
    if not text:
        return ParsedReply(text=None)
    blocks = [(m.start(), m.end(), m.group(1)) for m in _TAGGED.finditer(text)]
    kind = "tagged"
    if not blocks:
        kind = "fenced"
        blocks = [(m.start(), m.end(), m.group(1)) for m in _FENCED.finditer(text) if _LOOKS_LIKE_A_CALL.match(m.group(1))]
    if not blocks and _LOOKS_LIKE_A_CALL.match(text):
        kind = "bare"
        blocks = [(0, len(text), text)]
    if not blocks:
        return ParsedReply(text=text)
    try:
        calls = [_one_call(body, i) for i, (_, _, body) in enumerate(blocks)]
    except ValueError as exc:
        return ParsedReply(text=text, format=kind, error=str(exc))
    rest, last = [], 0
    for start, end, _ in blocks:
        rest.append(text[last:start])
        last = end
    rest.append(text[last:])
    leftover = " ".join(" ".join(rest).split()) if kind != "bare" else ""
    return ParsedReply(calls=calls[:max_calls], text=leftover or None, format=kind)


def qwen_history(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The conversation as Qwen2.5's chat template renders tool turns, in plain user/assistant
    messages: an assistant turn's tool calls as ``<tool_call>`` JSON, consecutive tool results as one
    user turn of ``<tool_response>`` blocks (fenced: document text is data)."""
    out: list[ChatMessage] = []
    responses: list[str] = []

    def flush() -> None:
        if responses:
            out.append(ChatMessage.from_user("\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in responses)))
            responses.clear()

    for message in messages:
        if message.is_from(ChatRole.TOOL) and message.tool_call_results:
            responses.extend(fence(r.result) for r in message.tool_call_results)
            continue
        flush()
        if message.is_from(ChatRole.ASSISTANT) and message.tool_calls:
            calls = "\n".join(
                "<tool_call>\n" + json.dumps({"name": c.tool_name, "arguments": c.arguments}, ensure_ascii=False) + "\n</tool_call>"
                for c in message.tool_calls
            )
            out.append(ChatMessage.from_assistant((message.text + "\n" if message.text else "") + calls))
        else:
            out.append(message)
    flush()
    return out


@component
class TextToolCallGenerator:
    def __init__(self, chat_generator: Any, max_calls_per_reply: int = 2, step_name: Optional[str] = None, rewrite_history: Optional[bool] = None):
        """``chat_generator``: any Haystack chat generator. ``max_calls_per_reply``: tool calls kept from one
        reply (bounds the tool work per agent step). ``step_name``: if set, every call is its own traced
        step of that name (an Agent calls its chat generator outside any Pipeline, so no component span
        exists to record on); None records onto the current step. ``rewrite_history``: send tool turns
        as Qwen's template renders them (:func:`qwen_history`); None: for llama.cpp generators only."""
        if chat_generator is None:
            raise ValueError("TextToolCallGenerator needs a chat generator")
        if max_calls_per_reply < 1:
            raise ValueError("max_calls_per_reply must be >= 1")
        self.chat_generator, self.max_calls_per_reply, self.step_name, self.rewrite_history = chat_generator, max_calls_per_reply, step_name, rewrite_history

    def warm_up(self) -> None:
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator), max_calls_per_reply=self.max_calls_per_reply,
            step_name=self.step_name, rewrite_history=self.rewrite_history,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TextToolCallGenerator":
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], generation_kwargs: Optional[dict[str, Any]] = None, *, tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        if self.step_name is None:
            return self._run(messages, generation_kwargs, tools, streaming_callback)
        tags = {"haystack.component.name": self.step_name, "haystack.component.type": type(self.chat_generator).__name__}
        with tracing.tracer.trace("haystack.component.run", tags=tags) as span:
            try:
                return self._run(messages, generation_kwargs, tools, streaming_callback)
            except Exception as exc:
                span.set_tag("ragkit.error", f"{type(exc).__name__}: {str(exc)[:200]}")
                raise

    def _run(self, messages, generation_kwargs, tools, streaming_callback) -> dict[str, Any]:
        check_deadline()
        names = {t.name for t in flatten_tools_or_toolsets(tools)} if tools else set()
        rewrite = self.rewrite_history if self.rewrite_history is not None else backend_of(self.chat_generator) == "llama.cpp"
        kwargs: dict[str, Any] = {"messages": qwen_history(messages) if rewrite else messages}
        if generation_kwargs:
            kwargs["generation_kwargs"] = generation_kwargs
        if tools:
            kwargs["tools"] = tools
        if streaming_callback is not None:
            kwargs["streaming_callback"] = streaming_callback
        t0 = time.perf_counter()
        try:
            replies = self.chat_generator.run(**kwargs)["replies"]
        finally:
            record(llm_calls=1)
        usage = ((replies[0].meta or {}).get("usage") or {}) if replies else {}
        record(prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=int(usage.get("completion_tokens") or 0))
        out = []
        for reply in replies:
            out.append(self._read(reply, names))
        record(decision={"llm_s": round(time.perf_counter() - t0, 3)})
        return {"replies": out}

    def _read(self, reply: ChatMessage, names: set[str]) -> ChatMessage:
        meta = dict(reply.meta or {})
        if reply.tool_calls:  # a backend that parses tool calls itself (an OpenAI-compatible server)
            calls, kind, text = list(reply.tool_calls), "structured", reply.text
        else:
            parsed = parse_tool_calls(reply.text, self.max_calls_per_reply)
            if parsed.error:
                meta["tool_call_error"] = parsed.error
                record(fallback=f"unparsed_tool_call: {parsed.error}", decision={"tool_call_format": parsed.format})
                return ChatMessage.from_assistant(text=reply.text, meta=meta)
            calls, kind, text = parsed.calls, parsed.format, parsed.text
        if not calls:
            record(decision={"tool_calls": 0})
            return reply
        calls = [ToolCall(tool_name=c.tool_name, arguments=c.arguments, id=c.id or f"call_{i}", extra=c.extra) for i, c in enumerate(calls[: self.max_calls_per_reply])]
        meta["tool_call_format"] = kind
        unknown = sorted({c.tool_name for c in calls} - names) if names else []
        record(decision={"tool_calls": len(calls), "tool_call_format": kind, "tools": ",".join(c.tool_name for c in calls)})
        if unknown:  # the Agent answers these with an error message; the trace says so here, in order
            record(fallback=f"unknown_tool: {', '.join(unknown)} (tools: {', '.join(sorted(names))})")
        # prose around a text tool call is dropped: re-sent each step it costs tokens and adds nothing
        return ChatMessage.from_assistant(text=text if kind == "structured" else None, tool_calls=calls, meta=meta)
