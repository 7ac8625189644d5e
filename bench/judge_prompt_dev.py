"""Which faithfulness task should the evaluation judge ask? Chosen here, on questions the agreement figure never scores.

``bench/eval_agreement.py`` reports the judge's faithfulness AUC against gold correctness on the real
questions of a seeded sample of paragraphs. This script picks the judge's task on *other* paragraphs of
SQuAD dev (never the agreement sample, never new_wiki): the ``plain`` strategy answers a seeded sample
of their questions with the 0.5B over the whole dev index, and each candidate task is read as P(yes) by
the judge model over the same sources. The AUC of each against "right by the gold answers" (F1 ≥ 0.5)
is printed and written to ``bench/results/judge_prompt_dev.json``.

    .venv/bin/python bench/judge_prompt_dev.py --questions 80
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.calibration import roc_auc
from ragkit.eval.experiment_sets import index_documents, load_squad_corpus
from ragkit.eval.judge import FAITHFULNESS_TASKS, LocalJudge
from ragkit.eval.metrics import f1_score, strip_citations
from ragkit.eval.strategies import resolve
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.engine import AgenticRAG

AGREEMENT_SEED, AGREEMENT_PARAGRAPHS = 29, 300  # bench/eval_agreement.py's sample: kept out of this set
OUT = ROOT / "bench" / "results" / "judge_prompt_dev.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=80)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    args = parser.parse_args()
    started = time.perf_counter()
    docs, questions = load_squad_corpus(ROOT / "data" / "squad" / "squaddev_v1.1.json.gz")
    scored = set(random.Random(AGREEMENT_SEED).sample([d.id for d in docs], AGREEMENT_PARAGRAPHS))
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
        for name in FAITHFULNESS_TASKS:
            judge.task = name
            row["p_yes"][name] = judge.faithfulness(q["question"], result.answer, result.sources)[0]
        rows.append(row)
    auc = {name: round(roc_auc([r["p_yes"][name] for r in rows if r["p_yes"][name] is not None],
                               [r["right"] for r in rows if r["p_yes"][name] is not None]), 4) for name in FAITHFULNESS_TASKS}
    out = {"benchmark": "evaluation judge's faithfulness task, chosen on SQuAD dev paragraphs outside the agreement sample",
           "command": "python bench/judge_prompt_dev.py " + " ".join(sys.argv[1:]), "model": args.model, "judge_model": args.judge_model,
           "questions": len(rows), "right": sum(r["right"] for r in rows), "auc": auc, "rows": rows,
           "seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("questions", "right", "auc", "seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
