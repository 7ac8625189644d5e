"""Planning on two-part questions: does splitting a question answer both parts?

Two-part questions are built from SQuAD v1.1 dev: two questions about different articles, seeded
(``SEED``; none of them among the questions ``answer_quality.py`` reports), joined the way people
ask — "Which NFL team represented the AFC at Super Bowl 50, and where did Tesla study?" — over an
index of all dev paragraphs. Each is asked with

``plain``      ``Features()``: one retrieval and one answer for the whole question;
``decompose``  ``Features(decompose=True)``: the rules split it, each part gets the plain graph;
``multi_hop``  ``Features(multi_hop=True)``: one retrieval, then the sufficiency check (``hop_check``:
               the coverage check, no LLM, its threshold chosen by ``bench/hop_threshold.py``) and at most
               ``max_iterations`` follow-up retrievals for a bridge entity;
``full``       ``Features.all_on(decompose=True, multi_hop=True)`` with the decline floor off: every
               planning and checking step at once.

A part counts as answered when its gold answers' best SQuAD F1 against the text the system gives for
that part is ≥ 0.5 — for ``plain`` the whole answer (it has no parts), for ``decompose`` the part's own
answer. Reported per config: ``parts_answered`` (share of all parts answered), ``part_f1`` (mean
over parts), ``both_answered`` (share of questions with both parts answered), ``split`` (share split
into two parts), LLM calls and median seconds, and ``decompose`` / ``plain`` p50; cold llama.cpp
prompt cache per question, question-major. ``budget_violations``: questions whose LLM calls exceeded
the configuration's budget (:func:`call_budget`: each step's own bound summed, per part, at most
``max_parts`` parts) or made more follow-up retrievals than ``max_iterations`` in any part (each part's
hops are read from its own ``details``) — asserted 0.

``--bridge``: the hand-written two-hop questions over ``sample_docs/`` (``bench/data/bridge_questions.jsonl``,
``test`` split; the ``dev`` split is where the sufficiency threshold was looked at) asked with
``plain`` and ``multi_hop``; a question is answered when the answer's F1 against its gold is ≥ 0.5.
``sql`` is copied from ``bench/results/sql_route.json`` (``bench/sql_route.py``, test split).

    .venv/bin/python bench/planning.py --model qwen2.5-coder-0.5b --questions 200
    .venv/bin/python bench/planning.py --model qwen2.5-coder-0.5b --bridge

Writes ``bench/results/planning.json``: ``{section: {model: {config: {"n", "parts_answered", "part_f1",
"llm_calls", "p50_s", …, "over_plain_parts", "over_plain_p50"}}}}`` (every value under a model is one
configuration's figures), plus ``sql``, ``budget_violations`` and, beside them, per-question ``rows``,
``commands``, ``budgets`` and ``run``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from dataclasses import replace

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


BRIDGE = ROOT / "bench" / "data" / "bridge_questions.jsonl"
SQL_RESULTS = ROOT / "bench" / "results" / "sql_route.json"


def configurations(names: list[str]) -> dict[str, Features]:
    known = {
        "plain": Features(),
        "decompose": Features(decompose=True),
        "multi_hop": Features(multi_hop=True),
        "full": replace(Features.all_on(decompose=True, multi_hop=True), confidence_floor=0.0),
    }
    return {name: known[name] for name in names}


def call_budget(f: Features) -> int:
    """The most LLM calls a question may make under ``f``: every step's own bound, per part."""
    per_part = 1 + (1 if f.hyde else 0) + (1 if f.grading and f.grader_backend == "llm" else 0) + (1 if f.rerank and f.rerank_backend == "llm" else 0)
    per_part += (1 if f.routing and f.router_backend == "llm" else 0) + (1 if f.sql_route else 0)
    if f.hallucination_check:  # the judge, then per correction a new answer and a new judgement
        corrections = f.max_corrections if f.self_correction else 0
        per_part += 1 + 2 * corrections
    if f.multi_hop:
        per_part += f.hop_llm_calls
    if f.fallback:
        per_part += f.fallback_llm_calls
    if getattr(f, "expand", False) and f.expand_backend == "llm":
        per_part += 1
    if not f.decompose:
        return per_part
    return f.max_parts * per_part + (1 if f.decomposer_backend != "rules" else 0)


def hops_made(result) -> list[int]:
    """Follow-up retrievals per answered part (or of the question)."""
    parts = result.details.get("parts") or [{"details": result.details}]
    return [len([h for h in ((p.get("details") or {}).get("multi_hop") or {}).get("hops", []) if "new_documents" in h]) for p in parts]


def summarize(rows: list[dict]) -> dict:
    return {
        "n": len(rows), "parts_answered": round(statistics.mean(f >= 0.5 for r in rows for f in r["part_f1"]), 4),
        "both_answered": round(statistics.mean(all(f >= 0.5 for f in r["part_f1"]) for r in rows), 4),
        "part_f1": round(statistics.mean(f for r in rows for f in r["part_f1"]), 4),
        "split": round(statistics.mean(r["split"] for r in rows), 4), "llm_calls": round(statistics.mean(r["llm_calls"] for r in rows), 2),
        "p50_s": round(statistics.median(r["seconds"] for r in rows), 3),
    }


def ask_all(rags: dict, items: list[dict], generator, desc: str) -> dict[str, list[dict]]:
    """Every item asked under every configuration, question-major, cold prompt cache; one row each."""
    from ragkit.llm.generators import reset_prompt_cache

    rows = {name: [] for name in rags}
    for item in tqdm(items, desc=desc, file=sys.stderr, mininterval=10):
        for name, rag in rags.items():
            reset_prompt_cache(generator)
            t0 = time.perf_counter()
            r = rag.ask(item["question"])
            seconds = time.perf_counter() - t0
            parts = r.details.get("parts") or []
            golds = item["parts"] if "parts" in item else [{"answers": item["answers"]}]
            texts = [p["answer"] for p in parts] if len(parts) == len(golds) and len(golds) > 1 else [r.answer] * len(golds)
            f1s = [0.0 if r.declined else part_f1(t, q["answers"]) for t, q in zip(texts, golds)]
            hops = hops_made(r)
            rows[name].append({
                "id": item["id"], "question": item["question"], "answer": r.answer, "part_f1": [round(f, 4) for f in f1s],
                "split": len(parts) >= 2, "seconds": round(seconds, 3), "llm_calls": r.trace.llm_calls, "hops": hops,
                "over_budget": r.trace.llm_calls > call_budget(rag.features) or any(h > rag.features.max_iterations for h in hops),
                "exit_reasons": [((p.get("details") or {}).get("multi_hop") or {}).get("exit_reason") for p in (parts or [{"details": r.details}])],
            })
    return rows


def over_plain(figures: dict, plain: dict) -> dict:
    """A configuration's parts answered and p50 latency as ratios of ``plain``'s, asked in the same run."""
    return {"over_plain_p50": round(figures["p50_s"] / plain["p50_s"], 3),
            "over_plain_parts": round(figures["parts_answered"] / max(plain["parts_answered"], 1e-9), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--configs", default="plain,decompose,multi_hop,full")
    parser.add_argument("--bridge", action="store_true", help="the two-hop questions over sample_docs instead of the two-part set")
    parser.add_argument("--split", default="test", help="bridge split: dev | test")
    args = parser.parse_args()
    from ragkit.llm.generators import build_chat_generator
    from ragkit.pipeline.engine import AgenticRAG

    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    if args.bridge:
        from ragkit.index.indexer import build_index
        from ragkit.index.store import RagIndex

        index_dir = CACHE / "sample_docs_index"
        if not (index_dir / "manifest.json").exists() and not index_dir.exists():
            build_index(ROOT / "sample_docs", index_dir, RagConfig(), progress=False)
        index = RagIndex.load(index_dir)
        items = [q for q in map(json.loads, BRIDGE.read_text().splitlines()) if q["split"] == args.split or args.split == "all"]
    else:
        docs, questions = load_squad_corpus(SETS["squad_dev"])
        index = index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2")
        items = two_part_questions(questions, args.questions)
    generator = build_chat_generator(ModelConfig(llm=args.model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=args.model))
    rags = {name: AgenticRAG(f, config=config, chat_generator=generator, index=index) for name, f in configurations(names).items()}
    for rag in rags.values():  # one-time work (model load, sentence vectors, the span vocabulary) outside every timing
        if rag.features.rerank:
            rag.prepare_sentence_vectors(progress=False)
        rag.ask("Warm-up question: when was the Eiffel Tower finished?")
    rows = ask_all(rags, items, generator, f"planning {'bridge' if args.bridge else 'two-part'} {args.model}")
    summary = {name: summarize(rs) for name, rs in rows.items()}
    violations = sum(r["over_budget"] for rs in rows.values() for r in rs)
    section = "bridge" if args.bridge else "two_part"
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    entry = data.setdefault(section, {}).setdefault(args.model, {})  # {config: its figures}, nothing else
    entry.update(summary)
    if "plain" in summary:  # ratios against plain asked in this same run, kept inside each config's figures
        for name in summary:
            if name != "plain":
                entry[name].update(over_plain(summary[name], summary["plain"]))
    data.setdefault("budgets", {})[f"{section}/{args.model}"] = {name: call_budget(rag.features) for name, rag in rags.items()}
    data.setdefault("rows", {}).setdefault(section, {}).setdefault(args.model, {}).update(rows)
    data.setdefault("commands", {})[f"{section}/{args.model}"] = "python bench/planning.py " + " ".join(sys.argv[1:])
    data.setdefault("violations_by_run", {})[f"{section}/{args.model}"] = violations
    data["budget_violations"] = sum(data["violations_by_run"].values())
    if SQL_RESULTS.exists():  # the SQL route's accuracy, from bench/sql_route.py's test split
        sql = json.loads(SQL_RESULTS.read_text())
        data["sql"] = {m: {"n": v["test"]["n"], "accuracy": v["test"]["accuracy"]} for m, v in sql.items() if isinstance(v, dict) and "test" in v}
    data.setdefault("sql", {})
    data.setdefault("bridge", {})
    data["sets"] = {
        "two_part": "two-part questions from SQuAD v1.1 dev (pairs from different articles, seed 16), index of all dev paragraphs",
        "bridge": "hand-written two-hop questions over sample_docs/ (bench/data/bridge_questions.jsonl, test split)",
        "sql": "number questions about vega_datasets' cars table (bench/data/sql_questions.jsonl, test split)",
    }
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({**summary, "budget_violations": violations}))
    assert violations == 0, f"{violations} questions went over their LLM-call or iteration budget"
    return 0


if __name__ == "__main__":
    sys.exit(main())
