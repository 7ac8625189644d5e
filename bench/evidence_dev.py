"""Choose how a grounded answer finds its sentence, on development questions only.

A grounded answer is a span copied from one *evidence sentence* (:class:`ragkit.components.evidence_selector.EvidenceSelector`).
Which sentence is the choice that decides most answers, so this script measures, on SQuAD-Shifts
new_wiki development questions (``answer_quality.dev_questions``: never the calibration questions,
never the ones ``answer_quality.py`` reports), over an index of all new_wiki paragraphs, hybrid top ``Features().top_k`` (5):

``sentences``  (no LLM) how often the chosen sentence holds a gold answer, per way of choosing it:
               ``overlap`` (the sentence sharing most question words, what shipped before),
               ``idf`` (IDF-weighted share of the question's terms, the index's BM25 statistics),
               ``cosine`` (embedder cosine), ``idf+cosine``, ``idf+cosine+type`` (what ships: plus
               0.2 for holding the kind of thing asked for), and ``any`` (some sentence of the
               sources holds it: the ceiling).
``model``      (``--model``) whether the LLM chooses better among the three best sentences: its
               first-token preference under the span mask (``first_token``), its 0–10 grades of
               them in one grading call (``grades``) — each alone and added to ``idf+cosine``.
``engine``     (``--model``, ``--answers N``) the engine end to end on the first N questions:
               ``plain`` (``Features()``) and ``full`` (``Features.all_on()``, floor off), F1, EM,
               LLM calls and median seconds, cold prompt cache per question.

    .venv/bin/python bench/evidence_dev.py                                   # sentences only (~2 min)
    .venv/bin/python bench/evidence_dev.py --model qwen2.5-coder-0.5b --answers 60

Writes ``bench/results/evidence_dev.json`` (one entry per model; the sentence table is shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

import numpy as np
from answer_quality import SETS, dev_questions
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.eval.metrics import exact_match, f1_score, normalize_answer
from ragkit.index.retrieval import HybridRetriever
from ragkit.llm.source_spans import _STOP, _WORD, _stem
from ragkit.pipeline.features import Features

OUT = ROOT / "bench" / "results" / "evidence_dev.json"
WAYS = ("overlap", "idf", "cosine", "idf+cosine", "idf+cosine+type")
TOP_K = Features().top_k  # the sources a grounded answer's sentences come from


def holds_gold(text: str, answers: list[str]) -> bool:
    normalized = normalize_answer(text)
    return any(normalize_answer(a) and normalize_answer(a) in normalized for a in answers)


def ranked_candidates(selector: EvidenceSelector, question: str, sources) -> list[dict]:
    """Every sentence of the sources with each way's score (``idf+cosine`` is the selector's own)."""
    asked = {_stem(w) for w in _WORD.findall(question) if w.lower() not in _STOP and len(w) > 1}
    out = []
    for e in selector.rank(question, sources):
        words = {_stem(w) for w in _WORD.findall(e.content)}
        out.append({"text": e.content, "cite": e.meta["cite"], "offset": e.meta["offset"], "overlap": len(asked & words), "idf": e.meta["coverage"],
                    "cosine": e.meta["cosine"], "idf+cosine": e.meta["coverage"] + e.meta["cosine"], "idf+cosine+type": e.meta["evidence_score"]})
    # in the sources' order, so a tie goes to the earlier sentence (as the overlap rule always did)
    return sorted(out, key=lambda c: (c["cite"], c["offset"]))


def pick(candidates: list[dict], score) -> dict:
    return max(candidates, key=lambda c: (score(c), -candidates.index(c)))


def sentence_table(questions, retriever, selector) -> tuple[dict, list]:
    hits = {w: 0 for w in (*WAYS, "any")}
    kept = []
    for q in tqdm(questions, desc="sentences", file=sys.stderr, mininterval=10):
        sources = retriever.retrieve(q["question"], top_k=TOP_K).documents
        cands = ranked_candidates(selector, q["question"], sources)
        if not cands:
            continue
        for c in cands:
            c["gold"] = holds_gold(c["text"], q["answers"])
        for way in WAYS:
            hits[way] += pick(cands, lambda c: c[way])["gold"]
        hits["any"] += any(c["gold"] for c in cands)
        kept.append((q, sources, cands))
    n = len(kept)
    return {"n": n, **{w: round(v / n, 4) for w, v in hits.items()}}, kept


def model_choice(kept, model: str, n: int) -> dict:
    """The LLM choosing among the three best sentences: first-token preference and grades."""
    from haystack import Document

    from ragkit.components.document_grader import grade_task
    from ragkit.config import ModelConfig
    from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
    from ragkit.llm.probe import probe_for
    from ragkit.llm.prompts import context_messages, grounded_answer_task
    from ragkit.llm.source_spans import candidate_starts
    from ragkit.llm.span_decoding import SpanMask, vocabulary_for

    llm = build_chat_generator(ModelConfig(llm=model))
    llm.warm_up()
    probe, vocabulary = probe_for(llm), vocabulary_for(llm)
    digits = [probe._single_token(str(d)) for d in range(10)]
    counts = {"first_token": 0, "grades": 0, "idf+cosine": 0, "idf+cosine+first_token": 0, "idf+cosine+grades": 0}
    rows = []
    for q, _sources, cands in tqdm(kept[:n], desc=f"model choice {model}", file=sys.stderr, mininterval=10):
        top = sorted(cands, key=lambda c: -c["idf+cosine"])[:3]
        texts = [c["text"] for c in top]
        docs = [Document(content=t) for t in texts]
        reset_prompt_cache(llm)
        logits = probe.next_token_logits(probe.format(context_messages(docs, grounded_answer_task(q["question"]))))
        norm = float(np.log(np.exp(logits - logits.max()).sum()) + logits.max())
        for i, c in enumerate(top):
            starts = candidate_starts(q["question"], [texts[i]], sentences=1) or {(0, 0)}
            ids = list(SpanMask(vocabulary, [texts[i]], starts=starts)._first_step())
            c["first_token"] = float(np.log(np.exp(logits[ids] - logits.max()).sum()) + logits.max() - norm) if ids else -50.0
        reset_prompt_cache(llm)
        prompt = probe.format(context_messages(docs, grade_task(q["question"], len(docs))))
        reply = "["
        for i, c in enumerate(top):
            out = probe.next_token_logits(prompt + reply, continues_call=i > 0)[digits]
            p = np.exp(out - out.max())
            p /= p.sum()
            c["grades"] = float(p @ np.arange(10))
            reply += str(int(np.argmax(p))) + ("," if i < len(top) - 1 else "]")
        counts["first_token"] += pick(top, lambda c: c["first_token"])["gold"]
        counts["grades"] += pick(top, lambda c: c["grades"])["gold"]
        counts["idf+cosine"] += pick(top, lambda c: c["idf+cosine"])["gold"]
        counts["idf+cosine+first_token"] += pick(top, lambda c: c["idf+cosine"] + 0.05 * c["first_token"])["gold"]
        counts["idf+cosine+grades"] += pick(top, lambda c: c["idf+cosine"] + 0.1 * c["grades"])["gold"]
        rows.append({"id": q["id"], "candidates": [{k: c[k] for k in ("cite", "gold", "idf+cosine", "first_token", "grades")} for c in top]})
    m = len(rows)
    return {"n": m, **{k: round(v / m, 4) for k, v in counts.items()}, "weights": {"first_token": 0.05, "grades": 0.1}, "rows": rows}


def engine_run(kept, model: str, n: int, index) -> dict:
    from ragkit.config import ModelConfig, RagConfig
    from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=model))
    rags = {"plain": AgenticRAG(Features(), config=config, chat_generator=generator, index=index),
            "full": AgenticRAG(replace(Features.all_on(), confidence_floor=0.0), config=config, chat_generator=generator, index=index)}
    for rag in rags.values():
        if rag.features.rerank:
            rag.prepare_sentence_vectors()
        rag.ask("Warm-up question: when was the Eiffel Tower finished?")
    rows = {name: [] for name in rags}
    for q, _sources, _cands in tqdm(kept[:n], desc=f"engine {model}", file=sys.stderr, mininterval=10):
        for name, rag in rags.items():
            reset_prompt_cache(generator)
            t0 = time.perf_counter()
            r = rag.ask(q["question"])
            seconds = time.perf_counter() - t0
            f1 = 0.0 if r.declined else f1_score(r.answer, q["answers"])
            rows[name].append({"id": q["id"], "answer": r.answer, "f1": round(f1, 4), "em": 0.0 if r.declined else exact_match(r.answer, q["answers"]),
                               "seconds": round(seconds, 3), "llm_calls": r.trace.llm_calls, "mode": r.answer_mode, "confidence": round(r.confidence, 4)})
    summary = {name: {"n": len(r), "f1": round(statistics.mean(x["f1"] for x in r), 4), "em": round(statistics.mean(x["em"] for x in r), 4),
                      "p50_s": round(statistics.median(x["seconds"] for x in r), 3), "llm_calls": round(statistics.mean(x["llm_calls"] for x in r), 2)}
               for name, r in rows.items()}
    summary["full_over_plain_p50"] = round(summary["full"]["p50_s"] / summary["plain"]["p50_s"], 3)
    return {"summary": summary, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=390, help="development questions for the sentence table")
    parser.add_argument("--model", default=None)
    parser.add_argument("--model-questions", type=int, default=150)
    parser.add_argument("--answers", type=int, default=0, help="questions answered end to end by the engine")
    args = parser.parse_args()
    docs, questions = load_squad_corpus(SETS["new_wiki"])
    index = index_documents(docs, CACHE / "new_wiki_index_all-MiniLM-L6-v2")
    selector = EvidenceSelector(index=index)
    table, kept = sentence_table(dev_questions(questions)[: args.questions], HybridRetriever(index), selector)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data["sentences"] = table
    data["set"] = f"new_wiki dev questions (answer_quality.dev_questions), hybrid top {TOP_K} over all new_wiki paragraphs"
    print(json.dumps(table))
    if args.model:
        entry = data.setdefault("models", {}).setdefault(args.model, {})
        if args.model_questions:
            entry["model_choice"] = model_choice(kept, args.model, args.model_questions)
            print(json.dumps({k: v for k, v in entry["model_choice"].items() if k != "rows"}))
        if args.answers:
            entry["engine"] = engine_run(kept, args.model, args.answers, index)
            print(json.dumps(entry["engine"]["summary"]))
        entry["command"] = f"python bench/evidence_dev.py --model {args.model} --model-questions {args.model_questions} --answers {args.answers}"
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
