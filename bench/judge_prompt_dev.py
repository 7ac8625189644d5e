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

``--answer-likelihood`` asks whether the judge model's own likelihood of the answer adds to P(yes): the
default task's P(yes), then, over the same sources, the judge's log-probability of each answer token as its
reply to "copy the shortest exact phrase that answers the question" (one pass for the prompt, reusing the
sources' blocks, then one a token); AUCs of the geometric-mean token probability, of the answer's whole
probability, and of P(yes) times the geometric mean (no weight to fit). Written to
``bench/results/judge_likelihood_dev.json``; the same seeded draw as above. Decided before the first run:
a score goes on to a scored set only if it beats P(yes) by at least 0.03 of AUC over all the questions and
is not below it in either half (``clearly_better``).

    .venv/bin/python bench/judge_prompt_dev.py --questions 160 --answer-likelihood

``--rescore FILE`` adds, with no LLM call, each AUC again with an answer that holds a gold answer inside a
longer reply counted as right (a diagnosis of what the judge "gets wrong", never the scored definition):

    .venv/bin/python bench/judge_prompt_dev.py --rescore bench/results/judge_sources_dev.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
import random
import sys
import time

from squad_common import CACHE, ROOT, agreement_paragraph_ids, load_squad, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.calibration import roc_auc
from ragkit.eval.experiment_sets import index_documents
from ragkit.eval.judge import LocalJudge
from ragkit.eval.metrics import f1_score, holds_gold_answer, strip_citations
from ragkit.eval.strategies import resolve
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.engine import AgenticRAG

OUT = ROOT / "bench" / "results" / "judge_prompt_dev.json"
SOURCES_OUT = ROOT / "bench" / "results" / "judge_sources_dev.json"
LIKELIHOOD_OUT = ROOT / "bench" / "results" / "judge_likelihood_dev.json"
PROMPT_TASKS = ("sentences", "answers_question", "correct")  # the P(yes) tasks compared in judge_prompt_dev.json
LIKELIHOOD_SCORES = ("correct", "answer_token_p_geomean", "answer_p", "correct_x_answer_token_p_geomean")


def likelihood_scores(judge: LocalJudge, question: str, answer: str, sources: list) -> dict[str, float | None]:
    """The default task's P(yes), then the judge model's probability of the answer as its own reply, over the same sources."""
    p_yes = judge.faithfulness(question, answer, sources)[0]
    logprobs = judge.answer_logprobs(question, answer, sources) if strip_citations(answer).strip() else []
    if p_yes is None or not logprobs:
        return dict.fromkeys(LIKELIHOOD_SCORES)
    geomean = math.exp(sum(logprobs) / len(logprobs))
    return {"correct": p_yes, "answer_token_p_geomean": geomean, "answer_p": math.exp(sum(logprobs)),
            "correct_x_answer_token_p_geomean": p_yes * geomean, "answer_tokens": len(logprobs)}


def dev_draw(docs: list, questions: list[dict], n: int) -> list[dict]:
    """The seeded draw of ``n`` SQuAD dev questions outside the agreement sample; a larger ``n`` extends a smaller one's."""
    scored = agreement_paragraph_ids(docs)
    return random.Random(7).sample([q for q in questions if q["doc_id"] not in scored], n)


def dev_questions_and_engine(n: int, model: str) -> tuple[list[dict], list[dict], AgenticRAG]:
    """SQuAD dev's questions, their seeded draw of ``n`` (:func:`dev_draw`), and the ``plain`` strategy's engine
    with ``model`` over the whole dev index, which answers them."""
    docs, questions = load_squad()
    index = index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2")
    config = RagConfig(models=ModelConfig(llm=model))
    llm = build_chat_generator(config.models)
    llm.warm_up()
    return questions, dev_draw(docs, questions, n), AgenticRAG(resolve("plain").features, config=config, index=index, chat_generator=llm)


def score_key(rows: list[dict]) -> str:
    """Rows keep P(yes) under "p_yes"; the likelihood comparison's rows hold other scores too, under "scores"."""
    return "scores" if rows and "scores" in rows[0] else "p_yes"


def auc_right_if_it_holds_a_gold_answer(result: dict, questions: list[dict]) -> dict:
    """Each stored AUC again, an answer that holds a gold answer counted as right; and how many that relabels."""
    gold = {q["id"]: q["answers"] for q in questions}
    holds = {r["id"]: r["right"] or holds_gold_answer(r["answer"], gold[r["id"]]) for r in result["rows"]}
    names, key = list(result["auc"]), score_key(result["rows"])
    return {"auc": {name: round(roc_auc([r[key][name] for r in result["rows"] if r[key][name] is not None],
                                        [holds[r["id"]] for r in result["rows"] if r[key][name] is not None]), 4) for name in names},
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
    parser.add_argument("--answer-likelihood", action="store_true", help="the judge's likelihood of the answer beside P(yes) (the default task)")
    parser.add_argument("--rescore", metavar="FILE", help="add the holds-a-gold-answer diagnosis to a finished result (no LLM call)")
    args = parser.parse_args()
    if args.rescore:
        return rescore(args.rescore)
    counts = sorted({int(n) for n in args.max_sources.split(",")}) if args.max_sources else None
    started = time.perf_counter()
    questions, sample, rag = dev_questions_and_engine(args.questions, args.model)
    judge = LocalJudge(build_chat_generator(ModelConfig(llm=args.judge_model)), task="correct")  # P(yes), what every result here starts from
    rows = []
    for q in tqdm(sample, desc="answer + judge", file=sys.stderr):
        result = rag.ask(q["question"])
        if result.failed or result.declined or not result.sources:
            continue
        row = {"id": q["id"], "answer": result.answer, "right": f1_score(strip_citations(result.answer), q["answers"]) >= 0.5}
        if args.answer_likelihood:
            scores = likelihood_scores(judge, q["question"], result.answer, result.sources)
            rows.append(row | {"answer_tokens": scores.pop("answer_tokens", None), "scores": scores})
            continue
        row["p_yes"] = {}
        # counts in rising order: each prompt extends the last one's sources, so llama.cpp reuses their prefix
        for name in [str(n) for n in counts] if counts else PROMPT_TASKS:
            if counts:
                judge.max_sources = int(name)
            else:
                judge.task = name
            row["p_yes"][name] = judge.faithfulness(q["question"], result.answer, result.sources)[0]
        rows.append(row)
    names = list(LIKELIHOOD_SCORES) if args.answer_likelihood else [str(n) for n in counts] if counts else list(PROMPT_TASKS)

    key = score_key(rows)

    def auc_of(subset: list[dict]) -> dict[str, float]:
        return {name: round(roc_auc([r[key][name] for r in subset if r[key][name] is not None],
                                    [r["right"] for r in subset if r[key][name] is not None]), 4) for name in names}

    out = {"benchmark": ("whether the judge model's likelihood of the answer adds to its P(yes)" if args.answer_likelihood
                         else "how many sources the evaluation judge reads" if counts else "evaluation judge's faithfulness task")
           + ", chosen on SQuAD dev paragraphs outside the agreement sample",
           "command": "python bench/judge_prompt_dev.py " + " ".join(sys.argv[1:]), "model": args.model, "judge_model": args.judge_model,
           "questions": len(rows), "right": sum(r["right"] for r in rows), "auc": auc_of(rows)}
    if counts or args.answer_likelihood:
        out["judge_task"] = judge.task
    if (counts or args.answer_likelihood) and len(sample) > 80:  # the first 80 informed the task's choice; the rest never informed anything (no empty half)
        first = {q["id"] for q in sample[:80]}
        out |= {"auc_first_80": auc_of([r for r in rows if r["id"] in first]), "auc_after_80": auc_of([r for r in rows if r["id"] not in first])}
    if args.answer_likelihood and "auc_first_80" in out:
        halves = (out["auc"], out["auc_first_80"], out["auc_after_80"])
        out["clearly_better"] = {name: halves[0][name] >= halves[0]["correct"] + 0.03 and all(h[name] >= h["correct"] for h in halves[1:])
                                 for name in names if name != "correct"}
    out |= {"rows": rows, "seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
    out["right_if_it_holds_a_gold_answer"] = auc_right_if_it_holds_a_gold_answer(out, questions)
    (LIKELIHOOD_OUT if args.answer_likelihood else SOURCES_OUT if counts else OUT).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("rows", "run")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
