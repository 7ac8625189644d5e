"""What notebook 08 shows of a planned answer: the parts of a split question, the hops of a multi-hop
search, the SQL route's query and rows, the fallback's attempts, and the committed planning benchmark — as tables and a chart.

Pure functions of an :class:`~ragkit.pipeline.result.AgenticResult` (or of ``bench/results/planning.json``),
so a test checks what the notebook shows. Every value is escaped (:func:`ragkit.ui.html.table_html`).

Usage::

    HTML(parts_html(rag.ask("Where was Tesla born, and what did he study?")))
    planning_bars(json.loads(Path("bench/results/planning.json").read_text()))
"""

from __future__ import annotations

from typing import Any

from ragkit.ui import plots
from ragkit.ui.html import table_html
from ragkit.ui.text_safety import html_text

CONFIG_ORDER = ("plain", "decompose", "multi_hop", "full", "agent", "agent_text")
CONFIG_LABELS = {"agent": "agent (grammar)", "agent_text": "agent (text tool calls)"}


def _short(text: str | None, n: int = 110) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def parts_html(result: Any) -> str:
    """One row per part of a decomposed question: the part, its answer, its confidence."""
    parts = result.details.get("parts") or []
    if not parts:
        return "<i>the question was not split (it asks one thing)</i>"
    rows = [{"part": p.get("question"), "answer": p.get("answer"), "confidence": f"{p.get('symbol', '')} {p.get('confidence') or 0:.2f}"} for p in parts]
    return table_html(rows)


def hops_html(result: Any) -> str:
    """One row per iteration of the multi-hop step, and why it stopped."""
    hop = result.details.get("multi_hop")
    if not hop:
        return "<i>multi-hop did not run</i>"
    # the check that ran: the coverage check's share of the query's terms, or the LLM's P(the evidence answers it)
    check = ("coverage", "coverage") if any("coverage" in h for h in hop["hops"]) else ("p_sufficient", "P(enough)")
    rows = [{
        "iteration": h.get("iteration"), "best evidence": _short(h.get("evidence")), check[1]: h.get(check[0], "—"),
        "bridge": h.get("bridge", "—") or "(none found)", "follow-up query": h.get("query", "—") or "—", "new chunks": h.get("new_documents", "—"),
    } for h in hop["hops"]]
    return table_html(rows) + f"<div style='margin-top:4px'>exit reason: <b>{html_text(str(hop['exit_reason']))}</b></div>"


def sql_html(result: Any) -> str:
    """The SQL route: the query the LLM wrote, whether it ran, and what it returned."""
    sql = result.details.get("sql")
    if not sql:
        return "<i>the SQL route was not asked (not a question about counts or sums of the table)</i>"
    status = "ran" if sql.get("ok") else f"refused / failed: {sql.get('error')}"
    rows = sql.get("rows") or []
    shown = table_html([{f"column {i + 1}": v for i, v in enumerate(r)} for r in rows[:10]]) if rows else "<i>no rows</i>"
    return (f"<div><code>{html_text(str(sql.get('sql') or '—'))}</code> — {html_text(status)}</div>" + shown)


def fallback_html(result: Any) -> str:
    """The fallback step: how the first evidence measured, each strategy tried (why, and how it ended)."""
    fb = result.details.get("fallback")
    if not fb:
        return "<i>the fallback step did not run</i>"
    initial = fb.get("initial") or {}
    head = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in initial.items()) or "—"
    rows = [{"strategy": a["strategy"], "why it ran": a.get("why", "—"), "new chunks": a.get("new_documents", "—"),
             "after": ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (a.get("after") or {}).items()) or a.get("error", "—"),
             "result": a.get("result")} for a in fb.get("attempts", [])]
    table = table_html(rows) if rows else "<i>no strategy was needed</i>"
    return (f"<div>first retrieval: {html_text(head)} ({html_text(str(fb.get('check')))} check)</div>" + table
            + f"<div style='margin-top:4px'>exit reason: <b>{html_text(str(fb.get('exit_reason')))}</b></div>")


def planning_rows(data: dict[str, Any], section: str = "two_part") -> list[dict[str, Any]]:
    """``planning.json``'s section as table rows (one per model × configuration)."""
    rows = []
    for model, configs in (data.get(section) or {}).items():
        for config in CONFIG_ORDER:
            r = configs.get(config)
            if isinstance(r, dict):
                rows.append({"model": model.replace("qwen2.5-coder-", ""), "configuration": CONFIG_LABELS.get(config, config), "questions": r["n"],
                             "parts answered": f"{r['parts_answered']:.1%}", "part F1": round(r["part_f1"], 3),
                             "LLM calls/q": round(r["llm_calls"], 2), "p50": plots.format_seconds(r["p50_s"])})
    return rows


def planning_bars(data: dict[str, Any], section: str = "two_part", title: str | None = None):
    """Share of parts answered per configuration (one group of bars per model), labelled."""
    fig = plots.new_figure((7, 3.6))
    ax = fig.subplots()
    models = list((data.get(section) or {}).keys())
    configs = [c for c in CONFIG_ORDER if any(isinstance(data[section][m].get(c), dict) for m in models)]
    if not configs:  # nothing committed for this section yet: say so on the axes, not with an error
        ax.text(0.5, 0.5, f"no {section} run in planning.json yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    width = 0.8 / max(len(configs), 1)
    for j, config in enumerate(configs):
        xs, ys = [], []
        for i, model in enumerate(models):
            r = data[section][model].get(config)
            if isinstance(r, dict):
                xs.append(i + j * width)
                ys.append(r["parts_answered"])
            else:  # an empty slot would read as 0%: say the configuration was not run for this model
                ax.text(i + j * width, 0.01, "not run", rotation=90, ha="center", va="bottom", fontsize=7, color="0.45")
        bars = ax.bar(xs, ys, width=width * 0.95, label=CONFIG_LABELS.get(config, config))
        ax.bar_label(bars, labels=[f"{y:.1%}" for y in ys], fontsize=8, padding=1)
    ax.set_xticks([i + width * (len(configs) - 1) / 2 for i in range(len(models))], [m.replace("qwen2.5-coder-", "") for m in models])
    ax.set_xlim(-width, len(models) - 1 + width * len(configs))  # the "not run" slots too (text does not widen the axes)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("parts answered (F1 ≥ 0.5)")
    ax.set_title(title or {"two_part": "two-part questions (SQuAD dev)", "bridge": "bridge questions (sample_docs)"}.get(section, section))
    # below the axes, three a row: six labels in one row ran past the axes at 1280 px
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(len(configs), 3), frameon=False)
    fig.tight_layout()
    return fig
