"""Does a judge score depend on what the judge read before it? llama.cpp's exact prefix reuse vs ragkit's block-aligned reuse.

The evaluation judge (the 1.5B, ``ragkit eval``'s default) reads P(yes) for "according to the sources, is
this answer correct?". In a run, the call before it often had the same sources and another answer (the
next strategy's answer to the same question, or context relevance), so llama.cpp reuses a prefix
whose length depends on that previous call. For each of N SQuAD dev questions outside every scored set
(sources: the gold paragraph and four others, shuffled; answer: the gold answer), the judge scores
the answer in each reuse mode (alternating which goes first), all in this process:

* **fresh**: the KV cache emptied first (the reference);
* **after another answer**: right after judging the same question with another question's answer;
* the seconds and prompt tokens evaluated by both calls.

For ``exact`` (llama.cpp's own reuse, ragkit before ``ragkit/llm/aligned_reuse.py``) and ``aligned``
(whole 64-token blocks at fixed positions, ragkit's default now) it reports how many scores changed
with the history, by how much, and the medians of seconds and evaluated tokens, with the aligned/exact
ratio of each median. Then the pipeline's 0.5B answers each question (free text, greedy, cold cache) in both
modes: how many answers are the same, and the F1 of each, since every figure committed before the
aligned reuse was measured with llama.cpp's own.

``--pipeline-only`` measures what a user of the engine sees instead, and adds it to the JSON as
``pipeline``: for N other seeded questions (an index of all 2,067 dev paragraphs), plain RAG and all
features on (``Features.all_on()``), the 0.5B, each question asked from an empty cache, then another
question, then the first again — in each mode, alternating which goes first. Reported per config and
mode: the median seconds of ``AgenticRAG.ask`` and prompt tokens evaluated, on how many questions the
answer or the confidence changed with the question asked before, and the aligned/exact ratio of the
median seconds (and the median of the per-question ratios).

    .venv/bin/python bench/prefix_reuse.py --questions 12    -> bench/results/prefix_reuse.json (998 s)
    .venv/bin/python bench/prefix_reuse.py --pipeline-only --pipeline-questions 8    -> its "pipeline" part
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from squad_common import ROOT, agreement_paragraph_ids, load_squad, run_facts, squad_index
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.judge import LocalJudge
from ragkit.eval.metrics import f1_score, strip_citations
from ragkit.llm.aligned_reuse import DEFAULT_BLOCK, attach
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.llm.probe import probe_for
from ragkit.llm.prompts import answer_task, context_messages
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features

OUT = ROOT / "bench" / "results" / "prefix_reuse.json"


def answers_by_mode(cases: list, blocks: dict, model: str) -> dict:
    """Each question answered greedily (free text) by ``model`` from a cold prompt cache, in each mode: a cold
    start is evaluated in other batches than before (64-token blocks, not 512), so answers at near-ties can flip."""
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    reuse, kwargs = attach(generator._model), {"max_tokens": 48, "temperature": 0.0}
    texts: dict[str, list[str]] = {mode: [] for mode in blocks}
    for q, sources, _ in tqdm(cases, desc=f"answers {model}", file=sys.stderr):
        for mode, block in blocks.items():
            reuse.block = block
            reset_prompt_cache(generator)
            texts[mode].append(generator.run(messages=context_messages(sources, answer_task(q["question"])), generation_kwargs=kwargs)["replies"][0].text or "")
    reuse.block = DEFAULT_BLOCK
    golds = [q["answers"] for q, _, _ in cases]
    return {
        "model": model, "questions": len(cases), "identical": sum(a == b for a, b in zip(texts["exact"], texts["aligned"])),
        "mean_f1": {mode: round(statistics.fmean(f1_score(strip_citations(t), g) for t, g in zip(texts[mode], golds)), 4) for mode in texts},
        "differing": [{"id": q["id"], "exact": a, "aligned": b} for (q, _, _), a, b in zip(cases, texts["exact"], texts["aligned"]) if a != b],
    }


def pipeline_by_mode(pairs: list, blocks: dict, model: str, index) -> dict:
    """Each question asked fresh, then after another question, by plain RAG and by all features on, in each mode."""
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=model))
    rags = {"plain": AgenticRAG(Features(), config=config, chat_generator=generator, index=index),
            "full": AgenticRAG(Features.all_on(), config=config, chat_generator=generator, index=index)}
    for rag in rags.values():  # embedders, prototypes and the model's pages loaded before anything is timed
        rag.ask("Warm-up question: what is the capital of France?")
    reuse = attach(generator._model)
    rows: dict[str, dict[str, list[dict]]] = {name: {mode: [] for mode in blocks} for name in rags}
    for i, (q, other) in enumerate(tqdm(pairs, desc=f"pipeline {model}", file=sys.stderr)):
        for name, rag in rags.items():
            for mode in (list(blocks) if i % 2 == 0 else list(blocks)[::-1]):
                reuse.block = blocks[mode]
                reset_prompt_cache(generator)
                fresh = rag.ask(q["question"])
                rag.ask(other["question"])
                after = rag.ask(q["question"])
                rows[name][mode].append({
                    "id": q["id"], "answer_fresh": fresh.answer, "answer_after": after.answer,
                    "confidence_fresh": fresh.confidence, "confidence_after": after.confidence,
                    "f1_fresh": 0.0 if fresh.declined else f1_score(strip_citations(fresh.answer), q["answers"]),
                    "seconds_fresh": round(fresh.seconds, 3), "seconds_after": round(after.seconds, 3),
                    "evaluated_fresh": fresh.trace.prompt_tokens_evaluated, "evaluated_after": after.trace.prompt_tokens_evaluated,
                    "llm_calls": fresh.trace.llm_calls,
                })
    reuse.block = DEFAULT_BLOCK
    out: dict = {"model": model, "questions": len(pairs), "configs": {}}
    for name, by_mode in rows.items():
        summary = {}
        for mode, mode_rows in by_mode.items():
            changes = [abs((r["confidence_after"] or 0.0) - (r["confidence_fresh"] or 0.0)) for r in mode_rows]
            summary[mode] = {
                "block": blocks[mode],
                "answers_changed_by_previous_question": sum(r["answer_after"] != r["answer_fresh"] for r in mode_rows),
                "confidences_changed_by_previous_question": sum(c != 0 for c in changes),
                "confidence_abs_change_max": round(max(changes), 5),
                "mean_f1_fresh": round(statistics.fmean(r["f1_fresh"] for r in mode_rows), 4),
                "seconds_median": round(statistics.median(r["seconds_fresh"] for r in mode_rows), 3),
                "prompt_tokens_evaluated_median": statistics.median(r["evaluated_fresh"] for r in mode_rows),
                "llm_calls_median": statistics.median(r["llm_calls"] for r in mode_rows),
                "rows": mode_rows,
            }
        exact, aligned = summary["exact"], summary["aligned"]
        summary["ratio_aligned_to_exact"] = {
            "seconds_median": round(aligned["seconds_median"] / exact["seconds_median"], 3),
            "per_question_seconds_median": round(statistics.median(a["seconds_fresh"] / e["seconds_fresh"] for a, e in zip(aligned["rows"], exact["rows"])), 3),
        }
        summary["same_answer_both_modes"] = sum(a["answer_fresh"] == e["answer_fresh"] for a, e in zip(aligned["rows"], exact["rows"]))
        out["configs"][name] = summary
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="the pipeline's LLM, for the answers and pipeline parts")
    parser.add_argument("--pipeline-only", action="store_true", help="measure only the engine (plain and all features) and add it to the JSON")
    parser.add_argument("--pipeline-questions", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    docs, questions = load_squad()
    scored = agreement_paragraph_ids(docs)
    by_id = {d.id: d for d in docs}
    rng = random.Random(11)
    pool = [q for q in questions if q["doc_id"] not in scored]
    blocks = {"exact": None, "aligned": DEFAULT_BLOCK}
    if args.pipeline_only:
        out = json.loads(OUT.read_text())
        judged_ids = {row["id"] for row in out["modes"]["exact"]["rows"]}  # the judge part's questions, kept out
        picks = random.Random(12).sample([q for q in pool if q["id"] not in judged_ids], 2 * args.pipeline_questions)
        pairs = list(zip(picks[::2], picks[1::2]))
        out["pipeline"] = {**pipeline_by_mode(pairs, blocks, args.model, squad_index(docs)), "index_chunks": len(docs),
                           "command": "python bench/prefix_reuse.py " + " ".join(sys.argv[1:]),
                           "seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
        OUT.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps({name: {m: ({k: v for k, v in x.items() if k != "rows"} if isinstance(x, dict) else x) for m, x in c.items()}
                          for name, c in out["pipeline"]["configs"].items()}, indent=1))
        return 0
    sample = rng.sample(pool, args.questions)
    cases = []
    for q in sample:
        sources = [by_id[q["doc_id"]]] + rng.sample([d for d in docs if d.id != q["doc_id"] and d.id not in scored], 4)
        rng.shuffle(sources)
        other = rng.choice([p for p in pool if p["doc_id"] != q["doc_id"]])["answers"][0]
        cases.append((q, sources, other))

    generator = build_chat_generator(ModelConfig(llm=args.judge_model))
    generator.warm_up()
    judge, probe, reuse = LocalJudge(generator, task="correct", model_name=args.judge_model), probe_for(generator), attach(generator._model)

    def judged(q, answer, sources) -> tuple[float | None, float, int]:
        mark, t0 = probe.mark(), time.perf_counter()
        p_yes, _ = judge.faithfulness(q["question"], answer, sources)
        seconds, usage = time.perf_counter() - t0, probe.usage_since(mark)
        return p_yes, seconds, usage["prompt_tokens"] - usage["prompt_tokens_reused"]

    rows: dict[str, list[dict]] = {mode: [] for mode in blocks}
    judged(cases[0][0], cases[0][2], cases[0][1])  # the model's pages in memory before anything is timed
    for i, (q, sources, other) in enumerate(tqdm(cases, desc="judge", file=sys.stderr)):
        for mode in (list(blocks) if i % 2 == 0 else list(blocks)[::-1]):  # alternate which mode goes first
            reuse.block = blocks[mode]
            reset_prompt_cache(generator)
            fresh, fresh_s, fresh_tokens = judged(q, q["answers"][0], sources)
            judged(q, other, sources)
            after, after_s, after_tokens = judged(q, q["answers"][0], sources)
            rows[mode].append({"id": q["id"], "p_fresh": fresh, "p_after_other_answer": after, "seconds_fresh": round(fresh_s, 3),
                               "seconds_after": round(after_s, 3), "tokens_evaluated_fresh": fresh_tokens, "tokens_evaluated_after": after_tokens})
    reuse.block = DEFAULT_BLOCK
    modes = {}
    for mode, mode_rows in rows.items():
        diffs = [abs(r["p_after_other_answer"] - r["p_fresh"]) for r in mode_rows]
        modes[mode] = {
            "block": blocks[mode], "questions": len(mode_rows), "scores_changed_by_history": sum(d != 0 for d in diffs),
            "abs_change_median": round(statistics.median(diffs), 5), "abs_change_max": round(max(diffs), 5),
            "seconds_fresh_median": round(statistics.median(r["seconds_fresh"] for r in mode_rows), 3),
            "seconds_after_median": round(statistics.median(r["seconds_after"] for r in mode_rows), 3),
            "tokens_evaluated_fresh_median": statistics.median(r["tokens_evaluated_fresh"] for r in mode_rows),
            "tokens_evaluated_after_median": statistics.median(r["tokens_evaluated_after"] for r in mode_rows),
            "rows": mode_rows,
        }
    answers = answers_by_mode(cases, blocks, args.model)
    exact, aligned = modes["exact"], modes["aligned"]
    out = {
        "benchmark": "judge P(yes) fresh vs right after judging another answer over the same sources, llama.cpp's exact prefix reuse vs ragkit's block-aligned reuse",
        "command": "python bench/prefix_reuse.py " + " ".join(sys.argv[1:]), "judge_model": args.judge_model, "questions": len(cases),
        "ratio_aligned_to_exact": {
            "seconds_fresh_median": round(aligned["seconds_fresh_median"] / exact["seconds_fresh_median"], 3),
            "seconds_after_median": round(aligned["seconds_after_median"] / exact["seconds_after_median"], 3),
        },
        "modes": modes, "answers": answers, "seconds": round(time.perf_counter() - started, 1), "run": run_facts(),
    }
    if OUT.exists() and "pipeline" in (previous := json.loads(OUT.read_text())):
        out["pipeline"] = previous["pipeline"]  # measured by its own command, on other questions
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: ({m: {x: y for x, y in v.items() if x != "rows"} for m, v in out["modes"].items()} if k == "modes" else v)
                      for k, v in out.items() if k not in ("run", "pipeline")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
