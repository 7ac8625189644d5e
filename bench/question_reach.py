"""How often a question draws on more than the one sentence that holds its answer — people's against a generated set's.

``bench/eval_agreement.py`` found SQuAD dev's generated set ranking the sentence-level reranker above plain retrieval
while people's questions rank it below (docs/evaluation.md). The explanation offered there: a generated question is
written from one sentence, a person's from the whole paragraph. This script measures that, with no LLM and no
threshold to choose: for each question, its content words (SQuAD's normalisation, ``ragkit.eval.metrics.STOPWORDS`` left out) that its
paragraph holds, and whether some of those are **outside the paragraph's best-matching sentence** (the sentence
holding most of them) — a question that "reaches" beyond one sentence. Measured on every real question of the set,
on the 240 real questions the agreement runs asked, and on each committed generated set's single and paraphrase
items (multi items join two questions; unanswerable ones have no paragraph).

Where the agreement runs' rows are in ``bench/.cache/eval_agreement/`` (they are not committed), it also splits the
real questions' retrieval change against ``plain`` by whether the question reaches: does the reranker lose more
where a question needs more than one sentence? Without those rows the committed split is kept as it is.

Descriptive only: nothing in ragkit is chosen from these figures.

    .venv/bin/python bench/question_reach.py     # -> bench/results/question_reach.json (seconds)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval_agreement import FIRST_WRITER, run_folder  # noqa: E402

from ragkit.eval.experiment_sets import load_squad_corpus  # noqa: E402
from ragkit.eval.metrics import STOPWORDS, normalize_answer  # noqa: E402
from ragkit.eval.runs import load_run  # noqa: E402
from ragkit.eval.testset import load_testset, squad_file  # noqa: E402
from ragkit.index.sentences import sentence_spans  # noqa: E402

SETS = ("squad_dev", "new_wiki")
SETS_DIR = REPO / "bench" / "results" / "eval_agreement"
RESULT = REPO / "bench" / "results" / "question_reach.json"
COMPARED = ("rerank", "sparse_only", "dense_only", "grading")
COMMAND = ".venv/bin/python bench/question_reach.py"


def content_words(text: str) -> set[str]:
    # SQuAD's answer normalisation, not ragkit.eval.metrics.content_words: that splits "Tesla's" into "tesla" and
    # "s" and moves the committed shares (31 % of SQuAD dev's questions reaching would read 32 %)
    return {word for word in normalize_answer(text).split() if word not in STOPWORDS}


def words_beyond_best_sentence(question: str, paragraph: str) -> set[str]:
    """The question's content words its paragraph holds but its best-matching sentence does not (the sentence with
    most of the question's words; the first of equals). Empty: one sentence holds all the paragraph gives it."""
    asked = content_words(question)
    in_paragraph = asked & content_words(paragraph)
    sentences = [paragraph[a:b] for a, b in sentence_spans(paragraph)] or [paragraph]
    best = max((asked & content_words(sentence) for sentence in sentences), key=len)
    return in_paragraph - best


def reach_share(pairs: list[tuple[str, str]]) -> dict:
    """Of (question, paragraph) pairs: how many reach beyond their best sentence, over how many."""
    reaching = sum(bool(words_beyond_best_sentence(question, paragraph)) for question, paragraph in pairs)
    return {"n": len(pairs), "reaching": reaching, "share": round(reaching / len(pairs), 3) if pairs else None}


def _rows(name: str, strategy: str) -> dict[str, dict] | None:
    """The scored rows of ``strategy``'s run on the 240 real questions of ``name`` (None when the run is not here)."""
    folder = run_folder(name, 120, 240, FIRST_WRITER, "real", strategy)
    if not (folder / "run.json").exists():
        return None
    return {row["id"]: row for row in load_run(folder)["rows"] if row.get("mrr") is not None}


def retrieval_split(name: str, paragraphs: dict[str, str]) -> dict | None:
    """Each compared strategy's MRR change against plain on the real questions, for those that reach beyond their
    best sentence and those that do not; None when the finished runs are not here."""
    plain = _rows(name, "plain")
    if plain is None:
        return None
    reaches = {qid: bool(words_beyond_best_sentence(row["question"], paragraphs[row["gold_chunks"][0]])) for qid, row in plain.items()}
    split = {}
    for strategy in COMPARED:
        other = _rows(name, strategy)
        if other is None:
            continue
        split[strategy] = {}
        for label, wanted in (("reaching", True), ("within_one_sentence", False)):
            deltas = [other[qid]["mrr"] - plain[qid]["mrr"] for qid in plain if qid in other and reaches[qid] is wanted]
            split[strategy][label] = {"n": len(deltas), "mean_mrr_change": round(statistics.fmean(deltas), 3) if deltas else None,
                                      "worse": sum(d < 0 for d in deltas), "better": sum(d > 0 for d in deltas)}
    return split


def measure(name: str, earlier: dict) -> dict:
    documents, questions = load_squad_corpus(squad_file(name))
    paragraphs = {document.id: document.content for document in documents}
    figures: dict = {"real_all": reach_share([(q["question"], paragraphs[q["doc_id"]]) for q in questions])}
    asked, _ = load_testset(SETS_DIR / f"{name}.real240.jsonl")
    figures["real_240"] = reach_share([(item.question, paragraphs[item.chunks[0]]) for item in asked])
    figures["generated"] = {}
    for path in sorted(SETS_DIR.glob(f"{name}.generated*.jsonl")):
        writer = path.name.removeprefix(f"{name}.generated").removesuffix(".jsonl").lstrip(".") or "qwen2.5-coder-0.5b"
        items, _ = load_testset(path)
        figures["generated"][writer] = {kind: reach_share([(item.question, paragraphs[item.chunks[0]]) for item in items if item.kind == kind])
                                        for kind in ("single", "paraphrase")}
    split = retrieval_split(name, paragraphs)
    figures["retrieval_vs_plain_real_240"] = split if split is not None else earlier.get("retrieval_vs_plain_real_240")
    return figures


def main() -> None:
    earlier = json.loads(RESULT.read_text())["sets"] if RESULT.exists() else {}
    result = {"command": COMMAND, "sets": {name: measure(name, earlier.get(name, {})) for name in SETS}}
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    for name, figures in result["sets"].items():
        print(f"{name}: reaching beyond the best sentence — real {figures['real_all']['share']:.0%} of {figures['real_all']['n']}, "
              f"the 240 asked {figures['real_240']['share']:.0%}; "
              + "; ".join(f"{writer} {kind} {share['share']:.0%} of {share['n']}" for writer, kinds in figures["generated"].items()
                          for kind, share in kinds.items()))
        for strategy, parts in (figures["retrieval_vs_plain_real_240"] or {}).items():
            print("   ", strategy, "against plain:", "; ".join(f"{label} {p['n']}: MRR {p['mean_mrr_change']:+.3f}, -{p['worse']}/+{p['better']}"
                                                         for label, p in parts.items()))


if __name__ == "__main__":
    main()
