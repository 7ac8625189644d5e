"""The SQL route on number questions: does the embedded LLM write a SELECT that gets the right number?

``bench/data/sql_questions.jsonl`` holds 46 questions about the ``cars`` table of ``vega_datasets``
(406 cars, 1970-1982), each with the reference SQL that computed its gold answer (a number or a
string). The first 10 (``split: dev``) were used to make prompt choices; the rest (``test``) are the
reported set. Each question goes through :class:`~ragkit.components.sql_answerer.SqlAnswerer` with
the real embedded model (grammar-constrained through llama.cpp); one untimed warm-up question first.

A question is answered when a cell of the result's first row matches the gold: numbers after rounding
to 2 decimals, within a relative tolerance of 1e-2 (exactly for a whole-number gold: a count that is
off by 3 of 406 is wrong, though within 1%); strings case-insensitive. An empty result, a
refused query, an SQL error or a timeout is a ``failure`` (and wrong). ``p50_s``: median seconds of
one ``run`` (LLM call + check + query); ``load_avg_1m`` at the start and the end says whether
something else was using the cores meanwhile (then the seconds are not the route's own). The llama.cpp prompt cache is kept between questions: the
schema is a shared system-prompt prefix, and reusing it is how the route is meant to run.

    .venv/bin/python bench/sql_route.py --model qwen2.5-coder-0.5b --split test
    .venv/bin/python bench/sql_route.py --model qwen2.5-coder-1.5b --split all --limit 5

Writes ``bench/results/sql_route.json`` ({model: {split: {n, accuracy, p50_s, failures}}}, the
per-question rows under ``rows``, each model's command under ``commands``), merging with earlier runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "bench" / "data" / "sql_questions.jsonl"
OUT = ROOT / "bench" / "results" / "sql_route.json"
WARM_UP = "How many cars have 6 cylinders?"  # not among the questions


def load_questions(split: str = "all", limit: int | None = None) -> list[dict[str, Any]]:
    """The questions of ``split`` ("dev", "test" or "all"), in id order, the first ``limit`` of each split."""
    questions = sorted((json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()), key=lambda q: q["id"])
    splits = ("dev", "test") if split == "all" else (split,)
    chosen = []
    for name in splits:
        rows = [q for q in questions if q["split"] == name]
        chosen += rows[:limit] if limit else rows
    return chosen


def matches(value: Any, gold: Any) -> bool:
    """A result cell against a gold answer: numbers after rounding to 2 decimals, within a relative tolerance
    of 1e-2 (an average), exactly when the gold is a whole number (a count, a total, a year); strings
    case-insensitive, surrounding spaces ignored."""
    if isinstance(gold, bool) or value is None:
        return False
    if isinstance(gold, (int, float)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return False
        if math.isnan(number):
            return False
        if float(gold).is_integer():  # a count or a total: 403 cars is not 406 cars, though within 1%
            return round(number, 2) == float(gold)
        return math.isclose(round(number, 2), round(float(gold), 2), rel_tol=1e-2, abs_tol=1e-9)
    return str(value).strip().lower() == str(gold).strip().lower()


def correct(rows: list[list[Any]], gold: Any) -> bool:
    return bool(rows) and any(matches(cell, gold) for cell in rows[0])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "n": len(rows),
        "accuracy": round(float(statistics.mean(r["correct"] for r in rows)), 4) if rows else 0.0,
        "p50_s": round(statistics.median(r["seconds"] for r in rows), 3) if rows else 0.0,
        "failures": sum(not r["ok"] for r in rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--split", choices=("dev", "test", "all"), default="all")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of each split (a smoke test)")
    args = parser.parse_args()

    from ragkit.components.sql_answerer import SqlAnswerer
    from ragkit.config import ModelConfig
    from ragkit.llm.generators import build_chat_generator
    from ragkit.pipeline.trace import RagkitTracer

    from haystack import Pipeline

    questions = load_questions(args.split, args.limit)
    load_before = os.getloadavg()[0]
    generator = build_chat_generator(ModelConfig(llm=args.model))
    answerer = SqlAnswerer(chat_generator=generator)
    answerer.warm_up()
    pipeline = Pipeline()  # a one-step pipeline, so the trace records the step's tokens
    pipeline.add_component("sql", answerer)
    pipeline.run({"sql": {"query": WARM_UP}})
    tracer = RagkitTracer()
    rows: dict[str, list[dict[str, Any]]] = {}
    for q in tqdm(questions, desc=f"sql route {args.model}", file=sys.stderr, mininterval=10):
        with tracer.collect() as trace:
            t0 = time.perf_counter()
            out = pipeline.run({"sql": {"query": q["question"]}})["sql"]
            seconds = time.perf_counter() - t0
        rows.setdefault(q["split"], []).append({
            "id": q["id"], "question": q["question"], "gold": q["gold"], "sql": out["sql"], "first_row": out["rows"][:1],
            "ok": out["ok"], "error": out["error"], "correct": out["ok"] and correct(out["rows"], q["gold"]),
            "seconds": round(seconds, 3), "completion_tokens": trace.completion_tokens,
        })
    summary = {split: summarize(rs) for split, rs in rows.items()}
    # latency is only comparable on an idle machine: a load above the core count means it was shared
    summary["load_avg_1m"] = {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2), "cpu_count": os.cpu_count()}
    command = "python bench/sql_route.py " + " ".join(sys.argv[1:])
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[args.model] = summary
    data["command"] = command
    data.setdefault("commands", {})[args.model] = command
    data.setdefault("rows", {})[args.model] = rows
    data["set"] = (f"{QUESTIONS.relative_to(ROOT)}: number questions about vega_datasets' cars table (406 rows), "
                   "gold from each question's reference SQL; dev = the first 10 (prompt choices), test = the rest")
    data["scoring"] = ("correct: a cell of the first result row matches the gold (numbers rounded to 2 decimals, rel. tol. 1e-2, "
                       "exact for a whole-number gold; strings case-insensitive)")
    try:
        from squad_common import run_facts

        data["run"] = run_facts()
    except Exception:  # the machine facts are a courtesy; never lose the results for them
        pass
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(json.dumps({args.model: summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
