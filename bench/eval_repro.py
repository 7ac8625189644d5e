"""Can an evaluation run be trusted and repeated? The same run twice with the LLM cache, and a run killed mid-way.

On ``sample_docs/`` with the 0.5B: a test set is generated, then ``ragkit eval`` runs as a user runs it
(separate processes):

* **rerun with the cache**: the strategy once into an empty cache, then again into a new run folder —
  the second run's rows must equal the first's (answers, scores, sources, confidences; not the seconds)
  with 0 LLM calls;
* **kill -9 and resume**: a clean run without the cache, and a run killed with SIGKILL after a few
  rows and started again — its rows must equal the clean run's, none lost, none twice.

    .venv/bin/python bench/eval_repro.py    -> bench/results/eval_repro.json
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from squad_common import ROOT, run_facts

OUT = ROOT / "bench" / "results" / "eval_repro.json"
RAGKIT = str(Path(sys.executable).with_name("ragkit"))
VOLATILE = ("seconds", "step_seconds", "judge_seconds", "llm_calls", "cache_hits", "prompt_tokens")


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines() if line.strip()]


def stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in VOLATILE}


def main() -> int:
    env = {**os.environ, "RAGKIT_LLM": "qwen2.5-coder-0.5b"}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        common = ["--index-dir", str(work / "index"), "--quiet"]
        subprocess.run([RAGKIT, "testset", "generate", str(ROOT / "sample_docs"), "--n", "16", "-o", str(work / "set.jsonl"), "--cache",
                        str(work / "gen_cache.sqlite"), "--seed", "5", *common], env=env, check=True, capture_output=True, timeout=3600)
        items = len((work / "set.jsonl").read_text().splitlines())
        ask = [RAGKIT, "eval", "--features", "grading", "--testset", str(work / "set.jsonl"), "--runs-dir", str(work / "runs"), *common]
        cache = ["--cache", str(work / "eval_cache.sqlite")]
        t0 = time.perf_counter()
        subprocess.run([*ask, *cache, "--name", "first"], env=env, check=True, capture_output=True, timeout=3600)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([*ask, *cache, "--name", "second"], env=env, check=True, capture_output=True, timeout=3600)
        second_s = time.perf_counter() - t0
        first, second = rows(work / "runs" / "first"), rows(work / "runs" / "second")

        subprocess.run([*ask, "--no-cache", "--name", "clean"], env=env, check=True, capture_output=True, timeout=3600)
        killed = subprocess.Popen([*ask, "--no-cache", "--name", "killed"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = work / "runs" / "killed" / "rows.jsonl"
        while killed.poll() is None and not (path.exists() and path.read_text().count("\n") >= items // 3):
            time.sleep(0.1)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        before_resume = path.read_text().count("\n")
        subprocess.run([*ask, "--no-cache", "--name", "killed"], env=env, check=True, capture_output=True, timeout=3600)
        clean, resumed = rows(work / "runs" / "clean"), rows(work / "runs" / "killed")

    ids = [r["id"] for r in resumed]
    data = {
        "definition": "bench/eval_repro.py: ragkit eval (grading, 0.5B) on a test set generated from sample_docs/, run as separate processes",
        "items": items,
        "rerun_with_cache": {
            "rows_first": len(first), "rows_second": len(second),
            "identical_rows": sum(stable(a) == stable(b) for a, b in zip(first, second)),
            "identical_answers": sum(a["answer"] == b["answer"] for a, b in zip(first, second)),
            "llm_calls_first": sum(r["llm_calls"] for r in first), "llm_calls_second": sum(r["llm_calls"] for r in second),
            "cache_hits_second": sum(r["cache_hits"] for r in second), "seconds_first": round(first_s, 1), "seconds_second": round(second_s, 1),
        },
        "kill_and_resume": {
            "rows_when_killed": before_resume, "rows_after_resume": len(resumed), "rows_clean": len(clean),
            "duplicated_rows": len(ids) - len(set(ids)),
            "same_rows_as_clean": sorted(json.dumps(stable(r), sort_keys=True) for r in resumed) == sorted(json.dumps(stable(r), sort_keys=True) for r in clean),
        },
        "command": "python bench/eval_repro.py", "seconds": round(time.perf_counter() - started, 1), "run": run_facts(),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in data.items() if k != "run"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
