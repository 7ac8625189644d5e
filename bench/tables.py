"""Print the README's markdown tables from bench/results/*.json, so the README never drifts from them.

    .venv/bin/python bench/tables.py            # every table whose JSON exists
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def judge_table(d: dict) -> str:
    lines = [
        "| judge | balanced accuracy at 0.5 | ROC AUC | judged supported at 0.5: supported / contradicted / unsupported | calibrated threshold | held-out balanced accuracy: calibrated / at 0.5 | p50 ms/item |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, variants in d["results"].items():
        r = variants["with_question"]
        k = r["per_kind"]
        c = r.get("calibrated")
        calibrated = f"{c['threshold']:.2f} | {c['held_out_balanced_accuracy']:.3f} / {c['held_out_balanced_accuracy_at_0.5']:.3f}" if c else "– | –"
        lines.append(
            f"| {model} | {r['balanced_accuracy']:.3f} | {r['roc_auc']:.3f} | "
            f"{k['supported']['judged_supported']:.2f} / {k['contradicted']['judged_supported']:.2f} / {k['unsupported']['judged_supported']:.2f} | {calibrated} | {r['ms_p50']:.0f} |"
        )
    return "\n".join(lines)


def rerank_table(d: dict) -> str:
    lines = ["| reranker (15 hybrid candidates) | questions | R@1 | R@3 | R@5 | MRR | p50 ms/q |", "| --- | --- | --- | --- | --- | --- | --- |"]
    rows = dict(d["all_questions"])
    subset_key = next(k for k in d if k.startswith("first_"))
    for name in ("llm", "llm+fused"):
        if name in d[subset_key]:
            rows[name] = d[subset_key][name]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['questions']} | {r['recall@1']:.3f} | {r['recall@3']:.3f} | {r['recall@5']:.3f} | {r['mrr']:.3f} | {r['ms_per_q_p50']:.0f} |")
    return "\n".join(lines)


def main() -> int:
    for name, fn in (("judge_squad.json", judge_table), ("rerank_squad.json", rerank_table)):
        data = load(name)
        if data:
            print(f"<!-- {name} -->\n{fn(data)}\n")
    agentic = RESULTS / "agentic_squad.md"
    if agentic.exists():
        print(f"<!-- agentic_squad.json -->\n{agentic.read_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
