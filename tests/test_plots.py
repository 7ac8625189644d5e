"""Plot helpers: what they draw, checked on the figure's artists."""

import matplotlib

matplotlib.use("Agg")

from ragkit.plots import quality_latency_scatter  # noqa: E402


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


def test_scatter_skips_rows_without_the_measure_and_draws_an_empty_axis_for_none():
    labels = _labels(quality_latency_scatter({"a": {"latency_s_p50": 1.0, "f1": 0.5}, "b": {"latency_s_p50": 2.0}}))
    assert set(labels) == {"a"}
    assert _labels(quality_latency_scatter({"b": {"latency_s_p50": 2.0}})) == {}
