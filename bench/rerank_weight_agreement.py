"""Would ``Reranker(retrieval_weight=2)`` as the default lift the agreement runs' retrieval τ? Their own candidates, no LLM.

``bench/rerank_questions.py`` chose ``retrieval_weight=2`` on SQuAD dev questions outside the agreement runs' 300
paragraphs: it makes the ``rerank`` feature neutral on people's questions where the default (1) loses. Making it
the default means running every committed figure measured with reranking on again — the agreement runs' ``rerank``
and ``full`` among them, hours of LLM time on 2 cores. This script says first what that would do to retrieval τ,
exactly and cheaply, because a run's retrieval measure needs no LLM once its candidates are known:

for every row of the finished ``rerank`` and ``full`` runs (``bench/.cache/eval_agreement/``, real and generated, every
committed generated set: each writer's 120 items and the 1.5B's 240), the retrieval step's 10 candidates are stored;
the real :class:`~ragkit.components.reranker.Reranker` reorders them with the default weight, and where that reproduces the row's stored sources (the five documents the
answer was written from) the reranker alone decided them, so the same candidates reordered with weight 2 give the
row's sources under the candidate default, and its MRR. A row the reranker alone does not explain (a HyDE passage
as query, a self-correction's second retrieval, a route without retrieval) keeps its measured MRR, counted.

Then retrieval τ between the generated and the real rankings, as ``bench/eval_agreement.py`` computes it, with
every other strategy's rows as measured. **A what-if, not a run**: the answers would change with the sources and are
not re-asked, so no answers τ is given; nothing is chosen from this on the scored sets — the weight was chosen
elsewhere, and this says whether re-measuring with it is worth the hours.

    .venv/bin/python bench/rerank_weight_agreement.py    # minutes -> bench/results/rerank_weight_agreement.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from eval_agreement import CACHE, COMMITTED_GENERATED_SETS, FIRST_WRITER, OUT, STRATEGIES, agreement, run_folder, sampled_paragraphs  # noqa: E402
from squad_common import run_facts  # noqa: E402

from ragkit.components.reranker import Reranker  # noqa: E402
from ragkit.eval.experiment_sets import index_documents  # noqa: E402
from ragkit.eval.runs import load_run  # noqa: E402
from ragkit.eval.scoring import retrieval_scores  # noqa: E402

SETS, REAL = ("squad_dev", "new_wiki"), 240
RERANKED = ("rerank", "full")
CANDIDATE_WEIGHT, TOP_K = 2.0, 5
RESULT = REPO / "bench" / "results" / "rerank_weight_agreement.json"
COMMAND = ".venv/bin/python bench/rerank_weight_agreement.py"


def reweighted(rows: list[dict], chunks: dict, default: Reranker, candidate: Reranker) -> tuple[list[dict], dict]:
    """The rows with ``mrr`` as the candidate weight would give it where the default reranker alone explains the sources."""
    out, counts = [], {"rows": len(rows), "no_retrieval_measure": 0, "reordered": 0, "kept_as_measured": 0, "mrr_changed": 0}
    for row in rows:
        candidates = [chunks[i] for i in row.get("retrieved", []) if i in chunks]
        if row.get("mrr") is None:  # an unanswerable item: no gold chunk, not in the retrieval τ
            out.append(row)
            counts["no_retrieval_measure"] += 1
            continue
        if len(candidates) <= TOP_K:
            out.append(row)
            counts["kept_as_measured"] += 1
            continue
        query = row["question"]  # the reranker's query in both strategies
        if [d.id for d in default.run(query=query, documents=candidates)["documents"]] != row["sources"]:
            out.append(row)
            counts["kept_as_measured"] += 1
            continue
        sources = [d.id for d in candidate.run(query=query, documents=candidates)["documents"]]
        mrr = round(retrieval_scores(sources, row["gold_chunks"], TOP_K)["mrr"], 4)
        counts["reordered"] += 1
        counts["mrr_changed"] += mrr != row["mrr"]
        out.append({**row, "mrr": mrr, "sources": sources})
    return out, counts


def measure_set(name: str, stored_sets: dict) -> dict:
    docs, _ = sampled_paragraphs(name, 300)
    index = index_documents(docs, CACHE / f"{name}_index_all-MiniLM-L6-v2")
    default, candidate = Reranker(backend="bi-encoder", top_k=TOP_K), Reranker(backend="bi-encoder", top_k=TOP_K, retrieval_weight=CANDIDATE_WEIGHT)
    real = {s: load_run(run_folder(name, 120, REAL, FIRST_WRITER, "real", s))["rows"] for s in STRATEGIES}
    real_after, real_counts = dict(real), {}
    for s in RERANKED:
        real_after[s], real_counts[s] = reweighted(tqdm(real[s], desc=f"{name} real {s}", file=sys.stderr), index.chunks, default, candidate)
    figures: dict = {"real_rows": real_counts}
    for writer, size in COMMITTED_GENERATED_SETS:
        generated = {s: load_run(run_folder(name, size, REAL, writer, "generated", s))["rows"] for s in STRATEGIES}
        after, counts = dict(generated), {}
        for s in RERANKED:
            after[s], counts[s] = reweighted(tqdm(generated[s], desc=f"{name} {writer} {size} {s}", file=sys.stderr), index.chunks, default, candidate)
        keep = lambda r: r["kind"] != "unanswerable"  # noqa: E731 — as bench/eval_agreement.py's retrieval τ
        measured, what_if = agreement(generated, real, "mrr", keep), agreement(after, real_after, "mrr", keep)
        figures[f"{writer} {size}"] = {
            "stored_tau": stored_tau(stored_sets.get(name, {}), writer, size),
            "measured": {"tau": measured["tau"], "interval95": measured["interval95"]},
            "retrieval_weight_2": {"tau": what_if["tau"], "interval95": what_if["interval95"]},
            "mrr": {s: {"generated": [measured["generated"][s], what_if["generated"][s]], "real": [measured["real"][s], what_if["real"][s]]} for s in ("plain", *RERANKED)},
            "generated_rows": counts,
        }
    return figures


def stored_tau(entry: dict, writer: str, size: int) -> float | None:
    """The committed retrieval τ of that writer's set of ``size`` items against the 240 real questions (the recomputed
    one must equal it)."""
    if entry.get("writer_model", FIRST_WRITER) == writer:
        section = entry.get("larger_real") if size == 120 else None
    else:
        section = entry.get("by_writer", {}).get(writer, {}).get(f"real{REAL}" if size == 120 else f"real{REAL}-generated{size}")
    return section["kendall_tau"]["retrieval"] if section else None


def main() -> None:
    started = time.perf_counter()
    stored = json.loads(OUT.read_text())["sets"]
    result = {"command": COMMAND, "candidate_retrieval_weight": CANDIDATE_WEIGHT, "real_questions": REAL, "sets": {name: measure_set(name, stored) for name in SETS}}
    result |= {"seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    for name, by_writer in result["sets"].items():
        print(name, "real rows:", by_writer["real_rows"])
        for writer, size in COMMITTED_GENERATED_SETS:
            f = by_writer[f"{writer} {size}"]
            print(f"  {writer} {size}: retrieval τ stored {f['stored_tau']}, recomputed {f['measured']['tau']} {f['measured']['interval95']}, "
                  f"weight 2 {f['retrieval_weight_2']['tau']} {f['retrieval_weight_2']['interval95']}; rows {f['generated_rows']}")
            for s, m in f["mrr"].items():
                print(f"     {s}: generated {m['generated'][0]:.3f} -> {m['generated'][1]:.3f}, real {m['real'][0]:.3f} -> {m['real'][1]:.3f}")


if __name__ == "__main__":
    main()
