"""The notebook control panel, A/B view and ablation, driven programmatically with a scripted LLM."""

import dataclasses
import io
import re

import ipywidgets as widgets
import matplotlib
import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features
from ragkit.ui.feature_controls import CALIBRATED, feature_controls, features_from_controls
from ragkit.ui.panel import (
    ControlPanel,
    ab_compare,
    comparison_html,
    result_sentence,
    run_ablation,
    summary_table_html,
    table_html,
)
from ragkit.pipeline.trace import RagkitTracer

matplotlib.use("Agg")
pytestmark = pytest.mark.integration


def scripted_llm(model, callback=None):
    def respond(messages):
        text = messages[-1].text
        if "rate how useful" in text:
            n = text.count("<source id=")
            return "[" + ",".join(["9"] + ["1"] * (n - 1)) + "]"
        if "Claims:" in text:
            return '["yes"]'
        if "Task: find the answer" in text:
            return "Tesla was born in Smiljan [1]."
        return "Nikola Tesla, the inventor, was born in the village of Smiljan in the Austrian Empire."

    return MockChatGenerator(response_fn=respond)


@pytest.fixture()
def panel(sample_index, fast_config):
    """The panel over a scripted LLM in the free answer mode: these tests are about what the panel
    shows; grounded answers have their own tests (tests/test_grounded_answers.py)."""
    panel = ControlPanel(index=sample_index, config=fast_config, question="Where was Nikola Tesla born?", generator_factory=scripted_llm)
    panel.controls["answer_mode"].value = "free"
    return panel


def test_every_features_field_has_a_control_and_round_trips():
    features = Features.all_on(top_k=4, grade_threshold=6.5)
    controls = feature_controls(features)
    # dicts and lists (per route, per table, per step, a strategy order): edited in code or YAML
    assert {f.name for f in dataclasses.fields(Features)} - set(controls) == {"route_policy", "sql_tables", "collections", "route_filters", "fallback_strategies", "step_models", "step_prompts"}
    assert features_from_controls(controls) == features
    # the support threshold: "calibrated for the model" (None) or any number, also off the 0.05 grid
    exact = Features(hallucination_check=True, support_threshold=0.37)
    assert features_from_controls(feature_controls(exact)).support_threshold == 0.37


def test_calibrated_support_threshold_is_a_selected_option_not_an_empty_box():
    # ipywidgets treats a None value as "nothing selected": the box looked empty in the browser
    dropdown = feature_controls(Features())["support_threshold"]
    assert dropdown.value == CALIBRATED and dropdown.index == 0 and dropdown.label == "calibrated per model"
    assert features_from_controls({"support_threshold": dropdown}).support_threshold is None
    dropdown.value = 0.5
    assert features_from_controls({"support_threshold": dropdown}).support_threshold == 0.5
    dropdown.value = CALIBRATED
    assert features_from_controls({"support_threshold": dropdown}).support_threshold is None


def test_controls_fill_their_column_so_a_narrow_notebook_does_not_scroll_sideways(panel):
    grid = panel.feature_box()
    # 260 px columns, as many as fit: 3 in JupyterLab's ~900 px notebook at 1280 px, never a fixed 4
    assert "auto-fill" in grid.layout.grid_template_columns and "minmax(260px" in grid.layout.grid_template_columns
    for name, control in panel.controls.items():
        assert control.layout.width == "100%", name
        description_width = (getattr(control, "style", None) and getattr(control.style, "description_width", "")) or "0px"
        assert not description_width.endswith("px") or int(description_width[:-2]) <= 100, name  # label + control fit 260 px
        if isinstance(control, (widgets.IntSlider, widgets.FloatSlider)):
            assert control.readout, name
    for box in grid.children:
        assert box.layout.min_width == "0"  # a grid item may shrink below its content's default width


def _png_pixels(png: bytes) -> np.ndarray:
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def _assert_not_blank(png: bytes) -> None:
    png = bytes(png)
    assert png.startswith(b"\x89PNG")
    pixels = _png_pixels(png)
    assert pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10  # not a single colour


def test_panel_figures_are_pngs_not_pyplot_figures_and_replace_the_previous_run(panel):
    plt.close("all")
    panel.run()
    first = [bytes(image.value) for image in panel.images.children]
    panel.controls["grading"].value = True
    panel.run()
    # nothing registered with pyplot: matplotlib-inline's post-execute hook has nothing to redraw or close
    assert plt.get_fignums() == []
    images = panel.images.children
    assert len(images) == 2 and all(isinstance(image, widgets.Image) and image.format == "png" for image in images)
    for image in images:
        _assert_not_blank(image.value)
    assert [bytes(image.value) for image in images] != first  # the second run's figures, not stale copies


def test_run_button_shows_answer_confidence_sources_trace_and_plots(panel):
    panel.run_button.click()
    result = panel.last_result
    assert result is not None and "Smiljan" in panel.answer.value
    assert result.symbol in panel.summary.value and "LLM calls" in panel.summary.value
    assert "Nikola_Tesla.md" in panel.sources.value and "retrieve" in panel.trace.value
    waterfall, confidence = panel.last_figures
    assert len(waterfall.axes[0].patches) == len(result.trace.steps) and confidence.axes[0].patches
    assert not panel.run_button.disabled and panel.status.value == ""


def test_while_a_question_runs_the_panel_shows_the_step_clears_the_last_result_and_disables_run(sample_index, fast_config):
    seen = []

    def watching_llm(model, callback=None):
        def respond(messages):
            seen.append({"disabled": panel.run_button.disabled, "status": panel.status.value, "sources": panel.sources.value,
                         "trace": panel.trace.value, "images": len(panel.images.children), "summary": panel.summary.value})
            return "Smiljan [1]." if "Task: find the answer" in messages[-1].text else "[9,1,1,1,1]"
        return MockChatGenerator(response_fn=respond)

    panel = ControlPanel(index=sample_index, config=fast_config, question="Where was Nikola Tesla born?", generator_factory=watching_llm)
    panel.run()
    assert panel.images.children and panel.sources.value  # a previous result on screen
    panel.controls["grading"].value = True
    seen.clear()
    panel.run()
    grading, answering = seen
    assert all(s["disabled"] for s in seen)
    assert all(s["sources"] == "" and s["trace"] == "" and s["images"] == 0 and s["summary"] == "" for s in seen)
    assert "running <b>grade</b>" in grading["status"] and "retrieve" in grading["status"]  # done steps with their times
    assert "running <b>answer</b>" in answering["status"] and "grade" in answering["status"].split("done:")[1]
    assert not panel.run_button.disabled and panel.status.value == "" and panel.sources.value


def test_run_is_enabled_again_after_a_failure(panel):
    def broken(messages):
        raise RuntimeError("server refused the connection")

    panel.engine._generators[panel.model.value] = MockChatGenerator(response_fn=broken)
    panel.run()  # a failed LLM is a traced fallback, not an exception
    assert not panel.run_button.disabled
    panel.question.value = ""
    with pytest.raises(ValueError):
        panel.run()
    assert not panel.run_button.disabled and panel.status.value == ""


def test_tracer_listener_sees_each_step_start_and_end():
    from haystack import Pipeline, component

    @component
    class Echo:
        @component.output_types(value=str)
        def run(self, value: str):
            return {"value": value}

    events = []
    tracer = RagkitTracer(listener=lambda event, step: events.append((event, step.name, step.seconds > 0 if event == "end" else None)))
    pipe = Pipeline()
    pipe.add_component("first", Echo())
    pipe.add_component("second", Echo())
    pipe.connect("first.value", "second.value")
    with tracer.collect() as trace:
        pipe.run({"first": {"value": "x"}})
    assert [(e, n) for e, n, _ in events] == [("start", "first"), ("end", "first"), ("start", "second"), ("end", "second")]
    assert [s.name for s in trace.steps] == ["first", "second"]

    tracer.listener = lambda event, step: 1 / 0  # a broken display hook never breaks the question
    with tracer.collect() as trace:
        pipe.run({"first": {"value": "x"}})
    assert len(trace.steps) == 2


def test_one_time_setup_runs_before_timing_and_is_shown_apart(panel, monkeypatch):
    import time

    prepared = []

    def slow_prepare(self, progress=False):
        time.sleep(0.2)
        self._sentence_vectors_ready = True
        prepared.append(time.perf_counter())
        return {"loaded": 0, "embedded": 120, "cached": 120}

    monkeypatch.setattr(AgenticRAG, "prepare_sentence_vectors", slow_prepare)
    panel.controls["rerank"].value = True
    result = panel.run()
    # done before the question's clock started, and not a step of the question
    assert "sentence_vectors" not in [s.name for s in result.trace.steps]
    assert min(s.started for s in result.trace.steps) >= prepared[-1]
    assert "one-time setup: sentence vectors 2" in panel.setup.value and "not part of the per-question latency" in panel.setup.value
    comparison, _ = panel.compare(Features(answer_mode="free", rerank=True, grading=True))
    assert all(side["sentence vectors"] >= 0.2 for side in comparison["one_time_setup_s"])
    assert "one-time setup (not in latency)" in comparison_html(comparison)


def test_a_one_time_step_inside_a_question_is_excluded_from_its_latency_and_said(panel):
    result = panel.run()
    from ragkit.pipeline.trace import Step

    result.trace.add(Step(name="sentence_vectors", seconds=45.0, started=result.trace.steps[0].started))
    result.seconds += 45.0
    panel.show(result)
    assert "45.0 s" in panel.summary.value and "not part of the per-question latency" in panel.summary.value
    assert re.search(r"\d+ ms per question", panel.summary.value)
    assert "sentence_vectors (one-time)" in panel.trace.value


def test_grades_are_shown_out_of_10_everywhere(panel):
    panel.controls["grading"].value = True
    result = panel.run()
    assert result.sources[0].meta["grade"] == 9.0
    assert "9/10" in panel.sources.value
    assert "threshold=4/10" in panel.trace.value and "grades=9/10 1/10" in panel.trace.value
    comparison, _ = panel.compare(Features(answer_mode="free", grading=True))
    html = comparison_html(comparison)
    assert "grade 9/10" in html and "grade 1/10" in html  # kept in A and B; dropped by grading


def test_a_kept_source_under_the_threshold_says_why_it_was_kept(sample_index, fast_config):
    def low_grades(model, callback=None):
        def respond(messages):
            text = messages[-1].text
            n = text.count("<source id=")
            return "[" + ",".join(["2"] + ["0"] * (n - 1)) + "]" if "rate how useful" in text else "Smiljan [1]."
        return MockChatGenerator(response_fn=respond)

    panel = ControlPanel(index=sample_index, config=fast_config, question="Where was Nikola Tesla born?", generator_factory=low_grades, plots_enabled=False)
    panel.controls["grading"].value = True
    panel.run()
    assert "2/10 (under 4/10: kept, grading never drops every source)" in panel.sources.value


def test_flipping_grading_adds_the_step_and_drops_chunks(panel):
    panel.run()
    plain_steps = [s.name for s in panel.last_result.trace.steps]
    panel.controls["grading"].value = True
    panel.run()
    graded = panel.last_result
    assert "grade" not in plain_steps and "grade" in [s.name for s in graded.trace.steps]
    assert len(graded.sources) == 1 and "grade" in panel.trace.value


def test_ab_view_reports_what_changed(panel):
    comparison, figure = panel.compare(Features(answer_mode="free", grading=True, hallucination_check=True), labels=("plain", "checked"))
    assert comparison["llm_calls"] == (1, 3)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["plain", "checked"]
    assert {"grade", "hallucination"} <= set(comparison["steps_only_b"]) and comparison["dropped_by_grading"][1]
    assert len(figure.axes) >= 2
    assert ab_compare(panel.last_result or panel.run(), panel.last_result)["sources_only_a"] == []


def _cells(html_text: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html_text, flags=re.S)
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)] for row in rows]


def test_ab_table_is_for_people(panel):
    comparison, _ = panel.compare(Features(answer_mode="free", grading=True, hallucination_check=True), question="Where was Nikola Tesla born?")
    html_text = comparison_html(comparison, ("plain", "graded"))
    rows = {r[0]: r[1:] for r in _cells(html_text)[1:]}
    assert not re.search(r"[0-9a-f]{20,}", html_text)  # short ids, not 64-character hashes
    assert "None" not in html_text and "(" not in re.sub(r"\([^)]*\)", "", html_text.split("<tbody>")[1]).replace("(", "")
    assert "symbol" not in rows and re.fullmatch(r"[●◐○] \d\.\d\d", rows["confidence"][0])
    assert re.fullmatch(r"\d+(\.\d)? (ms|s)", rows["latency per question"][0])
    assert rows["route"] == ["—", "—"] and rows["LLM calls"] == ["1", "3"]
    assert re.search(r"Nikola_Tesla\.md · [0-9a-f]{8} · score 0\.\d{3}", rows["sources"][0])
    assert "grade" in rows["steps only in this run"][1]
    # what differs is highlighted, what is equal is not; every cell left-aligned like its header
    row_html = {r[0]: r for r in re.findall(r"<tr>(.*?)</tr>", html_text, flags=re.S)}
    differs = [row for row in re.findall(r"<tr>(.*?)</tr>", html_text, flags=re.S) if "#fff4cc" in row]
    assert any(">LLM calls<" in row for row in differs) and not any(">route<" in row for row in differs)
    assert row_html and all("text-align:right" not in row for row in re.findall(r"<tr>(.*?)</tr>", html_text, flags=re.S))


def test_ab_table_escapes_document_text():
    doc = Document(id="a" * 64, content="x", meta={"source": "<img src=x onerror=alert(1)>.md"}, score=0.5)
    comparison = {"answer": ("<script>alert(1)</script>", "ok"), "sources_both": [{"id": doc.id, "source": doc.meta["source"], "score": 0.5, "grade": None}]}
    html_text = comparison_html(comparison)
    assert "<script>" not in html_text and "<img" not in html_text and "&lt;img" in html_text


def test_trace_table_keeps_short_cells_on_one_line_and_wraps_long_text():
    rows = [{"step": "retrieve", "ms": 2.1, "docs": "0 → 10", "error": "RuntimeError: " + "the server refused the connection " * 4},
            {"step": "answer", "ms": 5074.7, "docs": "", "error": ""}]
    html_text = table_html(rows)
    cells = re.findall(r"<td style='([^']*)'>([^<]*)</td>", html_text)
    by_value = {value: style for style, value in cells}
    assert "white-space:nowrap" in by_value["0 → 10"] and "text-align:left" in by_value["0 → 10"]
    assert "text-align:right" in by_value["5,075"] and "text-align:right" in by_value["2.1"]
    error_style = next(style for style, value in cells if value.startswith("RuntimeError"))
    assert "overflow-wrap:anywhere" in error_style and "nowrap" not in error_style
    assert "max-width:100%" in html_text and "table-layout:auto" in html_text


def test_headers_wrap_between_words_values_do_not():
    html_text = table_html([{"latency p50": "3.9 s", "one-time setup (not in latency)": "45.2 s"}])
    heads = dict((value, style) for style, value in re.findall(r"<th style='([^']*)'>([^<]*)</th>", html_text))
    assert all(style.endswith("white-space:normal") for style in heads.values())
    cells = re.findall(r"<td style='([^']*)'>", html_text)
    assert cells and all("white-space:nowrap" in style for style in cells)  # "45.2 s" never splits


def test_eval_lab_pickers_name_the_runs_it_shows(tmp_path):
    from ragkit.ui.eval_view import EvalLab

    lab = EvalLab(index_dir=tmp_path / "index", runs_dir=tmp_path / "runs")
    lab._show_runs = lambda: None  # the report itself is checked in the browser test
    assert (lab.strategy_a.value, lab.strategy_b.value) == ("plain", "grading")
    runs = [{"run": {"strategy": {"name": name, "version": "builtin"}}} for name in ("plain", "dense_only")]
    lab.show([], None, runs, tmp_path / "testset.jsonl")
    assert (lab.strategy_a.value, lab.strategy_b.value) == ("plain", "dense_only")


def test_run_aggregates_put_measures_down_and_runs_across():
    from ragkit.ui.eval_view import aggregates_html

    def run(strategy, f1, failed=0):
        return {"run": {"strategy": {"name": strategy, "version": "builtin"}},
                "aggregates": {"rows": 6, "f1": {"mean": f1, "n": 6, "failed": failed}, "latency_s": {"p50": 2.1}, "llm_calls": {"mean": 1.0}}}
    header, *rows = _cells(aggregates_html([run("plain", 0.5), run("dense_only", 0.25, failed=1)]))
    assert len(header) == 3 and header[0] == "measure"
    by_measure = {r[0]: r[1:] for r in rows}
    assert by_measure["items"] == ["6", "6"] and by_measure["f1"] == ["0.500 (n=6)", "0.250 (n=6, 1 failed)"]
    assert "p50 s" in by_measure and "mrr" not in by_measure  # a measure no run has is not a row
    twice = _cells(aggregates_html([run("plain", 0.5), run("plain", 0.25)]))[0]
    assert len(twice) == 3 and twice[1] != twice[2]  # the same strategy twice keeps both columns


def test_summary_table_rounds_and_gives_units():
    summary = {"plain": {"questions": 12, "em": 0.08333333333, "f1": 0.134899999, "confidence": 0.9999999999999998, "decline_rate": 0.25,
                         "latency_s_p50": 3.86123, "llm_calls_per_q": 1.0, "prompt_tokens_per_q": 712.4166, "one_time_setup_s": 0.0},
               "all on": {"questions": 12, "em": None, "f1": 0.2361, "confidence": 0.5, "decline_rate": 0.0,
                          "latency_s_p50": 0.912, "llm_calls_per_q": 2.95, "prompt_tokens_per_q": 1204.0, "one_time_setup_s": 45.2}}
    cells = _cells(summary_table_html(summary))
    header, plain, full = cells
    assert header[:3] == ["configuration", "questions", "F1"] and "latency p50" in header
    row = dict(zip(header, plain))
    assert row["F1"] == "0.135" and row["mean confidence"] == "1.00" and row["declined"] == "25%" and row["latency p50"] == "3.9 s"
    assert row["prompt tokens / question"] == "712" and row["one-time setup (not in latency)"] == "—"
    other = dict(zip(header, full))
    assert other["exact match"] == "—" and other["latency p50"] == "912 ms" and other["one-time setup (not in latency)"] == "45.2 s"


def test_ablation_summarises_quality_and_cost(panel):
    questions = [{"question": "Where was Nikola Tesla born?", "answers": ["Smiljan"]}] * 2
    summary = run_ablation(lambda f: panel.engine.rag(f, panel.model.value), {"plain": Features(answer_mode="free"), "graded": Features(answer_mode="free", grading=True)}, questions, progress=False)
    assert summary["plain"]["questions"] == 2 and summary["plain"]["llm_calls_per_q"] == 1 and summary["graded"]["llm_calls_per_q"] == 2
    assert summary["plain"]["f1"] > 0 and summary["plain"]["latency_s_p50"] > 0


def test_a_bad_question_is_reported_in_the_panel_not_raised_from_the_button(panel):
    panel.question.value = "   "
    panel.run_button.click()
    assert "color:#d1495b" in panel.answer.value and panel.last_result is None


def test_loading_the_llm_is_one_time_setup_not_the_first_questions_latency(sample_index, fast_config):
    import time

    class LazyLLM(MockChatGenerator):
        """Loads its model on warm_up, as llama.cpp does (there: seconds)."""

        def __init__(self):
            super().__init__(response_fn=lambda messages: "Smiljan [1].")
            self._model = None

        def warm_up(self):
            if self._model is None:
                time.sleep(0.2)
                self._model = object()

    panel = ControlPanel(index=sample_index, config=fast_config, question="Where was Nikola Tesla born?", generator_factory=lambda model, cb=None: LazyLLM(), plots_enabled=False)
    panel.run()
    assert "LLM load 2" in panel.setup.value and "not part of the per-question latency" in panel.setup.value
    assert "embedding model" not in panel.setup.value  # already loaded in this process: nothing to say
    panel.run()
    assert panel.setup.value == ""  # loaded once: the next question has no setup


def test_result_sentence_says_time_calls_and_confidence_or_the_decline():
    from ragkit.pipeline.engine import AgenticResult
    from ragkit.pipeline.trace import Step, Trace

    trace = Trace()
    trace.add(Step(name="sentence_vectors", started=0.0, seconds=40.0))  # one-time: not in the time
    trace.add(Step(name="answer", started=40.0, seconds=3.1, llm_calls=1))
    answered = AgenticResult(question="q", answer="Smiljan", sources=[], confidence=0.62, symbol="◐", trace=trace, seconds=43.1)
    assert result_sentence(answered) == "answered in 3.1 s with 1 LLM call at ◐ 0.62"
    declined = AgenticResult(question="q", answer="The documents don't say.", sources=[], confidence=0.0, symbol="○",
                             declined=True, p_lacks_answer=0.71, trace=trace, seconds=43.1, failed_steps=["grade"])
    assert result_sentence(declined) == "declined in 3.1 s with 1 LLM call (confidence 0, P(sources lack the answer) 0.71) (failed: grade)"


def test_summary_shows_a_decline_as_a_decline_and_names_failed_steps():
    from ragkit.pipeline.engine import AgenticResult
    from ragkit.ui.panel import summary_html

    declined = AgenticResult(question="q", answer="The documents don't say.", sources=[], confidence=0.0, symbol="○", declined=True, p_lacks_answer=0.71)
    line = summary_html(declined)
    assert "declined" in line and "71% sure" in line and "○ 0.00" not in line
    failed = AgenticResult(question="q", answer="x", sources=[], confidence=0.3, symbol="○", failed_steps=["grade", "hallucination"])
    assert "failed: grade, hallucination" in summary_html(failed) and "○ 0.30" in summary_html(failed)


def test_the_panel_draws_the_graph_that_runs_and_redraws_it_when_a_toggle_flips(panel):
    before = panel.graph.text
    assert before.startswith("---\ntitle: plain RAG") and "grade[" not in before
    panel.controls["grading"].value = True
    assert "    grade[" in panel.graph.text and "title: grading" in panel.graph.text
    panel.run()
    assert panel.ran_graph == panel.graph.text  # the drawing is the graph that answered
    panel.controls["self_correction"].value = True  # without hallucination_check: invalid, said, not raised
    assert panel.graph.text == panel.ran_graph and "needs hallucination_check" in panel.graph.error
    panel.controls["self_correction"].value = False
    panel.controls["grading"].value = False
    assert panel.graph.text == before and panel.graph.error == ""
    # the checkbox opens the self-correction loop; what Run compiles is drawn the same way
    panel.controls["hallucination_check"].value = True
    assert "self_correction[" in panel.graph.text and "subgraph self_correction" not in panel.graph.text
    panel.graph.detail.value = True
    assert "subgraph self_correction" in panel.graph.text and "self_correction__hallucination[" in panel.graph.text
    panel.graph.detail.value = False
    panel.controls["hallucination_check"].value = False
    assert panel.graph.text == before


def test_eval_lab_writes_its_test_set_with_the_writer_it_is_given(tmp_path, monkeypatch):
    # notebook 09 answers with the 0.5B and writes with the 1.5B, whose items a person found valid more often
    import ragkit.eval.generate
    import ragkit.index.indexer
    import ragkit.index.stores
    from ragkit.eval.generate import GenerationReport
    from ragkit.ui.eval_view import EvalLab

    used = []
    monkeypatch.setattr(ragkit.index.indexer, "build_index", lambda *a, **k: None)
    monkeypatch.setattr(ragkit.index.stores, "load_index", lambda *a, **k: [])
    monkeypatch.setattr(ragkit.eval.generate, "generate_testset", lambda index, generator, **k: (used.append(generator) or [], GenerationReport(requested=4)))
    answerer, writer = object(), object()
    EvalLab(index_dir=tmp_path / "index", runs_dir=tmp_path / "runs", chat_generator=answerer, writer=writer).generate(4)
    EvalLab(index_dir=tmp_path / "index", runs_dir=tmp_path / "runs", chat_generator=answerer).generate(4)
    assert used == [writer, answerer]  # without a writer, the strategies' model writes as before
