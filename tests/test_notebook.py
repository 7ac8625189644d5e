"""The notebook control panel, A/B view and ablation, driven programmatically with a scripted LLM."""

import dataclasses

import matplotlib
import pytest
from haystack.components.generators.chat import MockChatGenerator

from ragkit.features import Features
from ragkit.notebook import ControlPanel, ab_compare, feature_controls, features_from_controls, run_ablation

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
    return ControlPanel(index=sample_index, config=fast_config, question="Where was Nikola Tesla born?", generator_factory=scripted_llm)


def test_every_features_field_has_a_control_and_round_trips():
    features = Features.all_on(top_k=4, grade_threshold=6.5)
    controls = feature_controls(features)
    assert {f.name for f in dataclasses.fields(Features)} - set(controls) == {"route_policy"}
    assert features_from_controls(controls) == features
    # the support threshold: "calibrated for the model" (None) or any number, also off the 0.05 grid
    assert controls["support_threshold"].value is None
    exact = Features(hallucination_check=True, support_threshold=0.37)
    assert features_from_controls(feature_controls(exact)).support_threshold == 0.37


def test_run_button_shows_answer_confidence_sources_trace_and_plots(panel):
    panel.run_button.click()
    result = panel.last_result
    assert result is not None and "Smiljan" in panel.answer.value
    assert result.symbol in panel.summary.value and "LLM calls" in panel.summary.value
    assert "Nikola_Tesla.md" in panel.sources.value and "retrieve" in panel.trace.value
    waterfall, confidence = panel.last_figures
    assert len(waterfall.axes[0].patches) == len(result.trace.steps) and confidence.axes[0].patches


def test_flipping_grading_adds_the_step_and_drops_chunks(panel):
    panel.run()
    plain_steps = [s.name for s in panel.last_result.trace.steps]
    panel.controls["grading"].value = True
    panel.run()
    graded = panel.last_result
    assert "grade" not in plain_steps and "grade" in [s.name for s in graded.trace.steps]
    assert len(graded.sources) == 1 and "grade" in panel.trace.value


def test_ab_view_reports_what_changed(panel):
    comparison, figure = panel.compare(Features(grading=True, hallucination_check=True))
    assert comparison["llm_calls"] == (1, 3)
    assert {"grade", "hallucination"} <= set(comparison["steps_only_b"]) and comparison["dropped_by_grading"][1]
    assert len(figure.axes) >= 2
    assert ab_compare(panel.last_result or panel.run(), panel.last_result)["sources_only_a"] == []


def test_ablation_summarises_quality_and_cost(panel):
    questions = [{"question": "Where was Nikola Tesla born?", "answers": ["Smiljan"]}] * 2
    summary = run_ablation(lambda f: panel.engine.rag(f, panel.model.value), {"plain": Features(), "graded": Features(grading=True)}, questions, progress=False)
    assert summary["plain"]["questions"] == 2 and summary["plain"]["llm_calls_per_q"] == 1 and summary["graded"]["llm_calls_per_q"] == 2
    assert summary["plain"]["f1"] > 0 and summary["plain"]["latency_s_p50"] > 0


def test_a_bad_question_is_reported_in_the_panel_not_raised_from_the_button(panel):
    panel.question.value = "   "
    panel.run_button.click()
    assert "color:#d1495b" in panel.answer.value and panel.last_result is None
