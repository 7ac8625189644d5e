"""How good can a grounded span answer be with this model? The span step given the right sentence.

A grounded answer is two choices: which sentence (:class:`~ragkit.components.evidence_selector.EvidenceSelector`,
no LLM) and which span of it (the LLM under :class:`~ragkit.llm.span_decoding.SpanMask`). This script
separates them, on new_wiki development questions (``answer_quality.dev_questions``: never the
questions ``answer_quality.py`` reports or calibration is fitted on), with the exact call the engine
makes (:class:`~ragkit.components.guarded_generator.GuardedGenerator`, grounded mode, cold prompt cache):

``selected``         the sentence the evidence step picks from hybrid top ``Features().top_k`` over all
                     new_wiki paragraphs (what ships);
``oracle_sentence``  the gold paragraph's first sentence that holds a gold answer, handed over as if the
                     evidence step had picked it: the span step's ceiling — no retrieval or sentence
                     choice can lift F1 above it without a better span step.

Questions whose gold paragraph has no sentence holding an answer verbatim are left out of both.
Writes ``bench/results/span_ceiling.json`` (one entry per model)::

    .venv/bin/python bench/span_ceiling.py --model qwen2.5-coder-1.5b --questions 150
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from answer_quality import SETS, dev_questions
from evidence_dev import TOP_K, holds_gold
from haystack import Document
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.config import ModelConfig
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.eval.metrics import exact_match, f1_score
from ragkit.index.retrieval import HybridRetriever
from ragkit.index.sentences import sentence_spans
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.llm.prompts import evidence_messages

OUT = ROOT / "bench" / "results" / "span_ceiling.json"


def gold_sentence(question: dict) -> Document | None:
    """The gold paragraph's first sentence holding a gold answer, as an evidence Document of source 1."""
    text = question["context"]
    for a, b in sentence_spans(text):
        if holds_gold(text[a:b], question["answers"]):
            return Document(content=text[a:b], meta={"cite": 1, "offset": a})
    return None


def answer(step: GuardedGenerator, question: str, documents: list[Document], evidence: list[Document]) -> tuple[str, float]:
    reset_prompt_cache(step.chat_generator)
    t0 = time.perf_counter()
    out = step.run(messages=evidence_messages(evidence, question), documents=documents, mode="grounded", query=question, evidence=evidence)
    return out["replies"][0].text, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=int, default=150)
    args = parser.parse_args()
    docs, questions = load_squad_corpus(SETS["new_wiki"])
    index = index_documents(docs, CACHE / "new_wiki_index_all-MiniLM-L6-v2")
    by_id = {d.id: d for d in docs}
    retriever, selector = HybridRetriever(index), EvidenceSelector(index=index)
    generator = build_chat_generator(ModelConfig(llm=args.model))
    generator.warm_up()
    step = GuardedGenerator(chat_generator=generator, answer_mode="grounded")
    answer(step, "When was the Eiffel Tower finished?", [Document(content="The Eiffel Tower was finished in 1889.")],
           [Document(content="The Eiffel Tower was finished in 1889.", meta={"cite": 1, "offset": 0})])  # model load and vocabulary outside timing
    rows = []
    for q in tqdm(dev_questions(questions)[: args.questions], desc=f"span ceiling {args.model}", file=sys.stderr, mininterval=10):
        oracle = gold_sentence(q)
        if oracle is None:
            continue
        sources = retriever.retrieve(q["question"], top_k=TOP_K).documents
        picked = selector.run(query=q["question"], documents=sources, mode="grounded")["evidence"]
        row = {"id": q["id"], "question": q["question"], "answers": q["answers"], "picked_holds_gold": bool(picked and holds_gold(picked[0].content, q["answers"]))}
        for name, documents, evidence in (("selected", sources, picked), ("oracle_sentence", [by_id[q["doc_id"]]], [oracle])):
            text, seconds = answer(step, q["question"], documents, evidence) if evidence else ("", 0.0)
            row[name] = {"answer": text, "f1": round(f1_score(text, q["answers"]), 4), "em": exact_match(text, q["answers"]), "seconds": round(seconds, 3)}
        rows.append(row)
    summary = {name: {"n": len(rows), "f1": round(statistics.mean(r[name]["f1"] for r in rows), 4), "em": round(statistics.mean(r[name]["em"] for r in rows), 4),
                      "p50_s": round(statistics.median(r[name]["seconds"] for r in rows), 3)} for name in ("selected", "oracle_sentence")}
    right = [r for r in rows if r["picked_holds_gold"]]
    summary["selected"]["sentence_right"] = round(len(right) / len(rows), 4)
    summary["selected"]["f1_when_sentence_right"] = round(statistics.mean(r["selected"]["f1"] for r in right), 4) if right else None
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data.setdefault("models", {})[args.model] = {"summary": summary, "command": f"python bench/span_ceiling.py --model {args.model} --questions {args.questions}", "rows": rows}
    data["set"] = f"new_wiki dev questions (answer_quality.dev_questions), hybrid top {TOP_K} over all new_wiki paragraphs"
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
