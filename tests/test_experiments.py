"""The experiments the notebooks show: SQuAD corpus loading, rank metrics, routing accuracy,
rerank + grade reports and the judge's labelled set — on a tiny SQuAD-shaped file."""

import gzip
import json
from pathlib import Path

import pytest
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.document_grader import DocumentGrader
from ragkit.components.hyde import HyDEEmbedder
from ragkit.components.query_router import QueryRouter
from ragkit.components.reranker import Reranker
from ragkit.config import ModelConfig
from ragkit.eval.experiments import (
    balanced_accuracy, differing_questions, gold_rank, grading_summary, hyde_ranks, index_documents, judge_items, judge_scores,
    load_labelled_routes, load_squad_corpus, recall_table, rerank_and_grade, retrieval_ranks, router_accuracy, wins,
)
from ragkit.index.retrieval import HybridRetriever

ROOT = Path(__file__).resolve().parent.parent

ARTICLES = {
    "Tesla": [
        ("Nikola Tesla was born in Smiljan in 1856. His father was an Orthodox priest.",
         [("Where was Tesla born?", "Smiljan"), ("What was the job of Tesla's father?", "Orthodox priest")]),
        ("Tesla moved to New York in 1884 and worked for Thomas Edison for a short time.",
         [("When did Tesla move to New York?", "1884"), ("Who did Tesla work for in New York?", "Thomas Edison")]),
        ("In 1893 the Columbian Exposition in Chicago was lit by Westinghouse alternating current.",
         [("Which city hosted the Columbian Exposition?", "Chicago")]),
    ],
    "Rhine": [
        ("The Rhine rises in the Swiss Alps and flows into the North Sea near Rotterdam.",
         [("Where does the Rhine rise?", "Swiss Alps"), ("Which city is near the Rhine's mouth?", "Rotterdam")]),
        ("The Rhine is about 1,230 kilometres long and carries barge traffic to Basel.",
         [("How long is the Rhine?", "1,230 kilometres"), ("How far upstream do barges go?", "Basel")]),
    ],
}


@pytest.fixture(scope="module")
def squad_file(tmp_path_factory) -> Path:
    data = {"version": "1.1", "data": [
        {"title": title, "paragraphs": [
            {"context": context, "qas": [
                {"id": f"{title}-{p}-{i}", "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
                for i, (q, a) in enumerate(qas)
            ]} for p, (context, qas) in enumerate(paragraphs)
        ]} for title, paragraphs in ARTICLES.items()
    ]}
    path = tmp_path_factory.mktemp("squad") / "tiny.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)
    return path


@pytest.fixture(scope="module")
def corpus(squad_file, tmp_path_factory):
    docs, questions = load_squad_corpus(squad_file)
    index = index_documents(docs, tmp_path_factory.mktemp("squad_index") / "index", progress=False)
    return docs, questions, index, HybridRetriever(index, ModelConfig())


def test_squad_corpus_has_paragraph_ids_and_filters(squad_file):
    docs, questions = load_squad_corpus(squad_file)
    assert [d.id for d in docs] == ["0-0", "0-1", "0-2", "1-0", "1-1"] and len(questions) == 9
    assert questions[0]["doc_id"] == "0-0" and questions[0]["answers"] == ["Smiljan"] and questions[0]["title"] == "Tesla"
    rhine_docs, rhine_questions = load_squad_corpus(squad_file, titles=["Rhine"])
    assert {d.id for d in rhine_docs} == {"1-0", "1-1"} and all(q["doc_id"].startswith("1-") for q in rhine_questions)
    one_docs, _ = load_squad_corpus(squad_file, n_articles=1, seed=3)
    assert len({d.id.split("-")[0] for d in one_docs}) == 1


def test_index_documents_is_reused_when_it_holds_the_same_documents(corpus, tmp_path):
    docs, _, index, _ = corpus
    again = index_documents(docs, index.path, progress=False)
    assert set(again.chunks) == {d.id for d in docs} and len(again) == len(docs)
    fewer = index_documents(docs[:2], tmp_path / "fewer", progress=False)
    assert len(fewer) == 2


def test_retrieval_ranks_recall_and_wins(corpus):
    _, questions, _, retriever = corpus
    rows = retrieval_ranks(retriever, questions, depth=5, progress=False)
    assert len(rows) == len(questions) and set(rows[0]["ranks"]) == {"dense", "sparse", "hybrid"}
    table = {r["mode"]: r for r in recall_table(rows, ks=(1, 5))}
    # five short paragraphs: everything is in the top 5, and exact words put most gold paragraphs first
    assert all(table[m]["R@5"] == 1.0 for m in table) and table["sparse"]["R@1"] >= 0.7
    assert 0 < table["hybrid"]["MRR"] <= 1 and table["hybrid"]["ms p50"] >= 0


def test_wins_lists_misses_first_then_biggest_gaps():
    rows = [
        {"question": "a", "ranks": {"x": 1, "y": 2}},
        {"question": "b", "ranks": {"x": 1, "y": None}},
        {"question": "c", "ranks": {"x": 2, "y": 9}},
        {"question": "d", "ranks": {"x": 5, "y": 1}},
    ]
    assert [w["question"] for w in wins(rows, "x", "y")] == ["b", "c", "a"]
    assert wins(rows, "x", "y")[0]["y"] == "miss" and [w["question"] for w in wins(rows, "y", "x")] == ["d"]


def test_gold_rank_counts_chunks_of_the_gold_paragraph(corpus):
    docs = corpus[0]
    assert gold_rank(docs, "0-1") == 2 and gold_rank(docs, "9-9") is None


def test_rules_router_accuracy_matches_the_committed_benchmark():
    rows = load_labelled_routes(ROOT / "tests" / "data" / "routing_questions.jsonl")
    result = router_accuracy(QueryRouter(backend="rules"), rows)
    bench = json.loads((ROOT / "bench" / "results" / "routing.json").read_text())
    assert result["accuracy"] == bench["backends"]["rules"]["accuracy"]
    assert set(result["per_class_accuracy"]) == {"SIMPLE", "FACTUAL", "ANALYTICAL", "COMPARISON", "SUMMARY"}


def test_rerank_and_grade_reports_what_was_dropped(corpus):
    _, questions, _, retriever = corpus
    llm = MockChatGenerator(response_fn=lambda messages: "[9, 1, 1]")
    graders = {"llm": DocumentGrader(backend="llm", chat_generator=llm, threshold=4), "embedding": DocumentGrader(backend="embedding")}
    rows = rerank_and_grade(retriever, Reranker(backend="bi-encoder"), graders, questions[:3], candidates=5, top_k=3, progress=False)
    assert all(r["rank_after"] is not None and r["rerank_ms"] >= 0 for r in rows)
    assert all(r["graders"]["llm"]["kept"] == 1 and r["graders"]["llm"]["dropped"] == 2 for r in rows)
    summary = {s["grader"]: s for s in grading_summary(rows)}
    assert summary["llm"]["chunks dropped"] == "6/9" and summary["llm"]["fallbacks"] == 0


def test_hyde_ranks_compare_with_and_without_the_passage(corpus):
    _, questions, _, retriever = corpus
    llm = MockChatGenerator(response_fn=lambda messages: "Tesla was born in the village of Smiljan, in the Austrian Empire.")
    rows = hyde_ranks(retriever, HyDEEmbedder(chat_generator=llm), questions[:2], depth=5, progress=False)
    assert set(rows[0]["ranks"]) == {"dense", "dense+hyde", "hybrid", "hybrid+hyde"}
    assert rows[0]["passage"].startswith("Tesla was born") and rows[0]["ranks"]["dense+hyde"] == 1


def test_judge_items_are_supported_contradicted_or_unsupported(corpus):
    docs, questions, _, _ = corpus
    items = judge_items(docs, questions, n_supported=4, seed=1)
    kinds = {it["kind"] for it in items}
    assert "supported" in kinds and kinds <= {"supported", "contradicted", "unsupported"}
    for it in items:
        context = " ".join(d.content for d in it["documents"])
        assert len(it["documents"]) == 2
        if it["kind"] in ("supported", "contradicted"):
            assert it["answer"] in context
        else:
            assert it["answer"] not in context


def test_judge_scores_and_balanced_accuracy():
    class Oracle:  # scores 0.9 for the gold answer, 0.2 otherwise
        def run(self, replies, documents, query=None):
            return {"score": 0.9 if replies == ["gold"] else 0.2}

    items = [{"kind": "supported", "question": "q", "answer": "gold", "documents": []},
             {"kind": "contradicted", "question": "q", "answer": "other", "documents": []}]
    rows = judge_scores(Oracle(), items, progress=False)
    assert [r["score"] for r in rows] == [0.9, 0.2]
    assert balanced_accuracy(rows, 0.5) == 1.0 and balanced_accuracy(rows, 0.95) == 0.5
    with pytest.raises(ValueError):
        balanced_accuracy(rows[:1], 0.5)


def test_differing_questions_keeps_those_the_committed_run_separates(tmp_path):
    answers = tmp_path / "answers.jsonl"
    rows = [("plain", "q1", 0.0), ("full", "q1", 1.0), ("plain", "q2", 0.5), ("full", "q2", 0.5),
            ("plain", "q3", 0.6), ("full", "q3", 0.0), ("plain", "q4", 0.0), ("full", "q4", 0.9), ("grading", "q5", 1.0)]
    answers.write_text("\n".join(json.dumps({"config": c, "id": i, "f1": f}) for c, i, f in rows) + "\n")
    questions = [{"id": f"q{k}", "question": f"question {k}?", "answers": ["Smiljan"], "title": "Tesla"} for k in range(1, 6)]
    questions[3]["answers"] = ["Basel"]  # q4: its answer is not in the article below
    picked = differing_questions(answers, questions, n=10)
    assert [q["id"] for q in picked] == ["q1", "q3", "q4"]  # q2 same F1, q5 not run by both
    assert picked[0]["committed_f1"] == {"plain": 0.0, "full": 1.0}
    in_docs = differing_questions(answers, questions, documents={"Tesla": "Tesla was born in Smiljan."}, n=10)
    assert [q["id"] for q in in_docs] == ["q1", "q3"]
    two = differing_questions(answers, list(reversed(questions)), n=2, seed=0)
    assert len(two) == 2 and two == differing_questions(answers, questions, n=2, seed=0)  # seeded, order-free
