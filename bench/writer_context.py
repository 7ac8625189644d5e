"""Should the test-set writer read its sentence alone, or the whole passage? Chosen on paragraphs no scored run asks.

``bench/question_reach.py`` measured people's SQuAD questions drawing on a word of their paragraph outside the
answer's best sentence 2–3 times as often as the 1.5B's generated ones, and the sentence-level reranker losing most
on those questions — one reason a generated set ranks the reranker above plain where people's questions rank it
below (docs/evaluation.md). ``ragkit.eval.generate.generate_testset(question_context=…)`` has two writers: the
LLM reads the answer's ``sentence`` (the writer every committed set used), or the sentence's whole chunk,
``passage``, and is asked the question a reader of the passage would ask.

Here both write single and paraphrase items with the 1.5B (``ragkit testset generate``'s default writer) from the
same seeded SQuAD dev paragraphs, **outside the 300 paragraphs the agreement runs sample** (every paragraph
indexed, as there), the round trip and every filter unchanged, and for each:

* how many candidates it takes a kept item (acceptance), and what the rejected were rejected for;
* the share of kept items reaching beyond their best sentence (``question_reach.words_beyond_best_sentence``), beside
  the share of people's questions on the same paragraphs;
* the reranker's verdict: ``Features(rerank=True)``'s MRR@5 of the gold paragraph minus ``Features()``'s, on the
  kept items and on people's questions of the same paragraphs (no LLM: the pipelines stop before the answer).

The rule, fixed before the first run: ``passage`` becomes the default if its kept items' reaching share is closer to
people's than ``sentence``'s and its acceptance is at most 10 points lower; otherwise ``sentence`` stays. The
reranker's verdict is reported, not decided on (a few dozen items). new_wiki and the agreement runs report.

    .venv/bin/python bench/writer_context.py     # ~20 min on 2 cores -> bench/results/writer_context.json
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from eval_agreement import CACHE, sampled_paragraphs  # noqa: E402
from question_reach import reach_share  # noqa: E402
from rerank_questions import gold_measures  # noqa: E402
from squad_common import run_facts  # noqa: E402

from ragkit.config import ModelConfig, RagConfig  # noqa: E402
from ragkit.eval.experiment_sets import index_documents, load_squad_corpus  # noqa: E402
from ragkit.eval.generate import QUESTION_CONTEXTS, generate_testset  # noqa: E402
from ragkit.eval.testset import squad_file  # noqa: E402
from ragkit.llm.cache import LLMCache, llm_cache  # noqa: E402
from ragkit.llm.generators import build_chat_generator  # noqa: E402
from ragkit.pipeline.engine import AgenticRAG  # noqa: E402
from ragkit.pipeline.features import Features  # noqa: E402

SET, PARAGRAPHS, DEV_PARAGRAPHS, ITEMS, SEED = "squad_dev", 300, 120, 36, 29
WRITER = "qwen2.5-coder-1.5b"
MIX = {"single": 0.6, "paraphrase": 0.4}
ACCEPTANCE_DROP_ALLOWED = 0.10
RESULT = REPO / "bench" / "results" / "writer_context.json"
COMMAND = ".venv/bin/python bench/writer_context.py"


def rerank_verdict(plain_rag: AgenticRAG, rerank_rag: AgenticRAG, asked: list[tuple[str, str]]) -> dict:
    """rerank's MRR@5 minus plain's over (question, gold chunk id) pairs, with how many it ranks worse / better."""
    deltas = []
    for question, gold in asked:
        plain = [d.id for d in plain_rag.pause_before(question, "answer_prompt").inputs["documents"]]
        reranked = [d.id for d in rerank_rag.pause_before(question, "answer_prompt").inputs["documents"]]
        deltas.append(gold_measures(reranked, gold)["mrr@5"] - gold_measures(plain, gold)["mrr@5"])
    return {"n": len(deltas), "mrr@5_change": round(statistics.fmean(deltas), 4) if deltas else None,
            "worse": sum(d < 0 for d in deltas), "better": sum(d > 0 for d in deltas)}


def decide(people_share: float, by: dict) -> dict:
    """The rule fixed before the first run, applied to the two writers' figures."""
    closer = abs(by["passage"]["reach"]["all"]["share"] - people_share) < abs(by["sentence"]["reach"]["all"]["share"] - people_share)
    kept_enough = by["passage"]["acceptance"] >= by["sentence"]["acceptance"] - ACCEPTANCE_DROP_ALLOWED
    return {"rule": "passage if its reaching share is closer to people's and its acceptance at most 10 points lower",
            "reach_closer_to_people": closer, "acceptance_within_10_points": kept_enough, "default": "passage" if closer and kept_enough else "sentence"}


def main() -> None:
    started = time.perf_counter()
    docs, chosen = sampled_paragraphs(SET, PARAGRAPHS)
    index = index_documents(docs, CACHE / f"{SET}_index_all-MiniLM-L6-v2")
    others = sorted(set(index.chunks) - set(chosen))
    dev_ids = random.Random(SEED).sample(others, DEV_PARAGRAPHS)
    paragraphs = {d.id: d.content for d in docs}
    _, questions = load_squad_corpus(squad_file(SET))
    people = [(q["question"], q["doc_id"]) for q in questions if q["doc_id"] in set(dev_ids)]
    plain_rag = AgenticRAG(Features(), config=RagConfig(), index=index)
    rerank_rag = AgenticRAG(Features(rerank=True), config=RagConfig(), index=index)
    llm = build_chat_generator(ModelConfig(llm=WRITER))
    llm.warm_up()
    result: dict = {"command": COMMAND, "set": SET, "dev_paragraphs": DEV_PARAGRAPHS, "items_asked": ITEMS, "mix": MIX, "writer_model": WRITER,
                    "people": {"reach": reach_share([(q, paragraphs[g]) for q, g in people]), "rerank_vs_plain": rerank_verdict(plain_rag, rerank_rag, people)},
                    "contexts": {}}
    with llm_cache(LLMCache(CACHE / "writer_context" / "llm_cache.sqlite")):
        for context in QUESTION_CONTEXTS:
            items, report = generate_testset(index, llm, n=ITEMS, mix=MIX, seed=SEED, chunk_ids=dev_ids, judge=False, question_context=context)
            summary = report.summary()
            result["contexts"][context] = {
                "acceptance": round(sum(e["accepted"] for k, e in summary["by_kind"].items() if k in MIX) / max(1, summary["questions_tried"]), 3),
                "report": summary,
                "reach": {kind: reach_share([(it.question, paragraphs[it.chunks[0]]) for it in items if it.kind == kind]) for kind in MIX}
                | {"all": reach_share([(it.question, paragraphs[it.chunks[0]]) for it in items])},
                "rerank_vs_plain": rerank_verdict(plain_rag, rerank_rag, [(it.question, it.chunks[0]) for it in items]),
                "items": [{"kind": it.kind, "question": it.question, "answer": it.answers[0], "sentence": it.meta.get("sentence")} for it in items],
            }
    people_share, by = result["people"]["reach"]["share"], result["contexts"]
    result["decision"] = decide(people_share, by)
    result |= {"seconds": round(time.perf_counter() - started, 1), "run": run_facts()}
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"people: reach {people_share:.0%} of {result['people']['reach']['n']}; rerank vs plain {result['people']['rerank_vs_plain']}")
    for context, figures in by.items():
        print(f"{context}: acceptance {figures['acceptance']:.0%}, reach {figures['reach']['all']['share']:.0%} of {figures['reach']['all']['n']}, "
              f"rerank vs plain {figures['rerank_vs_plain']}, seconds {figures['report']['seconds']:.0f}")
    print("decision:", result["decision"])


if __name__ == "__main__":
    main()
