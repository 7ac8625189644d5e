"""Planning on two-part questions: does splitting a question answer both parts?

Two-part questions are built from SQuAD v1.1 dev: two questions about different articles, seeded
(``SEED``; none of them among the questions ``answer_quality.py`` reports), joined the way people
ask — "Which NFL team represented the AFC at Super Bowl 50, and where did Tesla study?" — over an
index of all dev paragraphs. Each is asked with

``plain``      ``Features()``: one retrieval and one answer for the whole question;
``decompose``  ``Features(decompose=True)``: the rules split it, each part gets the plain graph.

A part counts as answered when its gold answers' best SQuAD F1 against the text the system gives for
that part is ≥ 0.5 — for ``plain`` the whole answer (it has no parts), for ``decompose`` the part's own
answer. Reported per config: ``parts_answered`` (share of all parts answered), ``part_f1`` (mean
over parts), ``both_answered`` (share of questions with both parts answered), ``split`` (share split
into two parts), LLM calls and median seconds, and ``decompose`` / ``plain`` p50; cold llama.cpp
prompt cache per question, question-major. ``budget_violations``: questions whose LLM calls exceeded
the configuration's budget (plain 1 + 3 per correction; decompose that per part, at most
``max_parts`` parts, plus one for an LLM decomposer) — asserted 0.

Not yet measured here (issue 16): ``multi_hop``, ``agent`` and ``full`` configurations, the bridge
questions and the SQL route; the JSON keeps their places (``bridge``, ``sql``) empty.

    .venv/bin/python bench/planning.py --model qwen2.5-coder-0.5b --questions 40

Writes ``bench/results/planning.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time

from answer_quality import SETS, sample
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.eval.metrics import f1_score
from ragkit.pipeline.features import Features

OUT = ROOT / "bench" / "results" / "planning.json"
SEED = 16
_CITATION = re.compile(r"\s*\[\d+\]")
_OPENS_LIKE_A_QUESTION = re.compile(r"^(what|where|when|who|whom|whose|which|why|how|in what|in which)\b", re.I)


def two_part_questions(questions: list[dict], n: int) -> list[dict]:
    """``n`` pairs of questions from different articles whose second part opens with a question word."""
    reported = {q["id"] for q in sample("squad_dev", questions, 200)}
    pool = [q for q in questions if q["id"] not in reported and _OPENS_LIKE_A_QUESTION.match(q["question"]) and q["question"].strip().endswith("?")]
    rng = random.Random(SEED)
    rng.shuffle(pool)
    pairs, used = [], set()
    for a in pool:
        if len(pairs) == n:
            break
        if a["id"] in used:
            continue
        b = next((q for q in pool if q["id"] not in used and q["id"] != a["id"] and q.get("title") != a.get("title")), None)
        if b is None:
            break
        used |= {a["id"], b["id"]}
        second = b["question"].strip()
        pairs.append({"id": f"{a['id']}+{b['id']}", "question": f"{a['question'].strip().rstrip('?')}, and {second[0].lower()}{second[1:]}",
                      "parts": [a, b]})
    return pairs


def part_f1(text: str, answers: list[str]) -> float:
    return f1_score(_CITATION.sub("", text), answers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=int, default=40)
    args = parser.parse_args()
    from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
    from ragkit.pipeline.engine import AgenticRAG

    docs, questions = load_squad_corpus(SETS["squad_dev"])
    index = index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2")
    pairs = two_part_questions(questions, args.questions)
    generator = build_chat_generator(ModelConfig(llm=args.model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=args.model))
    rags = {"plain": AgenticRAG(Features(), config=config, generator=generator, index=index),
            "decompose": AgenticRAG(Features(decompose=True), config=config, generator=generator, index=index)}
    for rag in rags.values():
        rag.ask("Warm-up question: when was the Eiffel Tower finished?")
    rows = {name: [] for name in rags}
    for pair in tqdm(pairs, desc=f"planning {args.model}", file=sys.stderr, mininterval=10):
        for name, rag in rags.items():
            reset_prompt_cache(generator)
            t0 = time.perf_counter()
            r = rag.ask(pair["question"])
            seconds = time.perf_counter() - t0
            parts = r.details.get("parts") or []
            texts = [p["answer"] for p in parts] if len(parts) == 2 else [r.answer, r.answer]
            f1s = [0.0 if r.declined else part_f1(t, q["answers"]) for t, q in zip(texts, pair["parts"])]
            rows[name].append({"id": pair["id"], "question": pair["question"], "answer": r.answer, "part_f1": [round(f, 4) for f in f1s],
                               "split": len(parts) == 2, "seconds": round(seconds, 3), "llm_calls": r.trace.llm_calls})
    summary = {}
    budgets = {"plain": 1, "decompose": Features().max_parts}  # Features() has no judge, so no corrections
    violations = sum(r["llm_calls"] > budgets[name] for name, rs in rows.items() for r in rs)
    for name, rs in rows.items():
        summary[name] = {
            "n": len(rs), "parts_answered": round(statistics.mean(f >= 0.5 for r in rs for f in r["part_f1"]), 4),
            "both_answered": round(statistics.mean(all(f >= 0.5 for f in r["part_f1"]) for r in rs), 4),
            "part_f1": round(statistics.mean(f for r in rs for f in r["part_f1"]), 4),
            "split": round(statistics.mean(r["split"] for r in rs), 4), "llm_calls": round(statistics.mean(r["llm_calls"] for r in rs), 2),
            "p50_s": round(statistics.median(r["seconds"] for r in rs), 3),
        }
    ratios = {"decompose_over_plain_p50": round(summary["decompose"]["p50_s"] / summary["plain"]["p50_s"], 3),
              "decompose_over_plain_parts": round(summary["decompose"]["parts_answered"] / max(summary["plain"]["parts_answered"], 1e-9), 3)}
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data.setdefault("two_part", {})[args.model] = {**summary, **ratios}
    data.setdefault("bridge", {})
    data.setdefault("sql", {})
    data.setdefault("rows", {})[args.model] = rows
    data.setdefault("commands", {})[args.model] = f"python bench/planning.py --model {args.model} --questions {args.questions}"
    data.setdefault("violations_by_model", {})[args.model] = violations
    data["budget_violations"] = sum(data["violations_by_model"].values())
    data["set"] = "two-part questions from SQuAD v1.1 dev (pairs from different articles, seed 16), index of all dev paragraphs"
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({**summary, **ratios, "budget_violations": violations}))
    assert violations == 0, f"{violations} questions went over their LLM-call budget"
    return 0


if __name__ == "__main__":
    sys.exit(main())
