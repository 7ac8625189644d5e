"""Query-router accuracy and latency per backend on the labelled set tests/data/routing_questions.jsonl.

80 questions over sample_docs/, 16 per class. The embedding backend's prototypes are generic example
questions about none of these documents (ragkit/components/query_router.py), so this measures
generalisation, not memorisation. All backends run in one process on the same questions.

    .venv/bin/python bench/routing_eval.py                         # rules + embedding + LLM (0.5B and 1.5B)
    .venv/bin/python bench/routing_eval.py --llm qwen2.5-coder-0.5b
    .venv/bin/python bench/routing_eval.py --no-llm
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ragkit.components.query_router import ROUTES, QueryRouter
from ragkit.eval.experiments import load_labelled_routes, router_accuracy
from ragkit.config import ModelConfig
from ragkit.llm.generators import build_chat_generator

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--no-llm", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "routing.json"))
    args = parser.parse_args()
    rows = load_labelled_routes(ROOT / "tests" / "data" / "routing_questions.jsonl")
    results = {"rules": router_accuracy(QueryRouter(backend="rules"), rows), "embedding": router_accuracy(QueryRouter(backend="embedding"), rows)}
    for model in [] if args.no_llm else args.llm:
        generator = build_chat_generator(ModelConfig(llm=model))
        results[f"llm ({model})"] = router_accuracy(QueryRouter(backend="llm", chat_generator=generator), rows)
    out = {"questions": len(rows), "classes": ROUTES, "backends": results, "command": "python bench/routing_eval.py " + " ".join(sys.argv[1:])}
    Path(args.out).write_text(json.dumps(out, indent=1))
    for name, r in results.items():
        print(f"{name:28s} accuracy {r['accuracy']:.3f}  p50 {r['ms_p50']:8.2f} ms  fallbacks {r['fallbacks']}  {r['per_class_accuracy']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
