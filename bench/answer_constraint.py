"""What it costs to keep a citation mark out of an answer's first token: GBNF grammar vs logits mask.

ragkit forbids an answer that opens with "[" (the 1.5B otherwise answers some questions with a bare
"[1]"). The rule can be a GBNF grammar (``[^[ \\t\\n] [^\\x00]*``) or ragkit's first-token logits mask
(``ragkit.llm.structured.answer_constraint``). Both give the same greedy text; this measures their cost.

One process; for each of N seeded SQuAD dev questions (the agentic benchmark's sample), plain RAG's
answer prompt (top-3 chunks) is put in llama.cpp's prompt cache, then the answer is generated with no
constraint, with the grammar, and with the mask, back to back. Timed: the generation only. Reported:
median seconds per answer, ms per generated token, the paired per-question median ratio against no
constraint, and how many answers equal the grammar's.

    .venv/bin/python bench/answer_constraint.py            # 0.5B, 20 questions -> bench/results/answer_constraint.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from squad_common import ROOT, load_squad, run_facts, squad_index

from ragkit.pipeline.engine import AgenticRAG
from ragkit.config import ModelConfig, RagConfig
from ragkit.pipeline.features import Features
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.llm.prompts import answer_task, context_messages
from ragkit.llm.structured import answer_constraint

GRAMMAR = r"root ::= [^\[ \t\n] [^\x00]*"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "answer_constraint.json"))
    args = parser.parse_args()

    from llama_cpp import LlamaGrammar

    docs, questions = load_squad()
    index = squad_index(docs)
    sample = random.Random(args.seed).sample(questions, 100)[: args.questions]
    generator = build_chat_generator(ModelConfig(llm=args.model))
    generator.warm_up()
    retriever = AgenticRAG(Features(), config=RagConfig(models=ModelConfig(llm=args.model)), chat_generator=generator, index=index).retriever
    t0 = time.perf_counter()
    answer_constraint(generator)  # builds the model's banned-token list once
    mask_setup_s = time.perf_counter() - t0
    modes = {
        "none": lambda: {},
        "grammar": lambda: {"grammar": LlamaGrammar.from_string(GRAMMAR, verbose=False)},
        "first_token_mask": lambda: answer_constraint(generator),
    }
    rows: dict[str, list[dict]] = {mode: [] for mode in modes}
    for q in sample:
        messages = context_messages(retriever.retrieve(q["question"], top_k=3).documents, answer_task(q["question"]))
        for mode, kwargs in modes.items():
            reset_prompt_cache(generator)
            generator.run(messages=messages, generation_kwargs={"max_tokens": 1, "temperature": 0.0})  # the prompt, cached
            t = time.perf_counter()
            reply = generator.run(messages=messages, generation_kwargs={"max_tokens": 256, "temperature": 0.0, **kwargs()})["replies"][0]
            seconds = time.perf_counter() - t
            rows[mode].append({"seconds": seconds, "tokens": int((reply.meta.get("usage") or {}).get("completion_tokens", 0)), "text": reply.text or ""})

    results = {}
    for mode, r in rows.items():
        results[mode] = {
            "seconds_p50": round(statistics.median(x["seconds"] for x in r), 3),
            "ms_per_token": round(1000 * sum(x["seconds"] for x in r) / max(1, sum(x["tokens"] for x in r)), 1),
            "paired_ratio_vs_none": round(statistics.median(a["seconds"] / b["seconds"] for a, b in zip(r, rows["none"])), 3),
            "same_text_as_grammar": sum(a["text"] == b["text"] for a, b in zip(r, rows["grammar"])),
            "opens_with_bracket": sum(x["text"].lstrip().startswith("[") for x in r),
        }
    report = {
        "benchmark": "cost of forbidding a leading citation mark in answers",
        "command": "python bench/answer_constraint.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
        "model": args.model,
        "questions": len(sample),
        "mask_setup_s": round(mask_setup_s, 2),
        "results": results,
        "run": run_facts(),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
