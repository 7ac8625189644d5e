"""Did a change of the code change any answer? Two ``answer_quality.py`` row files, question by question.

Run the same questions with the code before and after a change (the same set, model, configs and
seed; ``bench/answer_quality.py run --rows-dir DIR``, the "before" from a ``git worktree`` of the old
commit with ``PYTHONPATH`` pointing at it), then compare: per configuration, how many answers are
byte-identical, how many confidences, decline decisions, exit reasons, routes, LLM call counts and
signals are the same, and the median seconds of each run (a ratio, both measured on this machine).
Writes ``bench/results/parity.json`` (the ids of any question that differs, with both answers).

    git worktree add /tmp/base BASE && ln -s "$PWD/bench/.cache" /tmp/base/bench/.cache
    (cd /tmp/base && PYTHONPATH=/tmp/base ../work/main/.venv/bin/python bench/answer_quality.py run --set squad_dev \\
        --model qwen2.5-coder-0.5b --questions 100 --baseline-questions 0 --rows-dir /tmp/parity/before)
    .venv/bin/python bench/answer_quality.py run --set squad_dev --model qwen2.5-coder-0.5b --questions 100 \\
        --baseline-questions 0 --rows-dir /tmp/parity/after
    .venv/bin/python bench/parity.py /tmp/parity/before/squad_dev.qwen2.5-coder-0.5b.jsonl /tmp/parity/after/squad_dev.qwen2.5-coder-0.5b.jsonl \\
        --before-commit BASE --after-commit HEAD
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from squad_common import ROOT, run_facts

OUT = ROOT / "bench" / "results" / "parity.json"
SAME = ("answer", "declined", "exit_reason", "route", "llm_calls", "answer_mode")


def read(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["id"], r["config"]): r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def compare(before: dict, after: dict) -> dict:
    configs = sorted({config for _, config in before} | {config for _, config in after})
    out = {}
    for config in configs:
        keys = sorted(k for k in before if k[1] == config and k in after)
        differ = [k for k in keys if any(before[k][f] != after[k][f] for f in SAME)
                  or round(before[k]["confidence_at_run"] or 0, 6) != round(after[k]["confidence_at_run"] or 0, 6)]
        out[config] = {
            "questions": len(keys),
            "only_before": sum(1 for k in before if k[1] == config and k not in after),
            "only_after": sum(1 for k in after if k[1] == config and k not in before),
            "same_answer": sum(before[k]["answer"] == after[k]["answer"] for k in keys),
            "same_confidence": sum(round(before[k]["confidence_at_run"] or 0, 6) == round(after[k]["confidence_at_run"] or 0, 6) for k in keys),
            "same_signals": sum(before[k]["signals"] == after[k]["signals"] for k in keys),
            "same_in_every_field": len(keys) - len(differ),
            "f1_before": round(statistics.fmean(before[k]["f1"] for k in keys), 4) if keys else None,
            "f1_after": round(statistics.fmean(after[k]["f1"] for k in keys), 4) if keys else None,
            "p50_s_before": round(statistics.median(before[k]["seconds"] for k in keys), 3) if keys else None,
            "p50_s_after": round(statistics.median(after[k]["seconds"] for k in keys), 3) if keys else None,
            "differences": [{"id": k[0], **{f: [before[k][f], after[k][f]] for f in (*SAME, "confidence_at_run") if before[k][f] != after[k][f]}}
                            for k in differ],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--before-commit", required=True)
    parser.add_argument("--after-commit", required=True)
    parser.add_argument("--what", default="issue 28: Haystack conventions (query / chat_generator / replies), one correction loop, portable generators")
    args = parser.parse_args()
    configs = compare(read(args.before), read(args.after))
    data = {"what": args.what, "before_commit": args.before_commit, "after_commit": args.after_commit, "rows": [str(args.before), str(args.after)],
            "command": "see bench/parity.py's docstring", "configs": configs, "run": run_facts()}
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({c: {k: v for k, v in r.items() if k != "differences"} for c, r in configs.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
