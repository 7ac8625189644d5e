"""``ragkit agreement``: do two test sets rank your strategies alike? (zero LLM calls; it reads finished runs)

Run the same strategies on a generated test set and on questions of your own, then ask whether the
generated set would have told you the same thing::

    for s in plain hyde rerank grading sparse_only; do
        ragkit eval --features $s --testset generated.jsonl --name gen-$s
        ragkit eval --features $s --testset mine.jsonl --name mine-$s
    done
    ragkit agreement runs/gen-* runs/mine-*
    ragkit agreement runs/gen-* runs/mine-* --json agreement.json

The figures are :func:`ragkit.eval.agreement.ranking_agreement`'s (the same functions issue 29's SQuAD
check reads in ``bench/eval_agreement.py``); the terminal view is :func:`ragkit.ui.eval_terminal.agreement_group`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragkit.ui.cli_common import shown


def cmd_agreement(args, console) -> int:
    from ragkit.eval.agreement import ranking_agreement
    from ragkit.eval.runs import load_run
    from ragkit.ui.eval_terminal import agreement_group

    result = ranking_agreement([load_run(path) for path in args.runs])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(agreement_group(result))
    if args.json:
        console.print(f"wrote {shown(args.json)}")
    return 0


def add_agreement_command(sub: Any) -> None:
    p = sub.add_parser("agreement", help="do two test sets rank the strategies alike? Kendall's tau from finished runs (no LLM call)")
    p.add_argument("runs", nargs="+", help="run folders: the same strategies on two test sets (ragkit eval), one run per strategy and set")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.set_defaults(func=cmd_agreement)
