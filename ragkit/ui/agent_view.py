"""What notebook 08 shows of an agent-mode answer: each step the agent took, as a table and as a graph.

The table has one row per step of the trace — each grammar-constrained action (what the model chose,
the prompt tokens it read and how many llama.cpp reused from the step before), each search (its
query, the chunks it returned with their scores, the coverage of each question part after it), each
part's answer — and the graph draws the same run as a Mermaid flowchart in the colours of the
engine's graphs (:data:`ragkit.pipeline.mermaid.ROLE_STYLE`: LLM steps orange, retrieval blue), so a
learner can set an agent's path beside the fixed workflow's.

Pure functions of an :class:`~ragkit.pipeline.result.AgenticResult`, so a test checks what the notebook
shows. Every value is escaped (:func:`ragkit.ui.html.table_html`; Mermaid labels by
:func:`ragkit.pipeline.mermaid._label`'s rule, quotes and brackets replaced).

Usage::

    result = AgentRAG(index=index).ask("Who founded the Yuan dynasty, and where was Tesla born?")
    HTML(agent_steps_html(result)); Markdown(agent_run_markdown(result))
"""

from __future__ import annotations

import re
from typing import Any

from ragkit.pipeline.mermaid import ROLE_STYLE
from ragkit.ui.html import table_html
from ragkit.ui.text_safety import html_text

LABEL_CHARS = 48


def _label(text: Any, n: int = LABEL_CHARS) -> str:
    text = " ".join(str(text or "").split())
    text = text if len(text) <= n else text[: n - 1] + "…"
    return re.sub(r'["\[\]{}()<>|#;`]', " ", text).strip() or "—"


def agent_steps(result: Any) -> list[dict[str, Any]]:
    """One row per step of the agent's trace, in order."""
    rows = []
    for step in result.trace.steps:
        d = step.decision or {}
        if step.name == "agent_llm":
            action = d.get("action", "—")
            what = f"{action}({d['query']})" if d.get("query") else (f"{action}()" + (f" — {d['chosen_by']}" if d.get("chosen_by") else ""))
            detail = f"{step.prompt_tokens} prompt tokens, {step.prompt_tokens_reused} reused" if step.llm_calls else "no LLM call"
        elif step.name in ("search", "count_cars"):
            what = f"{step.name}: {d.get('query', '—')}" + (" (repeated: not run)" if d.get("repeated") else "")
            coverage = d.get("coverage")
            detail = f"{d.get('found', 0)} chunks " + " ".join(d.get("ids", [])[:5]) + (f"; coverage by part {coverage}" if coverage else "")
            if "bridge" in d:  # the follow-up the search tool proposed for a one-part question (one LLM call)
                detail += f"; bridge copied from the evidence: {d['bridge']!r}" if d["bridge"] else "; no bridge in the evidence"
        else:
            what, detail = step.name, ", ".join(f"{k}={v}" for k, v in d.items())
        rows.append({"step": step.name, "what": what, "detail": detail, "ms": round(step.seconds * 1000), "LLM calls": step.llm_calls,
                     "failure": step.error or "; ".join(step.fallbacks)})
    return rows


def agent_steps_html(result: Any) -> str:
    """The steps as a table, then how the run ended and the confidence."""
    exit_line = (f"<div style='margin-top:4px'>exit reason: <b>{html_text(str(result.exit_reason))}</b> · "
                 f"{result.trace.llm_calls} LLM calls · confidence {html_text(result.symbol)} {result.confidence or 0:.2f}</div>")
    return table_html(agent_steps(result)) + exit_line


def agent_run_mermaid(result: Any) -> str:
    """The run as a flowchart: the question, each action and what it found, the answer per part."""
    lines = ["flowchart TD", f'    q(["question: {_label(result.question, 60)}"])']
    roles: dict[str, list[str]] = {"llm": [], "retrieve": [], "io": ["q"]}
    previous, answers, parts = "q", 0, len(result.details.get("parts") or []) or 1
    for i, step in enumerate(result.trace.steps):
        node, d = f"s{i}", step.decision or {}
        if step.name == "agent_llm":
            choice = f"{d.get('action', '?')}" + (f": {d['query']}" if d.get("query") else "")
            lines.append(f'    {node}["agent step · {_label(choice)}"]')
            roles["llm" if step.llm_calls else "io"].append(node)
        elif step.name in ("search", "count_cars"):
            found = "repeated, not run" if d.get("repeated") else f"{d.get('found', 0)} chunks"
            lines.append(f'    {node}["{step.name} · {_label(found)}"]')
            roles["retrieve"].append(node)
        else:
            answers += step.name == "answer"
            name = f"answer · part {answers}" if step.name == "answer" and parts > 1 else step.name
            lines.append(f'    {node}["{_label(name)}"]')
            roles["llm" if step.llm_calls else "io"].append(node)
        lines.append(f"    {previous} --> {node}")
        previous = node
    ending = f"an answer per part, {parts} parts" if parts > 1 else re.sub(r"\s*\[\d+\]", "", result.answer or "")
    lines.append(f'    end_(["{_label(ending, 40)} · exit {result.exit_reason}"])')
    lines.append(f"    {previous} --> end_")
    roles["io"].append("end_")
    for role, nodes in roles.items():
        if nodes:
            lines += [f"    classDef {role} {ROLE_STYLE[role]}", f"    class {','.join(nodes)} {role}"]
    return "\n".join(lines)


def agent_run_markdown(result: Any) -> str:
    """A Markdown ``mermaid`` block, which JupyterLab (≥ 4.1) draws in the notebook."""
    return "```mermaid\n" + agent_run_mermaid(result) + "\n```"
