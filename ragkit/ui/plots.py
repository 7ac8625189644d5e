"""Matplotlib figures for the notebooks: per-step latency waterfall, confidence breakdown, the A/B
comparison of two configurations, the quality-vs-latency scatter of an ablation and the
reliability diagram of a confidence.

Every function takes results (``AgenticResult`` / ``Trace`` / summary rows) and an optional ``ax``
and returns the matplotlib ``Figure``, so a test can check what was drawn without a display.

Figures are built as ``matplotlib.figure.Figure`` objects, never through ``pyplot``: in Jupyter,
ipywidgets' message handling fires IPython's post-execute hook, and matplotlib-inline then shows
and closes every figure pyplot knows about — on ipykernel's comm thread, while the panel may still
be drawing it (blank or half-drawn plots, figures shown twice, copies in the log console). A figure
pyplot never saw is left alone; it still renders as the last expression of a cell (IPython's PNG
formatter for Figure, or :meth:`NotebookFigure._repr_png_` where none is registered).
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from ragkit.eval.calibration import expected_calibration_error, reliability_bins
from ragkit.pipeline.trace import ONE_TIME_STEPS, Trace, one_time_seconds, per_question_seconds  # noqa: F401  (re-exported)

LLM_COLOR, STEP_COLOR, ONE_TIME_COLOR = "#d1495b", "#66a182", "#b8b8b8"
HIGH_COLOR, MID_COLOR, LOW_COLOR = "#66a182", "#edae49", "#d1495b"
# Work done once per process or index, not per question: kept out of per-question latency.
BANDS_CAPTION = "● > 0.7 likely right · ◐ 0.5–0.7 unsure · ○ < 0.5 likely wrong"


class NotebookFigure(Figure):
    """A ``Figure`` pyplot does not manage, that shows itself as a PNG in a notebook."""

    def _repr_png_(self) -> bytes:
        return figure_png(self)


def new_figure(figsize: tuple[float, float] = (7, 3)) -> Figure:
    fig = NotebookFigure(figsize=figsize)
    FigureCanvasAgg(fig)  # draws and saves without any pyplot backend
    return fig


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (white background, cropped to what was drawn)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", facecolor="white")
    return buffer.getvalue()


def format_seconds(seconds: float | None) -> str:
    """``0.0004`` → "<1 ms", ``0.043`` → "43 ms", ``5.075`` → "5.1 s", ``65.1`` → "1 min 5 s"."""
    if seconds is None:
        return "—"
    if seconds < 0.001:
        return "<1 ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def axes(ax, figsize=(7, 3)):
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(figsize)
    return fig, fig.add_subplot()


def latency_waterfall(trace: Trace, ax=None, title: str = "where the time goes"):
    """One bar per step, placed at its start; red bars called the LLM, grey ones are one-time
    preparation (not part of the per-question latency). Labels stay inside the axes."""
    rows = trace.offsets()
    fig, ax = axes(ax, (7, 0.35 * max(len(rows), 3) + 1.3))
    calls: dict[str, int] = {}
    for step in trace.steps:
        calls[step.name] = calls.get(step.name, 0) + step.llm_calls
    end = max((start + seconds for _, start, seconds in rows), default=0.0) or 1e-3
    for i, (name, start, seconds) in enumerate(rows):
        color = ONE_TIME_COLOR if name in ONE_TIME_STEPS else LLM_COLOR if calls.get(name) else STEP_COLOR
        ax.barh(i, seconds, left=start, color=color, hatch="//" if name in ONE_TIME_STEPS else None)
        label = format_seconds(seconds)
        if seconds > 0.25 * end:  # a long bar carries its label inside, so it cannot pass the frame
            ax.text(start + seconds - 0.01 * end, i, label, va="center", ha="right", fontsize=8, color="white", fontweight="bold")
        else:
            ax.text(start + seconds + 0.01 * end, i, label, va="center", ha="left", fontsize=8)
    ax.set_xlim(0, end * 1.22)  # room for the labels right of the short bars that end last
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first step")
    ax.set_title(title)
    legend = [Patch(color=LLM_COLOR, label="called the LLM"), Patch(color=STEP_COLOR, label="no LLM")]
    if any(name in ONE_TIME_STEPS for name, _, _ in rows):
        legend.append(Patch(facecolor=ONE_TIME_COLOR, hatch="//", label="one-time setup (not per question)"))
    # under the x label, at a fixed distance in points whatever the axes' height
    below = offset_copy(ax.transAxes, fig=fig, y=-30, units="points")
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=len(legend), fontsize=7.5, frameon=False)
    fig.tight_layout()
    return fig


# Confidence signals as a person reads them; each is shown on 0–1 (``SIGNAL_SCALES`` divides first).
# Signals on another scale (answer length, raw BM25) are named under the chart instead of drawn.
SIGNAL_LABELS = {
    "retrieval": "retrieval", "grading": "grading", "support": "judge: answer supported",
    "token_p_mean": "answer token p (mean)", "token_p_min": "answer token p (min)", "token_p_first": "answer token p (first)",
    "lexical_support": "answer words in sources", "verbatim": "answer verbatim in a source", "question_overlap": "answer repeats the question",
    "dense_top": "best dense cosine", "dense_margin": "dense margin over #2", "agree_top1": "dense & sparse agree on #1",
    "overlap_top5": "dense & sparse top-5 overlap", "grade_max": "best grade (/10)",
}
SIGNAL_SCALES = {"grade_max": 10.0}


def confidence_signals(result: Any) -> tuple[list[tuple[str, float]], list[str]]:
    """(label, value on 0–1) for each numeric confidence signal of ``result``, and "name value" for
    those not on a 0–1 scale."""
    raw = (getattr(result, "details", {}) or {}).get("confidence") or {}
    shown, other = [], []
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            continue
        scaled = value / SIGNAL_SCALES.get(name, 1.0)
        if 0.0 <= scaled <= 1.0:
            shown.append((SIGNAL_LABELS.get(name, name.replace("_", " ")), float(scaled)))
        else:
            other.append(f"{name.replace('_', ' ')} {value:.3g}")
    return shown, other


def _confidence_row(ax, confidence: float) -> None:
    """The ○ ◐ ● bands as a strip behind the confidence bar (y -0.6 to 0.6), each labelled with
    what it means."""
    for low, high, text, color in ((0.0, 0.5, "○ < 0.5 likely wrong", LOW_COLOR), (0.5, 0.7, "◐ 0.5–0.7", MID_COLOR), (0.7, 1.0, "● > 0.7 likely right", HIGH_COLOR)):
        ax.barh(0, high - low, left=low, height=1.2, color=color, alpha=0.2, zorder=0)
        ax.text((low + high) / 2, -0.3, text, ha="center", va="center", fontsize=7, color="#333333", zorder=4)
    ax.barh(0.25, confidence, height=0.45, color="#2e4057", zorder=2)
    ax.text(min(confidence, 1.0) + 0.01, 0.25, f"{confidence:.2f}", va="center", fontsize=8, fontweight="bold", zorder=5)


def confidence_breakdown(result: Any, ax=None, floor: float | None = None):
    """The confidence over its ○ ◐ ● bands (each band says what it means), and beneath it the
    signals it was computed from, each on 0–1."""
    shown, other = confidence_signals(result)
    confidence = result.confidence or 0.0
    fig, ax = axes(ax, (7, 0.3 * len(shown) + 1.9))
    _confidence_row(ax, confidence)
    ys = [1.3 + i for i in range(len(shown))]  # the confidence strip is taller than a signal row
    for y, (label, value) in zip(ys, shown):
        ax.barh(y, value, height=0.6, color=STEP_COLOR)
        ax.text(value + 0.01, y, f"{value:.2f}", va="center", fontsize=7.5)
    if shown:
        ax.axhline(0.72, color="#999999", linewidth=0.8)
    notes = []
    if floor:
        ax.axvline(floor, color="black", linestyle="--", linewidth=1)
        notes.append(f"dashed: declines below {floor:.2f}")
    if other:
        notes.append(f"not drawn (not on 0–1): {', '.join(other)}")
    ax.set_yticks([0.0] + ys, ["confidence"] + [label for label, _ in shown])
    ax.get_yticklabels()[0].set_fontweight("bold")
    ax.set_ylim((ys[-1] if ys else 0.0) + 0.5, -0.65)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel("signals, each on 0–1" + ("\n" + " · ".join(notes) if notes else ""), fontsize=8)
    if result.confidence is None:  # asked back (needs_clarification): nothing was answered, so nothing to be sure of
        ax.set_title(f"no confidence: {getattr(result, 'exit_reason', None) or 'no answer'}", fontsize=10)
    else:
        ax.set_title(f"confidence {result.symbol} {confidence:.2f}: estimated chance the answer is right", fontsize=10)
    fig.tight_layout()
    return fig


def ab_figure(a: Any, b: Any, labels: tuple[str, str] = ("A", "B")):
    """Two results of the same question: stacked per-step latency (one-time preparation left out,
    and said so), and confidence signals."""
    fig = new_figure((11, 3.8))
    left, right = fig.subplots(1, 2)
    names: list[str] = []
    for result in (a, b):
        for step in result.trace.steps:
            if step.name not in names and step.name not in ONE_TIME_STEPS:
                names.append(step.name)
    cmap = matplotlib.colormaps["tab20"]
    excluded: list[str] = []
    for col, result in enumerate((a, b)):
        bottom = 0.0
        per_step: dict[str, float] = {}
        for step in result.trace.steps:
            if step.name in ONE_TIME_STEPS:
                continue
            per_step[step.name] = per_step.get(step.name, 0.0) + step.seconds
        for k, name in enumerate(names):
            seconds = per_step.get(name, 0.0)
            if seconds:
                left.bar(col, seconds, bottom=bottom, color=cmap(k % 20), label=name if name not in left.get_legend_handles_labels()[1] else None)
                bottom += seconds
        left.text(col, bottom, format_seconds(per_question_seconds(result)), ha="center", va="bottom", fontsize=9)
        excluded += [f"{labels[col]}: {name} {format_seconds(s)}" for name, s in one_time_seconds(result.trace).items()]
    left.set_xticks([0, 1], list(labels))
    left.set_ylabel("seconds per question")
    left.set_title("latency by step")
    left.set_ylim(0, max(per_question_seconds(a), per_question_seconds(b), 1e-3) * 1.15)  # room for the totals
    left.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if excluded:
        left.set_xlabel("one-time setup not counted: " + "; ".join(excluded), fontsize=8)
    shown = [dict(confidence_signals(r)[0]) for r in (a, b)]
    names = ["confidence"] + list(dict.fromkeys(label for side in shown for label in side))
    height = 0.38
    for col, result in enumerate((a, b)):
        values = {"confidence": result.confidence or 0.0, **shown[col]}
        present = [(i, values[n]) for i, n in enumerate(names) if n in values]  # a signal one run lacks gets no bar, not 0
        right.barh([i + (col - 0.5) * height for i, _ in present], [v for _, v in present], height=height, label=f"{labels[col]} {result.symbol} {result.confidence or 0:.2f}")
    for low, high, color in ((0.0, 0.5, LOW_COLOR), (0.5, 0.7, MID_COLOR), (0.7, 1.0, HIGH_COLOR)):
        right.axvspan(low, high, ymin=1 - 1 / len(names), ymax=1, color=color, alpha=0.2, zorder=0)
    right.set_yticks(range(len(names)), names, fontsize=8)
    right.get_yticklabels()[0].set_fontweight("bold")
    right.set_ylim(len(names) - 0.5, -0.5)
    right.set_xlim(0, 1.0)
    right.set_xlabel(BANDS_CAPTION + " (shaded behind confidence)", fontsize=7.5)
    right.set_title("confidence and its signals (0–1)")
    below = offset_copy(right.transAxes, fig=fig, y=-32, units="points")
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def quality_latency_scatter(summary: dict[str, dict[str, Any]], quality: str = "f1", ax=None):
    """One point per configuration: latency p50 (x) against a quality measure (y)."""
    fig, ax = axes(ax, (6, 4))
    ax.set_xlabel("latency p50 (s)")
    ax.set_ylabel(quality)
    ax.set_title(f"{quality} vs latency")
    points = [(name, row["latency_s_p50"], row[quality]) for name, row in summary.items() if row.get("latency_s_p50") is not None and row.get(quality) is not None]
    if not points:
        return fig
    for _, x, y in points:
        ax.scatter(x, y, s=40)
    ax.margins(x=0.15, y=0.18)  # room inside the frame for the labels of the outermost points
    fig.tight_layout()
    # configs that do the same work land on the same spot: try label positions around each point and keep
    # the first that overlaps no label already placed, instead of printing names over each other
    renderer = fig.canvas.get_renderer()
    candidates = [(4, 4, "left"), (4, -10, "left"), (-4, 4, "right"), (-4, -10, "right"), (4, 15, "left"), (4, -21, "left"), (-4, 15, "right"), (-4, -21, "right")]
    frame = ax.get_window_extent(renderer)

    def inside(box) -> bool:  # a label on the axis frame is hard to read
        return box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1

    taken = []
    for name, x, y in sorted(points, key=lambda p: (p[1], -p[2])):
        for dx, dy, ha in candidates:
            label = ax.annotate(name, (x, y), textcoords="offset points", xytext=(dx, dy), ha=ha, fontsize=8)
            box = label.get_window_extent(renderer)
            if inside(box) and not any(box.overlaps(other) for other in taken):
                break
            label.remove()
        else:  # nowhere free: the default spot, overlapping
            label = ax.annotate(name, (x, y), textcoords="offset points", xytext=candidates[0][:2], fontsize=8)
            box = label.get_window_extent(renderer)
        taken.append(box)
    fig.tight_layout()
    return fig


def recall_curves(rows: list[dict], ks: tuple[int, ...] = (1, 2, 3, 5, 10, 20), ax=None, title: str = "gold paragraph found in the top k"):
    """Recall@k per retrieval mode (rows from :func:`ragkit.eval.experiments.retrieval_ranks` or
    :func:`~ragkit.eval.experiments.hyde_ranks`)."""
    from ragkit.eval.experiments import recall_at

    fig, ax = axes(ax, (6, 3.6))
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
    """Accuracy and median latency per router backend (from :func:`ragkit.eval.experiments.router_accuracy`)."""
    fig = new_figure((10, 3.2))
    left, right = fig.subplots(1, 2)
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

    fig, ax = axes(ax, (6, 3.4))
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
    fig, ax = axes(ax, (4.4, 4.2))
    xs = [r[before] or miss for r in rows]
    ys = [r[after] or miss for r in rows]
    ax.scatter(xs, ys, s=22, alpha=0.6, color=STEP_COLOR)
    ax.plot([1, miss], [1, miss], color="grey", linewidth=1)
    ax.set_xlabel(before.replace("_", " "))
    ax.set_ylabel(after.replace("_", " "))
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def reliability_diagram(rows: dict[str, list[tuple[float, bool]]], ax=None, title: str = "does confidence mean what it says?", n_bins: int = 10):
    """Predicted confidence (x, ``n_bins`` equal-width bins) against the share of those answers
    that were correct (y), one line per configuration, with the diagonal a calibrated confidence
    follows; point sizes and the histogram beneath say how many answers fell in each bin. ECE
    (expected calibration error) per configuration in the legend and title.

    ``rows``: ``{"plain": [(0.82, True), (0.31, False), ...], "full": [...]}``.
    """
    if ax is None:
        fig = new_figure((6, 5.2))
        ax, hist = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    else:
        fig, hist = ax.figure, None
    width = 1.0 / n_bins
    centers = [(i + 0.5) * width for i in range(n_bins)]
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    eces = []
    for k, (name, pairs) in enumerate(rows.items()):
        pairs = list(pairs)
        bins = reliability_bins([c for c, _ in pairs], [y for _, y in pairs], n_bins)
        filled = [(b["confidence"], b["correct"], b["n"]) for b in bins if b["n"]]
        ece = expected_calibration_error([c for c, _ in pairs], [y for _, y in pairs], n_bins) if pairs else None
        eces.append(f"{name} {ece:.2f}" if ece is not None else f"{name} —")
        color = matplotlib.colormaps["tab10"](k % 10)
        label = f"{name} (n={len(pairs)}, ECE {ece:.2f})" if ece is not None else f"{name} (no answers)"
        # x is the bin's mean confidence, so a point on the diagonal is exactly calibrated
        ax.plot([f[0] for f in filled], [f[1] for f in filled], color=color, linewidth=1.2, label=label)
        ax.scatter([f[0] for f in filled], [f[1] for f in filled], s=[12 + 200 * f[2] / max(len(pairs), 1) for f in filled], color=color, zorder=3)
        if hist is not None:
            offset = (k - (len(rows) - 1) / 2) * width / max(len(rows), 1)
            hist.bar([c + offset for c in centers], [b["n"] for b in bins], width=width / max(len(rows), 1), color=color, alpha=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks([i * width for i in range(n_bins + 1)], minor=True)
    ax.grid(which="minor", axis="x", color="#eeeeee")
    ax.set_ylabel("share of answers correct")
    ax.set_title(f"{title}\nECE: {', '.join(eces)}" if eces else title, fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left")
    if hist is not None:
        hist.set_ylabel("answers")
        hist.set_xlabel("predicted confidence (10 equal-width bins)")
    else:
        ax.set_xlabel("predicted confidence (10 equal-width bins)")
    fig.tight_layout()
    return fig
