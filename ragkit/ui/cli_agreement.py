"""``ragkit agreement``: do two test sets rank your strategies alike?

Give it a generated test set and questions of your own; it runs each strategy on both (resumable run
folders, the LLM-reply cache, no judge: neither measure needs one) and says whether the generated set would
have told you the same thing::

    ragkit agreement --testsets generated.jsonl mine.csv --strategies plain,rerank,sparse_only --dry-run
    ragkit agreement --testsets generated.jsonl mine.csv --strategies plain,rerank,sparse_only --json agreement.json

or, with zero LLM calls, reads runs you made yourself (``ragkit eval``, one a strategy and test set)::

    ragkit agreement runs/gen-* runs/mine-*

The figures are :func:`ragkit.eval.agreement.ranking_agreement`'s (the same functions issue 29's SQuAD
check reads in ``bench/eval_agreement.py``); the terminal view is :func:`ragkit.ui.eval_terminal.agreement_group`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragkit.ui.cli_common import cache_options, config_from_args, default_cache_path, shown

DEFAULT_STRATEGIES = "plain,rerank,dense_only,sparse_only"  # one LLM call a question each; the retrievers differ most


def cmd_agreement(args, console) -> int:
    from ragkit.eval.agreement import ranking_agreement
    from ragkit.eval.runs import RunStopped, load_run
    from ragkit.ui.eval_terminal import agreement_group

    if args.testsets and args.runs:
        raise ValueError("give run folders or --testsets, not both")
    if not args.testsets and not args.runs:
        raise ValueError("give the run folders to compare, or --testsets A B to run the strategies on two test sets first")
    if args.testsets:
        try:
            runs = _run_on_both(args, console)
        except RunStopped as exc:
            console.print(f"[bold red]stopped:[/] {shown(exc)}")
            return 3
        if runs is None:  # a dry run
            return 0
    else:
        runs = [load_run(path) for path in args.runs]
    result = ranking_agreement(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(agreement_group(result))
    if args.json:
        console.print(f"wrote {shown(args.json)}")
    return 0


def _run_on_both(args, console) -> list[dict[str, Any]] | None:
    """Each strategy on both test sets (what is already in a run folder is kept); None after a dry run."""
    from ragkit.eval.agreement import agreement_runs, run_folders
    from ragkit.eval.runs import Plan, duration_text
    from ragkit.eval.strategies import resolve
    from ragkit.llm.cache import LLMCache
    from ragkit.llm.generators import build_chat_generator
    from ragkit.ui.cli_eval import _embed, _index_for, _load_testset, _make_rag
    from ragkit.ui.eval_terminal import RunBars

    config = config_from_args(args)
    strategies = [resolve(name.strip()) for name in args.strategies.split(",") if name.strip()]
    testsets = [(path, _load_testset(path, console)) for path in args.testsets]  # an unreadable file: one line, before anything loads
    run_folders(args.testsets, strategies, args.runs_dir)  # so are the same set twice and too few strategies
    index = _index_for(args, console, config)
    llm = build_chat_generator(config.models)
    runs = agreement_runs(testsets, strategies, args.runs_dir, config, known_chunks=set(index.chunks), limit=args.limit, chat_generator=llm)
    for first in runs[::len(strategies)]:  # a test set's first run: every strategy skips the same items
        if first.missing_chunks:
            console.print(f"[yellow]{shown(first.meta['testset']['path'])}: {len(first.missing_chunks)} items name chunks that are no longer "
                          "in the index:[/] they are skipped")
    plans: list[Plan] = [run.plan() for run in runs]
    items, done, paced = sum(p.items for p in plans), sum(p.already_done for p in plans), sum(1 for p in plans if p.paced_on)
    console.print(f"{len(strategies)} strategies on each test set, {len(runs)} runs under {shown(args.runs_dir)}: {items - done} of {items} "
                  f"questions to ask ({done} already in the runs), about {sum(p.llm_calls for p in plans)} LLM calls, roughly "
                  f"{duration_text(sum(p.seconds for p in plans))} on 2 cores" + (f" ({paced} of the runs at their own pace so far)" if paced else ""))
    if args.dry_run:
        return None
    make_rag, embed = _make_rag(config, index, llm), _embed(config)
    cache = None if args.no_cache else LLMCache(args.cache or default_cache_path())
    bars = RunBars(quiet=args.quiet)  # one progress bar a run
    try:
        for run, strategy in zip(runs, strategies * len(testsets)):  # agreement_runs' order: each test set, each strategy
            what = f"{Path(run.meta['testset']['path']).stem}: {run.directory.name}"  # the folder's hash would crowd the bar out
            bars(what, len(run.done), len(run.items))
            run.execute(make_rag(strategy.features), embed=embed, cache=cache, progress=lambda done, total, what=what: bars(what, done, total))
    finally:
        bars.close()
    return [{"run": run.meta, "rows": run.rows(), "aggregates": run.summary()["aggregates"]} for run in runs]


def add_agreement_command(sub: Any, common: Any) -> None:
    p = sub.add_parser("agreement", parents=[common, cache_options()],
                       help="do two test sets rank the strategies alike? Kendall's tau, from finished runs or after running them")
    p.add_argument("runs", nargs="*", help="run folders: the same strategies on two test sets (ragkit eval), one run per strategy and set")
    p.add_argument("--testsets", nargs=2, metavar=("A", "B"),
                   help="instead of run folders: two test sets (JSONL or CSV; say a generated one and your own questions) to run each strategy on first")
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES, help=f"with --testsets: comma-separated strategy names, at least three (default {DEFAULT_STRATEGIES})")
    p.add_argument("--runs-dir", default="runs", help="with --testsets: where the run folders go, one folder a test set (default runs/)")
    p.add_argument("--limit", type=int, help="with --testsets: only the first N items of each")
    p.add_argument("--dry-run", action="store_true", help="with --testsets: say how many LLM calls and roughly how long; ask nothing")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.set_defaults(func=cmd_agreement)
