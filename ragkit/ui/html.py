"""What the notebooks show people, as HTML: tables (escaped, aligned, units), the result summary line,
the A/B comparison and the ablation summary. Pure functions of results, so tests check the text a
learner reads; :mod:`ragkit.ui.panel` puts them in widgets."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document

from ragkit.ui import plots
from ragkit.pipeline.engine import AgenticResult
from ragkit.pipeline.trace import Trace
from ragkit.ui.text_safety import html_text

_NUMBER = re.compile(r"^[<≈]?-?[\d,]+(\.\d+)?(\s?(ms|s|min \d+ s|%|/10))?$")
_SHORT = 40  # columns whose values are all this short never wrap ("0 → 3", "sentence_vectors")
_CELL = "padding:3px 8px;vertical-align:top;border-bottom:1px solid #e4e4e4"


def format_value(value: Any) -> str:
    """A cell value as a person reads it: rounded numbers, "—" for nothing."""
    if value is None or value == "":
        return "—" if value is None else ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "—"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {format_value(v)}" for k, v in value.items())
    return str(value)


def _column_style(values: list[str]) -> str:
    filled = [v for v in values if v not in ("", "—")]
    if filled and all(_NUMBER.match(v) for v in filled):
        return "text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums"
    if all(len(v) <= _SHORT for v in values):
        return "text-align:left;white-space:nowrap"
    return "text-align:left;white-space:normal;overflow-wrap:anywhere;word-break:break-word;min-width:8em"


def _table(head: str, body: str) -> str:
    # JupyterLab's own table CSS centres tables, right-aligns cells and fixes the layout: override all.
    # A table wider than the output (a window narrower than the laptop width the browser test checks)
    # scrolls sideways rather than losing its last columns without a sign.
    return (
        "<div style='max-width:100%;overflow-x:auto;line-height:1.35'>"
        "<table style='border-collapse:collapse;table-layout:auto;margin:0;max-width:100%;font-size:0.92em'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def table_html(rows: list[dict[str, Any]]) -> str:
    """Rows of dicts as an HTML table (every value escaped: document text is data, not markup).
    Numbers are rounded and right-aligned, text left-aligned; short columns never wrap, long text
    wraps inside the table's width; only a table still wider than its output scrolls sideways."""
    if not rows:
        return "<i>nothing</i>"
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[format_value(row.get(c, "")) for c in columns] for row in rows]
    styles = [_column_style([r[j] for r in cells]) for j in range(len(columns))]
    # every header may wrap between its words: headers held on one line ("one-time setup (not in
    # latency)" over "45.2 s") widened tables past the notebook at laptop width, where the wrapper clips them
    head = "".join(f"<th style='{_CELL};{style};white-space:normal'>{html_text(str(c))}</th>"
                   for c, style in zip(columns, styles))
    body = "".join("<tr>" + "".join(f"<td style='{_CELL};{style}'>{html_text(v)}</td>" for v, style in zip(r, styles)) + "</tr>" for r in cells)
    return _table(head, body)


def format_grade(grade: Any) -> str:
    """A grader's 0–10 grade as "7/10" (the grade threshold slider's scale), "—" when ungraded."""
    if grade is None or grade == "":
        return "—"
    return f"{float(grade):g}/10"


def short_id(doc_id: str | None) -> str:
    return (doc_id or "")[:8]


def sources_rows(result: AgenticResult) -> list[dict[str, Any]]:
    threshold = (result.details.get("grading") or {}).get("threshold")
    rows = []
    for i, d in enumerate(result.sources, 1):
        grade = d.meta.get("grade")
        graded = format_grade(grade)
        if grade is not None and threshold is not None and grade < threshold:
            graded += f" (under {threshold:g}/10: kept, grading never drops every source)"
        rows.append({
            "#": i,
            "source": d.meta.get("source", ""),
            "id": short_id(d.id),
            "page/section": d.meta.get("page") or d.meta.get("section") or "",
            "score": f"{d.score:.3f}" if d.score is not None else "—",
            "grade": graded,
            "text": (d.content or "")[:140].replace("\n", " ") + "…",
        })
    return rows


def trace_rows(trace: Trace) -> list[dict[str, Any]]:
    """The trace as a table for people: times with units, one-time steps marked."""
    rows = []
    for step in trace.steps:
        row = step.row()
        rows.append({
            "step": step.name + (" (one-time)" if step.name in plots.ONE_TIME_STEPS else ""),
            "time": plots.format_seconds(step.seconds),
            "LLM calls": step.llm_calls,
            "prompt tokens": step.prompt_tokens,
            "reused": step.prompt_tokens_reused,
            "completion tokens": step.completion_tokens,
            "docs": row["docs"],
            "decision": row["decision"],
            "fallbacks": row["fallbacks"],
            "error": row["error"],
        })
    # columns that are empty on every step only take room
    keep = [k for k in (rows[0] if rows else {}) if k in ("step", "time") or any(r[k] not in ("", 0) for r in rows)]
    return [{k: r[k] for k in keep} for r in rows]


def confidence_text(confidence: float | None, symbol: str) -> str:
    return f"{symbol} {confidence:.2f}" if confidence is not None else "—"


def result_sentence(result: AgenticResult) -> str:
    """A result in one line, for a notebook's closing summary: per-question time (one-time setup
    left out), LLM calls, and the confidence with its symbol — or, for a decline, confidence 0 and
    how sure the system is that the sources lack the answer; failed steps named."""
    calls = result.trace.llm_calls
    work = f"{plots.format_seconds(plots.per_question_seconds(result))} with {calls} LLM call{'' if calls == 1 else 's'}"
    if result.declined:
        lacks = f", P(sources lack the answer) {result.p_lacks_answer:.2f}" if result.p_lacks_answer is not None else ""
        text = f"declined in {work} (confidence 0{lacks})"
    else:
        text = f"answered in {work} at {confidence_text(result.confidence or 0.0, result.symbol)}"
    if result.failed_steps:
        text += f" (failed: {', '.join(result.failed_steps)})"
    return text


def setup_html(setup: dict[str, float]) -> str:
    """One-time work done before the question was timed, said apart from its latency."""
    if not setup:
        return ""
    work = ", ".join(f"{name} {plots.format_seconds(seconds)}" for name, seconds in setup.items())
    return f"<span style='color:#666'>one-time setup: {html_text(work)} — not part of the per-question latency</span>"


def summary_html(result: AgenticResult) -> str:
    t = result.trace
    one_time = plots.one_time_seconds(t)
    if result.declined:  # a decline is not a confident answer: say how sure the system is the sources lack it
        lacks = f" · sources lack the answer: {result.p_lacks_answer:.0%} sure" if result.p_lacks_answer is not None else ""
        headline = f"<b style='font-size:1.3em'>declined</b>{lacks}"
    elif result.confidence is not None:
        headline = f"<b style='font-size:1.3em'>{html_text(confidence_text(result.confidence, result.symbol))}</b> chance the answer is right"
    else:
        headline = "no confidence (answered without sources)"
    parts = [
        headline,
        f"<b style='color:#d1495b'>failed: {html_text(', '.join(result.failed_steps))}</b>" if result.failed_steps else "",
        f"route <b>{html_text(result.route)}</b>" if result.route else "",
        f"exit <b>{html_text(result.exit_reason)}</b>" if result.exit_reason else "",
        f"{plots.format_seconds(plots.per_question_seconds(result))} per question",
        f"{t.llm_calls} LLM calls",
        f"{t.prompt_tokens_evaluated} prompt tokens evaluated ({t.prompt_tokens_reused} reused)",
        f"fallbacks: {html_text('; '.join(t.fallbacks))}" if t.fallbacks else "",
        f"notes: {html_text('; '.join(result.warnings))}" if result.warnings else "",
        ("set aside as instructions to the model: " + html_text(", ".join(str(q.get("source")) for q in result.details["quarantined"])))
        if result.details.get("quarantined") else "",
    ]
    line = " · ".join(p for p in parts if p)
    if result.failed and result.error:  # the one line that says why there is no answer
        line = f"<b style='color:#d1495b'>no answer: {html_text(result.error)}</b><br>" + line
    if one_time:  # one-time work that ran inside this question (outside the panel): said, not counted
        line += "<br>" + setup_html(one_time)
    return line


def _doc_rows(docs: list[Document]) -> list[dict[str, Any]]:
    return [{"id": d.id, "source": d.meta.get("source", ""), "score": d.score, "grade": d.meta.get("grade")} for d in docs]


def ab_compare(a: AgenticResult, b: AgenticResult, setup: tuple[dict[str, float], dict[str, float]] | None = None) -> dict[str, Any]:
    """What changed between two runs of the same question (structured; :func:`comparison_html`
    renders it). Latency is per question: one-time setup is in ``one_time_setup_s``, not in it."""
    ids_a = {d.id: d for d in a.sources}
    ids_b = {d.id: d for d in b.sources}
    setup_a, setup_b = setup or ({}, {})
    return {
        "answer": (a.answer, b.answer),
        "confidence": (a.confidence, b.confidence),
        "symbol": (a.symbol, b.symbol),
        "declined": (a.declined, b.declined),
        "route": (a.route, b.route),
        "exit_reason": (a.exit_reason, b.exit_reason),
        "latency_s": (round(plots.per_question_seconds(a), 3), round(plots.per_question_seconds(b), 3)),
        "one_time_setup_s": ({**setup_a, **plots.one_time_seconds(a.trace)}, {**setup_b, **plots.one_time_seconds(b.trace)}),
        "llm_calls": (a.trace.llm_calls, b.trace.llm_calls),
        "prompt_tokens_evaluated": (a.trace.prompt_tokens_evaluated, b.trace.prompt_tokens_evaluated),
        "sources_only_a": _doc_rows([d for i, d in ids_a.items() if i not in ids_b]),
        "sources_only_b": _doc_rows([d for i, d in ids_b.items() if i not in ids_a]),
        "sources_both": _doc_rows([d for i, d in ids_a.items() if i in ids_b]),
        "dropped_by_grading": (
            (a.details.get("grading") or {}).get("dropped", []),
            (b.details.get("grading") or {}).get("dropped", []),
        ),
        "steps_only_a": [s.name for s in a.trace.steps if s.name not in {t.name for t in b.trace.steps}],
        "steps_only_b": [s.name for s in b.trace.steps if s.name not in {t.name for t in a.trace.steps}],
    }


def evidence_html(result: AgenticResult) -> str:
    """The source sentence the answer stands in, with the answer's span highlighted ("" without one)."""
    e = result.evidence
    if not e or e["source"] > len(result.sources):
        return ""
    doc = result.sources[e["source"] - 1]
    text = doc.content or ""
    how = "copied from" if result.answer_mode == "grounded" else "found verbatim in"
    return (
        f"<div style='font-size:0.95em;overflow-wrap:anywhere;border-left:3px solid #f2b134;padding-left:6px;margin:4px 0'>"
        f"<span style='color:#666'>evidence, {how} source {e['source']} ({html_text(str(doc.meta.get('source') or doc.meta.get('title') or doc.id))}):</span> "
        f"{html_text(text[e['sentence_start']:e['start']])}<mark style='background:#ffe08a'>{html_text(text[e['start']:e['end']])}</mark>"
        f"{html_text(text[e['end']:e['sentence_end']])}</div>"
    )


def result_html(result: AgenticResult) -> str:
    """The answer, its summary line, sources and trace as one HTML block."""
    return (
        f"<div style='font-size:1.1em;overflow-wrap:anywhere'><b>Q:</b> {html_text(result.question)}<br><b>A:</b> {html_text(result.answer)}</div>"
        f"{evidence_html(result)}<div>{summary_html(result)}</div><b>sources</b>{table_html(sources_rows(result))}<b>trace</b>{table_html(trace_rows(result.trace))}"
    )


_AB_LABELS = {
    "answer": "answer", "confidence": "confidence", "declined": "declined", "route": "route", "exit_reason": "exit",
    "latency_s": "latency per question", "one_time_setup_s": "one-time setup (not in latency)", "llm_calls": "LLM calls",
    "prompt_tokens_evaluated": "prompt tokens evaluated", "sources": "sources", "dropped_by_grading": "dropped by grading",
    "steps": "steps only in this run",
}
_DIFFERS = "background:#fff4cc"


def _doc_line(doc: dict[str, Any], note: str = "") -> str:
    parts = [html_text(str(doc.get("source") or "?")), f"<code>{html_text(short_id(doc.get('id')))}</code>"]
    if doc.get("score") is not None:
        parts.append(f"score {doc['score']:.3f}")
    if doc.get("grade") is not None:
        parts.append(f"grade {format_grade(doc['grade'])}")
    return " · ".join(parts) + (f" <i>{html_text(note)}</i>" if note else "")


def _lines(items: list[str]) -> str:
    return "<br>".join(items) if items else "—"


def _ab_cells(comparison: dict[str, Any], labels: tuple[str, str]) -> list[tuple[str, str, str]]:
    """(row label, A cell html, B cell html) for a comparison from :func:`ab_compare`; any other
    key is shown with :func:`format_value`."""
    rows: list[tuple[str, str, str]] = []
    symbols = comparison.get("symbol", ("", ""))
    for key, value in comparison.items():
        if key in ("symbol", "sources_only_a", "sources_only_b", "steps_only_b"):
            continue  # merged into the confidence, sources and steps rows
        label = _AB_LABELS.get(key, key.replace("_", " "))
        if key == "confidence":
            cells = tuple(html_text(confidence_text(c, s)) for c, s in zip(value, symbols))
        elif key == "latency_s":
            cells = tuple(html_text(plots.format_seconds(v)) for v in value)
        elif key == "one_time_setup_s":
            cells = tuple(html_text(", ".join(f"{k} {plots.format_seconds(v)}" for k, v in side.items()) or "—") for side in value)
        elif key == "dropped_by_grading":
            cells = tuple(_lines([_doc_line(d) for d in side]) for side in value)
        elif key == "sources_both":
            both = [_doc_line(d) for d in value]
            label = "sources"
            cells = (
                _lines(both + [_doc_line(d, f"only in {labels[0]}") for d in comparison.get("sources_only_a", [])]),
                _lines(both + [_doc_line(d, f"only in {labels[1]}") for d in comparison.get("sources_only_b", [])]),
            )
        elif key == "steps_only_a":
            label = _AB_LABELS["steps"]
            cells = (html_text(", ".join(value) or "—"), html_text(", ".join(comparison.get("steps_only_b", [])) or "—"))
        elif isinstance(value, tuple) and len(value) == 2:
            cells = tuple(html_text(format_value(v) if v not in ("", None) else "—") for v in value)
        else:
            cells = (html_text(format_value(value) or "—"), "")
        rows.append((label, *cells))
    return rows


def comparison_html(comparison: dict[str, Any], labels: tuple[str, str] = ("A", "B")) -> str:
    """The A/B comparison from :func:`ab_compare` as a table for people: rounded numbers with
    units, "—" for nothing, sources by name and short id, grades out of 10, and the rows where A
    and B differ highlighted."""
    cell = f"{_CELL};text-align:left;overflow-wrap:anywhere"
    head = "".join(f"<th style='{cell};white-space:nowrap'>{html_text(str(h))}</th>" for h in ("", *labels))
    body = ""
    for label, a, b in _ab_cells(comparison, labels):
        differs = a != b
        style = f"{cell};{_DIFFERS}" if differs else cell
        body += f"<tr><th style='{style};white-space:nowrap;font-weight:600'>{html_text(label)}</th><td style='{style}'>{a}</td><td style='{style}'>{b}</td></tr>"
    note = f"<div style='font-size:0.85em;color:#666;margin-top:4px'><span style='{_DIFFERS};padding:0 4px'>highlighted</span>: {html_text(labels[0])} and {html_text(labels[1])} differ · confidence {html_text(plots.BANDS_CAPTION)} · grades out of 10</div>"
    return _table(head, body) + note


_SUMMARY_COLUMNS = (
    ("questions", "questions", lambda v: str(v)),
    ("f1", "F1", lambda v: f"{v:.3f}"),
    ("em", "exact match", lambda v: f"{v:.3f}"),
    ("confidence", "mean confidence", lambda v: f"{v:.2f}"),
    ("decline_rate", "declined", lambda v: f"{v * 100:.0f}%"),
    ("latency_s_p50", "latency p50", plots.format_seconds),
    ("llm_calls_per_q", "LLM calls / question", lambda v: f"{v:.2f}"),
    ("prompt_tokens_per_q", "prompt tokens / question", lambda v: f"{v:,.0f}"),
    ("one_time_setup_s", "one-time setup (not in latency)", lambda v: plots.format_seconds(v) if v else "—"),
)


def summary_table_html(summary: dict[str, dict[str, Any]]) -> str:
    """:func:`run_ablation`'s summary, one row per configuration, rounded and with units."""
    rows = []
    for name, row in summary.items():
        cells = {"configuration": name}
        for key, title, fmt in _SUMMARY_COLUMNS:
            if any(key in r for r in summary.values()):
                cells[title] = fmt(row[key]) if row.get(key) is not None else "—"
        rows.append(cells)
    return table_html(rows)
