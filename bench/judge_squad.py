"""Balanced accuracy of the hallucination judge on a labelled SQuAD set.

Items are built from SQuAD v1.1 dev (seeded): for a question with its paragraph,

* ``supported`` — the gold answer;
* ``contradicted`` — the gold answer of *another* question on the same paragraph: stated in the
  sources, but a different fact than the one asked for (e.g. the losing team for "who won?");
* ``unsupported`` — a gold answer of the same question type (who/when/how many/...) from another
  article, absent from the sources: plausible, but nothing supports it.

The judge sees the gold paragraph plus one other paragraph of the same article (shuffled), the
question, and the answer — the layout the pipeline uses. Positive class = supported; balanced
accuracy = mean of the recall on supported and on the two negative kinds together.

A small model's P(yes) is not calibrated: 0.5 is an arbitrary cut (the 0.5B says "no" to most
true answers). So the items are split by question into a calibration half and a held-out half;
the threshold that maximises balanced accuracy on the calibration half is the model's shipped
threshold (``CALIBRATED_SUPPORT_THRESHOLDS`` in ragkit/components/hallucination_detector.py) and
is scored on the held-out half. Balanced accuracy at 0.5 on all items and ROC AUC are kept.
HHEM-2.1-Open's published anchor: 74.28% balanced accuracy on RAGTruth-QA.

    .venv/bin/python bench/judge_squad.py                               # 0.5B and 1.5B, 160 items
    .venv/bin/python bench/judge_squad.py --models qwen2.5-coder-0.5b --answer-only-too
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from squad_common import ROOT, load_squad, run_facts


from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.eval.experiments import judge_items
from ragkit.config import ModelConfig
from ragkit.llm.generators import build_chat_generator

def build_items(n_supported: int, seed: int) -> list[dict]:
    docs, questions = load_squad()
    return judge_items(docs, questions, n_supported, seed)


def auc(pos: list[float], neg: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def balanced_accuracy(scores: list[float | None], items: list[dict], threshold: float) -> float:
    pos = [s for s, it in zip(scores, items) if it["kind"] == "supported" and s is not None]
    neg = [s for s, it in zip(scores, items) if it["kind"] != "supported" and s is not None]
    return (sum(s >= threshold for s in pos) / len(pos) + sum(s < threshold for s in neg) / len(neg)) / 2


def best_threshold(scores: list[float | None], items: list[dict]) -> float:
    """The cut in 0.01 steps maximising balanced accuracy (the middle of the best plateau)."""
    grid = [t / 100 for t in range(1, 100)]
    accuracies = [balanced_accuracy(scores, items, t) for t in grid]
    top = max(accuracies)
    plateau = [t for t, a in zip(grid, accuracies) if a == top]
    return plateau[len(plateau) // 2]


def calibration_split(items: list[dict]) -> list[bool]:
    """True = calibration half; split by SQuAD question so an item's negatives stay with it."""
    ids = sorted({it["squad_id"] for it in items})
    random.Random(7).shuffle(ids)
    calibration = set(ids[: len(ids) // 2])
    return [it["squad_id"] in calibration for it in items]


def evaluate(detector: HallucinationDetector, items: list[dict], with_question: bool) -> dict:
    scores, times, evaluated = [], [], 0
    probe = detector._probe
    for item in items:
        before = probe.evaluated_tokens if probe else 0
        t0 = time.perf_counter()
        out = detector.run(replies=[item["answer"]], documents=item["documents"], query=item["question"] if with_question else None)
        times.append(time.perf_counter() - t0)
        evaluated += (probe.evaluated_tokens - before) if probe else 0
        scores.append(out["score"])
    pos = [s for s, it in zip(scores, items) if it["kind"] == "supported" and s is not None]
    neg = [s for s, it in zip(scores, items) if it["kind"] != "supported" and s is not None]
    threshold = detector.threshold
    tpr = sum(s >= threshold for s in pos) / len(pos)
    tnr = sum(s < threshold for s in neg) / len(neg)
    per_kind = {}
    for kind in ("supported", "contradicted", "unsupported"):
        ks = [s for s, it in zip(scores, items) if it["kind"] == kind and s is not None]
        per_kind[kind] = {"n": len(ks), "judged_supported": round(sum(s >= threshold for s in ks) / max(len(ks), 1), 4), "mean_p_supported": round(statistics.fmean(ks), 4) if ks else None}
    best = max(((t / 100, (sum(s >= t / 100 for s in pos) / len(pos) + sum(s < t / 100 for s in neg) / len(neg)) / 2) for t in range(1, 100)), key=lambda x: x[1])
    in_calibration = calibration_split(items)
    cal = [(s, it) for s, it, c in zip(scores, items, in_calibration) if c]
    held = [(s, it) for s, it, c in zip(scores, items, in_calibration) if not c]
    calibrated = best_threshold([s for s, _ in cal], [it for _, it in cal])
    return {
        "with_question": with_question,
        "balanced_accuracy": round((tpr + tnr) / 2, 4),
        "recall_supported": round(tpr, 4),
        "recall_not_supported": round(tnr, 4),
        "roc_auc": round(auc(pos, neg), 4),
        "best_threshold_in_sample": {"threshold": best[0], "balanced_accuracy": round(best[1], 4)},
        "calibrated": {
            "threshold": calibrated,
            "calibration_items": len(cal),
            "held_out_items": len(held),
            "held_out_balanced_accuracy": round(balanced_accuracy([s for s, _ in held], [it for _, it in held], calibrated), 4),
            "held_out_balanced_accuracy_at_0.5": round(balanced_accuracy([s for s, _ in held], [it for _, it in held], 0.5), 4),
        },
        "scores": [None if s is None else round(s, 4) for s in scores],
        "per_kind": per_kind,
        "failed": sum(s is None for s in scores),
        "ms_p50": round(statistics.median(times) * 1000, 1),
        "prompt_tokens_evaluated_per_item": round(evaluated / len(items), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--items", type=int, default=80, help="supported items; as many negatives are added (half contradicted, half unsupported)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--answer-only-too", action="store_true", help="also judge without showing the question")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "judge_squad.json"))
    args = parser.parse_args()
    items = build_items(args.items, args.seed)
    kinds = {k: sum(it["kind"] == k for it in items) for k in ("supported", "contradicted", "unsupported")}
    print(f"{len(items)} items: {kinds}", file=sys.stderr)
    results = {}
    for model in args.models:
        generator = build_chat_generator(ModelConfig(llm=model))
        generator.warm_up()
        detector = HallucinationDetector(backend="llm_judge", chat_generator=generator, threshold=0.5)
        results[model] = {"with_question": evaluate(detector, items, True)}
        if args.answer_only_too:
            results[model]["answer_only"] = evaluate(detector, items, False)
        print(model, json.dumps(results[model], indent=1), file=sys.stderr)
        del detector, generator
    report = {
        "benchmark": "hallucination judge, SQuAD v1.1 dev labelled set",
        "command": "python bench/judge_squad.py " + " ".join(sys.argv[1:]),
        "items": len(items),
        "kinds": kinds,
        "seed": args.seed,
        "threshold": 0.5,
        "anchor": {"hhem-2.1-open_ragtruth_qa_balanced_accuracy": 0.7428},
        "results": results,
        "examples": [{k: it[k] for k in ("kind", "question", "answer", "squad_id")} for it in items[:6]],
        "run": run_facts(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
