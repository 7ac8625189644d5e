"""Agent mode vs the fixed workflow: does letting the small model decide when to search help?

Asked question-major in one process with a cold llama.cpp prompt cache per question
(:func:`planning.ask_all`), on the same sets as ``bench/planning.py``:

``--baselines``  ragkit's engine, ``AgenticRAG`` under planning.py's configurations (``plain``, ``decompose``,
                 ``multi_hop``, ``full``), asked in this same run so ratios and latencies compare;
``agent``        ``AgentRAG`` (:mod:`ragkit.pipeline.agent_mode`): Haystack's ``Agent`` with the ``search`` tool
                 (``--tools search,sql`` adds ``count_cars``), at most ``--max-agent-steps`` agent steps.
                 ``--tool-calls grammar`` (the default): every step decoded under a grammar
                 (:mod:`ragkit.components.grammar_tool_calls`), each part answered by the answer step;
                 ``--tool-calls text``: tool calls written as free text, as agent mode was first measured
                 (3 chunks of 700 characters per search).

Sets: ``bridge`` — the hand-written two-hop questions over ``sample_docs/`` (``bench/data/bridge_questions.jsonl``,
``--split test``); ``two_part`` — ``--questions N`` two-part questions from SQuAD v1.1 dev
(:func:`planning.two_part_questions`, same seed, so the same questions as planning.py's run with the
same N). Scoring is planning.py's: a part is answered when SQuAD F1 ≥ 0.5 against the part's own answer
(``details["parts"]``) or, without parts, the whole answer.

Written to ``bench/results/planning.json`` under ``<set>/<model>/agent`` (``agent_text`` rows are the
text-mode runs; read, update, write; nothing else is replaced): ``n, parts_answered, both_answered,
part_f1, split, llm_calls, p50_s`` as planning.py reports them, plus ``llm_calls_p50``, the tool use —
``searched`` (share of questions with at least one successful search), ``tool_calls`` (mean per
question), ``exit_reasons``, ``no_tool_call_share``, ``unparsed_tool_calls`` (replies that could not
be read as an action), ``tool_call_formats`` — the call budget and its violations (LLM calls over
``AgentRAG.call_budget``: asserted 0), ``ece`` (the confidence against "every part answered", 5 bins),
and the baselines of this run: ``same_run`` (each one's figures), ``plain_same_run`` and
``over_plain_p50`` / ``over_plain_parts``. Per-question rows go to ``rows/<set>/<model>/agent``, the
command to ``commands/<set>/<model>/agent``.

    .venv/bin/python bench/agent_mode.py --model qwen2.5-coder-0.5b --questions 200 --sets two_part --baselines plain,decompose,multi_hop,full
    .venv/bin/python bench/agent_mode.py --model qwen2.5-coder-0.5b --sets bridge --baselines plain,multi_hop

A check on two-part pairs the reported 200 do not hold (the next pairs of the same seeded draw):

    .venv/bin/python bench/agent_mode.py --model qwen2.5-coder-0.5b --sets two_part --skip 200 --questions 60 --baselines plain,decompose --out bench/results/agent_unseen_pairs.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from answer_quality import SETS
from planning import BRIDGE, OUT, ask_all, configurations, over_plain, summarize, two_part_questions
from squad_common import CACHE, ROOT, run_facts

from ragkit.config import ModelConfig, RagConfig


class Recorded:
    """An ``ask``-able that keeps every result, so the tool use can be read after ``ask_all``."""

    def __init__(self, rag):
        self.rag, self.features, self.results = rag, rag.features, []

    def ask(self, question: str):
        result = self.rag.ask(question)
        self.results.append(result)
        return result


def load_set(name: str, args):
    from ragkit.eval.experiments import index_documents, load_squad_corpus
    from ragkit.index.indexer import build_index
    from ragkit.index.store import RagIndex

    if name == "bridge":
        index_dir = CACHE / "sample_docs_index"
        if not (index_dir / "manifest.json").exists() and not index_dir.exists():
            build_index(ROOT / "sample_docs", index_dir, RagConfig(), progress=False)
        items = [q for q in map(json.loads, BRIDGE.read_text().splitlines()) if q["split"] == args.split or args.split == "all"]
        return RagIndex.load(index_dir), items
    docs, questions = load_squad_corpus(SETS["squad_dev"])
    # the pairs are drawn in one seeded order, so --skip 200 gives pairs that a 200-question run never saw
    return index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2"), two_part_questions(questions, args.skip + args.questions)[args.skip:]


def tool_use(rows: list[dict], results: list, budget: int) -> dict:
    for row, result in zip(rows, results):
        stats = result.details.get("agent_stats") or {}
        row.update({
            "exit_reason": result.exit_reason, "tool_calls": stats.get("tool_calls", 0), "searched": bool(stats.get("searched")),
            "unparsed_tool_calls": stats.get("unparsed_tool_calls", 0), "tool_call_formats": stats.get("tool_call_formats", {}),
            "agent": result.details.get("agent", []), "error": result.error, "confidence": result.confidence,
            "over_budget": row["llm_calls"] > budget,  # planning's call_budget knows Features only
        })
    formats = Counter()
    for row in rows:
        formats.update(row["tool_call_formats"])
    return {
        "searched": round(statistics.mean(r["searched"] for r in rows), 4),
        "tool_calls": round(statistics.mean(r["tool_calls"] for r in rows), 2),
        "unparsed_tool_calls": sum(r["unparsed_tool_calls"] for r in rows),
        "tool_call_formats": dict(formats), "exit_reasons": dict(Counter(r["exit_reason"] for r in rows)),
        "call_budget": budget, "budget_violations": sum(r["over_budget"] for r in rows),
    }


def calibration_error(rows: list[dict], results: list) -> dict:
    """Expected calibration error of the agent's confidence against "a part answered" (F1 >= 0.5), per
    question (the confidence is the lowest of its parts'); 5 equal-width bins, and over how many."""
    pairs = [(r.confidence or 0.0, all(f >= 0.5 for f in row["part_f1"])) for row, r in zip(rows, results)]
    bins: dict[int, list] = {}
    for conf, right in pairs:
        bins.setdefault(min(int(conf * 5), 4), []).append((conf, right))
    ece = sum(len(b) / len(pairs) * abs(statistics.mean(c for c, _ in b) - statistics.mean(r for _, r in b)) for b in bins.values()) if pairs else 0.0
    return {"ece": round(ece, 4), "n": len(pairs), "mean_confidence": round(statistics.mean(c for c, _ in pairs), 4) if pairs else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=int, default=200, help="two-part questions")
    parser.add_argument("--skip", type=int, default=0, help="two-part: leave out the first N pairs (a check on pairs the reported run does not hold; use --out elsewhere)")
    parser.add_argument("--sets", default="bridge,two_part")
    parser.add_argument("--split", default="test", help="bridge split: dev | test | all")
    parser.add_argument("--max-agent-steps", type=int, default=4)
    parser.add_argument("--tools", default="search", help="search or search,sql")
    parser.add_argument("--baselines", default="plain", help="fixed-workflow configurations asked in the same run (planning.py's names)")
    parser.add_argument("--tool-calls", default="grammar", choices=["grammar", "text"], help="grammar-constrained actions, or tool calls written as text")
    parser.add_argument("--out", default=str(OUT), help="results file (a development run, e.g. --split dev, goes elsewhere than planning.json)")
    args = parser.parse_args()
    if "plain" not in [b.strip() for b in args.baselines.split(",")]:
        parser.error("--baselines must include plain: every agent figure is reported against plain RAG of the same run")
    from ragkit.llm.generators import build_chat_generator
    from ragkit.pipeline.agent_mode import AgentRAG
    from ragkit.pipeline.engine import AgenticRAG

    generator = build_chat_generator(ModelConfig(llm=args.model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=args.model))
    tools = tuple(t.strip() for t in args.tools.split(",") if t.strip())
    printed, violations = {}, 0
    for section in [s.strip() for s in args.sets.split(",") if s.strip()]:
        index, items = load_set(section, args)
        # text mode as first measured: 3 chunks of up to 700 characters per search
        shown = {"top_k": 3, "max_chars": 700} if args.tool_calls == "text" else {}
        agent = AgentRAG(index=index, config=config, chat_generator=generator, max_agent_steps=args.max_agent_steps, tools=tools,
                         tool_calls=args.tool_calls, **shown)
        baselines = configurations([b.strip() for b in args.baselines.split(",") if b.strip()])
        rags = {**{name: AgenticRAG(f, config=config, chat_generator=generator, index=index) for name, f in baselines.items()}, "agent": Recorded(agent)}
        for rag in rags.values():  # one-time work (model load, embedder, tables) outside every timing
            rag.ask("Warm-up question: when was the Eiffel Tower finished?")
        rags["agent"].results.clear()
        rows = ask_all(rags, items, generator, f"agent mode {section} {args.model}")
        use = tool_use(rows["agent"], rags["agent"].results, agent.call_budget)
        violations += use["budget_violations"]
        plain, agent_summary = summarize(rows["plain"]), summarize(rows["agent"])
        same_run = {name: summarize(rows[name]) for name in baselines}
        entry = {
            **agent_summary, **use, "llm_calls_p50": statistics.median(r["llm_calls"] for r in rows["agent"]),
            "no_tool_call_share": round(statistics.mean(r["exit_reason"] == "no_tool_call" for r in rows["agent"]), 4),
            "max_agent_steps": args.max_agent_steps, "tools": list(tools), "tool_call_mode": args.tool_calls,
            "plain_same_run": plain, "same_run": same_run, **over_plain(agent_summary, plain),
            "ece": calibration_error(rows["agent"], rags["agent"].results),
        }
        out = Path(args.out)
        data = json.loads(out.read_text()) if out.exists() else {}
        data.setdefault(section, {}).setdefault(args.model, {})["agent"] = entry
        data.setdefault("rows", {}).setdefault(section, {}).setdefault(args.model, {})["agent"] = rows["agent"]
        data.setdefault("commands", {})[f"{section}/{args.model}/agent"] = "python bench/agent_mode.py " + " ".join(sys.argv[1:])
        data.setdefault("agent_run", {})[f"{section}/{args.model}"] = run_facts()
        out.write_text(json.dumps(data, indent=1) + "\n")
        printed[section] = {"plain": plain, "agent": {k: v for k, v in entry.items() if k != "plain_same_run"}}
    print(json.dumps(printed, indent=1))
    assert violations == 0, f"{violations} agent questions made more LLM calls than AgentRAG.call_budget"
    return 0


if __name__ == "__main__":
    sys.exit(main())
