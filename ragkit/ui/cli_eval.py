"""The evaluation commands of the ``ragkit`` CLI: which features help on *your* documents, measured.

    ragkit testset generate sample_docs/ --n 40 -o set.jsonl      # questions from your own chunks (a folder or an index)
    ragkit eval --features grading --testset set.jsonl --name grading [--limit N] [--dry-run]
    ragkit report runs/plain runs/grading -o report.md            # differences with 95%% intervals, McNemar
    ragkit tune --testset set.jsonl --latency-budget 3             # chosen on one half, reported on the other
    ragkit strategies list | add NAME features.yaml

Runs go to ``runs/NAME`` (``--runs-dir``); LLM replies are kept in ``~/.cache/ragkit/llm_cache.sqlite``
(``--cache``; ``--no-cache`` bypasses it), so a rerun or a re-scoring makes no LLM call.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ragkit.ui.cli_common import cache_options, config_from_args, default_cache_path, index_location, print_files_not_read, shown


def _index_for(args, console, config):
    """The index the command reads: ``--store`` / ``--index-dir``, built from PATH first when PATH is a folder of documents."""
    from ragkit.index.store import RagIndex
    from ragkit.index.stores import index_exists, load_index

    where = index_location(args, config)
    target = getattr(args, "path", None)
    if target and RagIndex.exists(target):
        return RagIndex.load(target, expected_embedder=config.models.embedder)
    if target:
        from ragkit.index.indexer import build_index

        source = Path(target)
        if not source.exists():
            raise ValueError(f"{target}: no such file or folder")
        report = build_index(source, where, config, progress=not args.quiet)
        if not report.total_chunks:
            raise ValueError(f"{target}: nothing to generate questions from (no readable document; skipped: {len(report.skipped)})")
        console.print(f"indexed {shown(target)} into {shown(report.index_dir)}: {report.total_chunks} chunks")
        print_files_not_read(report, console)
    if not index_exists(where):
        raise ValueError(f"no index at {shown(where)}: run `ragkit index PATH` first, or give PATH")
    return load_index(where, expected_embedder=config.models.embedder)


def cmd_testset_generate(args, console) -> int:
    from dataclasses import replace

    from ragkit.eval.generate import generate_testset
    from ragkit.eval.testset import save_testset
    from ragkit.llm.cache import LLMCache, llm_cache
    from ragkit.llm.generators import build_chat_generator
    from ragkit.ui.eval_terminal import GenerationBar


    config = config_from_args(args)
    index = _index_for(args, console, config)
    mix = {k: float(v) for k, v in (part.split("=") for part in args.mix.split(","))} if args.mix else None
    llm = build_chat_generator(config.models)
    checker = None if args.check_llm in (None, "none") else llm if args.check_llm == config.models.llm else build_chat_generator(replace(config.models, llm=args.check_llm))
    cache = None if args.no_cache else LLMCache(args.cache or default_cache_path())
    bar = GenerationBar(quiet=args.quiet)  # minutes of LLM calls
    try:
        with llm_cache(cache):
            items, report = generate_testset(index, llm, n=args.n, mix=mix, seed=args.seed, progress=bar, check_generator=checker)
    finally:
        bar.close()
    save_testset(items, args.output)
    summary = report.summary()
    console.print(f"wrote {shown(args.output)}: {len(items)} items of {args.n} asked, from {summary['questions_tried']} questions tried "
                  f"({summary['llm_calls']} LLM calls, {summary['cache_hits']} cache hits, {summary['seconds']:.0f} s)")
    for kind, entry in summary["by_kind"].items():
        console.print(f"  {kind:13} {entry['in_set']:3} in the set; {entry['accepted']:3} of {entry['candidates']:3} candidates passed ({entry['acceptance']:.0%})")
    for i, (reason, n) in enumerate(summary["rejected_by_reason"].items()):  # a line each: a wrap never parts a count from its reason
        console.print(f"  {'rejected' if i == 0 else '':13} {n:3} {reason.replace('_', ' ')}", highlight=False)
    Path(str(args.output) + ".report.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0 if items else 3


def _make_rag(config, index, llm):
    from ragkit.pipeline.engine import AgenticRAG

    return lambda features: AgenticRAG(features, config=config, index=index, chat_generator=llm)


def _load_testset(path: str, console) -> list:
    """The test set's good items; each bad line named with its number and reason (the first 20, then how many more)."""
    from ragkit.eval.testset import load_testset

    items, problems = load_testset(path)
    for problem in problems[:SKIPPED_SHOWN]:
        console.print(f"[yellow]skipped[/] {shown(path)} {shown(problem)}")
    if len(problems) > SKIPPED_SHOWN:
        console.print(f"[yellow]skipped[/] {len(problems) - SKIPPED_SHOWN} more bad lines of {shown(path)}")
    return items


SKIPPED_SHOWN = 20


def _judge(args, config, llm):
    from dataclasses import replace

    from ragkit.eval.judge import LocalJudge
    from ragkit.llm.generators import build_chat_generator

    if args.judge_llm == "none":
        return None
    generator = llm if args.judge_llm in (None, config.models.llm) else build_chat_generator(replace(config.models, llm=args.judge_llm))
    return LocalJudge(generator, task=args.judge_task, model_name=args.judge_llm or config.models.llm)


def _embed(config):
    from ragkit.llm.generators import shared_text_embedder

    embedder = shared_text_embedder(config.models.embedder)

    def similarity(answer: str, gold: list[str]) -> float:
        import numpy as np

        vectors = np.asarray(embedder.embedding_backend.embed([answer, *gold], normalize_embeddings=True, show_progress_bar=False))
        return float(max(vectors[1:] @ vectors[0]))

    return similarity


def cmd_eval(args, console) -> int:
    from ragkit.eval.runs import EvalRun, RunStopped
    from ragkit.eval.strategies import resolve
    from ragkit.llm.cache import LLMCache
    from ragkit.llm.generators import build_chat_generator


    config = config_from_args(args)
    strategy = resolve(args.features)
    items = _load_testset(args.testset, console)
    index = _index_for(args, console, config)
    llm = build_chat_generator(config.models)
    judge = _judge(args, config, llm)
    run = EvalRun.open(Path(args.runs_dir) / (args.name or strategy.label), strategy, config, args.testset, items, known_chunks=set(index.chunks),
                       limit=args.limit, judge_model=getattr(judge, "label", None), chat_generator=llm)
    plan = run.plan()
    if run.missing_chunks:
        console.print(f"[yellow]{len(run.missing_chunks)} items name chunks that are no longer in the index:[/] they are skipped; the other {len(run.items)} are evaluated")
    console.print(plan.text())
    if args.dry_run:
        return 0
    from tqdm import tqdm

    bar = tqdm(total=len(run.items), initial=len(run.done), desc=strategy.label, disable=args.quiet)
    cache = None if args.no_cache else LLMCache(args.cache or default_cache_path())
    try:
        summary = run.execute(_make_rag(config, index, llm)(strategy.features), judge=judge, embed=_embed(config), cache=cache,
                              progress=lambda done, total: bar.update(done - bar.n))
    except RunStopped as exc:
        console.print(f"[bold red]stopped:[/] {shown(exc)}")
        return 3
    finally:
        bar.close()
    from ragkit.ui.eval_terminal import run_summary

    console.print(run_summary({"run": run.meta, "aggregates": summary["aggregates"]}, str(run.directory)))
    if run.setup_seconds:
        console.print("before the first question, in no question's seconds: " + ", ".join(f"{what} {s:.1f} s" for what, s in run.setup_seconds.items()))
    return 0


def cmd_report(args, console) -> int:
    from ragkit.eval.compare import markdown_report
    from ragkit.eval.runs import load_run

    runs = [load_run(path) for path in args.runs]
    hashes = {r["run"]["testset"]["sha256"] for r in runs}
    if len(hashes) > 1:
        raise ValueError("these runs measured different test sets; a comparison needs the same questions")
    if args.output:
        Path(args.output).write_text(markdown_report(runs, quality=args.quality), encoding="utf-8")
        console.print(f"wrote {shown(args.output)}")
    elif args.markdown or not console.is_terminal:  # a pipe or a file gets the Markdown, to paste or keep
        print(markdown_report(runs, quality=args.quality))
    else:  # a person at a terminal: tables that fit its width (16 Markdown columns fold at 80)
        from ragkit.ui.eval_terminal import report_group

        console.print(report_group(runs, quality=args.quality))
    return 0


def cmd_tune(args, console) -> int:
    from ragkit.eval.strategies import resolve
    from ragkit.eval.tune import TOGGLES, WIDE, builtin_space, plan_text, tune, tune_plan
    from ragkit.ui.eval_terminal import RunBars, tune_group
    from ragkit.llm.cache import LLMCache
    from ragkit.llm.generators import build_chat_generator


    config = config_from_args(args)
    if args.trials < 1:  # said before anything loads
        raise ValueError(f"--trials must be at least 1, not {args.trials}")
    items = _load_testset(args.testset, console)
    index = _index_for(args, console, config)
    llm = build_chat_generator(config.models)
    if args.strategies in ("toggles", "wide"):
        candidates = {"toggles": TOGGLES, "wide": WIDE}[args.strategies]
    elif args.strategies:
        candidates = [resolve(name) for name in args.strategies.split(",")]
    else:
        candidates = builtin_space(["plain", "hyde", "rerank", "grading", "self_correction", "full", "dense_only", "sparse_only"])
    judge = _judge(args, config, llm)
    if args.dry_run:
        console.print(plan_text(tune_plan(candidates, items, config.models.llm, getattr(judge, "label", None), known_chunks=set(index.chunks),
                                          trials=args.trials)))
        return 0
    cache = None if args.no_cache else LLMCache(args.cache or default_cache_path())
    bars = RunBars(quiet=args.quiet)  # one progress bar a run
    try:
        report = tune(_make_rag(config, index, llm), items, candidates, args.latency_budget, args.runs_dir, args.testset, config,
                      judge=judge, cache=cache, quality=args.quality, known_chunks=set(index.chunks), progress=bars,
                      trials=args.trials)
    finally:
        bars.close()
    out = Path(args.runs_dir) / "tune.json"
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    console.print(tune_group(report))
    console.print(f"wrote {shown(out)}")
    return 0


def cmd_strategies(args, console) -> int:
    from ragkit.eval import strategies

    if args.action == "add":
        if not args.name or not args.file:
            raise ValueError("usage: ragkit strategies add NAME FEATURES.yaml")
        added = strategies.add(args.name, args.file)
        console.print(f"added {added.label} ({shown(strategies.folder())})")
        return 0
    from ragkit.ui.eval_terminal import strategies_table

    console.print(strategies_table(strategies.available()))
    return 0


def cmd_calibrate(args, console) -> int:
    """Refit the confidence on a test set of the user's documents; before/after on items the fit never saw."""
    from dataclasses import replace

    from ragkit.eval.refit import CALIBRATION_NAME, MIN_ROWS, TooFewItemsError, collect_rows, refit, save_beside_index
    from ragkit.llm.generators import build_chat_generator
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    config = config_from_args(args)
    index = _index_for(args, console, config)
    where = index_location(args, config)
    if "://" in str(where):
        raise ValueError("ragkit calibrate keeps its fit beside a local index folder; a store is not supported yet")
    items = _load_testset(args.testset, console)
    answerable = sum(1 for it in items if it.answerable and it.answers)
    if answerable < MIN_ROWS:  # said before any question is asked
        raise TooFewItemsError(f"{shown(args.testset)} has {answerable} answerable questions with an answer; a refit needs at least {MIN_ROWS} "
                               "(ragkit testset generate DOCS --n 60 -o set.jsonl)")
    features = replace(Features.all_on(), confidence_floor=0.0) if args.features == "all" else Features()
    llm = build_chat_generator(config.models)
    rag = AgenticRAG(features, config=config, index=index, chat_generator=llm)
    rag.ask("Warm-up: what is this about?")  # loads the models; not scored
    from tqdm import tqdm

    with tqdm(total=sum(1 for it in items if it.answerable and it.answers), desc="asking", disable=args.quiet, file=sys.stderr) as bar:
        rows = collect_rows(rag, items, progress=lambda done, total: bar.update(done - bar.n))
    outcome = refit(rows, model=config.models.llm, agentic=features.grading or features.hallucination_check, folds=args.folds)
    print_refit(console, outcome)
    if args.output:
        Path(args.output).write_text(json.dumps({k: v for k, v in outcome.items()}, indent=1) + "\n", encoding="utf-8")
        console.print(f"wrote {shown(args.output)}")
    if args.no_save:
        console.print("not saved (--no-save): the shipped fit stays in use")
    else:
        path = save_beside_index(where, outcome["calibration"])
        console.print(f"saved {shown(path)}: `ragkit ask` on this index now uses it (delete {CALIBRATION_NAME} to go back to the shipped fit)")
    return 0


def print_refit(console, outcome: dict) -> None:
    """``ragkit calibrate``'s report: before/after figures and the reliability bins, narrow enough for 80 columns."""
    from ragkit.eval.refit import offset_interval_text

    before, after = outcome["before"], outcome["after"]
    console.print(f"{outcome['scored']} items scored ({outcome['answered']} answered, {outcome['right']:.0%} right; correct = F1 ≥ 0.5 "
                  f"against the test set's answer); {outcome['folds']} folds by chunk, so 'after' is on items its fit never saw")
    console.print(f"  {'':24} {'ECE':>6} {'ROC AUC':>8} {'mean conf.':>10} {'● right':>8}")
    offset = outcome.get("offset") or {}
    after_name = "recalibrated (after)" if outcome.get("method") == "recalibrate" else "refitted (after)"
    shown_rows = [("shipped fit (before)", before)]
    if offset.get("logit"):
        shown_rows.append((after_name.replace(" (after)", ", no offset"), outcome["after_without_offset"]))
    shown_rows.append((after_name, after))
    for name, entry in shown_rows:
        high = f"{entry['high_share_correct']:.0%}" if entry["high_share_correct"] is not None else "–"
        console.print(f"  {name:24} {entry['ece']:6.3f} {entry['auc']:8.3f} {entry['mean_confidence']:10.2f} {high:>8}")
    console.print("  per confidence bin: items, share right, mean confidence; before → after")
    for b0, b1 in zip(before["bins"], after["bins"]):
        if b0["n"] or b1["n"]:
            console.print(f"    {b0['low']:.1f}–{b0['high']:.1f}: {b0['n']:3} {_share(b0)}  →  {b1['n']:3} {_share(b1)}", highlight=False)
    if outcome.get("method") == "recalibrate" and outcome.get("platt"):
        console.print(f"the shipped fit's logit × {outcome['platt']['slope']:.2f} {outcome['platt']['shift']:+.2f}: the same ranking "
                      "of answers, its probabilities moved to your text", highlight=False)
    if offset.get("logit"):
        measured = str(offset.get("measured_for") or "")
        source = "borrowed from " + shown(measured.split(" (borrowed")[0]) if "borrowed" in measured else "measured on SQuAD dev"
        source += offset_interval_text(offset)
        console.print(f"[yellow]note:[/] generated questions are easier than people's, so the saved fit is moved by "
                      f"{offset['logit']:+.2f} logit (the offset {source}, for {offset['generated_share']:.0%} generated "
                      "questions here): it is meant for real questions like yours, and reads low on the generated ones above "
                      "(docs/confidence.md)")
    else:
        console.print("[yellow]caution:[/] no generated-question offset is measured, and generated questions are "
                      "often easier than real ones: the fit learns their share right; check it on real questions if you have "
                      "some (docs/confidence.md)")


def _share(b: dict) -> str:
    return f"{b['correct']:>4.0%} right, {b['confidence']:.2f}" if b["n"] else f"{'–':>4}" + " " * 12


def add_eval_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    cache = cache_options()

    testset = sub.add_parser("testset", help="test sets from your own documents").add_subparsers(dest="testset_command", required=True)
    p = testset.add_parser("generate", parents=[common, cache], help="generate questions from a folder of documents or an index")
    p.add_argument("path", help="a folder of documents (indexed into --index-dir first) or an index folder")
    p.add_argument("--n", "-n", type=int, default=40, help="items to generate (default 40)")
    p.add_argument("-o", "--output", required=True, help="the JSONL test set to write")
    p.add_argument("--mix", help="shares of each kind, e.g. single=0.4,paraphrase=0.25,multi=0.15,unanswerable=0.2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--llm", help="the model that writes the questions (default: the configured LLM, qwen2.5-coder-1.5b: 58%% of its "
                                 "items valid against 35%% of the 0.5B's, at 1.7x the seconds)")
    p.add_argument("--check-llm", help="a model that reads each kept item again and must call its answer correct (measured: "
                                       "qwen2.5-coder-1.5b on the 0.5B's items, 52%% valid against 22%%; default none)")
    p.set_defaults(func=cmd_testset_generate)

    judged = argparse.ArgumentParser(add_help=False)
    judged.add_argument("--judge-llm", help="the judge's model (default: the pipeline's; 'none': no judge metrics)")
    judged.add_argument("--judge-task", choices=["sentences", "answers_question", "correct", "correct_x_likelihood"],
                        help="what the judge's faithfulness reads (default with a llama.cpp judge correct_x_likelihood: P(yes) to 'is this answer "
                             "correct according to the sources' times the judge's own likelihood of the answer; with a server, correct alone)")
    judged.add_argument("--runs-dir", default="runs", help="where run folders go (default runs/)")

    p = sub.add_parser("eval", parents=[common, cache, judged], help="run a strategy on a test set: a resumable run folder with every row")
    p.add_argument("--features", required=True, help="a strategy name (ragkit strategies list) or a Features YAML file")
    p.add_argument("--testset", required=True, help="JSONL or CSV test set (ragkit testset generate)")
    p.add_argument("--name", help="the run's name (default: the strategy's)")
    p.add_argument("--limit", type=int, help="only the first N items")
    p.add_argument("--dry-run", action="store_true", help="say how many LLM calls and roughly how long; ask nothing")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", help="compare runs of one test set: differences with 95%% intervals, McNemar's test")
    p.add_argument("runs", nargs="+", help="run folders; the first is the baseline")
    p.add_argument("-o", "--output", help="write the Markdown report here")
    p.add_argument("--markdown", action="store_true", help="print the Markdown even to a terminal (a pipe always gets it)")
    p.add_argument("--quality", default="correct", help="the measure of the Pareto front (default correct)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("tune", parents=[common, cache, judged], help="choose a strategy on half the test set, report it on the other half")
    p.add_argument("--testset", required=True, help="JSONL or CSV test set (ragkit testset generate), split in halves by item")
    p.add_argument("--latency-budget", type=float, help="the most p50 seconds a question may take")
    p.add_argument("--strategies", help="comma-separated strategy names (default: the built-in plain, hyde, rerank, grading, "
                                        "self_correction, full, dense_only, sparse_only); 'toggles': every combination of hyde/rerank/grading/routing (16); "
                                        "'wide': those and decompose, self_correction, the retriever and top_k (576)")
    p.add_argument("--trials", type=int, default=24, help="a search space with more combinations than this is searched by Optuna "
                                                          "for this many trials instead of run whole (default 24)")
    p.add_argument("--quality", default="correct", help="what to maximise (default correct)")
    p.add_argument("--dry-run", action="store_true", help="say how many runs and LLM calls and roughly how long; ask nothing")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("calibrate", parents=[common], help="refit the confidence on a test set of your documents; kept beside the index")
    p.add_argument("--testset", required=True, help="JSONL or CSV test set (ragkit testset generate)")
    p.add_argument("--features", choices=["plain", "all"], default="plain", help="the configuration whose confidence to refit (default plain)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--no-save", action="store_true", help="measure only; keep the shipped fit")
    p.add_argument("-o", "--output", help="write the before/after figures as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("strategies", help="list the named strategies, or add yours (a new version each time)")
    p.add_argument("action", choices=["list", "add"])
    p.add_argument("name", nargs="?")
    p.add_argument("file", nargs="?")
    p.set_defaults(func=cmd_strategies)
