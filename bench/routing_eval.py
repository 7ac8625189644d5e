"""Query-router accuracy and latency per backend on the labelled set tests/data/routing_questions.jsonl.

80 questions over sample_docs/, 16 per class. The embedding backend's prototypes are generic example
questions about none of these documents (ragkit/components/query_router.py), so this measures
generalisation, not memorisation. All backends run in one process on the same questions.

    .venv/bin/python bench/routing_eval.py                         # rules + embedding + LLM (0.5B)
    .venv/bin/python bench/routing_eval.py --llm qwen2.5-coder-1.5b
    .venv/bin/python bench/routing_eval.py --no-llm
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from ragkit.components.query_router import ROUTES, QueryRouter
from ragkit.config import ModelConfig
from ragkit.llm import build_chat_generator

ROOT = Path(__file__).resolve().parent.parent


def evaluate(router: QueryRouter, rows: list[dict]) -> dict:
    router.warm_up()
    router.run(query="warm up")
    correct, times, fallbacks = 0, [], 0
    confusion: Counter = Counter()
    per_class: Counter = Counter()
    for row in rows:
        t0 = time.perf_counter()
        out = router.run(query=row["question"])
        times.append((time.perf_counter() - t0) * 1000)
        fallbacks += "fallback" in out["routing"]
        confusion[(row["label"], out["route"])] += 1
        if out["route"] == row["label"]:
            correct += 1
            per_class[row["label"]] += 1
    counts = Counter(r["label"] for r in rows)
    return {
        "accuracy": round(correct / len(rows), 4),
        "per_class_accuracy": {label: round(per_class[label] / counts[label], 4) for label in ROUTES},
        "ms_p50": round(statistics.median(times), 2),
        "ms_p95": round(sorted(times)[int(0.95 * (len(times) - 1))], 2),
        "fallbacks": fallbacks,
        "confusion": {f"{gold}->{pred}": n for (gold, pred), n in sorted(confusion.items()) if gold != pred},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--no-llm", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "routing.json"))
    args = parser.parse_args()
    rows = [json.loads(line) for line in (ROOT / "tests" / "data" / "routing_questions.jsonl").read_text().splitlines() if line.strip()]
    results = {"rules": evaluate(QueryRouter(backend="rules"), rows), "embedding": evaluate(QueryRouter(backend="embedding"), rows)}
    if not args.no_llm:
        generator = build_chat_generator(ModelConfig(llm=args.llm))
        results[f"llm ({args.llm})"] = evaluate(QueryRouter(backend="llm", generator=generator), rows)
    out = {"questions": len(rows), "classes": ROUTES, "backends": results, "command": "python bench/routing_eval.py" + (f" --llm {args.llm}" if args.llm != "qwen2.5-coder-0.5b" else "")}
    Path(args.out).write_text(json.dumps(out, indent=1))
    for name, r in results.items():
        print(f"{name:28s} accuracy {r['accuracy']:.3f}  p50 {r['ms_p50']:8.2f} ms  fallbacks {r['fallbacks']}  {r['per_class_accuracy']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
