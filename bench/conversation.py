"""Conversations, measured (issue 30): follow-ups, clarification, and what a follow-up costs in time.

Sets: ``data/conversations/SET.follow_ups.jsonl`` and ``SET.clarify.jsonl`` (built by
``bench/conversation_sets.py`` from SQuAD v1.1 dev and SQuAD-Shifts new_wiki; the construction is in
that script's docstring and data/conversations/README.md). The corpus is the set's every paragraph,
one chunk each (the cached bench index), so a follow-up competes with every other article.

**Follow-ups** — recall@5 of the second question's gold paragraph (the engine's hybrid retrieval,
``IndexRetriever``, top 5), asked as:

``raw``       the follow-up as the person typed it ("When was it created?");
``ceiling``   the question SQuAD wrote ("When was the United Methodist Church created?");
``rules``     :class:`~ragkit.components.follow_up_rewriter.FollowUpRewriter` ``backend="rules"`` with the history;
``llm``       the same, ``backend="llm"`` (each ``--models``), under its word grammar at temperature 0;

each with the shipped keep check (``dense_top``: the rewrite is used only when its best dense cosine is
at least the raw question's) and, beside it, ``…_always`` (every rewrite used). The history is what a
``ChatSession`` sends: the first question and its answer (SQuAD's gold), with the titles of the three
chunks retrieved for the first question in the answer's meta. ``gap_closed`` = (rewrite − raw) /
(ceiling − raw). **Self-contained**: the ceiling questions asked after the same history — the share
the detector leaves untouched, and recall@5 through the step against the question alone.

**Clarification** — each question of the clarify set is retrieved (top 5) and
:func:`~ragkit.conversation.clarification.find_ambiguity` decides ask / answer at each ``ratio`` of
``RATIOS``; the ratio is chosen on squad_dev half A (the best F1 of asking, ties to the higher ratio:
asks less) and reported on squad_dev half B and on new_wiki (neither seen). Then, for up to
``--choices`` ambiguous questions per set (half B / new_wiki) that were asked back, the scripted choice
— the option that names the question's entity — and the engine (plain RAG + ``clarify``, the 0.5B)
answers the original question in that option's scope: ``about_chosen`` is the share whose answer came
(not declined, not failed) with every source from the chosen entity's article; a question whose
options missed its entity counts as a miss. F1 ≥ 0.5 against SQuAD's answers is reported beside it.

**Latency** (0.5B, 2 cores, prompt cache emptied before each question, streamed): ``--latency-pairs``
pairs of squad_dev, each asked self-contained (``ceiling``) and as the follow-up (``raw``, rewritten by
the step) through ``AgenticRAG(Features(follow_ups=True))``, in alternating order; p50 of time to first
token and of total seconds, and the follow-up/self-contained ratio of the p50s, for each backend.

    .venv/bin/python bench/conversation.py                                  # everything, ~1 h on 2 cores
    .venv/bin/python bench/conversation.py --parts latency                  # only the timing, machine quiet
    .venv/bin/python bench/conversation.py --follow-ups my.jsonl --clarify my_cl.jsonl --sets squad_dev  # other sets, same index

Rewrites and answers go through one LLM reply cache (``bench/.cache/conversation_llm.sqlite``): a rerun
makes no call except for the latency part, which never uses it. Writes ``bench/results/conversation.json``
(the parts run replace theirs; the rest is kept).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from haystack.dataclasses import ChatMessage
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.components.ambiguity_check import AmbiguityCheck
from ragkit.components.follow_up_rewriter import FollowUpRewriter
from ragkit.components.index_retriever import IndexRetriever
from ragkit.config import ModelConfig, RagConfig
from ragkit.conversation.clarification import find_ambiguity, title_of
from ragkit.conversation.follow_ups import detect
from ragkit.eval.experiment_sets import index_documents, load_squad_corpus
from ragkit.eval.metrics import f1_score
from ragkit.llm.cache import LLMCache, llm_cache
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features

OUT = ROOT / "bench" / "results" / "conversation.json"
SETS_DIR = ROOT / "data" / "conversations"
SQUAD = {"squad_dev": ROOT / "data" / "squad" / "squaddev_v1.1.json.gz", "new_wiki": ROOT / "data" / "squad" / "new_wiki_v1.0.json.gz"}
RATIOS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
TOP_K = 5
SMALL = "qwen2.5-coder-0.5b"
ORDINARY_SEED = 5


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def set_index(set_name: str):
    docs, _ = load_squad_corpus(SQUAD[set_name])
    folder = CACHE / ("squad_dev_index_all-MiniLM-L6-v2" if set_name == "squad_dev" else f"{set_name}_index_all-MiniLM-L6-v2")
    return index_documents(docs, folder, embedder="all-MiniLM-L6-v2", progress=True)


def pct(x: float) -> float:
    return round(100 * x, 1)


# -- follow-ups -------------------------------------------------------------------------------------
def history_of(pair: dict, retriever: IndexRetriever) -> list[ChatMessage]:
    """What a ChatSession sends: the first question, and its answer with the titles of its sources."""
    first, answer = pair["history"][0]["text"], pair["history"][1]["text"]
    titles = list(dict.fromkeys(title_of(d) for d in retriever.run(query=first, top_k=3)["documents"]))
    return [ChatMessage.from_user(first), ChatMessage.from_assistant(answer, meta={"titles": titles})]


def hit(retriever: IndexRetriever, query: str, chunks: list[str]) -> bool:
    return any(d.id in chunks for d in retriever.run(query=query, top_k=TOP_K)["documents"])


def follow_up_rows(pairs: list[dict], retriever: IndexRetriever, rewriters: dict[str, FollowUpRewriter], desc: str, limits: dict[str, int]) -> list[dict]:
    """``limits``: a rewriter runs on the first so many pairs only (the larger model is slow on 2 cores)."""
    rows = []
    for i, pair in enumerate(tqdm(pairs, desc=desc, mininterval=10)):
        history = history_of(pair, retriever)
        row = {"id": pair["id"], "kind": pair["kind"], "raw": hit(retriever, pair["question"], pair["chunks"]),
               "ceiling": hit(retriever, pair["original"], pair["chunks"]), "detected": detect(pair["question"]).needed}
        for name, step in rewriters.items():
            if i >= limits.get(name, len(pairs)):
                continue
            out = step.run(query=pair["question"], history=history)
            info = out["rewrite"]
            rewritten = info.get("rewritten") or pair["question"]
            row[name] = hit(retriever, out["query"], pair["chunks"])
            row[f"{name}_always"] = row[name] if rewritten == out["query"] else hit(retriever, rewritten, pair["chunks"])
            row[f"{name}_rewrite"], row[f"{name}_kept"], row[f"{name}_by"] = info.get("rewritten"), info.get("kept"), info.get("by")
            # the same history, the self-contained question: is it left alone, and does recall hold?
            alone = step.run(query=pair["original"], history=history)
            row[f"{name}_self_untouched"] = alone["query"] == pair["original"]
            row[f"{name}_self"] = row["ceiling"] if alone["query"] == pair["original"] else hit(retriever, alone["query"], pair["chunks"])
        rows.append(row)
    return rows


def follow_up_summary(rows: list[dict], names: list[str]) -> dict:
    share = lambda subset, key: sum(bool(r[key]) for r in subset) / len(subset)  # noqa: E731
    raw, ceiling = share(rows, "raw"), share(rows, "ceiling")
    out = {"pairs": len(rows), "detected": pct(share(rows, "detected")), "recall@5": {"raw": pct(raw), "ceiling": pct(ceiling)},
           "gap_closed": {}, "self_contained": {}, "kept": {}, "pairs_by_rewriter": {}}
    for name in names:
        subset = [r for r in rows if name in r]  # a rewriter limited to the first pairs: its raw and ceiling on those
        sub_raw, sub_ceiling = share(subset, "raw"), share(subset, "ceiling")
        out["pairs_by_rewriter"][name] = len(subset)
        if len(subset) < len(rows):
            out["recall@5"][f"raw ({len(subset)} pairs)"], out["recall@5"][f"ceiling ({len(subset)} pairs)"] = pct(sub_raw), pct(sub_ceiling)
        for variant in (name, f"{name}_always"):
            value = share(subset, variant)
            out["recall@5"][variant] = pct(value)
            out["gap_closed"][variant] = pct((value - sub_raw) / (sub_ceiling - sub_raw)) if sub_ceiling > sub_raw else None
        out["self_contained"][name] = {"untouched": pct(share(subset, f"{name}_self_untouched")), "recall@5": pct(share(subset, f"{name}_self")),
                                       "recall@5_alone": pct(sub_ceiling), "drop_points": round(pct(sub_ceiling) - pct(share(subset, f"{name}_self")), 1)}
        out["kept"][name] = pct(share(subset, f"{name}_kept"))
    out["by_kind"] = {}
    for kind in sorted({r["kind"] for r in rows}):
        subset = [r for r in rows if r["kind"] == kind]
        out["by_kind"][kind] = {"pairs": len(subset), **{key: pct(share(subset, key)) for key in ["raw", "ceiling", *names] if all(key in r for r in subset)}}
    return out


# -- clarification ----------------------------------------------------------------------------------
def ask_rows(items: list[dict], retriever: IndexRetriever, desc: str, source_text=None) -> list[dict]:
    """``source_text``: the engine's :meth:`AmbiguityCheck.source_text` (a generic noun looked up in the whole document)."""
    rows = []
    for item in tqdm(items, desc=desc, mininterval=10):
        docs = retriever.run(query=item["question"], top_k=TOP_K)["documents"]
        row = {"id": item["id"], "label": item["label"], "entity": item["entity"], "half": item["half"], "kind": item["kind"], "asks": {}, "options": {}}
        for ratio in RATIOS:
            found = find_ambiguity(item["question"], docs, ratio=ratio, source_text=source_text)
            row["asks"][str(ratio)] = found.ambiguous
            row["options"][str(ratio)] = [{"label": o.label, "scope": o.scope} for o in found.options]
        rows.append(row)
    return rows


def ordinary_questions(set_name: str, items: list[dict], n: int) -> list[dict]:
    """``n`` of the set's own SQuAD questions (seeded), none of the clarify set's articles' rewritten ones:
    clear questions as people ask them, which should almost never be asked back."""
    from conversation_sets import halves

    half_of, used = halves(set_name), {i["question"] for i in items}
    _, questions = load_squad_corpus(SQUAD[set_name])
    pool = [q for q in questions if q["question"] not in used]
    return [{"id": f"{set_name}-ordinary-{i}", "question": q["question"], "label": "clear", "entity": q["title"], "chunks": [q["doc_id"]], "kind": "ordinary",
             "half": half_of[q["title"]], "answers": q["answers"]}
            for i, q in enumerate(random.Random(ORDINARY_SEED).sample(pool, min(n, len(pool))))]


def ask_scores(rows: list[dict], ratio: float) -> dict:
    key = str(ratio)
    ordinary = [r for r in rows if r["kind"] == "ordinary"]
    tp = sum(r["asks"][key] and r["label"] == "ambiguous" for r in rows)
    fp = sum(r["asks"][key] and r["label"] == "clear" for r in rows)
    fn = sum(not r["asks"][key] and r["label"] == "ambiguous" for r in rows)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    asked = [r for r in rows if r["asks"][key] and r["label"] == "ambiguous"]
    listed = sum(option_of(r["entity"], r["options"][key]) is not None for r in asked)
    return {"questions": len(rows), "ambiguous": tp + fn, "clear": len(rows) - tp - fn, "precision": round(precision, 3), "recall": round(recall, 3),
            "f1": round(f1, 3), "entity_among_options": round(listed / len(asked), 3) if asked else None,
            "ordinary": len(ordinary), "ordinary_asked": round(sum(r["asks"][key] for r in ordinary) / len(ordinary), 3) if ordinary else None}


def option_of(entity: str, options: list[dict]) -> dict | None:
    """The option whose scope is the entity's article (its source), if one is offered."""
    source = "squad:" + entity.replace(" ", "_")
    return next((o for o in options if o["scope"].get("source") == [source]), None)


def choose_ratio(rows: list[dict]) -> float:
    return max(RATIOS, key=lambda r: (ask_scores(rows, r)["f1"], r))


def scripted_choices(rows: list[dict], items: dict[str, dict], ratio: float, rag: AgenticRAG, limit: int, desc: str) -> dict:
    key, results = str(ratio), []
    candidates = [r for r in rows if r["label"] == "ambiguous" and r["asks"][key]][:limit]
    for row in tqdm(candidates, desc=desc, mininterval=10):
        item = items[row["id"]]
        # the script chooses the question's own entity when it is offered, else the first option
        chosen = option_of(row["entity"], row["options"][key])
        offered = chosen is not None
        chosen = chosen or row["options"][key][0]
        result = rag.ask(item["question"], scope=chosen["scope"])
        sources = {str(d.meta.get("source")) for d in result.sources}
        answered = not result.failed and not result.declined and result.exit_reason not in ("no_context", "needs_clarification") and bool(result.sources)
        results.append({"id": row["id"], "entity_offered": offered, "chosen": chosen["label"], "about_chosen": answered and sources == set(chosen["scope"]["source"]),
                        "exit_reason": result.exit_reason, "sources": sorted(sources), "answer": result.answer,
                        "f1": f1_score(result.answer, item["answers"]) if offered else None})
    n, offered = len(results), [r for r in results if r["entity_offered"]]
    return {"asked_ambiguous": n, "about_chosen": round(sum(r["about_chosen"] for r in results) / n, 3) if n else None,
            "entity_offered": round(sum(r["entity_offered"] for r in results) / n, 3) if n else None,
            "f1_ge_0.5": round(sum(r["f1"] >= 0.5 for r in offered) / len(offered), 3) if offered else None, "rows": results}


# -- latency ----------------------------------------------------------------------------------------
def latency(pairs: list[dict], index, retriever: IndexRetriever, generator, backends: list[str], n: int) -> dict:
    config = RagConfig(models=ModelConfig(llm=SMALL))
    out = {}
    for backend in backends:
        rag = AgenticRAG(Features(follow_ups=True, follow_up_backend=backend), config=config, index=index, chat_generator=generator)
        rag.ask("Warm up the steps.", history=None)
        timings: dict[str, list[float]] = {"self_total": [], "follow_total": [], "self_ttft": [], "follow_ttft": []}
        for i, pair in enumerate(tqdm(pairs[:n], desc=f"latency {backend}")):
            history = history_of(pair, retriever)
            order = [("self", pair["original"]), ("follow", pair["question"])]
            for label, question in (order if i % 2 == 0 else order[::-1]):
                reset_prompt_cache(generator)
                result = rag.ask(question, history=history, streaming_callback=lambda chunk: None)
                timings[f"{label}_total"].append(result.seconds)
                if result.first_token_s is not None:
                    timings[f"{label}_ttft"].append(result.first_token_s)
        p50 = {k: round(statistics.median(v), 3) if v else None for k, v in timings.items()}
        out[backend] = {"pairs": n, **{f"{k}_p50_s": v for k, v in p50.items()},
                        "follow_over_self": round(p50["follow_total"] / p50["self_total"], 2) if p50["self_total"] else None}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="squad_dev,new_wiki")
    parser.add_argument("--parts", default="follow_ups,clarify,latency")
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b", help="models for the LLM rewrite")
    parser.add_argument("--follow-ups", type=Path, help="a follow-up set (one set only); default data/conversations/SET.follow_ups.jsonl")
    parser.add_argument("--clarify", type=Path, help="a clarification set (one set only)")
    parser.add_argument("--large-pairs", type=int, default=100, help="pairs per set the second and later --models rewrite")
    parser.add_argument("--limit", type=int, default=0, help="at most this many pairs / questions per set (0: all)")
    parser.add_argument("--ordinary", type=int, default=200, help="the set's own SQuAD questions added as clear ones")
    parser.add_argument("--choices", type=int, default=60, help="scripted choices answered per set")
    parser.add_argument("--latency-pairs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    parts, sets, models = args.parts.split(","), args.sets.split(","), [m for m in args.models.split(",") if m]
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    report.setdefault("facts", {}).update(run_facts())
    cache = LLMCache(CACHE / "conversation_llm.sqlite")
    generators: dict[str, object] = {}

    def generator(model: str):
        if model not in generators:
            generators[model] = build_chat_generator(ModelConfig(llm=model))
            generators[model].warm_up()
        return generators[model]

    for set_name in sets:
        index = set_index(set_name)
        retriever = IndexRetriever(index=index, top_k=TOP_K)
        retriever.warm_up()
        if "follow_ups" in parts:
            pairs = load_jsonl(args.follow_ups or SETS_DIR / f"{set_name}.follow_ups.jsonl")[: args.limit or None]
            rewriters = {"rules": FollowUpRewriter(backend="rules", index=index)}
            for model in models:
                rewriters[f"llm_{model.split('-')[-1]}"] = FollowUpRewriter(chat_generator=generator(model), backend="llm", index=index)
            limits = {name: args.large_pairs for name in list(rewriters)[2:]}  # the first model runs on every pair
            with llm_cache(cache):
                rows = follow_up_rows(pairs, retriever, rewriters, f"{set_name} follow-ups", limits)
            report.setdefault("follow_ups", {})[set_name] = {**follow_up_summary(rows, list(rewriters)), "models": {k: m for k, m in zip(list(rewriters)[1:], models)}}
            rows_path = ROOT / "bench" / "results" / "conversation_rows" / f"{set_name}.follow_ups.jsonl"
            rows_path.parent.mkdir(parents=True, exist_ok=True)
            rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        if "clarify" in parts:
            items = load_jsonl(args.clarify or SETS_DIR / f"{set_name}.clarify.jsonl")[: args.limit or None]
            items += ordinary_questions(set_name, items, args.ordinary)
            rows = ask_rows(items, retriever, f"{set_name} clarify", source_text=AmbiguityCheck(index=index).source_text)
            section = report.setdefault("clarify", {})
            if set_name == "squad_dev":
                ratio = choose_ratio([r for r in rows if r["half"] == "A"])
                section["chosen_ratio"] = ratio
                section["chosen_on"] = "squad_dev half A (best F1 of asking; ties: the higher ratio)"
            ratio = section.get("chosen_ratio", 0.8)
            scored = {"squad_dev": {"A (chosen on)": [r for r in rows if r["half"] == "A"], "B": [r for r in rows if r["half"] == "B"]}}.get(set_name, {"all": rows})
            section[set_name] = {"ratio": ratio, **{half: ask_scores(subset, ratio) for half, subset in scored.items()},
                                 "by_ratio": {str(r): ask_scores(rows, r) for r in RATIOS}}
            held_out = scored.get("B", rows)
            rag = AgenticRAG(Features(clarify=True, clarify_ratio=ratio), config=RagConfig(models=ModelConfig(llm=SMALL)), index=index, chat_generator=generator(SMALL))
            with llm_cache(cache):
                section[set_name]["scripted_choice"] = scripted_choices(held_out, {i["id"]: i for i in items}, ratio, rag, args.choices, f"{set_name} choices")
        if "latency" in parts and set_name == "squad_dev":
            pairs = load_jsonl(SETS_DIR / "squad_dev.follow_ups.jsonl")
            report["latency"] = latency(pairs, index, retriever, generator(SMALL), ["rules", "llm"], args.latency_pairs)
            report["latency"]["model"] = SMALL
    for part in parts:  # each part's figures come from the command that last ran it
        report.setdefault("commands", {})[part] = "python " + " ".join(sys.argv)
    report["written"] = time.strftime("%Y-%m-%d %H:%M")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "facts"}, indent=1, default=str)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
