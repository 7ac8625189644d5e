"""The notebook controls for :class:`~ragkit.pipeline.features.Features`: one widget per field,
grouped and labelled as the control panel shows them, and the Features they read back.

Apart from :mod:`ragkit.ui.panel` because they depend on Features alone, not on an index or a model.
"""

from __future__ import annotations

import dataclasses

import ipywidgets as widgets

from ragkit.pipeline.features import CHOICES, Features

# Where each Features field sits in the panel, and the range of its slider.
GROUPS: dict[str, tuple[str, ...]] = {
    "routing": ("routing", "router_backend"),
    "HyDE": ("hyde", "hyde_passages"),
    "retrieval": ("retrieval_mode", "top_k", "injection_guard"),
    "answer": ("answer_mode",),
    "reranking": ("rerank", "rerank_backend", "rerank_model", "rerank_candidates"),
    "grading": ("grading", "grader_backend", "grade_threshold"),
    "hallucination check": ("hallucination_check", "hallucination_backend", "hhem_model", "support_threshold", "judge_spans"),
    "self-correction": ("self_correction", "max_corrections"),
    "confidence": ("confidence_floor",),
    "search scope": ("select_collections", "intent_filters", "expand", "expand_backend"),
    "fallback": ("fallback", "fallback_check", "fallback_coverage", "max_fallbacks", "fallback_llm_calls"),
    "conversation": ("follow_ups", "follow_up_backend", "history_tokens", "clarify", "clarify_ratio"),
    "planning": ("rewrite", "rewrite_backend", "gate", "gate_backend", "decompose", "decomposer_backend", "max_parts", "multi_hop", "hop_check", "hop_coverage", "max_iterations", "hop_llm_calls", "sufficiency_threshold", "sql_route"),
}
RANGES: dict[str, tuple[float, float, float]] = {
    "top_k": (1, 20, 1), "max_parts": (2, 6, 1), "hyde_passages": (1, 4, 1), "rerank_candidates": (2, 50, 1), "max_corrections": (0, 3, 1),
    "max_iterations": (1, 5, 1), "hop_llm_calls": (1, 12, 1), "sufficiency_threshold": (0, 1, 0.05), "hop_coverage": (0, 1, 0.05),
    "grade_threshold": (0, 10, 0.5), "confidence_floor": (0, 1, 0.05),
    "fallback_coverage": (0, 1, 0.05), "max_fallbacks": (1, 6, 1), "fallback_llm_calls": (0, 12, 1),
    "history_tokens": (50, 2000, 50), "clarify_ratio": (0.05, 1, 0.05),
}
# Short labels: each control sits under its group's title, so "backend" says enough and fits a
# ~260 px column (the field name is the tooltip).
LABELS: dict[str, str] = {
    "router_backend": "backend", "hyde_passages": "passages", "retrieval_mode": "mode", "top_k": "top k", "injection_guard": "injection guard",
    "rerank_backend": "backend", "rerank_model": "model", "rerank_candidates": "candidates",
    "grader_backend": "backend", "grade_threshold": "keep ≥ /10", "hallucination_backend": "backend",
    "hhem_model": "HHEM model", "support_threshold": "threshold", "judge_spans": "judge spans", "max_corrections": "max retries",
    "confidence_floor": "decline <", "answer_mode": "mode", "decompose": "split questions", "decomposer_backend": "backend", "max_parts": "max parts",
    "multi_hop": "multi-hop", "max_iterations": "max hops", "hop_llm_calls": "hop LLM calls", "sufficiency_threshold": "enough if P ≥", "hop_check": "check", "hop_coverage": "enough if ≥", "sql_route": "SQL route", "rewrite": "rewrite question", "rewrite_backend": "backend", "gate": "retrieval gate", "gate_backend": "backend",
    "select_collections": "collections", "intent_filters": "intent filters", "expand": "expand query", "expand_backend": "backend",
    "follow_ups": "follow-ups", "follow_up_backend": "rewrite by", "history_tokens": "history", "clarify": "ask back",
    "clarify_ratio": "contend at ≥", "fallback": "fallback", "fallback_check": "check", "fallback_coverage": "enough if ≥", "max_fallbacks": "max tries", "fallback_llm_calls": "LLM calls",
}
# dicts and lists (per route, per step, per table, a strategy order): edit them in code or YAML
NOT_A_CONTROL = ("route_policy", "sql_tables", "collections", "route_filters", "fallback_strategies", "step_models", "step_prompts")
# ipywidgets reads a Dropdown value of None as "nothing selected" (the box looks empty), so the
# judge's per-model calibrated threshold is this sentinel in the widget and None in Features.
CALIBRATED = "calibrated"
DESCRIPTION_WIDTH = "88px"
GROUP_MIN_WIDTH = "260px"


def feature_controls(features: Features) -> dict[str, widgets.Widget]:
    """One widget per Features field (except ``route_policy``), initialised from ``features``.
    Every control fills its grid cell (``width: 100%``), so a narrow notebook never scrolls sideways."""
    controls: dict[str, widgets.Widget] = {}
    style = {"description_width": DESCRIPTION_WIDTH}
    for f in dataclasses.fields(Features):
        name, value = f.name, getattr(features, f.name)
        if name in NOT_A_CONTROL:
            continue
        common = {"description": LABELS.get(name, name.replace("_", " ")), "tooltip": name, "layout": widgets.Layout(width="100%", max_width="100%")}
        if isinstance(value, bool):
            controls[name] = widgets.Checkbox(value=value, indent=False, **common)
        elif name in CHOICES:
            controls[name] = widgets.Dropdown(options=list(CHOICES[name]), value=value, style=style, **common)
        elif name == "support_threshold":
            grid = sorted({t / 100 for t in range(5, 100, 5)} | ({value} if value is not None else set()))
            options = [("calibrated per model", CALIBRATED)] + [(f"{t:.2f}", t) for t in grid]
            controls[name] = widgets.Dropdown(options=options, value=CALIBRATED if value is None else value, style=style, **common)
        elif name in RANGES:
            low, high, step = RANGES[name]
            cls = widgets.IntSlider if isinstance(value, int) else widgets.FloatSlider
            controls[name] = cls(value=value, min=low, max=high, step=step, style=style, continuous_update=False, readout=True, **common)
        else:  # optional model names / paths
            controls[name] = widgets.Text(value=value or "", placeholder="local folder or hub id", style=style, **common)
    missing = {f.name for f in dataclasses.fields(Features)} - set(controls) - set(NOT_A_CONTROL)
    assert not missing, f"Features fields without a control: {missing}"
    return controls


def features_from_controls(controls: dict[str, widgets.Widget], base: Features | None = None) -> Features:
    values = {name: (w.value if not isinstance(w, widgets.Text) else (w.value.strip() or None)) for name, w in controls.items()}
    if values.get("support_threshold") == CALIBRATED:
        values["support_threshold"] = None
    for name in ("hhem_model",):  # required strings keep their default when the box is emptied
        if values.get(name) is None:
            values[name] = getattr(Features(), name)
    return dataclasses.replace(base or Features(), **values).validate()
