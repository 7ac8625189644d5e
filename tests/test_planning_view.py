"""What notebook 08 shows: the planning tables and chart, as pure functions of a result or planning.json."""

from types import SimpleNamespace

from ragkit.ui.planning_view import hops_html, parts_html, planning_bars, planning_rows, sql_html

PLANNING = {
    "two_part": {"qwen2.5-coder-0.5b": {
        "plain": {"n": 200, "parts_answered": 0.18, "both_answered": 0.0, "part_f1": 0.18, "split": 0, "llm_calls": 1, "p50_s": 1.3},
        "decompose": {"n": 200, "parts_answered": 0.49, "both_answered": 0.24, "part_f1": 0.49, "split": 1, "llm_calls": 2, "p50_s": 2.0,
                      "over_plain_p50": 1.5, "over_plain_parts": 2.72},
    }},
    "bridge": {}, "sql": {}, "budget_violations": 0,
}


def result(**details):
    return SimpleNamespace(details=details)


def test_parts_hops_and_sql_are_tables_with_escaped_text():
    parts = parts_html(result(parts=[{"question": "Where was <b>Tesla</b> born?", "answer": "Smiljan [1]", "symbol": "●", "confidence": 0.73}]))
    assert "Smiljan [1]" in parts and "&lt;b&gt;Tesla" in parts and "● 0.73" in parts
    hops = hops_html(result(multi_hop={"exit_reason": "sufficient", "query": "q", "hops": [
        {"iteration": 0, "evidence": "Brazil is second after the United States.", "p_sufficient": 0.2, "bridge": "the United States", "query": "the United States year emigrate", "new_documents": 3},
        {"iteration": 1, "evidence": "Tesla emigrated to the United States in 1884.", "p_sufficient": 0.8}]}))
    assert "the United States year emigrate" in hops and "<b>sufficient</b>" in hops and "P(enough)" in hops
    covered = hops_html(result(multi_hop={"exit_reason": "sufficient", "query": "q", "hops": [{"iteration": 0, "evidence": "x", "coverage": 0.91}]}))
    assert "coverage" in covered and "0.91" in covered and "P(enough)" not in covered
    sql = sql_html(result(sql={"sql": "SELECT COUNT(*) FROM cars WHERE Origin = 'Japan'", "rows": [[79]], "ok": True, "error": None}))
    assert "SELECT COUNT(*)" in sql and "79" in sql and "ran" in sql
    assert "not split" in parts_html(result()) and "did not run" in hops_html(result()) and "not asked" in sql_html(result())


def test_the_measured_rows_and_chart():
    rows = planning_rows(PLANNING)
    assert [r["configuration"] for r in rows] == ["plain", "decompose"] and rows[1]["parts answered"] == "49.0%"
    fig = planning_bars(PLANNING)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "18.0%" in labels and "49.0%" in labels


def test_a_configuration_one_model_lacks_is_marked_not_run():
    data = {"two_part": {"a": {"plain": PLANNING["two_part"]["qwen2.5-coder-0.5b"]["plain"]},
                         "b": PLANNING["two_part"]["qwen2.5-coder-0.5b"]}}
    labels = [t.get_text() for t in planning_bars(data).axes[0].texts]
    assert labels.count("not run") == 1


def test_an_empty_section_draws_a_note_not_an_error():
    fig = planning_bars({"two_part": {}, "bridge": {}}, "two_part")
    assert "no two_part run" in fig.axes[0].texts[0].get_text()


def test_fallback_html_lists_each_attempt_escaped():
    from types import SimpleNamespace

    from ragkit.ui.planning_view import fallback_html

    fb = {"check": "coverage", "initial": {"coverage": 0.2}, "exit_reason": "recovered", "attempts": [
        {"strategy": "sparse", "why": "question-term coverage 0.2 < 0.6", "new_documents": 3, "after": {"coverage": 0.9}, "result": "sufficient"},
        {"strategy": "hyde", "why": "<script>", "result": "failed", "error": "HyDE wrote no passage"}]}
    shown = fallback_html(SimpleNamespace(details={"fallback": fb}))
    assert "coverage 0.2 &lt; 0.6" in shown and "&lt;script&gt;" in shown and "<b>recovered</b>" in shown and "HyDE wrote no passage" in shown
    assert "did not run" in fallback_html(SimpleNamespace(details={}))


def test_the_committed_planning_json_is_section_model_config():
    """Every value under a model is one configuration's figures, so a reader can loop over configurations."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "bench" / "results" / "planning.json").read_text())
    assert data["budget_violations"] == 0
    for section in ("two_part", "bridge"):
        for model in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
            configs = data[section][model]
            assert {"plain", "multi_hop"} <= set(configs)
            for name, figures in configs.items():
                assert isinstance(figures, dict), f"{section}/{model}/{name} is not a configuration"
                assert {"n", "parts_answered", "part_f1", "llm_calls", "p50_s"} <= set(figures), (section, model, name)
    for model, sql in data["sql"].items():
        assert sql["n"] >= 30 and 0 <= sql["accuracy"] <= 1, model
