"""The README's measured tables are exactly what bench/tables.py prints from bench/results/*.json."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_tables():
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "bench" / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    return tables


def test_readme_and_docs_tables_match_the_committed_results():
    tables = load_tables()
    generated = tables.tables()
    assert {"summary", "agentic_squad.json", "judge_squad.json", "routing.json", "rerank_squad.json", "retrieval_squad.json"} <= set(generated)
    pages = {page.relative_to(ROOT).as_posix(): page.read_text() for page in tables.PAGES}
    assert "README.md" in pages and len(pages) >= 8
    stale, shown = [], set()
    for name, text in pages.items():
        for marker in re.findall(r"^<!-- (.+?) -->$", text, re.M):
            if marker in generated:
                shown.add(marker)
                if f"<!-- {marker} -->\n{generated[marker]}\n" not in text:
                    stale.append(f"{name}: {marker}")
    assert not stale, f"tables out of step with bench/results: {stale}; run .venv/bin/python bench/tables.py --readme"
    assert not set(generated) - shown, f"generated tables no page shows: {sorted(set(generated) - shown)}"
    assert "<!-- summary -->" in pages["README.md"]


def test_the_readme_stays_a_short_path_with_the_measurements_in_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    headings = re.findall(r"^## (.+)$", readme, re.M)
    order = ["Two commands", "Notebooks", "Use it on your own documents", "What is inside", "Measured"]
    assert [h for h in headings if any(h.startswith(o) for o in order)] == [h for o in order for h in headings if h.startswith(o)], headings
    for link in re.findall(r"\]\((docs/[\w./-]+\.md)\)", readme):
        assert (ROOT / link).is_file(), link


def test_shipped_judge_thresholds_are_the_committed_calibration():
    import json

    from ragkit.components.hallucination_detector import CALIBRATED_SUPPORT_THRESHOLDS

    results = json.loads((ROOT / "bench" / "results" / "judge_squad.json").read_text())["results"]
    calibrated = {model: r["with_question"]["calibrated"]["threshold"] for model, r in results.items()}
    assert CALIBRATED_SUPPORT_THRESHOLDS == calibrated, "update CALIBRATED_SUPPORT_THRESHOLDS after bench/judge_squad.py"


def test_a_size_a_backend_could_not_reach_is_a_row_that_says_where_it_stopped():
    tables = load_tables()
    failed = {"chunks": 1_000_000, "failed": {"stage": "ingest", "chunks_written": 415_000, "seconds": 1234.5, "server_peak_pss_mb": 19_876.0,
                                            "reason": "the machine had 2,400 MB available (under 2,500) with the server at 19,876 MB: stopped it",
                                            "ragkit_rss_mb": 3_000.0}}
    row = tables.scale_table({"1000000": {"milvus": failed}}).splitlines()[-1]
    assert row.startswith("| 1,000,000 | milvus | stopped during ingest after 415,000 chunks (1,234 s): the machine had 2,400 MB")
    assert "19,876 (peak)" in row and row.count("|") == 12  # the table's 11 columns


def test_a_row_measured_under_a_search_budget_says_how_many_searches_it_rests_on():
    tables = load_tables()
    ms = {"p50": 40_000.0, "p95": 50_000.0, "p99": 52_000.0}
    entry = {"chunks": 1_000_000, "ingest_s": 1470.0, "latency_ms": {"dense": ms, "sparse": ms, "hybrid": ms}, "dense_recall@10": 1.0,
             "filtered": {"10%": {"returned_of_10": 10, **ms}, "1%": {"returned_of_10": 9.5, **ms}}, "hybrid_qps_4_clients": 0.1,
             "searches": {"unfiltered": 4, "filtered_10%": 2, "filtered_1%": 3}, "search_budget_s": 400.0,
             "server_pss_mb": 13_000.0, "ragkit_rss_mb": 2_400.0, "disk_mb": 4_000.0}
    row = tables.scale_table({"1000000": {"milvus": entry}}).splitlines()[-1]
    assert "40000.0 / 40000.0 / 40000.0 (4 questions, 400 s a stage)" in row and "10 / 9.5 (2 / 3 searches)" in row
    assert row.count("|") == 12
    del entry["search_budget_s"]  # a run without a budget asked every question: no count shown
    assert "questions" not in tables.scale_table({"1000000": {"milvus": entry}}).splitlines()[-1]


def test_a_server_that_stopped_after_its_searches_keeps_them_and_says_where_it_stopped():
    tables = load_tables()
    ms = {"p50": 31_000.0, "p95": 40_000.0, "p99": 41_000.0}
    entry = {"chunks": 1_000_000, "ingest_s": 1517.0, "latency_ms": {"dense": ms, "sparse": ms, "hybrid": ms}, "dense_recall@10": 1.0,
             "searches": {"unfiltered": 4}, "search_budget_s": 400.0,
             "failed": {"stage": "search: filtered 10%", "chunks_written": 1_000_000, "seconds": 3000.0, "reason": "the server exited",
                        "server_peak_pss_mb": 19_196.0, "ragkit_rss_mb": 2_299.0}}
    row = tables.scale_table({"1000000": {"milvus": entry}}).splitlines()[-1]
    assert "31000.0 / 31000.0 / 31000.0 (4 questions, 400 s a stage)" in row
    assert "– (stopped during search: filtered 10%: the server exited)" in row and "– / – (0 / 0 searches)" in row
    assert "19,196 (peak) | 2,299 | – |" in row and row.count("|") == 12


def test_regenerating_the_pages_leaves_them_as_they_are():
    """bench/tables.py --readme on committed pages changes nothing: no note of a block is left behind or written twice."""
    tables = load_tables()
    generated = tables.tables()
    for page in tables.PAGES:
        text = page.read_text()
        assert tables.rewritten(text, generated)[0] == text, f"{page.relative_to(ROOT)}: run .venv/bin/python bench/tables.py --readme"


def test_a_block_with_a_note_is_replaced_whole_when_its_figures_change():
    tables = load_tables()
    page = "intro\n\n<!-- x.json -->\n| a |\n| --- |\n| 1 |\n\nnote: judge 0.70.\n<!-- end x.json -->\n\nafter\n"
    new, done = tables.rewritten(page, {"x.json": "| a |\n| --- |\n| 2 |\n\nnote: judge 0.80."})
    assert done == ["x.json"]
    assert new == "intro\n\n<!-- x.json -->\n| a |\n| --- |\n| 2 |\n\nnote: judge 0.80.\n<!-- end x.json -->\n\nafter\n"
    assert tables.rewritten(new, {"x.json": "| a |\n| --- |\n| 2 |\n\nnote: judge 0.80."})[0] == new
