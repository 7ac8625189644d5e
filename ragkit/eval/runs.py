"""An evaluation run you can trust and repeat: a snapshot folder, resumable, with every row kept.

``runs/NAME/`` holds:

* ``run.json`` — what was measured: the strategy (name, version, ``Features``), the ``RagConfig``, the
  models' fingerprints (the GGUF's sha256, or the server and model name), the judge's, ragkit's version
  and git commit, the test set's path and sha256, the limit;
* ``rows.jsonl`` — one scored row per item (:func:`ragkit.eval.scoring.score_item`), appended and
  ``fsync``'d one at a time, so a run killed with ``kill -9``, Ctrl-C or a full disk keeps every row
  it finished; a half-written last line is dropped on the next start;
* ``summary.json`` — the aggregates (:func:`ragkit.eval.scoring.aggregate`), written atomically at the end.

Starting a run whose folder exists resumes it: the items already in ``rows.jsonl`` are skipped, none is
asked twice. A folder written for another strategy, test set or model — or by another run format — is
refused with what differs, so two different things never share a name. ``plan`` says, before a call is
made, how many LLM calls a run needs and roughly how long it takes (``ragkit eval --dry-run``).

Usage::

    run = EvalRun.open("runs/grading", strategy, config, "set.jsonl", items)
    summary = run.execute(rag, judge=LocalJudge(llm), cache=LLMCache(path))
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ragkit import __version__
from ragkit.config import RagConfig
from ragkit.eval.judge import calls_per_answer, judge_model_of
from ragkit.eval.scoring import aggregate, score_item
from ragkit.eval.strategies import Strategy
from ragkit.eval.testset import EvalItem, testset_sha256
from ragkit.llm.cache import LLMCache, llm_cache, model_fingerprint
from ragkit.llm.generators import reset_prompt_cache

RUN_FORMAT = 1
# Seconds per LLM call on 2 cores, measured (docs/answers.md, bench/results/answer_quality.json): what a
# dry run multiplies by. A model not listed gets the larger one.
SECONDS_PER_CALL = {"qwen2.5-coder-0.5b": 1.0, "qwen2.5-coder-1.5b": 2.2}
# A judge call reads the five sources whole where the answer's call reads the selected evidence, so it costs
# several times more: seconds per judge call by judge model, measured by bench/eval_seconds.py
# (bench/results/eval_seconds.json, a test keeps them equal). A judge not listed gets the larger one.
JUDGE_SECONDS_PER_CALL = {"qwen2.5-coder-0.5b": 2.21, "qwen2.5-coder-1.5b": 4.27}
# Those are SQuAD's seconds; other text runs slower (pyenv's and the AWS CLI's docs, the 1.5B and its judge: 33 s a
# question against 15 s planned), so a run that has asked this many questions plans the rest at its own pace.
PACE_MIN_ROWS = 3


class RunMismatch(ValueError):
    """The run folder was written for something else (another strategy, test set, model or format)."""


class RunStopped(RuntimeError):
    """The run stopped before its end (a full disk); the rows it finished are kept."""


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def estimated_calls(strategy: Strategy, item: EvalItem) -> int:
    """LLM calls the pipeline is likely to make for one item: the answer and each LLM step the strategy turns on."""
    f = strategy.features
    per_part = 1 + sum(bool(x) for x in (f.hyde, f.grading and f.grader_backend == "llm", f.hallucination_check, f.multi_hop, f.rewrite and f.rewrite_backend == "llm"))
    parts = max(len(item.parts), 1) if f.decompose else 1
    return per_part * parts


def askable(items: list[EvalItem], known_chunks: set[str] | None) -> list[EvalItem]:
    """The items a run asks: not those naming a chunk the index no longer holds (counted apart, never scored)."""
    return [it for it in items if not (it.chunks and known_chunks is not None and not set(it.chunks) <= known_chunks)]


def estimated_seconds(model: str, judge: str | None, calls: int, judge_calls: int, seconds_per_call: float | None = None) -> float:
    """Roughly how long ``calls`` of the pipeline's model and ``judge_calls`` of the judge (its run label) take on 2 cores,
    each at its model's measured seconds a call (``seconds_per_call``, when given, for both)."""
    per_call = seconds_per_call or SECONDS_PER_CALL.get(model, max(SECONDS_PER_CALL.values()))
    per_judge_call = JUDGE_SECONDS_PER_CALL.get(judge_model_of(judge), max(JUDGE_SECONDS_PER_CALL.values())) if judge else 0.0
    return calls * per_call + judge_calls * (seconds_per_call or per_judge_call)


def duration_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


@dataclass
class Plan:
    items: int
    skipped_missing_chunks: int
    already_done: int
    llm_calls: int
    seconds: float
    paced_on: int = 0  # the run's own rows the seconds were paced on (0: the measured seconds per call)

    def text(self) -> str:
        left = self.items - self.already_done
        pace = f"at this run's pace so far ({self.paced_on} questions)" if self.paced_on else "on 2 cores"
        return (f"{left} of {self.items} items to ask ({self.already_done} already in the run, {self.skipped_missing_chunks} skipped: their chunks are gone), "
                f"about {self.llm_calls} LLM calls, roughly {duration_text(self.seconds)} {pace}")


@dataclass
class EvalRun:
    directory: Path
    meta: dict[str, Any]
    items: list[EvalItem]
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing_chunks: list[str] = field(default_factory=list)
    setup_seconds: dict[str, float] = field(default_factory=dict)  # the last execute()'s one-time work, in no row

    @classmethod
    def open(cls, directory: str | Path, strategy: Strategy, config: RagConfig, testset_path: str | Path, items: list[EvalItem],
             known_chunks: set[str] | None = None, limit: int | None = None, judge_model: str | None = None, chat_generator: Any = None) -> "EvalRun":
        """The run in ``directory``: new, or the one there to resume (refused if it measured something else)."""
        directory = Path(directory)
        kept = askable(items, known_chunks)
        asked = {it.id for it in kept}
        missing = [it.id for it in items if it.id not in asked]
        kept = kept[:limit]
        meta = {
            "format": RUN_FORMAT, "ragkit_version": __version__, "git_commit": git_commit(),
            "strategy": {"name": strategy.name, "version": strategy.version, "features": strategy.features.to_dict()},
            "config": config.to_dict(), "model": config.models.llm,
            "model_fingerprint": model_fingerprint(chat_generator) if chat_generator is not None else None,
            "judge_model": judge_model, "testset": {"path": str(testset_path), "sha256": testset_sha256(testset_path), "items": len(items)},
            "limit": limit, "items_measured": len(kept), "skipped_missing_chunks": len(missing), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        run = cls(directory, meta, kept, missing_chunks=missing)
        if (directory / "run.json").exists():
            run._check_same(json.loads((directory / "run.json").read_text(encoding="utf-8")))
            run.done = run._read_rows()
        return run

    def _check_same(self, stored: dict[str, Any]) -> None:
        if stored.get("format") != RUN_FORMAT:
            raise RunMismatch(f"{self.directory} was written by another ragkit run format ({stored.get('format')}, ragkit {stored.get('ragkit_version')}); "
                              "start a new run under another --name")
        for key in ("strategy", "model", "model_fingerprint", "judge_model"):
            if stored.get(key) != self.meta[key]:
                raise RunMismatch(f"{self.directory} measured another {key} ({stored.get(key)!r}, now {self.meta[key]!r}); start a new run under another --name")
        if stored["testset"]["sha256"] != self.meta["testset"]["sha256"]:
            raise RunMismatch(f"{self.directory} measured another test set (sha256 {stored['testset']['sha256'][:12]}…, now "
                              f"{self.meta['testset']['sha256'][:12]}…); start a new run under another --name")
        self.meta["created"] = stored.get("created", self.meta["created"])

    def _read_rows(self) -> dict[str, dict[str, Any]]:
        path = self.directory / "rows.jsonl"
        if not path.exists():
            return {}
        raw = path.read_bytes()
        complete = raw[: raw.rfind(b"\n") + 1]
        if len(complete) != len(raw):  # killed in the middle of a line: that row was never finished
            with open(path, "r+b") as fh:
                fh.truncate(len(complete))
        rows = [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]
        return {r["id"]: r for r in rows}

    def plan(self, seconds_per_call: float | None = None) -> Plan:
        strategy = Strategy(self.meta["strategy"]["name"], self.meta["strategy"]["version"], self._features())
        left = [it for it in self.items if it.id not in self.done]
        judge = self.meta["judge_model"]
        judge_calls = calls_per_answer(judge) * len(left)
        calls = sum(estimated_calls(strategy, it) for it in left)
        done, pace = self._pace()
        if pace is None or seconds_per_call is not None:
            done, seconds = 0, estimated_seconds(self.meta["model"], judge, calls, judge_calls, seconds_per_call)
        else:
            seconds = pace * len(left)
        return Plan(len(self.items), len(self.missing_chunks), len(self.items) - len(left), calls + judge_calls, seconds, done)

    def _pace(self) -> tuple[int, float | None]:
        """(rows, mean seconds a row: the answer's and the judge's) over the rows this run has, or (0, None) when
        they are under :data:`PACE_MIN_ROWS` or were written without the judge's seconds."""
        rows = [r for r in self.done.values() if r.get("seconds") is not None]
        if len(rows) < PACE_MIN_ROWS or (self.meta["judge_model"] and not any("judge_seconds" in r for r in rows)):
            return 0, None
        return len(rows), sum(r["seconds"] + r.get("judge_seconds", 0.0) for r in rows) / len(rows)

    def _features(self):
        from ragkit.pipeline.features import Features

        return Features.from_dict(self.meta["strategy"]["features"])

    def execute(self, rag: Any, judge: Any = None, embed: Callable | None = None, cache: LLMCache | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Ask every item not yet in the run, score and append each row; returns the summary."""
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(self.directory / "run.json", self.meta)
        k = rag.features.top_k
        known = set(rag.index.chunks) if getattr(rag, "index", None) is not None else None
        # each chunk's file, for items that name only the file they are about (a user's own labelled questions)
        chunk_files = {cid: (doc.meta or {}).get("source") for cid, doc in rag.index.chunks.items()} if known is not None else None
        # model loads and the reranker's sentence vectors, before the first row is timed: in it they made a
        # reranked run's p95 15 s longer on 12 questions of a folder of docs
        pending = any(item.id not in self.done for item in self.items)
        self.setup_seconds = rag.prepare_one_time() if pending and hasattr(rag, "prepare_one_time") else {}
        with open(self.directory / "rows.jsonl", "a", encoding="utf-8") as out:
            for item in self.items:
                if item.id in self.done:
                    continue
                # every question from a cold llama.cpp prompt cache: its latency does not depend on the question
                # before it, and a resumed run computes exactly what an uninterrupted one did
                reset_prompt_cache(getattr(rag, "chat_generator", None))
                with llm_cache(cache):
                    result = rag.ask(item.question)
                    row = score_item(item, result, k, judge=judge, embed=embed, known_chunks=known, chunk_sources=chunk_files)
                try:
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise RunStopped(f"the disk is full: {len(self.done)} rows are kept in {self.directory / 'rows.jsonl'}; "
                                         "free some space and run the same command again to go on") from None
                    raise
                self.done[item.id] = row
                if progress:
                    progress(len(self.done), len(self.items))
        summary = self.summary()
        _write_atomically(self.directory / "summary.json", summary)
        return summary

    def rows(self) -> list[dict[str, Any]]:
        return [self.done[it.id] for it in self.items if it.id in self.done]

    def summary(self) -> dict[str, Any]:
        return {"run": self.meta, "aggregates": aggregate(self.rows())}


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_run(directory: str | Path) -> dict[str, Any]:
    """A finished or partial run as ``{"run": meta, "rows": [...], "aggregates": {...}}`` (for reports)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "run.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{directory} is not a ragkit run (no run.json)") from None
    if meta.get("format") != RUN_FORMAT:
        raise RunMismatch(f"{directory} was written by another ragkit run format ({meta.get('format')}); this ragkit reads format {RUN_FORMAT}")
    path = directory / "rows.jsonl"
    lines = [line for line in (path.read_text(encoding="utf-8") if path.exists() else "").splitlines() if line.strip()]
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):  # only the last line may be half-written (a killed run)
                raise ValueError(f"{path}: line {number} is not a row") from None
    return {"run": meta, "rows": rows, "aggregates": aggregate(rows)}
