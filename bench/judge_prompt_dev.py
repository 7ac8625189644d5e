"""Which faithfulness task should the evaluation judge ask? Chosen here, on questions the agreement figure never scores.

``bench/eval_agreement.py`` reports the judge's faithfulness AUC against gold correctness on the real
questions of a seeded sample of paragraphs. This script picks the judge's task on *other* paragraphs of
SQuAD dev (never the agreement sample, never new_wiki): the ``plain`` strategy answers a seeded sample
of their questions with the 0.5B over the whole dev index, and each candidate task is read as P(yes) by
the judge model over the same sources. The AUC of each against "right by the gold answers" (F1 ≥ 0.5)
is printed and written to ``bench/results/judge_prompt_dev.json``.

    .venv/bin/python bench/judge_prompt_dev.py --questions 80

``--max-sources 1,2,3,5`` asks instead how many of the answer's sources the judge should read (the default
task, each count over the first that many sources): fewer distractors for a small judge, or too little
context to tell a right span from a wrong one? Written to ``bench/results/judge_sources_dev.json``; the first
80 questions of a larger ``--questions`` are the 80 above (the same seeded draw, extended).

    .venv/bin/python bench/judge_prompt_dev.py --questions 160 --max-sources 1,2,3,5

``--rescore FILE`` adds, with no LLM call, each AUC again with an answer that holds a gold answer inside a
longer reply counted as right (a diagnosis of what the judge "gets wrong", never the scored definition):

    .venv/bin/python bench/judge_prompt_dev.py --rescore bench/results/judge_sources_dev.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import random
import sys
import time

from squad_common import CACHE, ROOT, agreement_paragraph_ids, load_squad, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.calibration import roc_auc
from ragkit.eval.experiment_sets import index_documents
from ragkit.eval.judge import FAITHFULNESS_TASKS, LocalJudge
from ragkit.eval.metrics import f1_score, holds_gold_answer, strip_citations
from ragkit.eval.strategies import resolve
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.engine import AgenticRAG

OUT = ROOT / "bench" / "results" / "judge_prompt_dev.json"
SOURCES_OUT = ROOT / "bench" / "results" / "judge_sources_dev.json"


def auc_right_if_it_holds_a_gold_answer(result: dict, questions: list[dict]) -> dict:
    """Each stored AUC again, an answer that holds a gold answer counted as right; and how many that relabels."""
    gold = {q["id"]: q["answers"] for q in questions}
    holds = {r["id"]: r["right"] or holds_gold_answer(r["answer"], gold[r["id"]]) for r in result["rows"]}
    names = list(result["auc"])
    return {"auc": {name: round(roc_auc([r["p_yes"][name] for r in result["rows"] if r["p_yes"][name] is not None],
                                        [holds[r["id"]] for r in result["rows"] if r["p_yes"][name] is not None]), 4) for name in names},
            "relabelled": sum(1 for r in result["rows"] if holds[r["id"]] and not r["right"]), "wrong_by_f1": sum(1 for r in result["rows"] if not r["right"])}


def rescore(path: str) -> int:
    """The diagnosis added to a finished result from its rows and SQuAD dev's gold answers (zero LLM calls)."""
    target = Path(path) if Path(path).is_absolute() else ROOT / path
    result = json.loads(target.read_text())
    _, questions = load_squad()
    result["right_if_it_holds_a_gold_answer"] = auc_right_if_it_holds_a_gold_answer(result, questions)
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["right_if_it_holds_a_gold_answer"], indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=80)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--max-sources", help="compare these counts of sources (comma-separated) for the default task instead of the tasks")
    parser.add_argument("--rescore", metavar="FILE", help="add the holds-a-gold-answer diagnosis to a finished result (no LLM call)")
    args = parser.parse_args()
    if args.rescore:
        return rescore(args.rescore)
    counts = sorted({int(n) for n in args.max_sources.split(",")}) if args.max_sources else None
    started = time.perf_counter()
    docs, questions = load_squad()
    scored = agreement_paragraph_ids(docs)
    pool = [q for q in questions if q["doc_id"] not in scored]
    sample = random.Random(7).sample(pool, args.questions)
    index = index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2")
    config = RagConfig(models=ModelConfig(llm=args.model))
    llm = build_chat_generator(config.models)
    llm.warm_up()
    rag = AgenticRAG(resolve("plain").features, config=config, index=index, chat_generator=llm)
    judge = LocalJudge(build_chat_generator(ModelConfig(llm=args.judge_model)))
    rows = []
    for q in tqdm(sample, desc="answer + judge", file=sys.stderr):
        result = rag.ask(q["question"])
        if result.failed or result.declined or not result.sources:
            continue
        row = {"id": q["id"], "answer": result.answer, "right": f1_score(strip_citations(result.answer), q["answers"]) >= 0.5, "p_yes": {}}
        # counts in rising order: each prompt extends the last one's sources, so llama.cpp reuses their prefix
        for name in [str(n) for n in counts] if counts else FAITHFULNESS_TASKS:
            if counts:
                judge.max_sources = int(name)
            else:
                judge.task = name
            row["p_yes"][name] = judge.faithfulness(q["question"], result.answer, result.sources)[0]
        rows.append(row)
    names = [str(n) for n in counts] if counts else list(FAITHFULNESS_TASKS)

    def auc_of(subset: list[dict]) -> dict[str, float]:
        return {name: round(roc_auc([r["p_yes"][name] for r in subset if r["p_yes"][name] is not None],
                                    [r["right"] for r in subset if r["p_yes"][name] is not None]), 4) for name in names}

    out = {"benchmark": ("how many sources the evaluation judge reads" if counts else "evaluation judge's faithfulness task")
           + ", chosen on SQuAD dev paragraphs outside the agreement sample",
           "command": "python bench/judge_prompt_dev.py " + " ".join(sys.argv[1:]), "model": args.model, "judge_model": args.judge_model,
           "questions": len(rows), "right": sum(r["right"] for r in rows), "auc": auc_of(rows)}
    if counts:
        out["judge_task"] = judge.task
    if counts and len(sample) > 80:  # the first 80 informed the task's choice; the rest never informed anything (no empty half)
        first = {q["id"] for q in sample[:80]}
        out |= {"auc_first_80": auc_of([r for r in rows if r["id"] in first]), "auc_after_80": auc_of([r for r in rows if r["id"] not in first])}
    out |= {"rows": rows, "seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
    out["right_if_it_holds_a_gold_answer"] = auc_right_if_it_holds_a_gold_answer(out, questions)
    (SOURCES_OUT if counts else OUT).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("rows", "run")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
