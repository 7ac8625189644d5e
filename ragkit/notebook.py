"""Notebook widgets: a control panel with a control for every ``Features`` field, an A/B view, and
batch ablations — logic here, notebooks stay one-liners.

Everything is drivable without a browser: set a control's ``.value``, call ``.run()`` (what the Run
button calls) and read ``last_result``, the HTML widgets' ``.value`` and ``last_figures``. That is
how the tests check what a notebook shows.

Usage (in Jupyter)::

    from ragkit.notebook import ControlPanel
    panel = ControlPanel(index_dir=".ragkit/index", question="Where was Nikola Tesla born?")
    panel            # displays; flip a toggle, press Run
"""

from __future__ import annotations

import dataclasses
import html
import statistics
from typing import Any, Callable

import ipywidgets as widgets
from haystack import tracing

from ragkit.agentic import AgenticRAG, AgenticResult
from ragkit.config import DEFAULT_LLM, FAST_LLM, RagConfig
from ragkit.evaluation import exact_match, f1_score
from ragkit.features import CHOICES, Features
from ragkit.index import RagIndex
from ragkit.llm import build_chat_generator, reset_prompt_cache
from ragkit import plots

# Where each Features field sits in the panel, and the range of its slider.
GROUPS: dict[str, tuple[str, ...]] = {
    "routing": ("routing", "router_backend"),
    "HyDE": ("hyde", "hyde_passages"),
    "retrieval": ("retrieval_mode", "top_k"),
    "reranking": ("rerank", "rerank_backend", "rerank_model", "rerank_candidates"),
    "grading": ("grading", "grader_backend", "grade_threshold"),
    "hallucination check": ("hallucination_check", "hallucination_backend", "hhem_model", "support_threshold"),
    "self-correction": ("self_correction", "max_corrections"),
    "confidence": ("confidence_floor",),
}
RANGES: dict[str, tuple[float, float, float]] = {
    "top_k": (1, 20, 1), "hyde_passages": (1, 4, 1), "rerank_candidates": (2, 50, 1), "max_corrections": (0, 3, 1),
    "grade_threshold": (0, 10, 0.5), "confidence_floor": (0, 1, 0.05),
}
NOT_A_CONTROL = ("route_policy",)  # a dict per route: edit it in code or YAML


def feature_controls(features: Features) -> dict[str, widgets.Widget]:
    """One widget per Features field (except ``route_policy``), initialised from ``features``."""
    controls: dict[str, widgets.Widget] = {}
    style = {"description_width": "initial"}
    for f in dataclasses.fields(Features):
        name, value = f.name, getattr(features, f.name)
        if name in NOT_A_CONTROL:
            continue
        label = name.replace("_", " ")
        if isinstance(value, bool):
            controls[name] = widgets.Checkbox(value=value, description=label, indent=False)
        elif name in CHOICES:
            controls[name] = widgets.Dropdown(options=list(CHOICES[name]), value=value, description=label, style=style)
        elif name == "support_threshold":  # None = the judge's per-model calibrated cut
            grid = sorted({t / 100 for t in range(5, 100, 5)} | ({value} if value is not None else set()))
            options = [("calibrated for the model", None)] + [(f"{t:.2f}", t) for t in grid]
            controls[name] = widgets.Dropdown(options=options, value=value, description=label, style=style)
        elif name in RANGES:
            low, high, step = RANGES[name]
            cls = widgets.IntSlider if isinstance(value, int) else widgets.FloatSlider
            controls[name] = cls(value=value, min=low, max=high, step=step, description=label, style=style, continuous_update=False)
        else:  # optional model names / paths
            controls[name] = widgets.Text(value=value or "", description=label, placeholder="local folder or hub id", style=style)
    missing = {f.name for f in dataclasses.fields(Features)} - set(controls) - set(NOT_A_CONTROL)
    assert not missing, f"Features fields without a control: {missing}"
    return controls


def features_from_controls(controls: dict[str, widgets.Widget], base: Features | None = None) -> Features:
    values = {name: (w.value if not isinstance(w, widgets.Text) else (w.value.strip() or None)) for name, w in controls.items()}
    for name in ("hhem_model",):  # required strings keep their default when the box is emptied
        if values.get(name) is None:
            values[name] = getattr(Features(), name)
    return dataclasses.replace(base or Features(), **values).validate()


def table_html(rows: list[dict[str, Any]]) -> str:
    """Rows of dicts as an HTML table (every value escaped: document text is data, not markup)."""
    if not rows:
        return "<i>nothing</i>"
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def sources_rows(result: AgenticResult) -> list[dict[str, Any]]:
    return [
        {
            "#": i,
            "source": d.meta.get("source", ""),
            "page/section": d.meta.get("page") or d.meta.get("section") or "",
            "score": f"{d.score:.3f}" if d.score is not None else "",
            "grade": d.meta.get("grade", ""),
            "text": (d.content or "")[:90].replace("\n", " ") + "…",
        }
        for i, d in enumerate(result.sources, 1)
    ]


def summary_html(result: AgenticResult) -> str:
    t = result.trace
    parts = [
        f"<b style='font-size:1.3em'>{result.symbol} {result.confidence:.2f}</b>" if result.confidence is not None else "",
        f"route <b>{result.route}</b>" if result.route else "",
        f"exit <b>{result.exit_reason}</b>" if result.exit_reason else "",
        f"{result.seconds:.2f} s",
        f"{t.llm_calls} LLM calls",
        f"{t.prompt_tokens_evaluated} prompt tokens evaluated ({t.prompt_tokens_reused} reused)",
        "<b>declined</b>" if result.declined else "",
        f"fallbacks: {html.escape('; '.join(t.fallbacks))}" if t.fallbacks else "",
    ]
    return " · ".join(p for p in parts if p)


def ab_compare(a: AgenticResult, b: AgenticResult) -> dict[str, Any]:
    """What changed between two runs of the same question."""
    ids_a = {d.id: d for d in a.sources}
    ids_b = {d.id: d for d in b.sources}
    def describe(docs):
        return [(d.meta.get("source", d.id), round(d.score, 3) if d.score is not None else None) for d in docs]
    return {
        "answer": (a.answer, b.answer),
        "route": (a.route, b.route),
        "confidence": (a.confidence, b.confidence),
        "symbol": (a.symbol, b.symbol),
        "latency_s": (round(a.seconds, 3), round(b.seconds, 3)),
        "llm_calls": (a.trace.llm_calls, b.trace.llm_calls),
        "prompt_tokens_evaluated": (a.trace.prompt_tokens_evaluated, b.trace.prompt_tokens_evaluated),
        "sources_only_a": describe([d for i, d in ids_a.items() if i not in ids_b]),
        "sources_only_b": describe([d for i, d in ids_b.items() if i not in ids_a]),
        "sources_both": describe([d for i, d in ids_a.items() if i in ids_b]),
        "dropped_by_grading": (
            (a.details.get("grading") or {}).get("dropped", []),
            (b.details.get("grading") or {}).get("dropped", []),
        ),
        "steps_only_a": [s.name for s in a.trace.steps if s.name not in {t.name for t in b.trace.steps}],
        "steps_only_b": [s.name for s in b.trace.steps if s.name not in {t.name for t in a.trace.steps}],
        "exit_reason": (a.exit_reason, b.exit_reason),
    }


class _Engine:
    """The index and one loaded generator per model, shared by every run of a panel."""

    def __init__(self, index: RagIndex, config: RagConfig, generator_factory: Callable | None, on_chunk: Callable):
        self.index, self.config = index, config
        self._factory = generator_factory or (lambda model, callback: build_chat_generator(dataclasses.replace(config.models, llm=model), streaming_callback=callback))
        self._generators: dict[str, Any] = {}
        self._on_chunk = on_chunk

    def rag(self, features: Features, model: str) -> AgenticRAG:
        if model not in self._generators:
            self._generators[model] = self._factory(model, self._on_chunk)
        config = dataclasses.replace(self.config, models=dataclasses.replace(self.config.models, llm=model))
        return AgenticRAG(features, config=config, index=self.index, generator=self._generators[model])

    def cold_rag(self, features: Features, model: str) -> AgenticRAG:
        """As :meth:`rag`, with llama.cpp's prompt cache emptied first: an A/B comparison must not
        let B reuse the sources A just evaluated."""
        rag = self.rag(features, model)
        reset_prompt_cache(rag.generator)
        return rag


class ControlPanel:
    """Toggles for every feature, a model choice, a question, Run; then the answer (streamed), its
    confidence, route, sources, the trace table and plots."""

    def __init__(
        self,
        index_dir: str = ".ragkit/index",
        features: Features | None = None,
        config: RagConfig | None = None,
        question: str = "",
        index: RagIndex | None = None,
        generator_factory: Callable[[str, Callable], Any] | None = None,
        plots_enabled: bool = True,
    ):
        self.config = config or RagConfig()
        self.base = features or Features()
        index = index if index is not None else RagIndex.load(index_dir, expected_embedder=self.config.models.embedder)
        self.engine = _Engine(index, self.config, generator_factory, self._on_chunk)
        self.controls = feature_controls(self.base)
        models = list(dict.fromkeys([self.config.models.llm, DEFAULT_LLM, FAST_LLM]))
        self.model = widgets.Dropdown(options=models, value=self.config.models.llm, description="model")
        self.question = widgets.Textarea(value=question, placeholder="Ask about your documents…", layout=widgets.Layout(width="100%"))
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.run_button.on_click(self._clicked)
        self.answer = widgets.HTML()
        self.summary = widgets.HTML()
        self.sources = widgets.HTML()
        self.trace = widgets.HTML()
        self.figures = widgets.Output()
        self.plots_enabled = plots_enabled
        self.last_result: AgenticResult | None = None
        self.last_figures: list[Any] = []
        self._streaming_span = None

    # -- widgets ---------------------------------------------------------------------------------
    def feature_box(self) -> widgets.Widget:
        boxes = [widgets.VBox([widgets.HTML(f"<b>{title}</b>")] + [self.controls[n] for n in names]) for title, names in GROUPS.items()]
        return widgets.GridBox(boxes, layout=widgets.Layout(grid_template_columns="repeat(4, 1fr)", grid_gap="4px 16px"))

    @property
    def widget(self) -> widgets.Widget:
        return widgets.VBox([
            self.feature_box(),
            widgets.HBox([self.model, self.run_button]),
            self.question,
            self.answer, self.summary,
            widgets.HTML("<b>sources</b>"), self.sources,
            widgets.HTML("<b>trace</b>"), self.trace,
            self.figures,
        ])

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def features(self) -> Features:
        return features_from_controls(self.controls, self.base)

    # -- running -----------------------------------------------------------------------------------
    def _on_chunk(self, chunk) -> None:
        """Stream only the answering step's tokens (grading JSON and HyDE passages are not the answer)."""
        span = tracing.tracer.current_span()
        tags = getattr(span, "tags", {}) or {}
        if tags.get("haystack.component.name") != "answer":
            return
        if span is not self._streaming_span:  # a new answer (first, or a correction): start over
            self._streaming_span = span
            self.answer.value = ""
        self.answer.value += html.escape(getattr(chunk, "content", "") or "")

    def _clicked(self, _button) -> None:
        try:
            self.run()
        except ValueError:  # already shown in the panel; a button callback has nowhere to raise to
            pass

    def run(self, question: str | None = None) -> AgenticResult:
        question = question if question is not None else self.question.value
        self.answer.value, self.summary.value = "<i>thinking…</i>", ""
        self._streaming_span = None
        try:
            result = self.engine.rag(self.features(), self.model.value).ask(question)
        except ValueError as exc:  # bad question or bad settings: say so in the panel
            self.answer.value = f"<b style='color:#d1495b'>{html.escape(str(exc))}</b>"
            raise
        self.show(result)
        return result

    def show(self, result: AgenticResult) -> None:
        self.last_result = result
        self.answer.value = f"<div style='font-size:1.1em'>{html.escape(result.answer)}</div>"
        self.summary.value = summary_html(result)
        self.sources.value = table_html(sources_rows(result))
        self.trace.value = table_html(result.trace.table())
        self.last_figures = []
        if self.plots_enabled:
            self.last_figures = [plots.latency_waterfall(result.trace), plots.confidence_breakdown(result, floor=self.features().confidence_floor or None)]
            self.figures.clear_output()
            with self.figures:
                for fig in self.last_figures:
                    display_figure(fig)

    def compare(self, other: Features, question: str | None = None, model: str | None = None) -> tuple[dict[str, Any], Any]:
        """A/B: the panel's current features (A) against ``other`` (B) on the same question."""
        question = question if question is not None else self.question.value
        a = self.engine.cold_rag(self.features(), self.model.value).ask(question)
        b = self.engine.cold_rag(other, model or self.model.value).ask(question)
        return ab_compare(a, b), plots.ab_figure(a, b)


def display_figure(fig) -> None:
    try:
        from IPython.display import display

        display(fig)
    except ImportError:  # outside IPython: nothing to show on
        pass


def run_ablation(
    make_rag: Callable[[Features], AgenticRAG],
    configs: dict[str, Features],
    questions: list[dict[str, Any]],
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Every config on every question (``{"question": …, "answers": [...]}``, answers optional),
    question-major so machine noise hits all configs alike. Returns a summary row per config."""
    from tqdm.auto import tqdm

    rags = {name: make_rag(features) for name, features in configs.items()}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    for q in tqdm(questions, desc="questions", disable=not progress):
        for name, rag in rags.items():
            r = rag.ask(q["question"])
            gold = q.get("answers")
            rows[name].append({
                "seconds": r.seconds, "confidence": r.confidence or 0.0, "declined": r.declined,
                "llm_calls": r.trace.llm_calls, "prompt_tokens": r.trace.prompt_tokens_evaluated,
                "em": exact_match(r.answer, gold) if gold and not r.declined else (0.0 if gold else None),
                "f1": f1_score(r.answer, gold) if gold and not r.declined else (0.0 if gold else None),
            })
    def mean(values):
        values = [v for v in values if v is not None]
        return round(statistics.fmean(values), 4) if values else None
    return {
        name: {
            "questions": len(r),
            "em": mean(x["em"] for x in r), "f1": mean(x["f1"] for x in r),
            "confidence": mean(x["confidence"] for x in r), "decline_rate": mean(float(x["declined"]) for x in r),
            "latency_s_p50": round(statistics.median(x["seconds"] for x in r), 3),
            "llm_calls_per_q": mean(x["llm_calls"] for x in r), "prompt_tokens_per_q": mean(x["prompt_tokens"] for x in r),
        }
        for name, r in rows.items()
    }


def result_html(result: AgenticResult) -> str:
    """The answer, its summary line, sources and trace as one HTML block."""
    return (
        f"<div style='font-size:1.1em'><b>Q:</b> {html.escape(result.question)}<br><b>A:</b> {html.escape(result.answer)}</div>"
        f"<div>{summary_html(result)}</div><b>sources</b>{table_html(sources_rows(result))}<b>trace</b>{table_html(result.trace.table())}"
    )


def show(result: AgenticResult):
    """Display a result in a notebook (returns the HTML object, so it is also the cell's output)."""
    from IPython.display import HTML

    return HTML(result_html(result))


def comparison_html(comparison: dict[str, Any], labels: tuple[str, str] = ("A", "B")) -> str:
    rows = [{"": key, labels[0]: value[0], labels[1]: value[1]} if isinstance(value, tuple) else {"": key, labels[0]: value, labels[1]: ""} for key, value in comparison.items()]
    return table_html(rows)
