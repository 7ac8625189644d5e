"""Does the ``rerank`` feature help retrieval on people's questions? Thousands of them, no LLM.

``bench/rerank_squad.py`` chose the offline reranker (the embedded bi-encoder's best sentence, fused with the
retrieval order) on 150 SQuAD dev questions, by recall at 3 and 5 among 15 candidates. ``bench/eval_agreement.py``
then measured the ``rerank`` strategy losing MRR against ``plain`` on 240 real SQuAD dev questions (−44/+19). Too
few to say whether that is the reranker or those questions; this script asks thousands, as the pipeline runs:

* ``plain``: the documents ``Features()`` hands the answer prompt (hybrid retrieval's top 5);
* ``rerank``: ``Features(rerank=True)``'s — its 10 hybrid candidates reordered by the real
  :class:`~ragkit.components.reranker.Reranker`, top 5 — the script calls that component on the pipeline's own
  candidates, and asserts on each part's first questions that the pipeline orders them the same;
* ``rerank, retrieval weighted 2``: the same component with ``retrieval_weight=2`` — the reranker's order
  breaking the retrieval order's near-ties instead of outvoting it. A candidate default, **chosen on SQuAD dev's
  questions outside the 300 paragraphs the agreement runs sample** and reported on new_wiki and on those 300's
  questions; ragkit's default is unchanged by this script.

Measured per set on every question of the agreement runs' 300 paragraphs and on 1,000 seeded questions of the
other paragraphs (every paragraph indexed, as there): MRR@5, R@1 and R@5 of the gold paragraph, each strategy's
difference from ``plain`` with its paired bootstrap 95% interval, and how many questions it ranks worse / better.

    .venv/bin/python bench/rerank_questions.py     # ~6 min on 2 cores -> bench/results/rerank_questions.json
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from eval_agreement import CACHE, sampled_paragraphs  # noqa: E402
from squad_common import run_facts  # noqa: E402

from ragkit.components.reranker import Reranker  # noqa: E402
from ragkit.config import RagConfig  # noqa: E402
from ragkit.eval.compare import paired_bootstrap  # noqa: E402
from ragkit.eval.experiment_sets import index_documents, load_squad_corpus  # noqa: E402
from ragkit.eval.testset import squad_file  # noqa: E402
from ragkit.pipeline.engine import AgenticRAG  # noqa: E402
from ragkit.pipeline.features import Features  # noqa: E402

SETS = ("squad_dev", "new_wiki")
PARAGRAPHS, OTHER_QUESTIONS, SEED, TOP_K = 300, 1000, 23, 5
PIPELINE_CHECKED = 50  # questions a part whose reranked order is also read from the whole pipeline
CANDIDATE_WEIGHT = 2.0
RESULT = REPO / "bench" / "results" / "rerank_questions.json"
COMMAND = ".venv/bin/python bench/rerank_questions.py"


def gold_measures(ids: list[str], gold: str) -> dict[str, float]:
    """MRR@5, R@1 and R@5 of one gold paragraph in a ranked list of ids."""
    top = ids[:TOP_K]
    return {"mrr@5": 1 / (top.index(gold) + 1) if gold in top else 0.0, "r@1": float(top[:1] == [gold]), "r@5": float(gold in top)}


def against_plain(plain: list[dict], other: list[dict]) -> dict:
    figures = {}
    for measure in ("mrr@5", "r@1", "r@5"):
        a, b = [row[measure] for row in plain], [row[measure] for row in other]
        diff, low, high = paired_bootstrap(a, b, samples=2000, seed=SEED)
        figures[measure] = {"value": round(sum(b) / len(b), 4), "change": round(diff, 4), "interval95": [round(low, 4), round(high, 4)]}
    deltas = [y["mrr@5"] - x["mrr@5"] for x, y in zip(plain, other)]
    figures["worse"], figures["better"] = sum(d < 0 for d in deltas), sum(d > 0 for d in deltas)
    return figures


def indexed_parts(name: str) -> tuple[Any, dict[str, list[dict]]]:
    """The set's index (every paragraph) and its two parts of people's questions: every question of the agreement runs'
    300 paragraphs, and 1,000 seeded ones of the other paragraphs (where candidate rerankers are chosen)."""
    docs, chosen = sampled_paragraphs(name, PARAGRAPHS)
    chosen = set(chosen)
    index = index_documents(docs, CACHE / f"{name}_index_all-MiniLM-L6-v2")
    _, questions = load_squad_corpus(squad_file(name))
    others = [q for q in questions if q["doc_id"] not in chosen]
    random.Random(SEED).shuffle(others)
    return index, {"agreement_paragraphs": [q for q in questions if q["doc_id"] in chosen], "other_paragraphs": others[:OTHER_QUESTIONS]}


def measure_set(name: str) -> dict:
    index, parts = indexed_parts(name)
    plain_rag = AgenticRAG(Features(), config=RagConfig(), index=index)
    rerank_rag = AgenticRAG(Features(rerank=True), config=RagConfig(), index=index)
    current, weighted = Reranker(backend="bi-encoder", top_k=TOP_K), Reranker(backend="bi-encoder", top_k=TOP_K, retrieval_weight=CANDIDATE_WEIGHT)
    result = {}
    for part, asked in parts.items():
        rows: dict[str, list[dict]] = {"plain": [], "rerank": [], "rerank, retrieval weighted 2": []}
        for asked_so_far, q in enumerate(tqdm(asked, desc=f"{name} {part}", file=sys.stderr)):
            plain = [d.id for d in plain_rag.pause_before(q["question"], "answer_prompt").inputs["documents"]]
            candidates = rerank_rag.pause_before(q["question"], "rerank").inputs["documents"]
            reranked = [d.id for d in current.run(query=q["question"], documents=candidates)["documents"]]
            if asked_so_far < PIPELINE_CHECKED:
                assert [d.id for d in rerank_rag.pause_before(q["question"], "answer_prompt").inputs["documents"]] == reranked, "the pipeline's reranker"
            reweighted = [d.id for d in weighted.run(query=q["question"], documents=candidates)["documents"]]
            for label, ids in (("plain", plain), ("rerank", reranked), ("rerank, retrieval weighted 2", reweighted)):
                rows[label].append(gold_measures(ids, q["doc_id"]))
        result[part] = {"questions": len(asked), "plain": {m: round(sum(r[m] for r in rows["plain"]) / len(asked), 4) for m in ("mrr@5", "r@1", "r@5")},
                        **{label: against_plain(rows["plain"], rows[label]) for label in rows if label != "plain"}}
    return result


def main() -> None:
    started = time.perf_counter()
    result = {"command": COMMAND, "top_k": TOP_K, "rerank_candidates": Features().rerank_candidates,
              "chosen_on": "squad_dev other_paragraphs", "sets": {name: measure_set(name) for name in SETS}}
    result |= {"seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    for name, parts in result["sets"].items():
        for part, figures in parts.items():
            print(f"{name} {part} ({figures['questions']}): plain MRR@5 {figures['plain']['mrr@5']:.3f} R@1 {figures['plain']['r@1']:.3f} R@5 {figures['plain']['r@5']:.3f}")
            for label in ("rerank", "rerank, retrieval weighted 2"):
                f = figures[label]
                print(f"   {label:30s} " + "  ".join(f"{m} {f[m]['change']:+.4f} [{f[m]['interval95'][0]:+.4f}, {f[m]['interval95'][1]:+.4f}]" for m in ("mrr@5", "r@1", "r@5"))
                      + f"  -{f['worse']}/+{f['better']}")


if __name__ == "__main__":
    main()
