"""Which kind of generated question makes a generated set favour the reranker? The finished agreement runs, no LLM.

``bench/eval_agreement.py``'s generated sets rank ``rerank`` above ``plain`` on retrieval in four of six cases,
where people's questions about the same paragraphs rank it below (``bench/rerank_questions.py``). Each generated
item is tagged with its kind (single fact, paraphrase, multi-part; unanswerable items have no source to retrieve),
so the finished runs say where that favour comes from: per set, writer and kind, the ``rerank`` run's MRR minus the
``plain`` run's on the same items, with its paired-bootstrap 95 % interval — and the same for people's 240 questions.

It reads ``bench/.cache/eval_agreement/`` (the runs ``bench/eval_agreement.py`` leaves there; a set whose runs are
missing is skipped and named). **Observed on the scored sets, nothing is chosen from it**: a kind mix picked to
agree with people here would be tuned on what it is scored on.

    .venv/bin/python bench/rerank_by_kind.py     # seconds -> bench/results/rerank_by_kind.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from eval_agreement import COMMITTED_GENERATED_SETS, FIRST_WRITER, run_folder  # noqa: E402

from ragkit.eval.compare import paired_bootstrap  # noqa: E402
from ragkit.eval.runs import load_run  # noqa: E402

SETS = ("squad_dev", "new_wiki")
REAL, KINDS, SEED = 240, ("single", "paraphrase", "multi"), 29
RESULT = REPO / "bench" / "results" / "rerank_by_kind.json"
COMMAND = ".venv/bin/python bench/rerank_by_kind.py"


def rerank_change(plain_rows: list[dict], rerank_rows: list[dict]) -> dict:
    """rerank's MRR minus plain's on the same items (matched by id), with its interval."""
    rerank_by_id = {row["id"]: row for row in rerank_rows}
    pairs = [(row["mrr"], rerank_by_id[row["id"]]["mrr"]) for row in plain_rows
             if row.get("mrr") is not None and rerank_by_id.get(row["id"], {}).get("mrr") is not None]
    if not pairs:
        return {"items": 0}
    change, low, high = paired_bootstrap([a for a, _ in pairs], [b for _, b in pairs], samples=2000, seed=SEED)
    return {"items": len(pairs), "plain_mrr": round(sum(a for a, _ in pairs) / len(pairs), 4), "change": round(change, 4),
            "interval95": [round(low, 4), round(high, 4)], "worse": sum(b < a for a, b in pairs), "better": sum(b > a for a, b in pairs)}


def runs_of(set_name: str, generated: int, writer: str, which: str) -> tuple[list[dict], list[dict]] | None:
    folders = [run_folder(set_name, generated, REAL, writer, which, s) for s in ("plain", "rerank")]
    if not all((folder / "run.json").exists() for folder in folders):
        return None
    return load_run(folders[0])["rows"], load_run(folders[1])["rows"]


def main() -> None:
    result: dict = {"command": COMMAND, "real_questions": REAL, "sets": {}, "missing": []}
    for set_name in SETS:
        entry: dict = {}
        real = runs_of(set_name, 120, FIRST_WRITER, "real")
        if real is None:
            result["missing"].append(f"{set_name} real")
        else:
            entry["people"] = rerank_change(*real)
        for writer, size in COMMITTED_GENERATED_SETS:
            runs = runs_of(set_name, size, writer, "generated")
            if runs is None:
                result["missing"].append(f"{set_name} {writer} {size}")
                continue
            plain_rows, rerank_rows = runs
            entry[f"{writer} {size}"] = {"all": rerank_change(plain_rows, rerank_rows),
                                         **{kind: rerank_change([r for r in plain_rows if r.get("kind") == kind], rerank_rows) for kind in KINDS}}
        result["sets"][set_name] = entry
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    for set_name, entry in result["sets"].items():
        for name, figures in entry.items():
            parts = {"all": figures} if name == "people" else figures
            print(f"{set_name} {name}: " + "; ".join(f"{kind} {f['change']:+.3f} [{f['interval95'][0]:+.3f}, {f['interval95'][1]:+.3f}] n={f['items']}"
                                                    for kind, f in parts.items() if f["items"]))
    if result["missing"]:
        print("missing (run bench/eval_agreement.py first):", ", ".join(result["missing"]))


if __name__ == "__main__":
    main()
