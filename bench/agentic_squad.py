"""What each agentic feature does to answer quality, faithfulness, latency and LLM cost, on SQuAD.

One process, one index of all 2,067 SQuAD v1.1 dev paragraphs (one chunk each), N seeded dev
questions. For every question, every config runs back to back (question-major order, so machine
noise hits all configs alike), each from a cold llama.cpp prompt cache: the cache is reset before
every question, so a config never reuses another config's context. Within one question a config
reuses its own cached prefix — that is the design being measured.

Per config: SQuAD EM and F1 (official normalisation; citations stripped; a decline scores 0),
faithfulness by the judge (share of answered questions whose answer the LLM judge — same model,
with the question, outside the timed call — scores at or above the model's calibrated support
threshold against the sources the answer was written from) and by lexical support (share of the answer's content words found in those
sources), decline rate, latency p50/p95 of ``AgenticRAG.ask``, LLM calls and prompt tokens
(total, evaluated, reused) per question.

Besides plain, each feature alone and all of them (the required rows), two reference rows for the
0.5B: ``plain_top1`` (plain RAG reading one chunk instead of three) and ``grading_embedding`` (the
no-LLM grader at a cosine cut of 0.6), to show how much of grading's gain comes from a shorter
context and whether a millisecond grader gets it too.

    .venv/bin/python bench/agentic_squad.py                        # 0.5B: every config; 1.5B: plain + full
    .venv/bin/python bench/agentic_squad.py --questions 5 --out /tmp/agentic.json   # smoke run
    .venv/bin/python bench/agentic_squad.py --only-small --small-configs plain full --out bench/results/agentic_squad_one_engine.json

``pipeline_overhead_ms_p50`` / ``_p95``: the engine's own cost per question — ``AgenticRAG.ask``'s wall
time minus the time spent inside its traced steps.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from squad_common import ROOT, load_squad, run_facts, squad_index
from tqdm import tqdm

from ragkit.pipeline.engine import AgenticRAG
from ragkit.eval.metrics import exact_match, f1_score, lexical_support
from ragkit.components.hallucination_detector import HallucinationDetector, support_threshold_for
from ragkit.config import ModelConfig, RagConfig
from ragkit.pipeline.features import Features
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.llm.prompts import NO_ANSWER

CONFIGS: dict[str, Features] = {
    "plain": Features(),
    "routing": Features(routing=True),
    "hyde": Features(hyde=True),
    "rerank": Features(rerank=True),
    "grading": Features(grading=True),
    "hallucination_check": Features(hallucination_check=True),
    "self_correction": Features(hallucination_check=True, self_correction=True),
    "confidence_floor": Features(confidence_floor=Features.all_on().confidence_floor),
    "full": Features.all_on(),
}
# Reference rows beside the required ones: how much of grading's gain is just a shorter context
# (plain with one chunk), and the no-LLM grader at a cut (cosine 0.6) that drops as much as the LLM's.
ABLATIONS: dict[str, Features] = {
    "plain_top1": Features(top_k=1),
    "grading_embedding": Features(grading=True, grader_backend="embedding", grade_threshold=6.0),
}
SMALL, LARGE = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"
SENTENCE_VECTORS: dict[str, dict] = {}  # per model: the reranker's index-time sentence vectors (loaded / embedded, seconds)
def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 3)


def summarize(model: str, rows: list[dict]) -> dict:
    answered = [r for r in rows if not r["declined"]]
    judged = [r for r in answered if r["judge"] is not None]
    threshold = support_threshold_for("llm_judge", model)
    lexical = [r["lexical"] for r in answered if r["lexical"] is not None]
    return {
        "model": model,
        "questions": len(rows),
        "em": round(statistics.fmean(r["em"] for r in rows), 4),
        "f1": round(statistics.fmean(r["f1"] for r in rows), 4),
        "faithfulness": round(sum(r["judge"] >= threshold for r in judged) / len(judged), 4) if judged else None,
        "faithfulness_threshold": threshold,
        "faithfulness_judge_mean": round(statistics.fmean(r["judge"] for r in judged), 4) if judged else None,
        "faithfulness_lexical": round(statistics.fmean(lexical), 4) if lexical else None,
        "decline_rate": round(1 - len(answered) / len(rows), 4),
        "latency_s_p50": pct([r["seconds"] for r in rows], 50),
        "latency_s_p95": pct([r["seconds"] for r in rows], 95),
        # the engine's own cost: AgenticRAG.ask's wall time minus the time spent inside its steps
        # (Haystack's scheduling, input copies, routers' templates, tracing, result assembly)
        "pipeline_overhead_ms_p50": pct([r["overhead_ms"] for r in rows if "overhead_ms" in r], 50) if any("overhead_ms" in r for r in rows) else None,
        "pipeline_overhead_ms_p95": pct([r["overhead_ms"] for r in rows if "overhead_ms" in r], 95) if any("overhead_ms" in r for r in rows) else None,
        "llm_calls_per_q": round(statistics.fmean(r["llm_calls"] for r in rows), 3),
        "prompt_tokens_per_q": round(statistics.fmean(r["prompt_evaluated"] for r in rows), 1),
        "prompt_tokens_total_per_q": round(statistics.fmean(r["prompt_total"] for r in rows), 1),
        "prompt_tokens_reused_per_q": round(statistics.fmean(r["prompt_reused"] for r in rows), 1),
        "completion_tokens_per_q": round(statistics.fmean(r["completion"] for r in rows), 1),
        "gold_paragraph_in_sources": round(statistics.fmean(r["gold_in_sources"] for r in rows), 4),
        "fallbacks": sum(r["fallbacks"] for r in rows),
        "step_seconds_mean": {k: round(statistics.fmean(r["step_seconds"].get(k, 0.0) for r in rows), 3) for k in sorted({k for r in rows for k in r["step_seconds"]})},
        "corrections": sum(r["corrections"] for r in rows),
        "routes": {k: sum(str(r["route"]) == k for r in rows) for k in sorted({str(r["route"]) for r in rows})},
        "exit_reasons": {k: sum(str(r["exit_reason"]) == k for r in rows) for k in sorted({str(r["exit_reason"]) for r in rows})},
    }


def markdown_table(configs: dict[str, dict]) -> str:
    head = "| config | model | EM | F1 | faithful (judge) | lexical support | declined | p50 s | p95 s | LLM calls/q | prompt tok evaluated/q | reused/q |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for name, c in configs.items():
        def f(key, digits=3):
            return "n/a" if c.get(key) is None else f"{c[key]:.{digits}f}"
        lines.append(
            f"| {name} | {c['model'].replace('qwen2.5-coder-', '')} | {f('em')} | {f('f1')} | {f('faithfulness')} | {f('faithfulness_lexical')} | "
            f"{f('decline_rate', 2)} | {f('latency_s_p50', 2)} | {f('latency_s_p95', 2)} | {f('llm_calls_per_q', 2)} | {f('prompt_tokens_per_q', 0)} | {f('prompt_tokens_reused_per_q', 0)} |"
        )
    return "\n".join(lines) + "\n"


def step_seconds(trace) -> dict[str, float]:
    out: dict[str, float] = {}
    for step in trace.steps:
        out[step.name] = out.get(step.name, 0.0) + step.seconds
    return out


def run_model(model: str, configs: list[str], questions: list[dict], index, log) -> dict[str, list[dict]]:
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=model))
    rags = {name: AgenticRAG({**CONFIGS, **ABLATIONS}[name], config=config, chat_generator=generator, index=index) for name in configs}
    judge = HallucinationDetector(backend="llm_judge", chat_generator=generator, threshold=support_threshold_for("llm_judge", model))
    fallback_sources = AgenticRAG(Features(), config=config, chat_generator=generator, index=index).retriever
    for rag in rags.values():  # index-time work before timing: every index sentence gets its vector once
        if rag.features.rerank and rag.features.rerank_backend == "bi-encoder":
            t0 = time.perf_counter()
            prepared = rag.prepare_sentence_vectors(progress=True)
            SENTENCE_VECTORS.setdefault(model, {**prepared, "seconds": round(time.perf_counter() - t0, 1)})
    for rag in rags.values():  # load embedders, prototypes and rerankers before timing
        rag.ask("Warm-up question: what is the capital of France?")
    rows: dict[str, list[dict]] = {name: [] for name in configs}
    for q in tqdm(questions, desc=model, file=sys.stderr, mininterval=5):
        for name, rag in rags.items():
            reset_prompt_cache(generator)
            result = rag.ask(q["question"])
            trace = result.trace
            declined = result.declined or result.answer.strip() == NO_ANSWER
            sources = result.sources or fallback_sources.retrieve(q["question"], top_k=5).documents
            judge_score = None if declined else judge.run(replies=[result.answer], documents=sources, query=q["question"])["score"]
            rows[name].append({
                "id": q["id"], "answer": result.answer, "declined": declined, "route": result.route,
                "em": 0.0 if declined else exact_match(result.answer, q["answers"]),
                "f1": 0.0 if declined else f1_score(result.answer, q["answers"]),
                "judge": judge_score, "lexical": None if declined else lexical_support(result.answer, sources),
                "gold_in_sources": any(d.id == q["doc_id"] or (d.meta.get("parent_id") == q["doc_id"]) for d in result.sources),
                "seconds": result.seconds, "llm_calls": trace.llm_calls,
                "prompt_total": trace.prompt_tokens, "prompt_reused": trace.prompt_tokens_reused,
                "prompt_evaluated": trace.prompt_tokens_evaluated, "completion": trace.completion_tokens,
                "fallbacks": len(trace.fallbacks), "corrections": result.corrections, "exit_reason": result.exit_reason,
                "step_seconds": step_seconds(trace),
                "overhead_ms": round((result.seconds - trace.seconds) * 1000, 3),
            })
        if len(rows[configs[0]]) % 10 == 0:
            log({name: summarize(model, r) for name, r in rows.items()})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--small", default=SMALL)
    parser.add_argument("--small-configs", nargs="+", default=list(CONFIGS) + list(ABLATIONS), choices=list(CONFIGS) + list(ABLATIONS))
    parser.add_argument("--large", default=LARGE)
    parser.add_argument("--large-configs", nargs="*", default=["plain", "full"], choices=list(CONFIGS) + list(ABLATIONS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "agentic_squad.json"))
    parser.add_argument("--only-large", action="store_true", help="run only the large model and add its rows to the JSON already at --out")
    parser.add_argument("--only-small", action="store_true", help="run only the small model and keep the large model's rows already at --out")
    args = parser.parse_args()
    out = Path(args.out)
    previous = json.loads(out.read_text()) if (args.only_large or args.only_small) and out.exists() else None

    docs, questions = load_squad()
    index = squad_index(docs)
    sample = random.Random(args.seed).sample(questions, args.questions)
    started = time.time()
    report = {
        "benchmark": "agentic features on SQuAD v1.1 dev",
        "command": "python bench/agentic_squad.py " + " ".join(sys.argv[1:]),
        "questions": len(sample),
        "index_chunks": len(index),
        "seed": args.seed,
        "configs": {},
        "features": {name: features.to_dict() for name, features in {**CONFIGS, **ABLATIONS}.items()},
        "notes": {
            "faithfulness": "share of answered questions judged supported (P >= the model's calibrated threshold, faithfulness_threshold) by the LLM judge of the same model, "
            "given the question, against the sources the answer was written from (top-5 retrieval when the route skipped retrieval)",
            "faithfulness_lexical": "mean share of the answer's content words found in those sources",
            "prompt_tokens_per_q": "prompt tokens the LLM evaluated; prompt_tokens_reused_per_q came from llama.cpp's prompt cache",
            "latency": "wall seconds of AgenticRAG.ask, prompt cache reset before each question and config",
        },
        "run": run_facts(),
    }

    def write(partial: dict[str, dict], suffix: str = "") -> None:
        report["configs"].update({name + suffix: stats for name, stats in partial.items()})
        report["sentence_vectors"] = {**report.get("sentence_vectors", {}), **SENTENCE_VECTORS}
        report["elapsed_s"] = round(time.time() - started, 1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")

    this_run = {"command": report["command"], "run": report["run"]}
    ran = [args.large] if args.only_large else [args.small] if args.only_small else [args.small, args.large]
    if previous:  # keep the other model's rows, and the command and code that made them
        kept = {name: row for name, row in previous["configs"].items() if row["model"] not in ran}
        report["configs"] = kept
        report["runs"] = {m: r for m, r in previous.get("runs", {}).items() if m not in ran}
        for model in {row["model"] for row in kept.values()} - set(report["runs"]):
            report["runs"][model] = {"command": previous["command"], "run": previous["run"]}
        report["sentence_vectors"] = {m: v for m, v in previous.get("sentence_vectors", {}).items() if m not in ran}
    report.setdefault("runs", {}).update({m: this_run for m in ran})
    plans = [] if args.only_large else [(args.small, args.small_configs, "")]
    if args.large_configs and not args.only_small:
        plans.append((args.large, args.large_configs, "_1.5b" if "1.5b" in args.large else "_large"))
    all_rows = {}
    for model, configs, suffix in plans:
        rows = run_model(model, configs, sample, index, lambda stats, s=suffix: write(stats, s))
        write({name: summarize(model, r) for name, r in rows.items()}, suffix)
        all_rows.update({name + suffix: r for name, r in rows.items()})
        answers_path = out.with_suffix(".large.answers.jsonl") if args.only_large else out.with_suffix(".answers.jsonl")
        answers_path.write_text("".join(json.dumps({"config": name, **row}) + "\n" for name, rows_ in all_rows.items() for row in rows_))  # after each model: a stopped run keeps them
        for name, r in rows.items():
            print(f"{name + suffix:24s} {json.dumps(summarize(model, r))}", file=sys.stderr)
    # the small model's rows first, whichever model this run measured
    report["configs"] = configs = dict(sorted(report["configs"].items(), key=lambda kv: kv[1]["model"] != args.small))
    report["targets"] = {}
    for suffix in ("", "_1.5b", "_large"):
        plain, full = configs.get("plain" + suffix), configs.get("full" + suffix)
        if plain and full:
            report["targets"][full["model"]] = {
                "full_latency_over_plain": round(full["latency_s_p50"] / plain["latency_s_p50"], 3),
                "full_llm_calls_per_q": full["llm_calls_per_q"],
                "full_f1_minus_plain_f1": round(full["f1"] - plain["f1"], 4),
                "full_faithfulness": full["faithfulness"],
            }
    write({})
    out.with_suffix(".md").write_text(markdown_table(report["configs"]))
    print(json.dumps(report.get("targets"), indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
