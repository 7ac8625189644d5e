"""How long ``ragkit eval`` takes against what its ``--dry-run`` said, and what a judge call costs.

``ragkit eval --dry-run`` multiplies the LLM calls it expects by seconds a call. The answer's call is short
(the engine's selected evidence: ~1 s for the 0.5B), but a judge call reads the five sources whole, so it
costs several times more and depends on the judge model. This bench runs ``ragkit eval`` as a user runs it
(a process each, no LLM cache) on test sets generated from ``sample_docs/``: the plain strategy with no
judge, with the 0.5B as judge and with the 1.5B as judge, each after its own ``--dry-run``.

* On the **fitting set** (seed 1) it measures each judge's seconds a judge call:
  (judged run − unjudged run) / the judge calls the dry run counted. ``ragkit.eval.runs.JUDGE_SECONDS_PER_CALL``
  holds these figures (a test keeps them equal).
* On the **checking set** (seed 2, other questions) it reports the measured time against the dry run's
  estimate as it was made and against the estimate with each judge call at its fitted seconds, so the
  fitted figures are judged on questions they were not fitted on.

    .venv/bin/python bench/eval_seconds.py    -> bench/results/eval_seconds.json   (~12 min on 2 cores)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from squad_common import ROOT, run_facts

OUT = ROOT / "bench" / "results" / "eval_seconds.json"
RAGKIT = str(Path(sys.executable).with_name("ragkit"))
JUDGES = ("none", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
ITEMS = 12
PLAN = re.compile(r"about (\d+) LLM calls, roughly (\d+) (s|min)")


def timed_eval(work: Path, testset: Path, judge: str, env: dict, common: list[str]) -> dict:
    ask = [RAGKIT, "eval", "--features", "plain", "--testset", str(testset), "--judge-llm", judge, "--no-cache",
           "--runs-dir", str(work / f"runs-{testset.stem}"), "--name", judge, *common]
    plan = subprocess.run([*ask, "--dry-run"], env=env, check=True, capture_output=True, text=True, timeout=600).stdout
    calls, amount, unit = PLAN.search(" ".join(plan.split())).groups()
    t0 = time.perf_counter()
    subprocess.run(ask, env=env, check=True, capture_output=True, timeout=3600)
    return {"dry_run_calls": int(calls), "dry_run_s": int(amount) * (60 if unit == "min" else 1), "measured_s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    env = {**os.environ, "RAGKIT_LLM": "qwen2.5-coder-0.5b"}
    started = time.perf_counter()
    sets: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        common = ["--index-dir", str(work / "index"), "--quiet"]
        for name, seed in (("fitting", 1), ("checking", 2)):
            testset = work / f"{name}.jsonl"
            subprocess.run([RAGKIT, "testset", "generate", str(ROOT / "sample_docs"), "--n", str(ITEMS), "-o", str(testset), "--seed", str(seed),
                            "--cache", str(work / "gen_cache.sqlite"), *common], env=env, check=True, capture_output=True, timeout=3600)
            runs = {judge: timed_eval(work, testset, judge, env, common) for judge in JUDGES}
            items = len(testset.read_text().splitlines())
            sets[name] = {"seed": seed, "items": items, "runs": runs}
    fitting = sets["fitting"]["runs"]
    per_call = {}
    for judge in JUDGES[1:]:
        judge_calls = fitting[judge]["dry_run_calls"] - fitting["none"]["dry_run_calls"]
        per_call[judge] = round((fitting[judge]["measured_s"] - fitting["none"]["measured_s"]) / judge_calls, 2)
    for entry in sets.values():
        runs = entry["runs"]
        for judge, run in runs.items():
            run["measured_over_dry_run"] = round(run["measured_s"] / max(run["dry_run_s"], 1), 2)
            if judge in per_call:  # the answers' estimate as the dry run made it, each judge call at its fitted seconds
                judge_calls = run["dry_run_calls"] - runs["none"]["dry_run_calls"]
                run["with_fitted_judge_s"] = round(runs["none"]["dry_run_s"] + judge_calls * per_call[judge], 1)
                run["measured_over_fitted"] = round(run["measured_s"] / run["with_fitted_judge_s"], 2)
    data = {
        "definition": "bench/eval_seconds.py: ragkit eval --features plain --no-cache on test sets generated from sample_docs/ (0.5B answers), "
                      "as separate processes (model loading included), with no judge and each judge; the dry run's estimate beside the wall time",
        "judge_seconds_per_call": per_call,
        "judge_seconds_per_call_definition": "(judged run - unjudged run) / the judge calls the dry run counted, on the fitting set",
        "sets": sets,
        "command": "python bench/eval_seconds.py", "seconds": round(time.perf_counter() - started, 1), "run": run_facts(),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in data.items() if k != "run"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
