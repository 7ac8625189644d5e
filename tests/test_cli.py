import json

import pytest

from conftest import SAMPLE_DOCS
from ragkit.ui.cli import build_parser, main

pytestmark = pytest.mark.integration


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("index", "ask", "info"))


def test_index_then_info(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAGKIT_LLM", "qwen2.5-coder-0.5b")
    assert main(["index", str(SAMPLE_DOCS / "wikipedia"), "--index-dir", str(tmp_path / "idx"), "--quiet"]) == 0
    assert "6 file(s)" in capsys.readouterr().out
    assert main(["info", "--index-dir", str(tmp_path / "idx")]) == 0
    assert "wikipedia" not in capsys.readouterr().err


def test_index_names_the_files_it_did_not_read(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.rst").write_text("Install\n=======\n\nRun pyenv install to build a Python version.\n")
    (docs / "broken.md").write_bytes(b"\x00binary")
    (docs / "logo.png").write_bytes(b"\x89PNG")
    (docs / "a.py").write_text("x = 1\n")
    (docs / "b.py").write_text("x = 2\n")
    for extra, done in (([], "Indexed 1 file(s)"), (["--dry-run"], "would index 0 file(s)")):
        assert main(["index", str(docs), "--index-dir", str(tmp_path / "idx"), "--quiet", *extra]) == 0
        out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal's width
        assert done in out and "skipped broken.md: binary file" in out, out
        assert "not read 3 file(s) of other types (2 .py, 1 .png); ragkit reads .htm .html .markdown .md .pdf .rst .txt" in out, out


def test_errors_are_one_line_not_a_traceback(tmp_path, capsys):
    assert main(["ask", "anything", "--index-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "No ragkit index" in err and "Traceback" not in err
    assert main(["index", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.llm
def test_ask_prints_answer_sources_and_latency(sample_index_dir, capsys, monkeypatch):
    monkeypatch.setenv("RAGKIT_LLM", "qwen2.5-coder-0.5b")
    monkeypatch.setenv("RAGKIT_MAX_NEW_TOKENS", "48")
    assert main(["ask", "Where was Nikola Tesla born?", "--index-dir", str(sample_index_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "Smiljan" in out["answer"]
    assert {s["source"] for s in out["sources"]} == {"wikipedia/Nikola_Tesla.md"}
    assert {"embed", "retrieve", "answer"} <= set(out["timings_s"]) and out["exit_reason"] is None and 0 <= out["confidence"] <= 1


@pytest.mark.llm
def test_ask_with_every_agentic_feature_prints_confidence_route_and_trace(sample_index_dir, capsys, monkeypatch):
    monkeypatch.setenv("RAGKIT_LLM", "qwen2.5-coder-0.5b")
    monkeypatch.setenv("RAGKIT_MAX_NEW_TOKENS", "48")
    assert main(["ask", "Which team won Super Bowl 50?", "--index-dir", str(sample_index_dir), "--all-features", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["route"] == "FACTUAL" and out["symbol"] in "●◐○" and 0 <= out["confidence"] <= 1
    stages = [row["stage"] for row in out["trace"]]
    assert {"router", "route_policy", "retrieve", "rerank", "grade", "context_check", "answer", "hallucination", "confidence"} <= set(stages)
    assert out["exit_reason"] in ("supported", "max_corrections", "unsupported_span", "span_copied", "unknown")


def test_pipeline_prints_the_graph_the_features_compile_to_as_mermaid(capsys, tmp_path):
    assert main(["pipeline"]) == 0
    plain = capsys.readouterr().out
    assert plain.startswith("---\ntitle: plain RAG") and "flowchart TD" in plain and "grade[" not in plain
    assert main(["pipeline", "--all-features", "-o", str(tmp_path / "g.mmd")]) == 0
    drawn = (tmp_path / "g.mmd").read_text()
    assert "route_policy[" in drawn and "self_correction[" in drawn and 'question(["question"])' in drawn
    assert main(["pipeline", "--all-features", "--detail"]) == 0
    assert "subgraph self_correction" in capsys.readouterr().out  # the loop's own steps


@pytest.mark.integration
def test_export_writes_yaml_that_haystack_restores_in_safe_mode(sample_index_dir, tmp_path, capsys):
    from haystack import Pipeline

    out = tmp_path / "pipeline.yaml"
    assert main(["export", "--all-features", "--index-dir", str(sample_index_dir), "--llm", "qwen2.5-coder-0.5b", "-o", str(out)]) == 0
    restored = Pipeline.loads(out.read_text(), allowed_modules=["ragkit.*"])
    assert {"router", "route_policy", "retrieve", "self_correction", "confidence"} <= set(restored.graph.nodes)
    assert restored.metadata["ragkit"]["features"]["grading"] is True
