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

    .venv/bin/python bench/prefix_reuse.py --questions 12    -> bench/results/prefix_reuse.json (998 s)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from squad_common import ROOT, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig
from ragkit.eval.experiment_sets import load_squad_corpus
from ragkit.eval.judge import LocalJudge
from ragkit.eval.metrics import f1_score, strip_citations
from ragkit.llm.aligned_reuse import DEFAULT_BLOCK, attach
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.llm.probe import probe_for
from ragkit.llm.prompts import answer_task, context_messages

AGREEMENT_SEED, AGREEMENT_PARAGRAPHS = 29, 300  # bench/eval_agreement.py's sample: kept out of this set
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="the pipeline's LLM, for the answers part")
    args = parser.parse_args()
    started = time.perf_counter()
    docs, questions = load_squad_corpus(ROOT / "data" / "squad" / "squaddev_v1.1.json.gz")
    scored = set(random.Random(AGREEMENT_SEED).sample([d.id for d in docs], AGREEMENT_PARAGRAPHS))
    by_id = {d.id: d for d in docs}
    rng = random.Random(11)
    pool = [q for q in questions if q["doc_id"] not in scored]
    sample = rng.sample(pool, args.questions)
    cases = []
    for q in sample:
        sources = [by_id[q["doc_id"]]] + rng.sample([d for d in docs if d.id != q["doc_id"] and d.id not in scored], 4)
        rng.shuffle(sources)
        other = rng.choice([p for p in pool if p["doc_id"] != q["doc_id"]])["answers"][0]
        cases.append((q, sources, other))

    generator = build_chat_generator(ModelConfig(llm=args.judge_model))
    generator.warm_up()
    judge, probe, reuse = LocalJudge(generator, model_name=args.judge_model), probe_for(generator), attach(generator._model)

    def judged(q, answer, sources) -> tuple[float | None, float, int]:
        mark, t0 = probe.mark(), time.perf_counter()
        p_yes, _ = judge.faithfulness(q["question"], answer, sources)
        seconds, usage = time.perf_counter() - t0, probe.usage_since(mark)
        return p_yes, seconds, usage["prompt_tokens"] - usage["prompt_tokens_reused"]

    blocks = {"exact": None, "aligned": DEFAULT_BLOCK}
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
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: ({m: {x: y for x, y in v.items() if x != "rows"} for m, v in out["modes"].items()} if k == "modes" else v)
                      for k, v in out.items() if k != "run"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
