"""A yes/no judgment's P(yes) from an OpenAI-compatible server's top log-probabilities, against the in-process one.

With the model in-process, ragkit reads P(yes) from llama.cpp's next-token distribution; served by an
OpenAI-compatible server, it reads it from the server's ``top_logprobs`` of a one-token reply
(:mod:`ragkit.llm.judgments`), where before it took a constrained "yes"/"no" (1.0 or 0.0). This script
asks, on the evaluation judge's own task and answers, how close the served number is to the in-process
one, and what each does to the judge's AUC against gold correctness:

* the ``plain`` strategy answers the seeded draw of SQuAD dev questions outside the agreement sample that
  ``bench/judge_prompt_dev.py`` uses (the 0.5B, in-process, over the whole dev index);
* the judge model (default the 1.5B) reads each answer's "according to the sources, is this answer
  correct?" (``--judge-task correct``, what a server judge asks): in-process, then behind ``llama-server``
  (the same llama.cpp) as P(yes) from the top 20 log-probabilities, then as the constrained yes/no reply;
* written: the differences between in-process and served P(yes) (median, 95th percentile, largest), the
  judge's AUC for each with a bootstrap 95% interval (the same resampled questions for all three), and
  the seconds a judgment took each way (one process, one after the other).

Nothing is chosen here (the method has no parameter but the API's 20); it is a measurement.

    .venv/bin/python bench/server_judgments.py --questions 80
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from judge_prompt_dev import dev_questions_and_engine
from squad_common import ROOT, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig
from ragkit.eval.calibration import roc_auc
from ragkit.eval.judge import correct_task
from ragkit.eval.metrics import f1_score, strip_citations
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.judgments import YES_NO_WORDS, constrained_yes, server_choice_probs, yes_probability
from ragkit.llm.prompts import context_messages
from ragkit.llm.server import start_llama_server

OUT = ROOT / "bench" / "results" / "server_judgments.json"
WAYS = ("in_process", "server_top_logprobs", "server_constrained")


def auc_with_interval(rows: list[dict], way: str, draws: int = 2000) -> dict:
    scores, right = [r[way] for r in rows], [r["right"] for r in rows]
    rng = random.Random(11)  # the same resampled questions for every way
    values = sorted(roc_auc(*zip(*[(scores[i], right[i]) for i in (rng.randrange(len(rows)) for _ in rows)])) for _ in range(draws))
    return {"auc": round(roc_auc(scores, right), 4), "interval95": [round(values[int(0.025 * draws)], 4), round(values[int(0.975 * draws) - 1], 4)]}


def differences(pairs: list[tuple[float, float]]) -> dict:
    gaps = sorted(abs(a - b) for a, b in pairs)
    return {"n": len(gaps), "median": round(statistics.median(gaps), 4), "p95": round(gaps[int(0.95 * (len(gaps) - 1))], 4), "max": round(gaps[-1], 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=80)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--max-sources", type=int, default=5, help="the sources the judge reads (LocalJudge's default)")
    args = parser.parse_args()
    started = time.perf_counter()
    _, sample, rag = dev_questions_and_engine(args.questions, args.model)
    rows = []
    for q in tqdm(sample, desc="answer", file=sys.stderr):
        result = rag.ask(q["question"])
        if result.failed or result.declined or not result.sources:
            continue
        sources = result.sources[: args.max_sources]
        rows.append({"id": q["id"], "answer": result.answer, "right": f1_score(strip_citations(result.answer), q["answers"]) >= 0.5,
                     "messages": context_messages(sources, correct_task(q["question"], result.answer))})
    rag = None  # the answering model's memory back before the judge's loads
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}

    def judged(way: str, judge) -> None:
        for row in tqdm(rows, desc=way, file=sys.stderr):
            t0 = time.perf_counter()
            row[way] = judge(row["messages"])
            seconds[way].append(time.perf_counter() - t0)

    local = build_chat_generator(ModelConfig(llm=args.judge_model))
    local.warm_up()
    judged("in_process", lambda m: yes_probability(local, m, step="judge"))
    local = None
    with start_llama_server(args.judge_model, parallel=1) as server:
        served = build_chat_generator(server.model_config())
        judged("server_top_logprobs", lambda m: server_choice_probs(served, m, YES_NO_WORDS, step="judge")["yes"])
        judged("server_constrained", lambda m: constrained_yes(served, m, step="judge"))
    scored = [{"id": r["id"], "answer": r["answer"], "right": r["right"], **{w: round(r[w], 5) for w in WAYS}} for r in rows]
    out = {
        "benchmark": "P(yes) from an OpenAI-compatible server's top log-probabilities (llama-server) against llama.cpp in-process, "
                     "on the evaluation judge's task; SQuAD dev questions outside the agreement sample",
        "command": "python bench/server_judgments.py " + " ".join(sys.argv[1:]), "model": args.model, "judge_model": args.judge_model,
        "judge_task": "correct", "questions": len(scored), "right": sum(r["right"] for r in scored),
        "judge_auc": {way: auc_with_interval(scored, way) for way in WAYS},
        "served_minus_in_process": differences([(r["in_process"], r["server_top_logprobs"]) for r in scored]),
        "constrained_agrees_with_p_yes_over_half": round(sum((r["in_process"] >= 0.5) == (r["server_constrained"] == 1.0) for r in scored) / len(scored), 4),
        "seconds_per_judgment_median": {way: round(statistics.median(s), 3) for way, s in seconds.items()},
        "rows": scored, "seconds": round(time.perf_counter() - started, 1), "run": run_facts(),
    }
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("rows", "run")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
