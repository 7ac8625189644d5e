"""Balanced accuracy of the hallucination judge on a labelled SQuAD set.

Items are built from SQuAD v1.1 dev (seeded): for a question with its paragraph,

* ``supported`` — the gold answer;
* ``contradicted`` — the gold answer of *another* question on the same paragraph: stated in the
  sources, but a different fact than the one asked for (e.g. the losing team for "who won?");
* ``unsupported`` — a gold answer of the same question type (who/when/how many/...) from another
  article, absent from the sources: plausible, but nothing supports it.

The judge sees the gold paragraph plus one other paragraph of the same article (shuffled), the
question, and the answer — the layout the pipeline uses. Positive class = supported; balanced
accuracy = mean of the recall on supported and on the two negative kinds together, at the
component's threshold (0.5). ROC AUC and the best threshold are reported as diagnostics (chosen
in-sample, so optimistic). HHEM-2.1-Open's published anchor: 74.28% balanced accuracy on RAGTruth-QA.

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

from squad_common import ROOT, load_squad, normalize_answer, run_facts

from haystack import Document

from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.config import ModelConfig
from ragkit.llm import build_chat_generator

WH = ("how many", "how much", "what year", "when", "who", "where", "which", "what", "why", "how")


def wh_type(question: str) -> str:
    q = question.lower()
    return next((w for w in WH if w in q), "other")


def build_items(n_supported: int, seed: int) -> list[dict]:
    docs, questions = load_squad()
    by_id = {d.id: d for d in docs}
    by_doc: dict[str, list[dict]] = {}
    for q in questions:
        by_doc.setdefault(q["doc_id"], []).append(q)
    by_type: dict[str, list[dict]] = {}
    for q in questions:
        by_type.setdefault(wh_type(q["question"]), []).append(q)
    rng = random.Random(seed)
    order = list(range(len(questions)))
    rng.shuffle(order)
    items, kinds = [], {"supported": 0, "contradicted": 0, "unsupported": 0}
    n_negative = n_supported // 2
    used_docs = set()
    for i in order:
        q = questions[i]
        if q["doc_id"] in used_docs:
            continue
        article, para = q["doc_id"].split("-")
        neighbours = [d for d in (f"{article}-{int(para) + 1}", f"{article}-{int(para) - 1}") if d in by_id]
        if not neighbours:
            continue
        sources = [by_id[q["doc_id"]], by_id[neighbours[0]]]
        rng.shuffle(sources)
        context_norm = " " + normalize_answer(" ".join(d.content for d in sources)) + " "
        gold_norm = {normalize_answer(a) for a in q["answers"]}
        candidates = []
        if kinds["contradicted"] < n_negative:
            others = [o for o in by_doc[q["doc_id"]] if o["id"] != q["id"]]
            others.sort(key=lambda o: wh_type(o["question"]) != wh_type(q["question"]))
            for o in others:
                a = o["answers"][0]
                a_norm = normalize_answer(a)
                if a_norm and not (set(a_norm.split()) & set(" ".join(gold_norm).split())):
                    candidates.append(("contradicted", a))
                    break
        if not candidates and kinds["unsupported"] < n_negative:
            pool = [o for o in by_type.get(wh_type(q["question"]), []) if not o["doc_id"].startswith(article + "-")]
            for o in rng.sample(pool, min(50, len(pool))):
                a_norm = normalize_answer(o["answers"][0])
                if a_norm and f" {a_norm} " not in context_norm:
                    candidates.append(("unsupported", o["answers"][0]))
                    break
        if kinds["supported"] < n_supported:
            candidates.append(("supported", q["answers"][0]))
        for kind, answer in candidates:
            items.append({"kind": kind, "question": q["question"], "answer": answer, "sources": [d.id for d in sources], "squad_id": q["id"]})
            kinds[kind] += 1
        used_docs.add(q["doc_id"])
        if kinds["supported"] >= n_supported and kinds["contradicted"] >= n_negative and kinds["unsupported"] >= n_negative:
            break
    for item in items:
        item["documents"] = [by_id[d] for d in item["sources"]]
    return items


def auc(pos: list[float], neg: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def evaluate(detector: HallucinationDetector, items: list[dict], with_question: bool) -> dict:
    scores, times, evaluated = [], [], 0
    probe = detector._probe
    for item in items:
        before = probe.evaluated_tokens if probe else 0
        t0 = time.perf_counter()
        out = detector.run(answer=item["answer"], documents=item["documents"], question=item["question"] if with_question else None)
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
    return {
        "with_question": with_question,
        "balanced_accuracy": round((tpr + tnr) / 2, 4),
        "recall_supported": round(tpr, 4),
        "recall_not_supported": round(tnr, 4),
        "roc_auc": round(auc(pos, neg), 4),
        "best_threshold_in_sample": {"threshold": best[0], "balanced_accuracy": round(best[1], 4)},
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
        detector = HallucinationDetector(backend="llm_judge", generator=generator, threshold=0.5)
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
