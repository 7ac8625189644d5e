"""What ``ragkit ask`` and ``ragkit chat`` print: the answer, its confidence, the sources and the trace,
laid out for a terminal 80 columns wide.

A trace row has eleven fields; a Rich table with one column each gives every column six characters
at 80 columns, so the step names read "deco…" and the decisions one syllable a line. Here the trace
keeps four narrow columns that never shrink — the step's full name, its time, its LLM calls, its
documents in and out — and gives the rest of the width to one "what happened" column, one
``key=value`` per line, folded at word boundaries. ``wide=True`` (``/trace wide``) adds the token
columns, for a terminal that has the room.

Rendering only: every function takes an :class:`~ragkit.pipeline.result.AgenticResult` (or its trace)
and returns Rich renderables, so tests render them into a fixed-width console and read the text.

Usage::

    console.print(answer_block(result))
    console.print(facts_line(result))
    console.print(sources_block(result))
    console.print(trace_table(result.trace))             # 80 columns and up
    console.print(trace_table(result.trace, wide=True))  # every token count too
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ragkit.pipeline.trace import Step, Trace
from ragkit.ui.text_safety import visible

NUMBERS = {"justify": "right", "no_wrap": True}


def plain(value: Any) -> str:
    """User or document text with control characters shown, not obeyed (Text never parses markup)."""
    return visible(value)


def confidence_text(result) -> Text:
    """``● 0.73 chance the answer is right``, or why it declined."""
    if result.declined:
        sure = f" (sources lack the answer: {result.p_lacks_answer:.0%} sure)" if result.p_lacks_answer is not None else ""
        return Text(f"declined{sure}", style="yellow")
    if result.confidence is None:
        return Text("")
    style = "green" if result.confidence >= 0.7 else ("yellow" if result.confidence >= 0.35 else "red")
    return Text(f"{result.symbol} {result.confidence:.2f} chance the answer is right", style=style)


def answer_block(result) -> Group:
    """The answer, once. A decomposed question shows each part with its own answer and confidence
    (the merged answer is those same lines, so it is not printed again)."""
    parts = result.details.get("parts") or []
    if len(parts) > 1:
        lines: list[Any] = [Text.assemble(("A: ", "bold green"), f"{len(parts)} parts")]
        for i, part in enumerate(parts, 1):
            lines.append(Text.assemble(f" {i}. ", (plain(part["question"]), "bold")))
            sure = f"{part.get('symbol', '')} {part['confidence']:.2f}" if part.get("confidence") is not None else ""
            lines.append(Text.assemble("    ", plain(part["answer"]), ("  " + sure if sure else "", "dim")))
        return Group(*lines)
    return Group(Text.assemble(("A: ", "bold green"), plain(result.answer)))


def facts_line(result, first_token_s: float | None = None) -> Text:
    """Confidence, then what the run cost: ``● 0.73 chance … · 1.21 s · 1 LLM call · 142 prompt tokens evaluated, 61 reused``."""
    trace = result.trace
    facts = []
    if result.failed_steps:
        facts.append(f"failed: {', '.join(result.failed_steps)}")
    if result.route:
        facts.append(f"route {result.route}")
    if result.exit_reason and result.exit_reason not in ("supported", "answered"):
        facts.append(f"exit {result.exit_reason}")
    facts.append(f"{result.seconds:.2f} s")
    if first_token_s is not None:
        facts.append(f"first token {first_token_s:.2f} s")
    calls = trace.llm_calls
    facts.append(f"{calls} LLM call{'s' if calls != 1 else ''}")
    if trace.prompt_tokens:
        facts.append(f"{trace.prompt_tokens_evaluated} prompt tokens evaluated, {trace.prompt_tokens_reused} reused")
    line = confidence_text(result)
    if line.plain:
        line.append(" · ")
    line.append(" · ".join(facts), style="dim")
    return line


def source_where(doc) -> str:
    return ", ".join(f"{k} {doc.meta[k]}" for k in ("page", "section") if doc.meta.get(k) is not None)


def sources_block(result, most: int | None = None) -> Table:
    """One short cited line a source: ``[1] wikipedia/Nikola_Tesla.md · section Nikola Tesla · 0.94``."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="cyan")
    grid.add_column(overflow="fold")
    for i, doc in enumerate(result.sources[:most] if most else result.sources, 1):
        where = source_where(doc)
        line = Text(plain(doc.meta.get("source") or doc.id))
        if where:
            line.append(f" · {plain(where)}", style="dim")
        if doc.score is not None:
            line.append(f" · {doc.score:.2f}", style="dim")
        grid.add_row(f"[{i}]", line)
    return grid


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_short(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_short(v) for v in value)
    return plain(value)


def what_happened(step: Step) -> Text:
    """A step's decision, one ``key=value`` a line; then fallbacks, warnings and its error."""
    text = Text()
    for key, value in step.decision.items():
        if text:
            text.append("\n")
        text.append(f"{key}=", style="dim")
        text.append(_short(value))
    for label, items, style in (("fallback", step.fallbacks, "yellow"), ("note", step.warnings, "dim yellow"), ("error", [step.error] if step.error else [], "bold red")):
        for item in items:
            if text:
                text.append("\n")
            text.append(f"{label}: {plain(item)}", style=style)
    return text


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f}" if ms < 10 else f"{ms:,.0f}"


def _llm(step: Step) -> str:
    calls = str(step.llm_calls) if step.llm_calls else ""
    if step.cache_hits:
        calls += f"{'+' if calls else ''}{step.cache_hits}c"
    return calls


def trace_table(trace: Trace, wide: bool = False, title: str | None = "Trace: every step, in run order") -> Table:
    """The trace, readable at 80 columns: the step, its time, LLM calls, documents in → out and what it
    decided. ``wide`` adds prompt tokens (evaluated / reused) and completion tokens."""
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, expand=False, title_justify="left")
    longest = max((len(s.name) for s in trace.steps), default=4)
    table.add_column("step", no_wrap=True, min_width=max(4, longest), style="bold")
    table.add_column("ms", **NUMBERS)
    table.add_column("LLM", **NUMBERS)
    if wide:
        table.add_column("prompt", **NUMBERS)
        table.add_column("reused", **NUMBERS)
        table.add_column("output", **NUMBERS)
    table.add_column("docs", no_wrap=True)
    table.add_column("what happened", overflow="fold", ratio=1, min_width=10 if wide else 16)  # wide at 80 columns: folded, not cropped
    for step in trace.steps:
        docs = f"{len(step.docs_in)}→{len(step.docs_out)}" if (step.docs_in or step.docs_out) else ""
        cells = [plain(step.name), _ms(step.seconds), _llm(step)]
        if wide:
            cells += [str(step.prompt_tokens or ""), str(step.prompt_tokens_reused or ""), str(step.completion_tokens or "")]
        table.add_row(*cells, docs, what_happened(step))
    return table


def trace_caption(trace: Trace) -> Text:
    return Text(f"{len(trace.steps)} steps · {trace.llm_calls} LLM calls "
                f"({trace.prompt_tokens} prompt tokens, {trace.prompt_tokens_reused} reused, {trace.completion_tokens} generated)", style="dim")
