"""The confidence of a pipeline whose LLM is served, against the same model in-process.

ragkit's confidence is a logistic fit whose strongest signals are the answer's own token probabilities
(the smallest and the first; ``ragkit/data/confidence_calibration.json``), fitted on answers decoded
in-process — mostly source spans decoded under a mask. Behind an OpenAI-compatible server a free-text
answer now asks for its chosen tokens' ``logprobs`` (``ragkit.llm.structured.answer_constraint``); before,
it had none and the fit put their calibration means in their place. A grounded answer through a server is
decoded under the span mask's rule as a GBNF grammar and its tokens renormalised over what the grammar
allowed (``ragkit.llm.span_grammar``); before, it was a free draft snapped to a source span, whose tokens
are not the span's. This script measures both, on questions the calibration never saw:

* the ``plain`` strategy (``--answer-mode grounded``, its default, or ``free``) answers a seeded draw of
  SQuAD dev questions outside the agreement sample (``bench/judge_prompt_dev.py``'s; ``--skip`` starts
  further along it, for a disjoint set) over the whole dev index: first with the model in-process, then
  with the same GGUF behind ``llama-server`` (one process, one after the other);
* right = token F1 >= 0.5 against the gold answers (a decline or a failure is not right);
* for each way: ECE, AUC, the share right among answers above 0.7 and the mean confidence
  (``ragkit.eval.calibration.score``); the served answers scored again without their token probabilities
  (the signals are the result's own, so this costs no LLM call); the per-question distance from the
  in-process confidence where both gave the same answer; how many declined. AUCs are over each way's own
  answers (they can differ), so they rank within a way, not across.

How it was used: questions 1–200 (grounded) are where choices are made — the snapped draft's token
probabilities (tried, too low: kept in the JSON as ``grounded_snapped_draft``, at 1af4aa4), then the span
grammar's 20 against 100 alternatives a token (100 kept; the tries under ``tried``); questions 201–280 (free;
~8 s a free answer in-process) and 281–400 (grounded, ``--run-name grounded_heldout``) are reported, nothing
chosen on them. ~7 min 30 s for 200 grounded questions.

    .venv/bin/python bench/served_confidence.py --questions 200                                                   # grounded, 1-200
    .venv/bin/python bench/served_confidence.py --questions 120 --skip 280 --run-name grounded_heldout            # grounded, 281-400
    .venv/bin/python bench/served_confidence.py --questions 80 --skip 200 --answer-mode free                       # free, 201-280
    .venv/bin/python bench/served_confidence.py --rescore --answer-mode grounded --run-name grounded_heldout      # its figures again
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

from judge_prompt_dev import dev_questions_and_engine
from server_judgments import differences
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.components.confidence import TOKEN_SIGNALS
from ragkit.config import RagConfig
from ragkit.eval.calibration import calibrated_confidence, model_calibration, score
from ragkit.eval.metrics import f1_score, strip_citations
from ragkit.llm.server import start_llama_server
from ragkit.pipeline.engine import AgenticRAG

OUT = ROOT / "bench" / "results" / "served_confidence.json"
WAYS = ("in_process", "served", "served_without_answer_tokens")


def answered(rag: AgenticRAG, sample: list[dict], desc: str) -> list[dict]:
    rows = []
    for q in tqdm(sample, desc=desc, file=sys.stderr):
        r = rag.ask(q["question"])
        right = not (r.declined or r.failed) and f1_score(strip_citations(r.answer), q["answers"]) >= 0.5
        rows.append({"id": q["id"], "answer": r.answer, "right": right, "confidence": float(r.confidence or 0.0), "declined": r.declined,
                     "failed_steps": list(r.failed_steps), "signals": dict(r.details.get("confidence") or {}), "seconds": round(r.seconds, 3)})
    return rows


def without_answer_tokens(row: dict, models: dict) -> float:
    """The row's confidence from the same signals less the answer's token probabilities (imputed, as before)."""
    values = {k: v for k, v in row["signals"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if row["declined"] or not values:
        return row["confidence"]
    capped = bool(row["signals"].get("failed_steps"))  # a failed or degraded step (a reply cut at max_tokens) caps it
    full, _ = calibrated_confidence(models, values, answered=True, failed=capped)
    assert abs(full - row["confidence"]) < 1e-3, (row["id"], full, row["confidence"])  # the signals are the ones it was scored on
    return calibrated_confidence(models, {k: v for k, v in values.items() if k not in TOKEN_SIGNALS}, answered=True, failed=capped)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--answer-mode", choices=["grounded", "free"], default="grounded", help="plain's answers: spans (its default) or free text")
    parser.add_argument("--skip", type=int, default=0, help="start after this many questions of the seeded draw (a disjoint set)")
    parser.add_argument("--run-name", help="the run's key in the JSON (default: --answer-mode), a draw of its own")
    parser.add_argument("--rescore", action="store_true", help="the figures again from the last run's answers of --run-name (no LLM call)")
    args = parser.parse_args()
    started = time.perf_counter()
    run_name = args.run_name or args.answer_mode
    rows_path = CACHE / f"served_confidence_rows.{run_name}.json"
    if args.rescore:
        stored = json.loads(rows_path.read_text())
        sample, local, served, run = stored["sample"], stored["in_process"], stored["served"], stored["run"]
    else:
        _, sample, rag = dev_questions_and_engine(args.skip + args.questions, args.model)
        sample = sample[args.skip:]
        features, index = replace(rag.features, answer_mode=args.answer_mode), rag.index
        rag = AgenticRAG(features, config=rag.config, index=index, chat_generator=rag.chat_generator)
        local = answered(rag, sample, "in-process")
        rag = None  # the in-process model's memory back before the server loads its own
        with start_llama_server(args.model, parallel=1, log_path=CACHE / "served_confidence.llama-server.log") as server:
            served = answered(AgenticRAG(features, config=RagConfig(models=server.model_config()), index=index), sample, "served")
        served_tokens = "the answer's own" if args.answer_mode == "free" else "the span's, renormalised over its grammar's top-100 alternatives"
        run = {"first_question": args.skip + 1, "served_answer_tokens": served_tokens, "command": "python bench/served_confidence.py " + " ".join(sys.argv[1:]),
               "seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
        rows_path.write_text(json.dumps({"sample": sample, "in_process": local, "served": served, "run": run}))
    _, models = model_calibration(args.model)
    confidences = {"in_process": [r["confidence"] for r in local], "served": [r["confidence"] for r in served],
                   "served_without_answer_tokens": [without_answer_tokens(r, models) for r in served]}
    right = {"in_process": [r["right"] for r in local], "served": [r["right"] for r in served], "served_without_answer_tokens": [r["right"] for r in served]}
    same = [i for i, (a, b) in enumerate(zip(local, served)) if a["answer"] == b["answer"]]
    result = {
        "questions": len(sample), "model": args.model, "strategy": "plain", "answer_mode": args.answer_mode,
        "scores": {way: score(confidences[way], right[way]) for way in WAYS},
        "distance_from_in_process": {way: differences(list(zip(confidences["in_process"], confidences[way]))) for way in WAYS[1:]},
        "distance_from_in_process_same_answer": {way: differences([(confidences["in_process"][i], confidences[way][i]) for i in same]) for way in WAYS[1:]},
        "same_answer": len(same),
        "declined": {"in_process": sum(r["declined"] for r in local), "served": sum(r["declined"] for r in served)},
        "answer_token_signals_present": {"in_process": sum(1 for r in local if "token_p_min" in r["signals"]), "served": sum(1 for r in served if "token_p_min" in r["signals"])},
        "seconds_per_question_median": {"in_process": statistics.median(r["seconds"] for r in local), "served": statistics.median(r["seconds"] for r in served)},
        "rows": [{"id": a["id"], "right": [a["right"], b["right"]], "confidence": [round(a["confidence"], 4), round(b["confidence"], 4), round(c, 4)]}
                 for a, b, c in zip(local, served, confidences["served_without_answer_tokens"])],
        **run,
    }
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data = data if "runs" in data else {"runs": {}}
    kept = {k: v for k, v in data["runs"].get(run_name, {}).items() if k in ("tried", "superseded", "code_at")}  # written by hand once
    data["runs"][run_name] = {**result, **kept}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "run")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
