"""Choose the grounded answer's rules on development questions: which variant of span decoding copies
the right span most often, against the free-text answer, one model, one process.

The questions are SQuAD-Shifts new_wiki questions held apart for this choice (``dev_questions`` in
``bench/answer_quality.py``: seed 101, never the calibration questions and never the ones
``answer_quality.py`` reports on). Each question: hybrid top 3 over all new_wiki paragraphs, then
every variant answers the same sources from a cold prompt cache (question-major order):

* ``free`` — the free-text answer task, citation-first token masked (the old answer mode);
* ``snap`` — ``free``'s reply kept only if it matches a span of the sources (extract-then-verify);
* ``span_top3`` — span-constrained decoding straight away (the grounded task): spans may not open
  with a function word ("The", "In", …) and may only start in the three sentences sharing most words
  with the question, at a word of the question's answer type;
* ``span_top1`` — what ``GuardedGenerator(answer_mode="grounded")`` ships: the same, in the one
  best-matching sentence;
* ``draft_copy`` — the free answer first, then a follow-up turn that copies it under the span mask
  over the three best sentences, the draft's words counting twice when choosing them.

    .venv/bin/python bench/answer_modes_dev.py --model qwen2.5-coder-0.5b --questions 40

Writes ``bench/results/answer_modes_dev.json``: per variant F1, EM, share of answers that are a
verbatim span, and the median seconds of the answer call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from answer_quality import SETS, dev_questions
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from haystack.dataclasses import ChatMessage

from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.config import ModelConfig
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.eval.metrics import exact_match, f1_score, strip_citations
from ragkit.index.retrieval import HybridRetriever
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.llm.prompts import NO_ANSWER, answer_task, context_messages, grounded_answer_task
from ragkit.llm.source_spans import FUNCTION_WORDS, candidate_starts, locate_span, snap_to_span
from ragkit.llm.span_decoding import SpanMask, vocabulary_for
from ragkit.llm.structured import TokenProbabilities, answer_constraint, call_llm, parse_answer

OUT = ROOT / "bench" / "results" / "answer_modes_dev.json"
VARIANTS = ("free", "snap", "span_top3", "span_top1", "draft_copy")
COPY_TASK = "Now copy from the sources the shortest exact phrase that is this answer (a few words, as written there)."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=int, default=40)
    args = parser.parse_args()
    from llama_cpp import LogitsProcessorList

    docs, questions = load_squad_corpus(SETS["new_wiki"])
    index = index_documents(docs, CACHE / "new_wiki_index_all-MiniLM-L6-v2")
    retriever = HybridRetriever(index)
    llm = build_chat_generator(ModelConfig(llm=args.model))
    llm.warm_up()
    vocabulary = vocabulary_for(llm)
    shipped = GuardedGenerator(chat_generator=llm, max_tokens=64, answer_mode="grounded")
    rows: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for q in tqdm(dev_questions(questions)[:args.questions], file=sys.stderr, desc=args.model):
        sources = retriever.retrieve(q["question"], top_k=3).documents
        texts = [d.content for d in sources]
        free_reply = None
        for variant in VARIANTS:
            if variant == "snap":  # no call of its own: free's reply, verified
                snapped = snap_to_span(free_reply or "", texts)
                answer = snapped[0] if snapped else ""
                rows[variant].append({"answer": answer, "seconds": rows["free"][-1]["seconds"], "span": snapped is not None})
            elif variant == "span_top1":
                reset_prompt_cache(llm)
                t0 = time.perf_counter()
                out = shipped.run(messages=context_messages(sources, grounded_answer_task(q["question"])), documents=sources, mode="grounded", query=q["question"])
                text = out["replies"][0].text
                answer = "" if text == NO_ANSWER else strip_citations(text)
                rows[variant].append({"answer": answer, "seconds": time.perf_counter() - t0, "span": out["evidence"] is not None})
            else:
                reset_prompt_cache(llm)
                t0 = time.perf_counter()
                free_kwargs = {"max_tokens": 64, "temperature": 0.0, **answer_constraint(llm)}
                free_messages = context_messages(sources, answer_task(q["question"]))
                if variant == "free":
                    reply = call_llm(llm, free_messages, parse_answer, free_kwargs, step="answer")
                    free_reply = reply.value if reply.ok else ""
                elif variant == "span_top3":
                    mask = SpanMask(vocabulary, texts, banned_first_words=FUNCTION_WORDS, starts=candidate_starts(q["question"], texts, sentences=3))
                    span_kwargs = {"max_tokens": 32, "temperature": 0.0, "logits_processor": LogitsProcessorList([mask, TokenProbabilities()])}
                    reply = call_llm(llm, context_messages(sources, grounded_answer_task(q["question"])), str.strip, span_kwargs, step="answer")
                else:  # draft_copy
                    draft = call_llm(llm, free_messages, parse_answer, {**free_kwargs, "max_tokens": 48}, step="answer")
                    hint = "" if not draft.ok or draft.value == NO_ANSWER else strip_citations(draft.value)
                    mask = SpanMask(vocabulary, texts, banned_first_words=FUNCTION_WORDS, starts=candidate_starts(q["question"], texts, sentences=3, hint=hint))
                    span_kwargs = {"max_tokens": 32, "temperature": 0.0, "logits_processor": LogitsProcessorList([mask, TokenProbabilities()])}
                    copy_messages = [*free_messages, ChatMessage.from_assistant(draft.text or draft.value or NO_ANSWER), ChatMessage.from_user(COPY_TASK)]
                    reply = call_llm(llm, copy_messages, str.strip, span_kwargs, step="answer")
                seconds = time.perf_counter() - t0
                answer = reply.value if reply.ok else ""
                if variant != "free":
                    answer = answer.strip().rstrip(",;:")
                rows[variant].append({"answer": answer, "seconds": seconds, "span": locate_span(answer, texts) is not None})
            row = rows[variant][-1]
            row.update(id=q["id"], f1=f1_score(row["answer"], q["answers"]), em=exact_match(row["answer"], q["answers"]),
                       gold_in_sources=any(d.id == q["doc_id"] for d in sources))
    summary = {
        v: {"n": len(r), "f1": round(statistics.mean(x["f1"] for x in r), 4), "em": round(statistics.mean(x["em"] for x in r), 4),
            "span_share": round(statistics.mean(x["span"] for x in r), 4), "answer_p50_s": round(statistics.median(x["seconds"] for x in r), 3)}
        for v, r in rows.items()
    }
    OUT.write_text(json.dumps({
        "model": args.model, "set": "new_wiki dev questions (answer_quality.dev_questions)", "variants": summary,
        "rows": rows, "command": f"python bench/answer_modes_dev.py --model {args.model} --questions {args.questions}", "run": run_facts(),
    }, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
