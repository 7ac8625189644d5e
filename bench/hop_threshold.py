"""Choose the multi-hop step's coverage threshold (``Features.hop_coverage``) on development questions only.

The coverage check (:class:`ragkit.components.multi_hop.MultiHopReasoner`, ``check="coverage"``) hops when
the best of the first retrieval's chunks holds less than ``hop_coverage`` of the question's IDF-weighted
terms. A good threshold hops on questions that need a second retrieval and not on those that do not:

``bridge``  the 12 development two-hop questions over ``sample_docs/`` (``bench/data/bridge_questions.jsonl``,
            ``dev`` split): should hop;
``single``  200 single-hop SQuAD v1.1 dev questions (seed 99) that are neither among the questions
            ``answer_quality.py`` reports nor parts of ``planning.py``'s two-part questions: should not.

For each threshold of a grid: how many of each would hop, and the balanced accuracy (mean of the two
rates of being right); the best one is reported as ``chosen``. Hybrid top 5, no LLM (~2 min):

    .venv/bin/python bench/hop_threshold.py      # -> bench/results/hop_threshold.json
"""

from __future__ import annotations

import json
import random
import sys

from answer_quality import SETS, sample
from planning import _OPENS_LIKE_A_QUESTION, BRIDGE, two_part_questions
from squad_common import CACHE, ROOT, run_facts

from ragkit.index.coverage import coverage, question_weights
from ragkit.components.index_retriever import IndexRetriever
from ragkit.config import RagConfig
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.index.indexer import build_index
from ragkit.index.store import RagIndex

OUT = ROOT / "bench" / "results" / "hop_threshold.json"
GRID = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
TOP_K = 5


def best_chunk_coverage(index: RagIndex, retriever: IndexRetriever, question: str) -> float:
    docs = retriever.run(query=question, top_k=TOP_K)["documents"]
    return coverage(question_weights(index, question), index.terms([d.content or "" for d in docs]))


def main() -> int:
    index_dir = CACHE / "sample_docs_index"
    if not index_dir.exists():
        build_index(ROOT / "sample_docs", index_dir, RagConfig(), progress=False)
    sample_index = RagIndex.load(index_dir)
    bridge_questions = [q for q in map(json.loads, BRIDGE.read_text().splitlines()) if q["split"] == "dev"]
    bridge = [best_chunk_coverage(sample_index, IndexRetriever(index=sample_index, mode="hybrid"), q["question"]) for q in bridge_questions]

    docs, questions = load_squad_corpus(SETS["squad_dev"])
    squad_index = index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2")
    used = {p["id"] for pair in two_part_questions(questions, 200) for p in pair["parts"]} | {q["id"] for q in sample("squad_dev", questions, 400)}
    pool = [q for q in questions if q["id"] not in used and _OPENS_LIKE_A_QUESTION.match(q["question"])]
    random.Random(99).shuffle(pool)
    retriever = IndexRetriever(index=squad_index, mode="hybrid")
    single = [best_chunk_coverage(squad_index, retriever, q["question"]) for q in pool[:200]]

    grid = []
    for t in GRID:
        hop_bridge, hop_single = sum(c < t for c in bridge), sum(c < t for c in single)
        balanced = (hop_bridge / len(bridge) + (len(single) - hop_single) / len(single)) / 2
        grid.append({"threshold": t, "bridge_hops": hop_bridge, "single_hops": hop_single, "balanced_accuracy": round(balanced, 4)})
    chosen = max(grid, key=lambda g: (g["balanced_accuracy"], -g["threshold"]))
    data = {"n": {"bridge": len(bridge), "single": len(single)}, "grid": grid, "chosen": chosen["threshold"],
            "bridge_coverage": sorted(round(c, 3) for c in bridge), "command": "python bench/hop_threshold.py", "run": run_facts()}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({"chosen": chosen, "grid": grid}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
