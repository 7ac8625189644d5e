"""Matplotlib figures for the notebooks: per-step latency waterfall, confidence breakdown, the A/B
comparison of two configurations, and the quality-vs-latency scatter of an ablation.

Every function takes results (``AgenticResult`` / ``Trace`` / summary rows) and an optional ``ax``
and returns the matplotlib ``Figure``, so a test can check what was drawn without a display.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt  # headless runs (CI, nbclient) fall back to Agg on their own

from ragkit.trace import Trace

LLM_COLOR, STEP_COLOR = "#d1495b", "#66a182"
SIGNAL_ORDER = ("retrieval", "grading", "support")


def _axes(ax, figsize=(7, 3)):
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=figsize)
    return fig, ax


def latency_waterfall(trace: Trace, ax=None, title: str = "where the time goes"):
    """One bar per step, placed at its start; red bars called the LLM."""
    rows = trace.offsets()
    fig, ax = _axes(ax, (7, 0.35 * max(len(rows), 3) + 1))
    calls: dict[str, int] = {}
    for step in trace.steps:
        calls[step.name] = calls.get(step.name, 0) + step.llm_calls
    for i, (name, start, seconds) in enumerate(rows):
        ax.barh(i, seconds, left=start, color=LLM_COLOR if calls.get(name) else STEP_COLOR)
        ax.text(start + seconds, i, f" {seconds * 1000:.0f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first step")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def confidence_breakdown(result: Any, ax=None, floor: float | None = None):
    """The signals confidence is built from, and the confidence itself with the ● ◐ ○ bands."""
    signals = result.details.get("confidence", {}) or {}
    names = [n for n in SIGNAL_ORDER if n in signals] + ["confidence"]
    values = [signals[n] for n in names[:-1]] + [result.confidence or 0.0]
    fig, ax = _axes(ax, (5, 3))
    ax.bar(names, values, color=[STEP_COLOR] * (len(names) - 1) + ["#2e4057"])
    ax.axhspan(0.7, 1.0, color="#66a182", alpha=0.08)
    ax.axhspan(0.5, 0.7, color="#edae49", alpha=0.08)
    ax.axhspan(0.0, 0.5, color="#d1495b", alpha=0.06)
    if floor:
        ax.axhline(floor, color="black", linestyle="--", linewidth=1, label=f"decline floor {floor}")
        ax.legend(loc="upper right", fontsize=8)
    for i, v in enumerate(values):
        ax.text(i, v + 0.02, f"{v:.2f}", ha="center", fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.set_title(f"confidence {result.symbol} {result.confidence or 0:.2f}")
    fig.tight_layout()
    return fig


def ab_figure(a: Any, b: Any, labels: tuple[str, str] = ("A", "B")):
    """Two results of the same question: stacked per-step latency, and confidence signals."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    names: list[str] = []
    for result in (a, b):
        for step in result.trace.steps:
            if step.name not in names:
                names.append(step.name)
    cmap = plt.get_cmap("tab20")
    for col, result in enumerate((a, b)):
        bottom = 0.0
        per_step: dict[str, float] = {}
        for step in result.trace.steps:
            per_step[step.name] = per_step.get(step.name, 0.0) + step.seconds
        for k, name in enumerate(names):
            seconds = per_step.get(name, 0.0)
            if seconds:
                left.bar(col, seconds, bottom=bottom, color=cmap(k % 20), label=name if col == 0 or name not in [s.name for s in a.trace.steps] else None)
                bottom += seconds
        left.text(col, bottom, f"{result.seconds:.2f} s", ha="center", va="bottom", fontsize=9)
    left.set_xticks([0, 1], list(labels))
    left.set_ylabel("seconds")
    left.set_title("latency by step")
    left.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    signals = list(SIGNAL_ORDER) + ["confidence"]
    width = 0.38
    for col, result in enumerate((a, b)):
        values = [(result.details.get("confidence") or {}).get(n, 0.0) for n in SIGNAL_ORDER] + [result.confidence or 0.0]
        right.bar([i + (col - 0.5) * width for i in range(len(signals))], values, width=width, label=f"{labels[col]} {result.symbol}")
    right.set_xticks(range(len(signals)), signals)
    right.set_ylim(0, 1.05)
    right.set_title("confidence and its signals")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def quality_latency_scatter(summary: dict[str, dict[str, Any]], quality: str = "f1", ax=None):
    """One point per configuration: latency p50 (x) against a quality measure (y)."""
    fig, ax = _axes(ax, (6, 4))
    ax.set_xlabel("latency p50 (s)")
    ax.set_ylabel(quality)
    ax.set_title(f"{quality} vs latency")
    points = [(name, row["latency_s_p50"], row[quality]) for name, row in summary.items() if row.get("latency_s_p50") is not None and row.get(quality) is not None]
    if not points:
        return fig
    for _, x, y in points:
        ax.scatter(x, y, s=40)
    fig.tight_layout()
    # configs that do the same work land on the same spot: try label positions around each point and keep
    # the first that overlaps no label already placed, instead of printing names over each other
    renderer = fig.canvas.get_renderer()
    candidates = [(4, 4, "left"), (4, -10, "left"), (-4, 4, "right"), (-4, -10, "right"), (4, 15, "left"), (4, -21, "left"), (-4, 15, "right"), (-4, -21, "right")]
    taken = []
    for name, x, y in sorted(points, key=lambda p: (p[1], -p[2])):
        for dx, dy, ha in candidates:
            label = ax.annotate(name, (x, y), textcoords="offset points", xytext=(dx, dy), ha=ha, fontsize=8)
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in taken):
                break
            label.remove()
        else:  # nowhere free: the default spot, overlapping
            label = ax.annotate(name, (x, y), textcoords="offset points", xytext=candidates[0][:2], fontsize=8)
            box = label.get_window_extent(renderer)
        taken.append(box)
    fig.tight_layout()
    return fig


def recall_curves(rows: list[dict], ks: tuple[int, ...] = (1, 2, 3, 5, 10, 20), ax=None, title: str = "gold paragraph found in the top k"):
    """Recall@k per retrieval mode (rows from :func:`ragkit.experiments.retrieval_ranks` or
    :func:`~ragkit.experiments.hyde_ranks`)."""
    from ragkit.experiments import recall_at

    fig, ax = _axes(ax, (6, 3.6))
    for mode in (rows[0]["ranks"] if rows else {}):
        ax.plot(ks, [recall_at(rows, mode, k) for k in ks], marker="o", label=mode)
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{title} ({len(rows)} questions)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def router_bars(results: dict[str, dict[str, Any]]):
    """Accuracy and median latency per router backend (from :func:`ragkit.experiments.router_accuracy`)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    names = list(results)
    left.bar(names, [results[n]["accuracy"] for n in names], color=STEP_COLOR)
    for i, n in enumerate(names):
        left.text(i, results[n]["accuracy"] + 0.02, f"{results[n]['accuracy']:.2f}", ha="center", fontsize=9)
    left.set_ylim(0, 1.05)
    left.set_title("accuracy on the labelled set")
    right.bar(names, [max(results[n]["ms_p50"], 1e-3) for n in names], color=LLM_COLOR)
    right.set_yscale("log")
    right.set_title("median ms per question (log)")
    for i, n in enumerate(names):
        right.text(i, max(results[n]["ms_p50"], 1e-3), f"{results[n]['ms_p50']:.2f}", ha="center", va="bottom", fontsize=9)
    fig.tight_layout()
    return fig


def score_strips(rows: list[dict], threshold: float | None = None, ax=None, title: str = "judge P(supported) by kind of answer"):
    """Each labelled answer's score, one strip per kind, with the decision threshold."""
    import random

    fig, ax = _axes(ax, (6, 3.4))
    kinds = [k for k in ("supported", "contradicted", "unsupported") if any(r["kind"] == k for r in rows)]
    jitter = random.Random(0)
    for i, kind in enumerate(kinds):
        scores = [r["score"] for r in rows if r["kind"] == kind and r["score"] is not None]
        ax.scatter([i + jitter.uniform(-0.15, 0.15) for _ in scores], scores, s=18, alpha=0.7, color=STEP_COLOR if kind == "supported" else LLM_COLOR)
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:.2f}")
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("P(supported)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def rank_shift(rows: list[dict], before: str = "rank_before", after: str = "rank_after", miss: int = 12, ax=None, title: str = "gold paragraph rank: before vs after"):
    """One point per question: the gold paragraph's rank before (x) and after (y); below the
    diagonal = moved up. A miss is drawn at ``miss``."""
    fig, ax = _axes(ax, (4.4, 4.2))
    xs = [r[before] or miss for r in rows]
    ys = [r[after] or miss for r in rows]
    ax.scatter(xs, ys, s=22, alpha=0.6, color=STEP_COLOR)
    ax.plot([1, miss], [1, miss], color="grey", linewidth=1)
    ax.set_xlabel(before.replace("_", " "))
    ax.set_ylabel(after.replace("_", " "))
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
