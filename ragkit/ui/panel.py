"""Notebook widgets: a control panel with a control for every ``Features`` field, an A/B view, and
batch ablations — logic here, notebooks stay one-liners.

Everything is drivable without a browser: set a control's ``.value``, call ``.run()`` (what the Run
button calls) and read ``last_result``, the HTML widgets' ``.value`` and ``last_figures``. That is
how the tests check what a notebook shows. The HTML itself (tables, the summary line, A/B, ablation
summary) is built by :mod:`ragkit.ui.html`, the per-field controls by :mod:`ragkit.ui.feature_controls`,
and the timed batch runs (:func:`prepare_one_time`, :func:`run_ablation`) by :mod:`ragkit.ui.ablation`;
their functions are importable from here too.

Usage (in Jupyter)::

    from ragkit.ui.panel import ControlPanel
    panel = ControlPanel(index_dir=".ragkit/index", question="Where was Nikola Tesla born?")
    panel            # displays; flip a toggle, press Run
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ipywidgets as widgets
from haystack import tracing

from ragkit.pipeline.engine import AgenticRAG, AgenticResult
from ragkit.config import DEFAULT_LLM, FAST_LLM, RagConfig
from ragkit.pipeline.features import Features
from ragkit.index.store import RagIndex
from ragkit.index.stores import load_index
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.ui import plots
from ragkit.ui.ablation import prepare_one_time, run_ablation  # noqa: F401  (the notebooks import these from here)
from ragkit.ui.feature_controls import GROUP_MIN_WIDTH, GROUPS, feature_controls, features_from_controls
from ragkit.ui.graph_view import GraphView
from ragkit.ui.html import (  # noqa: F401  (the notebooks import these from here)
    ab_compare, comparison_html, confidence_text, evidence_html, format_grade, format_value, result_html, result_sentence, setup_html,
    short_id, sources_rows, summary_html, summary_table_html, table_html, trace_rows,
)
from ragkit.pipeline.trace import Step
from ragkit.ui.text_safety import html_text


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
        return AgenticRAG(features, config=config, index=self.index, chat_generator=self._generators[model])

    def cold_rag(self, features: Features, model: str) -> AgenticRAG:
        """As :meth:`rag`, with llama.cpp's prompt cache emptied first: an A/B comparison must not
        let B reuse the sources A just evaluated."""
        rag = self.rag(features, model)
        reset_prompt_cache(rag.chat_generator)
        return rag


class ControlPanel:
    """Toggles for every feature, a model choice, a question, Run; then the answer (streamed), its
    confidence, route, sources, the trace table and plots.

    While a question runs the previous result is cleared, Run is disabled and a status line shows
    the step now running (from the trace as it grows). Plots are shown as PNG images rendered once
    from figures pyplot never sees (see :mod:`ragkit.ui.plots` for why)."""

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
        index = index if index is not None else load_index(self.config.store or index_dir, expected_embedder=self.config.models.embedder)
        self.engine = _Engine(index, self.config, generator_factory, self._on_chunk)
        self.controls = feature_controls(self.base)
        models = list(dict.fromkeys([self.config.models.llm, DEFAULT_LLM, FAST_LLM]))
        full_width = widgets.Layout(width="100%", max_width="100%")
        self.model = widgets.Dropdown(options=models, value=self.config.models.llm, description="model", style={"description_width": "48px"}, layout=widgets.Layout(width="320px", max_width="100%"))
        self.question = widgets.Textarea(value=question, placeholder="Ask about your documents…", layout=full_width)
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play", layout=widgets.Layout(width="120px"))
        self.run_button.on_click(self._clicked)
        self.status = widgets.HTML(layout=full_width)
        self.answer = widgets.HTML(layout=full_width)
        self.summary = widgets.HTML(layout=full_width)
        self.setup = widgets.HTML(layout=full_width)
        self.sources = widgets.HTML(layout=full_width)
        self.trace = widgets.HTML(layout=full_width)
        self.images = widgets.Box(layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start", width="100%", grid_gap="8px"))
        self.graph = GraphView(config=self.config)
        for control in self.controls.values():
            control.observe(lambda _change: self.graph.update(self.features), names="value")
        self.graph.update(self.features)
        self.ran_graph = ""  # the Mermaid text of the graph the last Run compiled (the same as self.graph.text)
        self.plots_enabled = plots_enabled
        self.last_result: AgenticResult | None = None
        self.last_figures: list[Any] = []
        self._streaming_span = None
        self._done: list[Step] = []

    # -- widgets ---------------------------------------------------------------------------------
    def feature_box(self) -> widgets.Widget:
        group_layout = widgets.Layout(min_width="0", overflow="hidden", padding="0 4px 6px 0")
        boxes = [widgets.VBox([widgets.HTML(f"<b>{html_text(title)}</b>")] + [self.controls[n] for n in names], layout=group_layout) for title, names in GROUPS.items()]
        # as many >= 260 px columns as fit: 4 at 1920 px, 3 at ~900 px, 1 on a phone; never a scrollbar
        return widgets.GridBox(boxes, layout=widgets.Layout(grid_template_columns=f"repeat(auto-fill, minmax({GROUP_MIN_WIDTH}, 1fr))", grid_gap="4px 16px", width="100%"))

    @property
    def widget(self) -> widgets.Widget:
        return widgets.VBox([
            self.feature_box(),
            self.graph.widget,
            widgets.HBox([self.model, self.run_button], layout=widgets.Layout(flex_flow="row wrap", width="100%", grid_gap="8px")),
            self.question,
            self.status,
            self.answer, self.summary, self.setup,
            widgets.HTML("<b>sources</b>"), self.sources,
            widgets.HTML("<b>trace</b>"), self.trace,
            self.images,
        ], layout=widgets.Layout(width="100%", max_width="100%", overflow="hidden"))

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
        if tags.get("haystack.component.name") not in ("answer", "direct_answer"):
            return
        if span is not self._streaming_span:  # a new answer (first, or a correction): start over
            self._streaming_span = span
            self.answer.value = ""
        self.answer.value += html_text(getattr(chunk, "content", "") or "")

    def _on_step(self, event: str, step: Step) -> None:
        """The tracer's listener: the step now running, and the ones done with their times."""
        if event == "end":
            self._done.append(step)
        done = " · ".join(f"{html_text(s.name)} {plots.format_seconds(s.seconds)}" for s in self._done)
        running = f"running <b>{html_text(step.name)}</b>…" if event == "start" else "…"
        self.status.value = f"<span style='color:#555'>{running}{' · done: ' + done if done else ''}</span>"

    def _clear(self) -> None:
        self.answer.value = "<i>thinking…</i>"
        self.summary.value = self.setup.value = self.sources.value = self.trace.value = self.status.value = ""
        self.images.children = ()
        self.last_result, self.last_figures = None, []
        self._streaming_span, self._done = None, []

    def _clicked(self, _button) -> None:
        try:
            self.run()
        except ValueError:  # already shown in the panel; a button callback has nowhere to raise to
            pass

    def run(self, question: str | None = None) -> AgenticResult:
        question = question if question is not None else self.question.value
        self._clear()
        self.run_button.disabled = True
        rag = None
        try:
            rag = self.engine.rag(self.features(), self.model.value)
            self.ran_graph = rag.mermaid(detail=self.graph.detail.value)
            self.status.value = "<span style='color:#555'>one-time setup (model loads, sentence vectors) if not done yet…</span>"
            setup = prepare_one_time(rag)
            self.setup.value = setup_html(setup)
            rag.tracer.listener = self._on_step
            result = rag.ask(question)
        except Exception as exc:  # bad question, bad settings, a failed model: say so in the panel
            self.answer.value = f"<b style='color:#d1495b'>{html_text(str(exc) or type(exc).__name__)}</b>"
            self.status.value = ""
            raise
        finally:
            if rag is not None:
                rag.tracer.listener = None
            self.run_button.disabled = False
        self.status.value = ""
        self.show(result)
        return result

    def show(self, result: AgenticResult) -> None:
        self.last_result = result
        answer = html_text(result.answer)
        if result.declined and result.details.get("declined_answer"):
            answer += f"<div style='color:#666;font-size:0.85em'>declined; the model's answer was: {html_text(result.details['declined_answer'])}</div>"
        self.answer.value = f"<div style='font-size:1.1em;overflow-wrap:anywhere'>{answer}</div>{evidence_html(result)}"
        self.summary.value = summary_html(result)
        self.sources.value = table_html(sources_rows(result))
        self.trace.value = table_html(trace_rows(result.trace))
        self.last_figures = []
        self.images.children = ()
        if self.plots_enabled:
            floor = self.features().confidence_floor or None
            self.last_figures = [plots.latency_waterfall(result.trace), plots.confidence_breakdown(result, floor=floor)]
            # rendered once to PNG, replacing the previous run's images: nothing left for pyplot to redraw
            self.images.children = tuple(png_image(plots.figure_png(fig)) for fig in self.last_figures)

    def compare(self, other: Features, question: str | None = None, model: str | None = None, labels: tuple[str, str] = ("A", "B")) -> tuple[dict[str, Any], Any]:
        """A/B: the panel's current features (A) against ``other`` (B) on the same question; returns
        :func:`ab_compare`'s data (show it with :func:`comparison_html`) and :func:`plots.ab_figure`.
        One-time preparation runs before either is timed and is reported apart (``one_time_setup_s``)."""
        question = question if question is not None else self.question.value
        rag_a = self.engine.cold_rag(self.features(), self.model.value)
        setup_a = prepare_one_time(rag_a)
        a = rag_a.ask(question)
        rag_b = self.engine.cold_rag(other, model or self.model.value)
        setup_b = prepare_one_time(rag_b)
        b = rag_b.ask(question)
        return ab_compare(a, b, (setup_a, setup_b)), plots.ab_figure(a, b, labels)


def png_image(png: bytes) -> widgets.Image:
    """A PNG as an image widget that shrinks with the notebook instead of overflowing it."""
    return widgets.Image(value=png, format="png", layout=widgets.Layout(max_width="100%", height="auto", object_fit="contain"))


def display_figure(fig) -> None:
    try:
        from IPython.display import Image, display

        display(Image(data=plots.figure_png(fig), format="png"))
    except ImportError:  # outside IPython: nothing to show on
        pass


def show(result: AgenticResult):
    """Display a result in a notebook (returns the HTML object, so it is also the cell's output)."""
    from IPython.display import HTML

    return HTML(result_html(result))
