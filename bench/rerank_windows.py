"""Would the reranker help people's questions if it scored windows of sentences? No LLM; one choosing set.

People's questions reach beyond their answer's sentence far more often than a sentence writer's items
(``bench/question_reach.py``), and the bi-encoder reranker scores a chunk by its *best single sentence*
(:mod:`ragkit.components.reranker`). So a window of ``w`` consecutive sentences (the best window's cosine to the
question) might serve people better. Six other variants of score and fusion were tried before
(docs/agentic_features.md); this one was not.

The rule, written before anything was measured: variants ``w`` ∈ {1, 2, 3} (1 is today's best sentence), each fused
with the retrieval order at weight 1 and 2 (:func:`~ragkit.components.reranker.fused_order`), are measured **only on
SQuAD dev's 1,000 seeded questions outside the 300 paragraphs the agreement runs sample** — the questions
``bench/rerank_questions.py`` chose ``retrieval_weight=2`` on. A variant becomes a candidate only if its MRR@5 change
against plain has a paired-bootstrap 95 % interval entirely above 0 (it *helps* people's retrieval); among those,
the largest change. None did (``chosen`` is null in the result), so nothing else is measured and ragkit is unchanged.

Windows are not a :class:`~ragkit.components.reranker.Reranker` option, so this script scores them itself, with the
same embedder, sentence splitter and fusion; its ``w = 1`` rows are checked against the real component's order on
every question.

    .venv/bin/python bench/rerank_windows.py     # ~3 min on 2 cores -> bench/results/rerank_windows.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rerank_questions import TOP_K, against_plain, gold_measures, indexed_parts  # noqa: E402
from squad_common import run_facts  # noqa: E402

from ragkit.components.reranker import Reranker, fused_order, split_passage  # noqa: E402
from ragkit.config import RagConfig  # noqa: E402
from ragkit.llm.generators import shared_text_embedder  # noqa: E402
from ragkit.pipeline.engine import AgenticRAG  # noqa: E402
from ragkit.pipeline.features import Features  # noqa: E402

CHOOSING_SET = "squad_dev"
WINDOWS, WEIGHTS = (1, 2, 3), (1.0, 2.0)
RESULT = REPO / "bench" / "results" / "rerank_windows.json"
COMMAND = ".venv/bin/python bench/rerank_windows.py"


def sentence_windows(text: str, width: int) -> list[str]:
    """Every run of ``width`` consecutive sentences of a chunk (the whole chunk when it has fewer)."""
    sentences = split_passage(text)
    if len(sentences) <= width:
        return [" ".join(sentences)]
    return [" ".join(sentences[i : i + width]) for i in range(len(sentences) - width + 1)]


def label(width: int, weight: float) -> str:
    return f"best {width}-sentence window, retrieval weighted {weight:g}"


def main() -> None:
    started = time.perf_counter()
    index, parts = indexed_parts(CHOOSING_SET)
    asked = parts["other_paragraphs"]  # the same 1,000 as bench/rerank_questions.py's

    plain_rag = AgenticRAG(Features(), config=RagConfig(), index=index)
    rerank_rag = AgenticRAG(Features(rerank=True), config=RagConfig(), index=index)
    reranker = Reranker(backend="bi-encoder", top_k=TOP_K)
    embedder, vectors = shared_text_embedder("all-MiniLM-L6-v2"), reranker.sentence_cache()  # the reranker's own, shared
    rows: dict[str, list[dict]] = {"plain": [], **{label(w, k): [] for w in WINDOWS for k in WEIGHTS}}
    for q in tqdm(asked, desc=f"{CHOOSING_SET} other paragraphs", file=sys.stderr):
        rows["plain"].append(gold_measures([d.id for d in plain_rag.pause_before(q["question"], "answer_prompt").inputs["documents"]], q["doc_id"]))
        candidates = rerank_rag.pause_before(q["question"], "rerank").inputs["documents"]
        query = np.asarray(embedder.embedding_backend.embed([q["question"]], normalize_embeddings=True, show_progress_bar=False), dtype=np.float32)[0]
        for width in WINDOWS:
            scores = [float((vectors.vectors(sentence_windows(d.content or "", width)) @ query).max()) for d in candidates]
            for weight in WEIGHTS:
                ids = [candidates[i].id for i in fused_order(scores, weight)[:TOP_K]]
                if width == 1 and weight == 1.0:
                    assert ids == [d.id for d in reranker.run(query=q["question"], documents=candidates)["documents"]], "w = 1 is the real reranker"
                rows[label(width, weight)].append(gold_measures(ids, q["doc_id"]))

    variants = {name: against_plain(rows["plain"], rows[name]) for name in rows if name != "plain"}
    helping = {name: f["mrr@5"]["change"] for name, f in variants.items() if f["mrr@5"]["interval95"][0] > 0}
    result = {
        "command": COMMAND, "set": CHOOSING_SET, "part": "other_paragraphs", "questions": len(asked), "top_k": TOP_K,
        "rerank_candidates": Features().rerank_candidates,
        "rule": "candidate only if the MRR@5 change against plain has a 95% interval entirely above 0; the largest such change",
        "default": label(1, 1.0), "plain": {m: round(sum(r[m] for r in rows["plain"]) / len(asked), 4) for m in ("mrr@5", "r@1", "r@5")},
        "variants": variants, "chosen": max(helping, key=helping.get) if helping else None,
        "seconds": round(time.perf_counter() - started, 1), "run": run_facts(),
    }
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{CHOOSING_SET} other paragraphs ({len(asked)}): plain MRR@5 {result['plain']['mrr@5']:.3f}")
    for name, f in variants.items():
        print(f"   {name:50s} " + "  ".join(f"{m} {f[m]['change']:+.4f} [{f[m]['interval95'][0]:+.4f}, {f[m]['interval95'][1]:+.4f}]" for m in ("mrr@5", "r@1", "r@5")))
    print("chosen:", result["chosen"])


if __name__ == "__main__":
    main()
