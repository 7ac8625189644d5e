"""Print the measured tables of the README and of docs/*.md from bench/results/*.json, so no page drifts from them.

    .venv/bin/python bench/tables.py            # every table whose JSON exists
    .venv/bin/python bench/tables.py --readme   # rewrite the table under each <!-- name.json --> marker in README.md and docs/*.md

The README's one table (``<!-- summary -->``) holds the headline figure of each measured page; the
pages hold the rest. ``tests/test_readme_tables.py`` fails when a page is out of step with the JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ragkit.eval.agreement import tau_text, writer_size

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def judge_table(d: dict) -> str:
    lines = [
        "| judge | balanced accuracy at 0.5 | ROC AUC | judged supported at 0.5: supported / contradicted / unsupported | calibrated threshold | held-out balanced accuracy: calibrated / at 0.5 | p50 ms/item |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, variants in d["results"].items():
        r = variants["with_question"]
        k = r["per_kind"]
        c = r.get("calibrated")
        calibrated = f"{c['threshold']:.2f} | {c['held_out_balanced_accuracy']:.3f} / {c['held_out_balanced_accuracy_at_0.5']:.3f}" if c else "– | –"
        lines.append(
            f"| {model} | {r['balanced_accuracy']:.3f} | {r['roc_auc']:.3f} | "
            f"{k['supported']['judged_supported']:.2f} / {k['contradicted']['judged_supported']:.2f} / {k['unsupported']['judged_supported']:.2f} | {calibrated} | {r['ms_p50']:.0f} |"
        )
    return "\n".join(lines)


def routing_table(d: dict) -> str:
    classes = d["classes"]
    lines = ["| router backend | accuracy | p50 ms | " + " | ".join(classes) + " |", "|---|---|---|" + "---|" * len(classes)]
    for name, r in d["backends"].items():
        per = " | ".join(f"{r['per_class_accuracy'].get(c, 0):.2f}" for c in classes)
        lines.append(f"| {name} | {r['accuracy']:.3f} | {r['ms_p50']:.2f} | {per} |")
    return "\n".join(lines)


def rerank_table(d: dict) -> str:
    lines = ["| reranker (15 hybrid candidates) | questions | R@1 | R@3 | R@5 | MRR | p50 ms/q |", "| --- | --- | --- | --- | --- | --- | --- |"]
    rows = dict(d["all_questions"])
    subset_key = next(k for k in d if k.startswith("first_"))
    for name in ("llm", "llm+fused"):
        if name in d[subset_key]:
            rows[name] = d[subset_key][name]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['questions']} | {r['recall@1']:.3f} | {r['recall@3']:.3f} | {r['recall@5']:.3f} | {r['mrr']:.3f} | {r['ms_per_q_p50']:.0f} |")
    return "\n".join(lines)


def rerank_questions_table(d: dict) -> str:
    """bench/rerank_questions.py: the rerank feature as the pipeline runs it, against plain, on thousands of people's questions."""
    lines = ["| set | questions of | n | plain MRR@5 / R@1 / R@5 | reranker | MRR@5 change [95%] | R@1 change [95%] | R@5 change [95%] | MRR worse / better |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    part_names = {"agreement_paragraphs": "the 300 paragraphs eval_agreement samples", "other_paragraphs": "other paragraphs (1,000 drawn)"}

    def change(f: dict) -> str:
        return f"{f['change']:+.3f} [{f['interval95'][0]:+.3f}, {f['interval95'][1]:+.3f}]"

    for name, parts in d["sets"].items():
        for part, f in parts.items():
            plain = f"{f['plain']['mrr@5']:.3f} / {f['plain']['r@1']:.3f} / {f['plain']['r@5']:.3f}"
            for label in (k for k in f if k not in ("questions", "plain")):
                shown = "the default (fused 1:1)" if label == "rerank" else "retrieval weighted 2 (candidate)"
                chosen = " ← chosen here" if f"{name} {part}" == d["chosen_on"] and label != "rerank" else ""
                lines.append(f"| {name} | {part_names.get(part, part)} | {f['questions']} | {plain} | {shown}{chosen} | {change(f[label]['mrr@5'])} | "
                             f"{change(f[label]['r@1'])} | {change(f[label]['r@5'])} | {f[label]['worse']} / {f[label]['better']} |")
    return "\n".join(lines)


def rerank_windows_table(d: dict) -> str:
    """bench/rerank_windows.py: the reranker scoring windows of sentences, on its one choosing set."""
    lines = [f"| reranker ({d['questions']:,} questions of {d['set']}'s other paragraphs; plain MRR@5 {d['plain']['mrr@5']:.3f}) "
             "| MRR@5 change [95%] | R@1 change [95%] | R@5 change [95%] | MRR worse / better |",
             "| --- | --- | --- | --- | --- |"]
    for name, f in d["variants"].items():
        cells = " | ".join(f"{f[m]['change']:+.3f} [{f[m]['interval95'][0]:+.3f}, {f[m]['interval95'][1]:+.3f}]" for m in ("mrr@5", "r@1", "r@5"))
        lines.append(f"| {name}{' (today: the default)' if name == d['default'] else ''} | {cells} | {f['worse']} / {f['better']} |")
    return "\n".join(lines)


def rerank_by_kind_table(d: dict) -> str:
    """bench/rerank_by_kind.py: rerank's MRR minus plain's per kind of generated item, beside people's questions."""
    kinds = ("all", "single", "paraphrase", "multi")
    lines = ["| set | questions | " + " | ".join(f"{kind}: change [95%] (n)" for kind in kinds) + " |", "|" + " --- |" * (2 + len(kinds))]

    def cell(f: dict | None) -> str:
        return f"{f['change']:+.3f} [{f['interval95'][0]:+.3f}, {f['interval95'][1]:+.3f}] ({f['items']})" if f and f.get("items") else ""

    for name, entry in d["sets"].items():
        for source, figures in entry.items():
            writer, _, items = source.partition(" ")
            shown = f"people's {d['real_questions']}" if source == "people" else f"{items} by the {writer_size(writer)}"
            parts = {"all": figures} if source == "people" else figures
            lines.append(f"| {name} | {shown} | " + " | ".join(cell(parts.get(kind)) for kind in kinds) + " |")
    return "\n".join(lines)


def one_engine_table(new: dict, old: dict) -> str:
    """The one-engine rerun (bench/results/agentic_squad_one_engine.json) beside the hand-rolled engine's committed rows."""
    lines = ["| config | engine | questions | EM | F1 | declined | LLM calls/q | p50 s | full / plain p50 | overhead ms p50 / p95 |", "|" + " --- |" * 10]
    for label, data in (("hand-rolled (agentic_squad.json)", old), ("one Pipeline (agentic_squad_one_engine.json)", new)):
        configs = data.get("configs", {})
        plain = configs.get("plain")
        for name in ("plain", "full"):
            c = configs.get(name)
            if not c:
                continue
            ratio = f"{c['latency_s_p50'] / plain['latency_s_p50']:.2f}" if name == "full" and plain else ""
            overhead = f"{c['pipeline_overhead_ms_p50']:.1f} / {c['pipeline_overhead_ms_p95']:.1f}" if c.get("pipeline_overhead_ms_p50") is not None else "not measured"
            lines.append(f"| {name} | {label} | {c['questions']} | {c['em']:.3f} | {c['f1']:.3f} | {c['decline_rate']:.2f} | {c['llm_calls_per_q']:.2f} | {c['latency_s_p50']:.2f} | {ratio} | {overhead} |")
    return "\n".join(lines)


def injection_table(d: dict) -> str:
    """bench/results/injection.json: how often the test-set attacks were obeyed, guard off vs on."""
    lines = ["| model | config | guard | answer obeyed | grader obeyed | judge obeyed | answer right |", "|" + " --- |" * 7]
    for model, configs in d["models"].items():
        for config, runs in configs.items():
            for guard in ("guard_off", "guard_on"):
                r = runs[guard]
                lines.append(f"| {model.replace('qwen2.5-coder-', '')} | {config} | {'on' if guard == 'guard_on' else 'off'} | "
                             f"{r['followed']}/{r['n']} | {r['grader_followed']}/{r['n']} | {r['judge_followed']}/{r['n']} | {r['right']}/{r['n']} |")
    fa = d["false_alarms"]
    lines.append("")
    lines.append(f"{d['cases']} attacks of the `{d['set']}` set, {sum(d['guard_detects'].values())} of them recognised by the guard; "
                 f"false alarms: {fa['flagged']} of {fa['paragraphs']:,} SQuAD paragraphs. `{d['command']}`")
    return "\n".join(lines)


def reliability_table(d: dict) -> str:
    return ("| cases | passed | data loss | hidden failures |\n| --- | --- | --- | --- |\n"
            f"| {d['cases']} | {d['passed']} | {d['data_loss']} | {d['hidden_failures']} |")


def answer_quality_table(d: dict) -> str:
    """bench/results/answer_quality.json: answer quality per set × model × config."""
    def ratio(r: dict, key: str) -> str:
        return f"{r[key]:.2f}×" if key in r else ""

    lines = ["| set | model | config | n | EM | F1 | false declines | verbatim spans | p50 s | p50 vs free mode | p50 vs plain |", "|" + " --- |" * 11]
    for set_name, models in (d.get("sets") or {}).items():
        for model, configs in models.items():
            for config, r in configs.items():
                lines.append(
                    f"| {set_name} | {model.replace('qwen2.5-coder-', '')} | {config} | {r['n']} | {r['em']:.3f} | {r['f1']:.3f} | {r['false_decline']:.1%} | "
                    f"{r['span_share']:.0%} | {r['p50_s']:.2f} | {ratio(r, 'p50_ratio_to_free')} | {ratio(r, 'p50_ratio_to_plain')} |"
                )
    return "\n".join(lines)


def answer_modes_dev_table(d: dict) -> str:
    """bench/results/answer_modes_dev.json: the grounded answer's variants on development questions."""
    lines = ["| variant | n | F1 | EM | verbatim spans | answer call p50 s |", "| --- | --- | --- | --- | --- | --- |"]
    for variant, r in d["variants"].items():
        lines.append(f"| {variant} | {r['n']} | {r['f1']:.3f} | {r['em']:.3f} | {r['span_share']:.0%} | {r['answer_p50_s']:.2f} |")
    return "\n".join(lines) + f"\n\n{d['model']}, {d['set']}: `{d['command']}`"


def evidence_dev_table(d: dict) -> str:
    """bench/results/evidence_dev.json: how often each way of choosing the evidence sentence holds a gold answer."""
    t = d["sentences"]
    ways = [w for w in ("overlap", "idf", "cosine", "idf+cosine", "idf+cosine+type", "any") if w in t]
    lines = ["| " + " | ".join(["n", *ways]) + " |", "| " + " | ".join(["---"] * (len(ways) + 1)) + " |",
             "| " + " | ".join([str(t["n"]), *(f"{t[w]:.3f}" for w in ways)]) + " |"]
    return "\n".join(lines) + f"\n\n{d['set']}: `python bench/evidence_dev.py`"


def planning_table(d: dict) -> str:
    """bench/results/planning.json: two-part and bridge questions per configuration, and the SQL route."""
    lines = ["| questions | model | config | n | parts answered | both parts answered | part F1 | LLM calls/q | p50 s | vs plain: parts / p50 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for section, section_label in (("two_part", "two-part (SQuAD dev)"), ("bridge", "bridge (sample_docs)")):
        for model, s in (d.get(section) or {}).items():
            for config in ("plain", "decompose", "multi_hop", "full", "agent", "agent_text"):
                r = s.get(config)
                if not isinstance(r, dict):
                    continue
                label = AGENT_LABELS.get(config, config)
                ratio = f"{r['over_plain_parts']:.2f}× / {r['over_plain_p50']:.2f}×" if "over_plain_p50" in r else ""
                if ratio and "plain_same_run" in r:  # agent_mode.py asks plain again in its own run
                    ratio += " (own run)"
                both = f"{r['both_answered']:.1%}" if section == "two_part" else ""
                lines.append(f"| {section_label} | {model.replace('qwen2.5-coder-', '')} | {label} | {r['n']} | {r['parts_answered']:.1%} | {both} | {r['part_f1']:.3f} | "
                             f"{r['llm_calls']:.2f} | {r['p50_s']:.2f} | {ratio} |")
    out = "\n".join(lines)
    if d.get("sql"):
        out += "\n\n| SQL route (cars table) | n | accuracy |\n| --- | --- | --- |\n" + "\n".join(
            f"| {m.replace('qwen2.5-coder-', '')} | {v['n']} | {v['accuracy']:.0%} |" for m, v in d["sql"].items())
    commands = ", ".join(f"`{c}`" for c in d.get("commands", {}).values())
    sets = "; ".join(f"{k}: {v}" for k, v in (d.get("sets") or {}).items()) or d.get("set", "")
    return out + f"\n\n{sets}. LLM-call and iteration budget violations: {d['budget_violations']}. " + commands


AGENT_LABELS = {"agent": "agent (grammar)", "agent_text": "agent (text tool calls)"}


AGENT_HEADER = ["| questions | model | agent | n | parts answered | same run: decompose / multi_hop | unreadable tool calls | no tool call | "
                "LLM calls median (mean) | p50 s | confidence ECE (n) | exit reasons | budget violations |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
AGENT_FOOTER = "Decompose and multi_hop asked in the agent's own run (same process, same questions, cold prompt cache each)."


def agent_rows(d: dict, sections: tuple) -> list[str]:
    """One table row per model and agent configuration of each section."""
    lines = []
    for section, section_label in sections:
        for model, s in (d.get(section) or {}).items():
            for config in ("agent", "agent_text"):
                r = s.get(config)
                if not isinstance(r, dict):
                    continue
                same = r.get("same_run") or {}
                fixed = " / ".join(f"{same[c]['parts_answered']:.1%}" if c in same else "—" for c in ("decompose", "multi_hop"))
                no_tool = (r.get("exit_reasons") or {}).get("no_tool_call", 0) / max(r["n"], 1)
                median = r.get("llm_calls_p50")
                calls = f"{median:g} ({r['llm_calls']:.2f})" if median is not None else f"— ({r['llm_calls']:.2f})"
                ece = f"{r['ece']['ece']:.3f} ({r['ece']['n']})" if r.get("ece") else "—"
                exits = ", ".join(f"{k} {v}" for k, v in sorted((r.get("exit_reasons") or {}).items(), key=lambda kv: -kv[1]))
                lines.append(f"| {section_label} | {model.replace('qwen2.5-coder-', '')} | {AGENT_LABELS[config]} | {r['n']} | {r['parts_answered']:.1%} | {fixed} | "
                             f"{r.get('unparsed_tool_calls', 0)} | {no_tool:.1%} | {calls} | {r['p50_s']:.2f} | "
                             f"{ece} | {exits} | {r.get('budget_violations', 0)} |")
    return lines


def agent_commands(d: dict) -> str:
    return ", ".join(f"`{c}`" for k, c in d.get("commands", {}).items() if "/agent" in k)


def agent_table(d: dict, sections: tuple = (("two_part", "two-part (SQuAD dev)"), ("bridge", "bridge (sample_docs)"))) -> str:
    """bench/results/planning.json's agent rows: how the grammar-constrained agent used its tools, beside
    the fixed workflow asked in the same run (agent_unseen_pairs.json: the same on other pairs)."""
    return "\n".join(AGENT_HEADER + agent_rows(d, sections)) + f"\n\n{AGENT_FOOTER} {agent_commands(d)}"


def agent_halves_table(halves: list[tuple[dict | None, str]]) -> str:
    """One agent table for a run made in parts (each its own process, baselines in the same run), with the
    parts pooled: parts answered are means over two parts a question, so the pooled share weights each run by n."""
    halves = [(d, label) for d, label in halves if d]
    rows = [row for d, label in halves for row in agent_rows(d, (("two_part", label),))]
    text = "\n".join(AGENT_HEADER + rows) + f"\n\n{AGENT_FOOTER} "
    entries = [m["agent"] for d, _ in halves for m in d["two_part"].values()]
    if len(entries) > 1:
        n = sum(e["n"] for e in entries)
        pooled = {name: sum(e["n"] * pick(e)["parts_answered"] for e in entries) / n
                  for name, pick in (("agent", lambda e: e), ("decompose", lambda e: e["same_run"]["decompose"]), ("plain", lambda e: e["plain_same_run"]))}
        # each run's share is a multiple of 0.5 %, so the pooled one needs two decimals (64.25 %, not 64.2 %)
        text += (f"Pooled over the {len(entries)} runs ({n} questions, {2 * n} parts): agent {pooled['agent']:.2%} of parts answered, "
                 f"decompose {pooled['decompose']:.2%}, plain {pooled['plain']:.2%}; unreadable tool calls {sum(e['unparsed_tool_calls'] for e in entries)}, "
                 f"budget violations {sum(e['budget_violations'] for e in entries)}. ")
    return text + ", ".join(agent_commands(d) for d, _ in halves)


def expansion_table(d: dict) -> str:
    """bench/results/expansion.json: BM25 (and the hybrid) with and without query expansion, test slices."""
    lines = ["| set | keyword side | BM25 MRR@10 | BM25 Recall@10 | helped / hurt | hybrid MRR@10 | hybrid Recall@10 | added ms p50 | LLM calls/q |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for set_name, s in d["sets"].items():
        t = s["test"]
        base, hyb = t["bm25"], t.get("hybrid", {})
        lines.append(f"| {set_name} | question only | {base['mrr@10']:.4f} | {base['recall@10']:.4f} |  | {hyb.get('mrr@10', 0):.4f} | {hyb.get('recall@10', 0):.4f} |  | 0 |")
        for name, r in t.items():
            if not name.startswith("bm25+"):
                continue
            sp, hy = r["sparse"], r.get("hybrid", {})
            lines.append(f"| {set_name} | + {name[5:]} | {sp['mrr@10']:.4f} | {sp['recall@10']:.4f} | {sp['helped']} / {sp['hurt']} | "
                         f"{hy.get('mrr@10', 0):.4f} | {hy.get('recall@10', 0):.4f} | {r['added_ms_p50']:.1f} | {r['llm_calls_mean']:.2f} |")
    n = next(iter(d["sets"].values()))["test_questions"]
    return "\n".join(lines) + f"\n\n{n} test questions a set ({d['questions']}); model {d.get('model') or '—'}. `{d['command']}`"


def fallback_table(d: dict) -> str:
    """bench/results/fallback.json: what reaches the answer with and without the fallback, per main retrieval mode."""
    lines = [f"| set | main search | coverage threshold (dev) | Recall@{d['top_k']} without → with | MRR@{d['top_k']} without → with | fallback ran | recovered | added ms p50 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for set_name, per_main in d["sets"].items():
        for main, r in per_main.items():
            b, f = r["baseline"], r["fallback"]
            lines.append(f"| {set_name} | {main} | {r['chosen_threshold']} | {b['recall@k']:.3f} → {f['recall@k']:.3f} | {b['mrr@k']:.3f} → {f['mrr@k']:.3f} | "
                         f"{f['triggered']:.0%} | {f['recovered']:.0%} | {f['added_ms_p50']:.1f} |")
    return "\n".join(lines) + f"\n\n{d['split']}; strategies: the other two modes. `{d['command']}`"


def span_ceiling_table(d: dict) -> str:
    """bench/results/span_ceiling.json: the span step with the sentence the evidence step picks, and with the gold one."""
    lines = ["| model | n | sentence picked holds the answer | F1 picked sentence | F1 when it holds the answer | F1 gold sentence (ceiling) | EM picked / gold |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, entry in d["models"].items():
        s, o = entry["summary"]["selected"], entry["summary"]["oracle_sentence"]
        lines.append(f"| {model.replace('qwen2.5-coder-', '')} | {s['n']} | {s['sentence_right']:.1%} | {s['f1']:.3f} | {s['f1_when_sentence_right']:.3f} | "
                     f"**{o['f1']:.3f}** | {s['em']:.3f} / {o['em']:.3f} |")
    commands = ", ".join(f"`{e['command']}`" for e in d["models"].values())
    return "\n".join(lines) + f"\n\n{d['set']}: {commands}"


def hop_threshold_table(d: dict) -> str:
    """bench/results/hop_threshold.json: how often the multi-hop coverage check would hop, per threshold."""
    n = d["n"]
    lines = [f"| hop when coverage < | bridge questions hopping (of {n['bridge']}) | single-hop questions hopping (of {n['single']}) | balanced accuracy |",
             "| --- | --- | --- | --- |"]
    for g in d["grid"]:
        mark = " (chosen)" if g["threshold"] == d["chosen"] else ""
        lines.append(f"| {g['threshold']}{mark} | {g['bridge_hops']} | {g['single_hops']} | {g['balanced_accuracy']:.3f} |")
    return "\n".join(lines) + f"\n\nDevelopment questions only (12 dev bridge questions, 200 single-hop SQuAD dev questions outside every reported set): `{d['command']}`"


def retrieval_quality_table(d: dict) -> str:
    lines = ["| set | system | MRR@10 | Recall@10 |", "| --- | --- | --- | --- |"]
    for set_name, systems in (d.get("retrieval") or {}).items():
        for system, r in systems.items():
            lines.append(f"| {set_name} | {system} | {r['mrr@10']:.4f} | {r['recall@10']:.4f} |")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def of_size(entry: dict) -> str:
    """A generated set's size where it is not the 120 items every committed set asked for (bench/eval_agreement.py)."""
    asked = entry.get("generated", {}).get("requested", 120)
    return "" if asked == 120 else f" ({asked} items)"


def summary_table() -> str:
    """The README's one table: a headline figure per measured page, each from its JSON."""
    rows = ["| what | measured | where | details |", "| --- | --- | --- | --- |"]
    agreement = load("eval_agreement.json")
    if agreement:
        def larger(e: dict) -> str:  # more real questions, and the same ones against a set another model wrote (ragkit's default writer)
            parts = [f"{tau_text(more['kendall_tau']['retrieval'])}, {tau_text(more['kendall_tau']['answer'])} with {more['real_questions']} real questions"
                     for more in [e.get("larger_real")] if more]
            parts += [f"{tau_text(r['kendall_tau']['retrieval'])}, {tau_text(r['kendall_tau']['answer'])} with {r['real_questions']} and a set the "
                      f"{writer_size(writer)} wrote{of_size(r)}" for writer, by_real in e.get("by_writer", {}).items() for r in by_real.values()]
            return f" ({'; '.join(parts)})" if parts else ""

        def judged(e: dict) -> str:
            more = e.get("larger_judge")
            return f" ({more['judge_auc']:.2f} with {more['real_questions']}{other_task(e, more)})" if more else ""

        figures = "; ".join(f"{name}: τ {tau_text(e['kendall_tau']['retrieval'])} retrieval, {tau_text(e['kendall_tau']['answer'])} answers{larger(e)}, judge AUC "
                            f"{e['judge_auc']:.2f}{judged(e)}" for name, e in agreement["sets"].items())
        rows.append(f"| a generated test set ranks strategies like real questions | {figures} | {len(next(iter(agreement['sets'].values()))['strategies'])} strategies, "
                    f"questions from 300 paragraphs a set, every paragraph indexed | [docs/evaluation.md](docs/evaluation.md) |")
    conversation = load("conversation.json")
    if conversation and conversation.get("follow_ups") and conversation.get("clarify"):
        follow, clarify = conversation["follow_ups"], conversation["clarify"]
        gaps = "; ".join(f"{name} {e['gap_closed'].get('llm_0.5b') or 0:.0f}% (LLM 0.5B) / {e['gap_closed']['rules']:.0f}% (rules)" for name, e in follow.items())
        held = [(name, e.get("B") or e.get("all")) for name, e in clarify.items() if isinstance(e, dict) and (e.get("B") or e.get("all"))]
        asks = "; ".join(f"{name} precision {s['precision']:.2f}, recall {s['recall']:.2f}" for name, s in held)
        rows.append(f"| conversations: follow-ups and clarification | follow-up recall gap closed: {gaps}; asking back: {asks} | "
                    f"{sum(e['pairs'] for e in follow.values())} follow-up pairs, held-out ambiguous/clear questions | [docs/conversations.md](docs/conversations.md) |")
    retrieval = load("retrieval_squad.json")
    if retrieval:
        s = retrieval["systems"]
        rows.append(f"| hybrid retrieval (FAISS + bm25s) | MRR@10 {s['ragkit-hybrid']['mrr@10']:.3f}, against {s['ragkit-sparse']['mrr@10']:.3f} for "
                    f"BM25 alone and {s['haystack-bm25']['mrr@10']:.3f} for Haystack's BM25 | SQuAD v1.1 dev, {retrieval['corpus_docs']:,} paragraphs, "
                    f"{retrieval['queries']:,} questions | [docs/retrieval.md](docs/retrieval.md) |")
    stores = load("store_parity.json")
    if stores and all(n in stores for n in ("squad_dev", "new_wiki")):
        names = [k for k in stores["squad_dev"]["dense_overlap@10"]] if isinstance(stores["squad_dev"]["dense_overlap@10"], dict) else ["pgvector"]
        figures = "; ".join(f"{n}: hybrid MRR@10 {stores[n]['mrr@10']['hybrid/local']:.3f} local / "
                            + " / ".join(f"{stores[n]['mrr@10'][f'hybrid/{s}']:.3f} {s}" for s in names) for n in ("squad_dev", "new_wiki"))
        rows.append(f"| the same retrieval on {' and '.join({'pgvector': 'PostgreSQL + pgvector', 'milvus': 'Milvus'}[s] for s in names)} | {figures} | "
                    f"{stores['squad_dev']['questions']} questions a set, every paragraph one chunk | [docs/stores.md](docs/stores.md) |")
    scale = load("scale.json")
    if scale and "1000000" in scale and "local" in scale["1000000"]:
        e = scale["1000000"]["local"]
        sizes = sorted((k for k in scale if k.isdigit()), key=int)
        reached = {b: [k for k in sizes if "latency_ms" in scale[k].get(b, {})] for b in ("pgvector", "milvus")}  # searched, stopped later or not
        largest = {b: max(ks, key=int) for b, ks in reached.items() if ks}
        servers = "; ".join(f"{b} {_ms(scale[k][b]['latency_ms']['hybrid']['p50'])} at {'1M' if k == '1000000' else f'{int(k) // 1000}k'}"
                            for b, k in largest.items())
        rows.append(f"| the index at scale | local hybrid search p50 {e['latency_ms']['hybrid']['p50']:.1f} ms at 1M chunks (dense recall@10 {e['dense_recall@10']:.2f}, "
                    f"{e['hybrid_qps_4_clients']:g} q/s with 4 clients); {servers} | replicated real SQuAD vectors, query embedding excluded, 2 cores | "
                    f"[docs/stores.md](docs/stores.md) |")
    quality = (load("answer_quality.json") or {}).get("sets", {}).get("squad_dev", {})
    if quality:
        figures = "; ".join(f"{m.split('-')[-1].upper()} F1 {c['plain']['f1']:.3f} plain / {c['full']['f1']:.3f} all features at {c['full']['p50_ratio_to_plain']:.2f}× p50"
                            for m, c in quality.items())
        n = next(iter(quality.values()))["plain"]["n"]
        rows.append(f"| grounded span answers | {figures} | {n} held-out SQuAD dev questions | [docs/answers.md](docs/answers.md) |")
    calibration = load("calibration.json")
    if calibration:
        figures = "; ".join(f"{m.split('-')[-1].upper()} ECE {c['configs']['plain']['ece']:.3f}, ROC AUC {c['configs']['plain']['auc']:.2f}, "
                            f"● right {_pct(c['configs']['plain']['high_share_correct'])}" for m, c in calibration["models"].items())
        rows.append(f"| calibrated confidence | {figures} | fitted on new_wiki, scored on SQuAD dev | [docs/confidence.md](docs/confidence.md) |")
        pooled = calibration.get("refit_pooled") or {}
        if pooled:
            figures = "; ".join(f"{m.split('-')[-1].upper()} ECE {e['scored_on']['before']['ece']:.3f} → {e['scored_on']['after']['ece']:.3f}, "
                                f"ROC AUC {e['scored_on']['before']['auc']:.2f} → {e['scored_on']['after']['auc']:.2f}" for m, e in pooled.items())
            n = next(iter(pooled.values()))["scored_on"]["n"]
            rows.append(f"| the confidence recalibrated on your text (`ragkit calibrate`), shipped → recalibrated | {figures} | fitted on generated "
                        f"new_wiki questions, scored on {n} gold questions of other paragraphs | [docs/confidence.md](docs/confidence.md) |")
    planning = (load("planning.json") or {}).get("two_part")
    if planning:
        figures = "; ".join(f"{m.split('-')[-1].upper()} {_pct(c['plain']['parts_answered'])} → {_pct(c['decompose']['parts_answered'])}"
                            for m, c in planning.items())
        n = next(iter(planning.values()))["plain"]["n"]
        rows.append(f"| planning: split a two-part question | parts answered, plain → decompose: {figures} | {n} two-part SQuAD dev questions | "
                    f"[docs/planning.md](docs/planning.md) |")
    injection = load("injection.json")
    if injection:
        runs = [c for configs in injection["models"].values() for c in configs.values()]
        off, on = sum(r["guard_off"]["followed"] for r in runs), sum(r["guard_on"]["followed"] for r in runs)
        total = sum(r["guard_on"]["n"] for r in runs)
        rows.append(f"| prompt injection in a document | answers obeying an attack: {off}/{total} without the guard, {on}/{total} with it | "
                    f"held-out attacks, both models, plain and all features | [docs/reliability.md](docs/reliability.md) |")
    reliability = load("reliability.json")
    if reliability:
        rows.append(f"| faults (dead LLM, crash mid-save, two writers, bad files …) | {reliability['passed']}/{reliability['cases']} promises held, "
                    f"{reliability['data_loss']} data lost, {reliability['hidden_failures']} failures passed off as answers | the fault suite | "
                    f"[docs/reliability.md](docs/reliability.md) |")
    times = load("notebook_times.json")
    if times:
        rows.append(f"| notebooks, restart and run all | {len(times)} notebooks, slowest {max(times.values()):.0f} s (budget 180 s) | "
                    f"JupyterLab in Chromium, 2 cores, 0.5B (09 writes with the 1.5B) | [docs/notebooks.md](docs/notebooks.md) |")
    served = load("load.json")
    if served and {"in_process", "llm_server"} <= set(served["backends"]):
        top = {b: served["backends"][b]["levels"][-1] for b in ("in_process", "llm_server")}
        users = top["llm_server"]["users"]
        rows.append(f"| a served LLM under {users} concurrent users | llama-server ({served['parallel']} slots) {top['llm_server']['questions_per_minute']:g} questions/min, "
                    f"first token p50 {top['llm_server']['ttft_p50_s']:.1f} s; in-process {top['in_process']['questions_per_minute']:g} questions/min, "
                    f"{top['in_process']['ttft_p50_s']:.1f} s; same answers {_pct(served['same_answers']['identical'])} | "
                    f"{served['model']}, plain RAG, Hayhooks streaming endpoint, 2 cores | [docs/serving.md](docs/serving.md) |")
    return "\n".join(rows)


def parity_table(d: dict) -> str:
    """bench/results/parity.json: the same questions answered by the code before and after a change."""
    lines = ["| config | questions | same answer | same confidence | same in every field | F1 before → after | p50 s before → after |", "|" + " --- |" * 7]
    for name, c in d["configs"].items():
        lines.append(f"| {name} | {c['questions']} | {c['same_answer']} | {c['same_confidence']} | {c['same_in_every_field']} | "
                     f"{c['f1_before']:.4f} → {c['f1_after']:.4f} | {c['p50_s_before']:.3f} → {c['p50_s_after']:.3f} |")
    return "\n".join(lines)


def larger_judge_cell(judged: dict) -> str:
    """The judge's AUC on a larger real set: the figure, its bootstrap interval, n, and the first 120 again."""
    low, high = judged["judge_auc_interval95"]
    first = judged["first_draw"]
    return f"{judged['judge_auc']:.2f} [{low:.2f}, {high:.2f}] ({judged['judge_n']}; its first {first['judge_n']}: {first['judge_auc']:.2f})"


def other_task(e: dict, judged: dict) -> str:
    """Says so where the larger judge run read another faithfulness task than the set's first run."""
    task = judged.get("judge_task", "correct")
    return "" if task == e.get("judge_task", "correct") else f", task {task}"


def shown_figures(per_strategy: dict) -> dict:
    """What the per-strategy table prints of a run: MRR and share right, not the latencies a rerun always moves."""
    return {name: (figures["mrr"], figures["correct"]) for name, figures in per_strategy.items()}


def agreement_table(d: dict) -> str:
    """bench/results/eval_agreement.json: does a generated test set rank strategies as the real questions do?"""
    def tau(e: dict, which: str) -> str:
        low_high = (e.get("kendall_tau_interval95") or {}).get(which)
        return tau_text(e["kendall_tau"][which]) + (f" [{low_high[0]:.2f}, {low_high[1]:.2f}]" if low_high else "")

    def itself(e: dict, which: str) -> str:
        half = (e.get("split_half_tau") or {}).get(which)
        return f"{half['real']['median']:.2f} / {half['generated']['median']:.2f}" if half else "–"

    lines = ["| set | strategies | Kendall τ, retrieval (MRR) [95% CI] | Kendall τ, answers (share right) [95% CI] | "
             "each ranking with itself, split-half τ real / generated: retrieval; answers | judge AUC (n) | generated items (asked) | real questions | model / judge |",
             "|" + " --- |" * 9]
    def row(label: str, e: dict, figures: dict, judge: str, judge_model: str) -> str:
        return (f"| {label} | {len(e['strategies'])} | {tau(figures, 'retrieval')} | {tau(figures, 'answer')} | {itself(figures, 'retrieval')}; {itself(figures, 'answer')} | "
                f"{judge} | {e['generated']['accepted']} ({e['generated']['requested']}) | {figures['real_questions']} | {e['model'].split('-')[-1]} / {judge_model} |")

    for name, e in d["sets"].items():
        judge = f"{e['judge_auc'] if e['judge_auc'] is None else format(e['judge_auc'], '.2f')} ({e['judge_n']})"
        lines.append(row(name, e, e, judge, e["judge_model"].split("-")[-1]))
        larger, judged = e.get("larger_real"), e.get("larger_judge")
        if judged and not (larger and larger["real_questions"] == judged["real_questions"]):
            # the judge alone on a larger real set (plain's answers, no other strategy): a row of its own
            lines.append(f"| {name}, {judged['real_questions']} real questions, judge only{other_task(e, judged)} | 1 (plain) | – | – | – | {larger_judge_cell(judged)} | – | "
                         f"{judged['real_questions']} | {judged['model'].split('-')[-1]} / {judged['judge_model'].split('-')[-1]} |")
        if larger:  # the same generated runs against a larger real set
            same = judged and judged["real_questions"] == larger["real_questions"]
            lines.append(row(f"{name}, {larger['real_questions']} real questions", e, larger,
                             larger_judge_cell(judged) + other_task(e, judged) if same else f"– (judged on the {e['real_questions']})", judged["judge_model"].split("-")[-1] if same else "–"))
        for writer, by_size in e.get("by_writer", {}).items():  # a generated set another model wrote from the same paragraphs
            for other in by_size.values():
                lines.append(row(f"{name}, written by the {writer_size(writer)}{of_size(other)}, {other['real_questions']} real questions", other, other,
                                 f"– (judged on the {e['real_questions']})" if other["judge_auc"] is None else f"{other['judge_auc']:.2f} ({other['judge_n']})",
                                 "–" if other["judge_auc"] is None else other["judge_model"].split("-")[-1]))
    strategies = list(dict.fromkeys(s for e in d["sets"].values() for s in e["strategies"]))  # a held-out set may run fewer
    lines += ["", "| set | questions | " + " | ".join(strategies) + " |", "|" + " --- |" * (len(strategies) + 2)]
    for name, e in d["sets"].items():
        sets = [("generated", e["per_strategy"]["generated"]), ("real", e["per_strategy"]["real"])]
        if larger := e.get("larger_real"):
            if shown_figures(larger["per_strategy"].get("generated", e["per_strategy"]["generated"])) != shown_figures(e["per_strategy"]["generated"]):
                # rerun by later code, and its MRR or share right moved (its latencies always do)
                sets.append((f"generated, again beside the {larger['real_questions']}", larger["per_strategy"]["generated"]))
            sets.append((f"real, {larger['real_questions']}", larger["per_strategy"]["real"]))
        shown = {e["real_questions"]: e["per_strategy"]["real"]} | ({larger["real_questions"]: larger["per_strategy"]["real"]} if larger else {})
        for writer, by_size in e.get("by_writer", {}).items():
            for other in by_size.values():
                sets.append((f"generated by the {writer_size(writer)}{of_size(other)}", other["per_strategy"]["generated"]))
                if shown_figures(shown.get(other["real_questions"], {})) != shown_figures(other["per_strategy"]["real"]):  # the shared real runs, where they did not reproduce
                    sets.append((f"real, {other['real_questions']}, beside the {writer_size(writer)}'s set", other["per_strategy"]["real"]))
        for which, per in sets:
            lines.append(f"| {name} | {which}: MRR / right | " + " | ".join(f"{per[s]['mrr']:.2f} / {per[s]['correct']:.2f}" if s in per else "–"
                                                                         for s in strategies) + " |")
    commands = ", ".join(f"`{command}`" for e in d["sets"].values()
                         for command in [e["command"]] + [e[part]["command"] for part in ("larger_real", "larger_judge") if e.get(part)]
                         + [other["command"] for by_size in e.get("by_writer", {}).values() for other in by_size.values()])
    lines += ["", "Strategies ranked on each test set; τ is Kendall's tau-b between the two rankings, its interval a paired bootstrap over "
              "the questions (the answers' τ over the generated set's answerable items: neither SQuAD v1.1 dev nor SQuAD-Shifts new_wiki has an unanswerable question). "
              "Split-half τ: one set's questions split at random into two halves, τ between the halves' rankings (median of 1,000 splits) — "
              "how far a ranking at half that size agrees with itself, so a low one says that set's order is noise. "
              + ("A row \"written by\" another model is the same strategies on a test set that model wrote from the same paragraphs, against "
                 "the same real questions; the other rows' sets were written by "
                 + ", ".join(sorted({f"the {writer_size(e.get('writer_model', e['model']))}" for e in d["sets"].values()}))  # no writer_model: the answering model wrote it
                 + ". " if any(e.get("by_writer") for e in d["sets"].values()) else "")
              + f"{commands}"]
    notes = [judge_notes(name, e["larger_judge"]) for name, e in d["sets"].items() if e.get("larger_judge")]
    if any(notes):
        lines += ["", " ".join(n for n in notes if n)]
    return "\n".join(lines)


JUDGE_TASK_WORDS = {"correct": "P(yes) to \"is this answer correct?\" alone",
                    "correct_x_likelihood": "P(yes) to \"is this answer correct?\" times the judge's own likelihood of the answer"}


def judge_notes(name: str, judged: dict) -> str:
    """What a larger judge run says beside its AUC: what its faithfulness read and what another task read on
    the same questions, the figure measured before aligned prompt reuse, and the AUC with a right answer
    given as a sentence counted right (a diagnosis, not the target)."""
    out = []
    task = judged.get("judge_task", "correct")
    for other, kept in (judged.get("other_tasks") or {}).items():
        low, high = kept["judge_auc_interval95"]
        # a kept run from before the aligned prompt reuse answered and scored under llama.cpp's exact reuse: not the same answers
        when = "" if "prompt_reuse_block" in kept else " in an earlier run under llama.cpp's exact prompt reuse"
        out.append(f"{name}'s judge on {judged['real_questions']} real questions reads {JUDGE_TASK_WORDS.get(task, task)} (task {task}); "
                   f"{JUDGE_TASK_WORDS.get(other, other)} (task {other}) gave {kept['judge_auc']:.2f} [{low:.2f}, {high:.2f}] ({kept['judge_n']}; "
                   f"its first {kept['first_draw']['judge_n']}: {kept['first_draw']['judge_auc']:.2f}){when}.")
    if before := judged.get("before_aligned_reuse"):
        low, high = before["judge_auc_interval95"]
        out.append(f"{name}'s judge on {judged['real_questions']} real questions is measured with each score depending on its prompt alone "
                   f"(the prompt cache reused in whole {judged['prompt_reuse_block']}-token blocks); before that, with llama.cpp's exact reuse, "
                   f"it was {before['judge_auc']:.2f} [{low:.2f}, {high:.2f}] ({before['judge_n']}).")
    if loose := judged.get("right_if_it_holds_a_gold_answer"):
        out.append(f"Of its {loose['wrong_by_f1']} answers wrong by F1 ≥ 0.5, {loose['relabelled']} hold a gold answer inside a longer reply; "
                   f"counting those right, the judge's AUC is {loose['judge_auc']:.2f} (a diagnosis of what the judge misses, not the target's definition).")
    return " ".join(out)


def repro_table(d: dict) -> str:
    """bench/results/eval_repro.json: the same run twice with the cache, and a run killed mid-way."""
    r, k = d["rerun_with_cache"], d["kill_and_resume"]
    return "\n".join([
        "| check | result |", "| --- | --- |",
        f"| rerun with the LLM cache | {r['identical_rows']} of {r['rows_first']} rows identical ({r['identical_answers']} answers), LLM calls {r['llm_calls_first']} → {r['llm_calls_second']} "
        f"({r['cache_hits_second']} cache hits), {r['seconds_first']:.0f} s → {r['seconds_second']:.0f} s |",
        f"| killed with SIGKILL after {k['rows_when_killed']} of {k['rows_clean']} rows, run again | {k['rows_after_resume']} rows, {k['duplicated_rows']} twice, "
        f"{'the same rows as a clean run' if k['same_rows_as_clean'] else 'rows DIFFER from a clean run'} |",
    ])


def eval_seconds_table(d: dict) -> str:
    """bench/results/eval_seconds.json: what ``ragkit eval --dry-run`` said against the wall time, by judge."""
    rows = ["| test set | judge | dry run said (every call at the answer's seconds) | measured | measured ÷ dry run | each judge call at its measured seconds | measured ÷ that |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, entry in d["sets"].items():
        for judge, r in entry["runs"].items():
            fitted = (f"{r['with_fitted_judge_s']:.0f} s", f"{r['measured_over_fitted']:.2f}") if "with_fitted_judge_s" in r else ("–", "–")
            rows.append(f"| {name} (seed {entry['seed']}, {entry['items']} items) | {judge} | {r['dry_run_s']} s ({r['dry_run_calls']} calls) | "
                        f"{r['measured_s']:.0f} s | {r['measured_over_dry_run']:.2f} | {fitted[0]} | {fitted[1]} |")
    per_call = ", ".join(f"{judge} {s:.1f} s" for judge, s in d["judge_seconds_per_call"].items())
    rows += ["", f"Seconds a judge call, measured on the fitting set and used by the dry run since: {per_call}; what is left over "
                 f"(measured ÷ that above 1) is the command's start-up — Python, the embedder, the models loading — which the estimate leaves out. `{d['command']}`"]
    return "\n".join(rows)


def conversation_tables(d: dict) -> dict[str, str]:
    """bench/results/conversation.json: follow-ups, clarification and what a follow-up costs (one pure table each)."""
    out = {}
    follow = d.get("follow_ups") or {}
    if follow:
        names = [k for k in next(iter(follow.values()))["recall@5"] if k not in ("raw", "ceiling")]
        lines = ["| set | pairs | raw | ceiling | " + " | ".join(names) + " | gap closed (with the keep check) | self-contained: untouched / recall change |",
                 "|" + " --- |" * (len(names) + 6)]
        for name, e in follow.items():
            gap = ", ".join(f"{k} {v:.0f}%" for k, v in e["gap_closed"].items() if v is not None and not k.endswith("_always"))
            alone = ", ".join(f"{k} {v['untouched']:.1f}% / {(-v['drop_points'] or 0.0):+.1f} pt" for k, v in e["self_contained"].items())
            lines.append(f"| {name} | {e['pairs']} | {e['recall@5']['raw']:.1f} | {e['recall@5']['ceiling']:.1f} | "
                         + " | ".join(f"{e['recall@5'][k]:.1f}" for k in names) + f" | {gap} | {alone} |")
        out["conversation.json follow_ups"] = "\n".join(lines)
    clarify = d.get("clarify") or {}
    if clarify:
        lines = ["| set | ratio | questions (ambiguous + clear) | precision of asking | recall of asking | entity among the options | "
                 "after the scripted choice: about the chosen entity (n) | F1 ≥ 0.5 |", "|" + " --- |" * 8]
        for name in ("squad_dev", "new_wiki"):
            e = clarify.get(name)
            for half, scores in (e or {}).items():
                if not isinstance(scores, dict) or "precision" not in scores:
                    continue
                choice = e.get("scripted_choice", {}) if half in ("B", "all") else {}
                about = f"{_pct(choice['about_chosen'])} ({choice['asked_ambiguous']})" if choice.get("about_chosen") is not None else "–"
                f1 = _pct(choice["f1_ge_0.5"]) if choice.get("f1_ge_0.5") is not None else "–"
                options = _pct(scores["entity_among_options"]) if scores["entity_among_options"] is not None else "–"
                lines.append(f"| {name} {half} | {e['ratio']} | {scores['ambiguous']} + {scores['clear']} | {scores['precision']:.2f} | {scores['recall']:.2f} | "
                             f"{options} | {about} | {f1} |")
        out["conversation.json clarify"] = "\n".join(lines)
    latency = {k: v for k, v in (d.get("latency") or {}).items() if isinstance(v, dict)}
    if latency:
        lines = ["| follow-up backend | pairs | first token p50: self-contained → follow-up | total p50: self-contained → follow-up | follow-up / self-contained |",
                 "|" + " --- |" * 5]
        for backend, e in latency.items():
            lines.append(f"| {backend} | {e['pairs']} | {e['self_ttft_p50_s']:.2f} s → {e['follow_ttft_p50_s']:.2f} s | "
                         f"{e['self_total_p50_s']:.2f} s → {e['follow_total_p50_s']:.2f} s | {e['follow_over_self']:.2f}× |")
        out["conversation.json latency"] = "\n".join(lines)
    return out


def store_parity_table(d: dict) -> str:
    rows = ["| set | chunks | store | dense top-10 overlap with exact | hybrid MRR@10 (local) | filtered 10 % / 1 %: results of 10 | p50 ms hybrid (local) |",
            "|---|---|---|---|---|---|---|"]
    for name in ("squad_dev", "new_wiki"):
        e = d.get(name)
        if not e:
            continue
        m, f, ms = e["mrr@10"], e["filtered"], e["p50_ms"]
        overlap = e["dense_overlap@10"] if isinstance(e["dense_overlap@10"], dict) else {"pgvector": e["dense_overlap@10"]}
        for store in overlap:
            rows.append(f"| {name} | {e['chunks']:,} | {store} | {overlap[store]:.3f} | {m[f'hybrid/{store}']:.3f} ({m['hybrid/local']:.3f}) | "
                        f"{f['10%'][f'returned_{store}']:g} / {f['1%'][f'returned_{store}']:g} | {ms[f'hybrid/{store}']:.1f} ({ms['hybrid/local']:.1f}) |")
        if "hybrid/pgvector-fulltext" in m:
            rows.append(f"| {name} | {e['chunks']:,} | pgvector, PostgreSQL full text | – | {m['hybrid/pgvector-fulltext']:.3f} ({m['hybrid/local']:.3f}); "
                        f"found nothing for {_pct(e['fulltext_empty'])} | – | {ms['hybrid/pgvector-fulltext']:.1f} |")
    return "\n".join(rows)


def _ms(ms: float) -> str:
    """A latency as a reader takes it in: milliseconds, or seconds from one second up."""
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def scale_table(d: dict) -> str:
    rows = ["| chunks | backend | ingest s | p50 ms dense / keyword / hybrid | hybrid p95 / p99 ms | hybrid q/s, 4 clients | dense recall@10 | "
            "filtered 10 % / 1 %: results of 10 | server MB | ragkit MB | disk MB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for size in sorted((k for k in d if k.isdigit()), key=int):
        for backend, e in d[size].items():
            if "failed" in e and "latency_ms" not in e:  # a size the backend could not reach on this machine: where it stopped
                x = e["failed"]
                rows.append(f"| {int(size):,} | {backend} | stopped during {x['stage']} after {x['chunks_written']:,} chunks "
                            f"({x['seconds']:,.0f} s): {x['reason']} | – | – | – | – | – | {x['server_peak_pss_mb']:,.0f} (peak) | "
                            f"{x['ragkit_rss_mb']:,.0f} | – |")
                continue
            lat, f = e["latency_ms"], e.get("filtered", {})
            server = f"{e['server_pss_mb']:,.0f}" if e.get("server_pss_mb") else "–"
            qps = f"{e['hybrid_qps_4_clients']:g}" if e.get("hybrid_qps_4_clients") is not None else "–"
            ragkit_mb, disk = e.get("ragkit_rss_mb"), f"{e['disk_mb']:,.0f}" if "disk_mb" in e else "–"
            if "failed" in e:  # searched, then stopped: the stages it finished are figures, the rest says where it stopped
                x = e["failed"]
                server, ragkit_mb = f"{x['server_peak_pss_mb']:,.0f} (peak)", x["ragkit_rss_mb"]
                qps = f"– (stopped during {x['stage']}: {x['reason']})"
            returned = " / ".join(f"{f[k]['returned_of_10']:g}" if k in f else "–" for k in ("10%", "1%"))
            asked = filtered_asked = ""
            if "search_budget_s" in e:  # a slow backend stopped each stage at a time budget: say how few searches the figures rest on
                n = e["searches"]
                asked = f" ({n['unfiltered']} questions, {e['search_budget_s']:g} s a stage)"
                filtered_asked = f" ({n.get('filtered_10%', 0)} / {n.get('filtered_1%', 0)} searches)"
            rows.append(f"| {int(size):,} | {backend} | {e['ingest_s']:,.0f} | {lat['dense']['p50']:.1f} / {lat['sparse']['p50']:.1f} / {lat['hybrid']['p50']:.1f}{asked} | "
                        f"{lat['hybrid']['p95']:.1f} / {lat['hybrid']['p99']:.1f} | {qps} | {e['dense_recall@10']:.3f} | "
                        f"{returned}{filtered_asked} | {server} | {ragkit_mb:,.0f} | {disk} |")
    return "\n".join(rows)


def store_answers_table(d: dict) -> str:
    a = d["answers"]
    rows = ["| store | questions | identical answers | identical sources | model, features |", "|---|---|---|---|---|"]
    for name, e in a["stores"].items():
        rows.append(f"| {name} | {a['questions']} | {_pct(e['identical_answers'])} | {_pct(e['identical_sources'])} | {a['model']}, {a['features']} |")
    return "\n".join(rows)


def load_table(d: dict) -> str:
    names = {"in_process": "in-process model (one question at a time)", "llm_server": f"llama-server, {d['parallel']} parallel slots"}
    rows = ["| LLM | users | questions | first token p50 / p95 s | full answer p50 / p95 s | questions / min | errors | peak RSS MB |",
            "|---|---|---|---|---|---|---|---|"]
    for backend, e in d["backends"].items():
        rss = " + ".join(f"{name} {mb:,}" for name, mb in e["peak_rss_mb"].items())
        for level in e["levels"]:
            rows.append(f"| {names.get(backend, backend)} | {level['users']} | {level['questions']} | {level['ttft_p50_s']:.2f} / {level['ttft_p95_s']:.2f} | "
                        f"{level['answer_p50_s']:.2f} / {level['answer_p95_s']:.2f} | {level['questions_per_minute']:g} | {level['errors']} | "
                        f"{rss if level is e['levels'][0] else ''} |")
    return "\n".join(rows)


def memory_table(d: dict) -> str:
    rows = ["| llama.cpp weight repacking | peak RSS MB | anonymous / file-backed MB at the end | prompt s p50 | generated tokens/s p50 |", "|---|---|---|---|---|"]
    for key, name in (("repack", "on (llama.cpp's default)"), ("no_repack", "off (ragkit's default)")):
        p, v = d["peak"][key], d["speed"][key]
        rows.append(f"| {name} | {p['peak_rss_mb']:,} | {p['anon_end_mb']:,} / {p['file_end_mb']:,} | {v['prompt_s_p50']:.2f} | {v['generated_tokens_per_s_p50']:.1f} |")
    return "\n".join(rows)


def refit_table(d: dict) -> str:
    """calibration.json's ``refit`` and ``refit_split<N>`` sections (one row each: the shipped fit, recalibrated on
    generated questions without and with the offset) and ``refit_offset`` (the offset's own measurement)."""
    rows = ["| model | scored on | right | ECE shipped → recalibrated → + offset | ROC AUC shipped → + offset | "
            "mean confidence shipped → recalibrated → + offset | fitted on |", "|---|---|---|---|---|---|---|"]
    sections = [k for k in d if k in ("refit", "refit_pooled") or (k.startswith("refit_split") and not k.endswith(("_commands", "_run", "_recomputed")))]
    sections.sort(key=lambda k: k == "refit_pooled")  # the splits, then the splits pooled
    for key in sections:
        for model, e in d[key].items():
            g, b, a = e["scored_on"], e["scored_on"]["before"], e["scored_on"]["after"]
            w = g.get("after_without_offset", a)
            rows.append(f"| {model.removeprefix('qwen2.5-coder-')} | {g['what']} | {_pct(g['right'])} | {b['ece']:.3f} → {w['ece']:.3f} → **{a['ece']:.3f}** | "
                        f"{b['auc']:.3f} → {a['auc']:.3f} | {b['mean_confidence']:.2f} → {w['mean_confidence']:.2f} → {a['mean_confidence']:.2f} | "
                        f"{e['fit_on']['what']} |")
    for model, o in (d.get("refit_offset") or {}).items():
        boot = o.get("logit_offset_bootstrap")
        spread = f" [95% bootstrap interval over paragraphs {boot['low']:+.2f} to {boot['high']:+.2f}]" if boot else ""
        draws = o.get("by_draw") or {}
        if len(draws) > 1:  # each draw alone, with the command that answered it
            where = "; each draw alone: " + "; ".join(
                f"draw {k} ({v['generated']} generated + {v['real']} real, {v['paragraphs']} paragraphs) {v['logit_offset']:+.2f}: `{v['command']}`"
                for k, v in draws.items())
        else:
            where = f": `{d['refit_offset_commands'][model]}`"
        rows += ["", f"Offset ({model}): **{o['logit_offset']:+.2f}** logit{spread}, measured on {o['generated']['what']} ({_pct(o['generated']['right'])} right) "
                 f"and {o['real']['what']} ({_pct(o['real']['right'])} right){where}"]
    commands = [f"`{d[k + '_commands'][m]}`" for k in sections for m in d[k] if m in d.get(k + "_commands", {})]
    rows += ["", "Held-out checks: " + "; ".join(commands)]  # a note ends with its command: --readme replaces it
    return "\n".join(rows)


def load_answers_table(d: dict) -> str:
    a = d["same_answers"]
    return "\n".join(["| questions, one at a time | identical answers, in-process vs llama-server | model, features |", "|---|---|---|",
                      f"| {a['questions']} | {_pct(a['identical'])} ({a['questions'] - len(a['differing'])}/{a['questions']}) | {d['model']}, {d['features']} |"])


def server_judgments_table(d: dict) -> str:
    ways = (("in_process", "llama.cpp in-process: P(yes) from the next-token distribution"),
            ("server_top_logprobs", "llama-server: P(yes) from the top 20 log-probabilities of a one-token reply"),
            ("server_constrained", "llama-server: a constrained \"yes\" / \"no\", 1 or 0 (what a server that sends no log-probabilities gets)"))
    rows = ["| the judge's yes/no read as | judge AUC [95% interval] | seconds a judgment (median) |", "|---|---|---|"]
    for key, label in ways:
        auc = d["judge_auc"][key]
        # the constrained pass runs last, on prompts llama-server still holds from the pass before: no prompt to evaluate
        seconds = f"{d['seconds_per_judgment_median'][key]:.2f}" + (" (prompts already cached)" if key == "server_constrained" else "")
        rows.append(f"| {label} | {auc['auc']:.3f} [{auc['interval95'][0]:.3f}, {auc['interval95'][1]:.3f}] | {seconds} |")
    gap = d["served_minus_in_process"]
    rows += ["", f"{d['questions']} answers of the {d['model']} to SQuAD dev questions outside the agreement sample ({d['right']} right by F1 ≥ 0.5), "
                 f"judged by the {d['judge_model']} (task {d['judge_task']}). Served P(yes) against in-process, per answer: median difference "
                 f"{gap['median']:.4f}, 95th percentile {gap['p95']:.4f}, largest {gap['max']:.4f}. The constrained reply said yes to "
                 f"{sum(r['server_constrained'] == 1.0 for r in d['rows'])} of the {d['questions']} (it agrees with \"P(yes) ≥ 0.5\" on "
                 f"{_pct(d['constrained_agrees_with_p_yes_over_half'])}), so it barely ranks them: `{d['command']}`"]
    return "\n".join(rows)


# how each run of bench/served_confidence.py is named in its table, and what its served rows were
_SERVED_RUNS = {
    "grounded": ("grounded, dev (the choices made here)", "(as shipped)", "(for comparison)"),
    "grounded_heldout": ("grounded, held out (reported)", "(as shipped)", "(for comparison)"),
    "grounded_snapped_draft": ("grounded, before: a free draft snapped to a span", "", "(as shipped before)"),  # its label says "tried"
    "free": ("free", "(as shipped)", "(before)"),
}


def served_confidence_table(d: dict) -> str:
    rows = ["| answers (`plain`) | the confidence | declined | ECE | AUC | right among ● (> 0.7) | mean confidence / share right | from in-process, same answers: median / p95 |",
            "|---|---|---|---|---|---|---|---|"]
    notes = []
    for mode, r in d["runs"].items():
        title, served_note, without_note = _SERVED_RUNS[mode]
        ways = (("in_process", "llama.cpp in-process (token probabilities from its logits)"),
                ("served", f"llama-server; token probabilities: {r['served_answer_tokens']} {served_note}".rstrip()),
                ("served_without_answer_tokens", f"llama-server; token probabilities: none, the fit's means in their place {without_note}"))
        first = r["first_question"]
        for key, label in ways:
            s, gap = r["scores"][key], r["distance_from_in_process_same_answer"].get(key)
            high = f"{_pct(s['high_share_correct'])} of {s['high_n']}" if s["high_n"] else "none above 0.7"
            declined = r["declined"]["in_process" if key == "in_process" else "served"]
            rows.append(f"| {title}, questions {first}–{first + r['questions'] - 1} | {label} | {declined} | {s['ece']:.3f} | {s['auc']:.3f} | {high} | "
                        f"{s['mean_confidence']:.2f} / {s['share_correct']:.2f} | " + (f"{gap['median']:.3f} / {gap['p95']:.3f} |" if gap else "– |"))
        at = f" at {r['code_at']}" if r.get("code_at") else ""
        notes.append(f"{title}: the same answer both ways for {r['same_answer']} of {r['questions']}, `{r['command']}`{at}")
    return "\n".join(rows + ["", f"{next(iter(d['runs'].values()))['model']}; SQuAD dev questions outside the agreement sample (the calibration, fitted on "
                               "new_wiki, never saw them), disjoint draws; right = F1 ≥ 0.5, a decline is not right. " + "; ".join(notes) + "."])


def tables() -> dict[str, str]:
    out = {"summary": summary_table()}
    if load("load.json"):
        out["load.json"] = load_table(load("load.json"))
        if "same_answers" in load("load.json"):
            out["load.json answers"] = load_answers_table(load("load.json"))
    if load("server_judgments.json"):
        out["server_judgments.json"] = server_judgments_table(load("server_judgments.json"))
    if load("served_confidence.json"):
        out["served_confidence.json"] = served_confidence_table(load("served_confidence.json"))
    if load("store_parity.json"):
        out["store_parity.json"] = store_parity_table(load("store_parity.json"))
        if "answers" in load("store_parity.json"):
            out["store_parity.json answers"] = store_answers_table(load("store_parity.json"))
    if load("scale.json"):
        out["scale.json"] = scale_table(load("scale.json"))
    if load("eval_agreement.json"):
        out["eval_agreement.json"] = agreement_table(load("eval_agreement.json"))
    if load("eval_repro.json"):
        out["eval_repro.json"] = repro_table(load("eval_repro.json"))
    if load("eval_seconds.json"):
        out["eval_seconds.json"] = eval_seconds_table(load("eval_seconds.json"))
    if load("conversation.json"):
        out.update(conversation_tables(load("conversation.json")))
    if load("parity.json"):
        out["parity.json"] = parity_table(load("parity.json"))
    retrieval = RESULTS / "retrieval_squad.md"
    if retrieval.exists():  # the table of bench/retrieval_squad.py's own report
        out["retrieval_squad.json"] = next(block for block in retrieval.read_text().split("\n\n") if block.startswith("|"))
    for name, fn in (("judge_squad.json", judge_table), ("rerank_squad.json", rerank_table), ("rerank_questions.json", rerank_questions_table), ("rerank_windows.json", rerank_windows_table), ("rerank_by_kind.json", rerank_by_kind_table), ("routing.json", routing_table),
                     ("injection.json", injection_table), ("reliability.json", reliability_table)):
        data = load(name)
        if data:
            out[name] = fn(data)
    if load("answer_modes_dev.json"):
        out["answer_modes_dev.json"] = answer_modes_dev_table(load("answer_modes_dev.json"))
    if load("planning.json"):
        out["planning.json"] = planning_table(load("planning.json"))
        out["planning.json agent"] = agent_table(load("planning.json"))
    if load("agent_unseen_pairs.json"):
        out["agent_unseen_pairs.json"] = agent_table(load("agent_unseen_pairs.json"), (("two_part", "two-part, pairs 201–260 (SQuAD dev)"),))
    if load("agent_two_part_1.5b.json"):
        out["agent_two_part_1.5b.json"] = agent_halves_table([(load("agent_two_part_1.5b.json"), "two-part, pairs 1–100 (SQuAD dev)"),
                                                              (load("agent_two_part_1.5b_pairs_101_200.json"), "two-part, pairs 101–200 (SQuAD dev)")])
    for name, fn in (("expansion.json", expansion_table), ("fallback.json", fallback_table)):
        if load(name):
            out[name] = fn(load(name))
    for name, fn in (("span_ceiling.json", span_ceiling_table), ("hop_threshold.json", hop_threshold_table)):
        if load(name):
            out[name] = fn(load(name))
    if load("evidence_dev.json"):
        out["evidence_dev.json"] = evidence_dev_table(load("evidence_dev.json"))
    quality = load("answer_quality.json")
    if quality and quality.get("sets"):
        out["answer_quality.json"] = answer_quality_table(quality)
    if quality and quality.get("retrieval"):
        out["answer_quality.json retrieval"] = retrieval_quality_table(quality)
    if load("memory.json"):
        out["memory.json"] = memory_table(load("memory.json"))
    if (load("calibration.json") or {}).get("refit"):
        out["calibration.json refit"] = refit_table(load("calibration.json"))
    calibration = RESULTS / "calibration.md"
    if calibration.exists():
        out["calibration.json"] = calibration.read_text().strip()
    if load("agentic_squad_one_engine.json") and load("agentic_squad.json"):
        out["agentic_squad_one_engine.json"] = one_engine_table(load("agentic_squad_one_engine.json"), load("agentic_squad.json"))
    agentic = RESULTS / "agentic_squad.md"
    if agentic.exists():
        out["agentic_squad.json"] = agentic.read_text().strip()
    return out


def rewritten(text: str, generated: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with the block right under each ``<!-- name.json -->`` marker replaced; and the names replaced.

    A block with more than tables (a note, a second table) ends with ``<!-- end name.json -->``, so the
    old block goes whole, however its paragraphs changed. A page written before those end markers loses
    its old tables and its note (a one-line paragraph ending with the command in backticks)."""
    lines, done, out, i = text.splitlines(), [], [], 0
    while i < len(lines):
        out.append(lines[i])
        marker = lines[i].strip()
        name = marker[5:-4].strip() if marker.startswith("<!--") and marker.endswith("-->") else None
        if name in generated:
            i += 1
            block, end = generated[name].splitlines(), f"<!-- end {name} -->"
            if end in lines[i:]:
                i = lines.index(end, i) + 1
            else:
                while i < len(lines) and lines[i].startswith("|"):
                    i += 1
                if any(not line.startswith("|") for line in block):
                    while i + 1 < len(lines) and lines[i] == "":
                        following = lines[i + 1]
                        if following.startswith("|"):
                            i += 1
                            while i < len(lines) and lines[i].startswith("|"):
                                i += 1
                        elif following.rstrip().endswith("`") and (i + 2 == len(lines) or lines[i + 2] == ""):
                            i += 2
                        else:
                            break
            out.extend(block)
            if any(not line.startswith("|") for line in block):
                out.append(end)
            done.append(name)
            continue
        i += 1
    return "\n".join(out) + "\n", done


def rewrite_page(page: Path) -> list[str]:
    """Rewrite ``page``'s generated blocks from bench/results; returns the names replaced."""
    text, done = rewritten(page.read_text(), tables())
    page.write_text(text)
    return done


def main() -> int:
    if "--readme" in sys.argv:
        for page in PAGES:
            print(f"{page.relative_to(ROOT)}:", ", ".join(rewrite_page(page)) or "no tables")
        return 0
    for name, table in tables().items():
        print(f"<!-- {name} -->\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
