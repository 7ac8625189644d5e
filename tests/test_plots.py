"""Plot helpers: what they draw, checked on the figure's artists."""

import matplotlib

matplotlib.use("Agg")

from ragkit.ui.plots import quality_latency_scatter  # noqa: E402


def _labels(fig):
    return {a.get_text(): a for a in fig.axes[0].texts}


def test_scatter_labels_of_configs_on_the_same_spot_do_not_overlap():
    summary = {
        "plain": {"latency_s_p50": 3.86, "f1": 0.160},
        "confidence_floor": {"latency_s_p50": 3.78, "f1": 0.160},
        "routing": {"latency_s_p50": 3.89, "f1": 0.164},
        "full": {"latency_s_p50": 4.67, "f1": 0.236},
        "plain_top1": {"latency_s_p50": 1.82, "f1": 0.247},
    }
    fig = quality_latency_scatter(summary)
    labels = _labels(fig)
    assert set(labels) == set(summary)
    renderer = fig.canvas.get_renderer()
    boxes = {name: label.get_window_extent(renderer) for name, label in labels.items()}
    overlapping = [(a, b) for a in boxes for b in boxes if a < b and boxes[a].overlaps(boxes[b])]
    assert overlapping == []
    assert labels["plain_top1"].xyann == (4, 4)  # a point with room keeps the default spot


def test_scatter_labels_stay_inside_the_axis_frame():
    # the notebook 07 ablation's shape: the fastest config and the best one sit at the data's edges
    summary = {
        "plain": {"latency_s_p50": 3.1, "f1": 0.1349}, "rerank": {"latency_s_p50": 3.2, "f1": 0.1349},
        "check+correct": {"latency_s_p50": 3.9, "f1": 0.1349}, "grading": {"latency_s_p50": 4.4, "f1": 0.21},
        "all on": {"latency_s_p50": 5.6, "f1": 0.25},
    }
    for rows in (summary, {"plain": {"latency_s_p50": 2.0, "f1": 0.0}, "all on": {"latency_s_p50": 4.0, "f1": 0.3}}):
        fig = quality_latency_scatter(rows)
        renderer = fig.canvas.get_renderer()
        frame = fig.axes[0].get_window_extent(renderer)
        for name, label in _labels(fig).items():
            box = label.get_window_extent(renderer)
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, name


def test_scatter_skips_rows_without_the_measure_and_draws_an_empty_axis_for_none():
    labels = _labels(quality_latency_scatter({"a": {"latency_s_p50": 1.0, "f1": 0.5}, "b": {"latency_s_p50": 2.0}}))
    assert set(labels) == {"a"}
    assert _labels(quality_latency_scatter({"b": {"latency_s_p50": 2.0}})) == {}


# -- figures pyplot never sees, and what they explain --------------------------------------------

import base64  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ragkit.ui import plots  # noqa: E402
from ragkit.pipeline.trace import Step, Trace  # noqa: E402


def _trace(*steps):
    trace = Trace()
    start = 100.0
    for name, seconds, llm_calls in steps:
        trace.add(Step(name=name, started=start, seconds=seconds, llm_calls=llm_calls))
        start += seconds
    return trace


def _result(trace, confidence=0.46, symbol="○", signals=None):
    return SimpleNamespace(details={"confidence": signals or {"retrieval": 0.68, "grading": 0.1, "support": 0.59, "calibration": "per model"}},
                           confidence=confidence, symbol=symbol, trace=trace, seconds=trace.seconds, sources=[])


TRACE = _trace(("embed", 0.043, 0), ("retrieve", 0.002, 0), ("sentence_vectors", 45.0, 0), ("grade", 14.9, 1), ("answer", 5.075, 1), ("confidence", 0.0001, 0))


def _all_figures():
    a = _result(_trace(("embed", 0.03, 0), ("answer", 21.8, 1)), 1.0, "●")
    return {
        "waterfall": plots.latency_waterfall(TRACE),
        "confidence": plots.confidence_breakdown(_result(TRACE), floor=0.35),
        "ab": plots.ab_figure(a, _result(TRACE)),
        "scatter": plots.quality_latency_scatter({"plain": {"latency_s_p50": 3.8, "f1": 0.16}}),
        "router": plots.router_bars({"rules": {"accuracy": 0.7, "ms_p50": 0.01}, "llm": {"accuracy": 0.8, "ms_p50": 300.0}}),
        "strips": plots.score_strips([{"kind": "supported", "score": 0.9}, {"kind": "unsupported", "score": 0.2}], threshold=0.4),
        "rank_shift": plots.rank_shift([{"rank_before": 3, "rank_after": 1}, {"rank_before": None, "rank_after": 2}]),
        "reliability": plots.reliability_diagram({"plain": [(0.9, True), (0.8, False)]}),
    }


def _not_blank(png: bytes | str) -> bool:
    if isinstance(png, str):  # IPython's display formatter hands PNGs on base64-encoded
        png = base64.b64decode(png)
    assert png.startswith(b"\x89PNG")
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    return len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10


def test_no_plot_registers_a_pyplot_figure():
    # matplotlib-inline shows and closes every pyplot figure after each widget message: the panel's
    # figures must not be among them (blank, doubled and stale plots in JupyterLab)
    plt.close("all")
    figures = _all_figures()
    assert plt.get_fignums() == []
    assert all(isinstance(fig, Figure) for fig in figures.values())
    assert all(_not_blank(plots.figure_png(fig)) for fig in figures.values())


def test_a_figure_returned_by_a_cell_still_renders_as_png():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    fig = plots.latency_waterfall(TRACE)
    shell = InteractiveShell.instance()
    data, _ = shell.display_formatter.format(fig)  # what a cell's last expression goes through
    assert "image/png" in data and _not_blank(data["image/png"])
    select_figure_formats(shell, {"png"})  # as matplotlib-inline registers it once pyplot is used
    data, _ = shell.display_formatter.format(fig)
    assert "image/png" in data and _not_blank(data["image/png"])


def test_waterfall_labels_have_units_and_stay_inside_the_axes():
    fig = plots.latency_waterfall(TRACE)
    ax = fig.axes[0]
    texts = {t.get_text(): t for t in ax.texts}
    assert {"43 ms", "2 ms", "45.0 s", "14.9 s", "5.1 s", "<1 ms"} <= set(texts)
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    for text in texts.values():
        box = text.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text.get_text()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "one-time setup (not per question)" in legend and "called the LLM" in legend


def test_confidence_chart_explains_its_bands_and_symbols():
    fig = plots.confidence_breakdown(_result(TRACE), floor=0.35)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert {"○ < 0.5 likely wrong", "◐ 0.5–0.7", "● > 0.7 likely right"} <= set(texts)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["confidence", "retrieval", "grading", "judge: answer supported"]
    assert "declines below 0.35" in ax.get_xlabel() and "0.46" in ax.get_title() and "chance the answer is right" in ax.get_title()


def test_confidence_chart_draws_only_signals_on_a_0_to_1_scale_and_names_the_rest():
    signals = {"token_p_mean": 0.73, "answer_words": 14, "sparse_top": 4.77, "grade_max": 9.0, "agree_top1": 1.0, "calibration": "qwen/full", "failed_steps": ["grade"]}
    fig = plots.confidence_breakdown(_result(TRACE, signals=signals))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["confidence", "answer token p (mean)", "best grade (/10)", "dense & sparse agree on #1"]
    assert "0.90" in [t.get_text() for t in ax.texts]  # the grade, out of 10, drawn on 0–1
    assert "answer words 14" in ax.get_xlabel() and "sparse top 4.77" in ax.get_xlabel()
    assert all(p.get_width() <= 1.0 for p in ax.patches)


def test_ab_figure_leaves_one_time_setup_out_of_the_latency_and_says_so():
    a = _result(_trace(("embed", 0.03, 0), ("answer", 21.8, 1)), 1.0, "●")
    b = _result(TRACE)
    b.seconds = TRACE.seconds
    left = plots.ab_figure(a, b).axes[0]
    assert "sentence_vectors" not in [t.get_text() for t in left.get_legend().get_texts()]
    totals = [t.get_text() for t in left.texts]
    assert totals == ["21.8 s", "20.0 s"]  # 65 s with the one-time 45 s, 20 s per question
    assert "one-time setup not counted" in left.get_xlabel() and "45.0 s" in left.get_xlabel()
    assert plots.per_question_seconds(b) == pytest.approx(TRACE.seconds - 45.0)


def test_format_seconds():
    assert [plots.format_seconds(s) for s in (0.0004, 0.043, 5.075, 14.637, 65.1, None)] == ["<1 ms", "43 ms", "5.1 s", "14.6 s", "1 min 5 s", "—"]


def test_reliability_diagram_bins_answers_and_handles_empty_bins():
    rows = {"plain": [(0.95, True), (0.92, False), (0.15, False), (0.12, False)], "full": [(0.75, True)] * 3 + [(0.72, False)], "none": []}
    fig = plots.reliability_diagram(rows, title="held-out SQuAD")
    assert isinstance(fig, Figure) and plt.get_fignums() == []
    ax, hist = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    plain = next(line for label, line in lines.items() if label.startswith("plain"))
    # two filled bins of 10: mean confidence (x) against share correct (y)
    assert list(plain.get_xdata()) == pytest.approx([0.135, 0.935]) and list(plain.get_ydata()) == pytest.approx([0.0, 0.5])
    from ragkit.eval.calibration import expected_calibration_error

    plain = rows["plain"]
    assert expected_calibration_error([c for c, _ in plain], [y for _, y in plain]) == pytest.approx((2 * 0.135 + 2 * abs(0.5 - 0.935)) / 4)
    assert "ECE" in ax.get_title() and "plain 0.29" in ax.get_title() and "none —" in ax.get_title()
    assert [label for label in lines if label.startswith("none")] == ["none (no answers)"]
    assert sum(p.get_height() for p in hist.patches) == 8  # the answers per bin, beneath
    assert lines["calibrated"].get_xdata().tolist() == [0, 1]
    assert _not_blank(plots.figure_png(fig))


def test_reliability_diagram_draws_on_a_given_axes():
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.reliability_diagram({"plain": [(0.5, True)]}, ax=ax) is fig and ax.get_lines()
