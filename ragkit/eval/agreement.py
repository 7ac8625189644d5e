"""Do two test sets rank strategies alike? Kendall's tau between their rankings, with how much either can be trusted.

A generated test set is worth using if it orders strategies the way the user's own questions do. Given
finished runs of the same strategies on two test sets (say ``ragkit testset generate``'s set and a
few dozen questions the user labelled), this says, with zero LLM calls:

* per measure — retrieval (MRR against the source chunks) and answers (the share right) — each
  strategy's mean on both sets, and **Kendall's tau-b** between the two rankings
  (``scipy.stats.kendalltau``), with a **bootstrap 95% interval** (each set's questions resampled with
  replacement, the same draw for every strategy, so the strategies stay paired);
* **each ranking's agreement with itself**: one set's questions split at random into halves, tau-b
  between the halves' rankings (median and 5–95 % over 1,000 splits). A ranking whose halves do not
  reliably agree (or whose halves mostly tie every strategy) cannot be told from chance at that size, and
  no other test set can agree with it better than it agrees with itself; then more questions, not another
  test set, is what is needed;
* a verdict in words, by rules fixed before any data was read: the sets rank alike when the interval
  is above 0, in opposite orders when it is below; otherwise there is no evidence they rank alike, and a
  set whose split-half range reaches 0 is named as the reason it cannot tell.

Unanswerable items are left out of both measures (a set of real questions has none to match them). This
is issue 29's acceptance figure (``bench/eval_agreement.py`` reads these functions on SQuAD) made
available for anyone's own two test sets; the bootstrap and split-half loops are written here (a few
lines): scipy has tau-b but no paired resampling of rankings.

Usage::

    result = ranking_agreement([load_run(p) for p in ["runs/gen-plain", "runs/gen-hyde", "runs/mine-plain", "runs/mine-hyde", ...]])
    result["measures"]["retrieval"]["tau"], result["measures"]["retrieval"]["verdict"]

    # or the runs made for it (``ragkit agreement --testsets gen.jsonl mine.csv``): opened here, asked by the caller
    runs = agreement_runs([("gen.jsonl", gen_items), ("mine.csv", my_items)], [resolve(n) for n in ("plain", "rerank", "sparse_only")], "runs", config)
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from statistics import mean
from typing import Any, Callable

from scipy.stats import kendalltau

from ragkit.eval.compare import label
from ragkit.eval.runs import EvalRun
from ragkit.eval.strategies import Strategy, run_label
from ragkit.eval.testset import EvalItem, testset_sha256

Rows = dict[str, list[dict[str, Any]]]  # strategy label -> its run's rows
BOOTSTRAP = 1000
SEED = 29
MIN_STRATEGIES = 3
MIN_ITEMS = 4


def answerable(row: dict[str, Any]) -> bool:
    return row.get("kind") != "unanswerable"


# measure name -> (the row field, which rows count)
MEASURES: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {"retrieval": ("mrr", answerable), "answer": ("correct", answerable)}


def kendall_tau_b(scores_a: dict[str, float], scores_b: dict[str, float]) -> float | None:
    """Tau-b between two rankings of the same strategies; None when one side ties them all (it is undefined)."""
    names = sorted(scores_a)
    value = kendalltau([scores_a[n] for n in names], [scores_b[n] for n in names]).statistic
    return float(value) if value == value else None


def kendall_tau(scores_a: dict[str, float], scores_b: dict[str, float]) -> float:
    """Tau-b, 0 when one side ties every strategy (nothing to agree on)."""
    value = kendall_tau_b(scores_a, scores_b)
    return 0.0 if value is None else value


def writer_label(model: str, question_context: str = "sentence") -> str:
    """A generated set's writer as runs and figures are filed: its model, and ``-passage`` when it read each sentence's
    whole chunk (``generate_testset(question_context="passage")``)."""
    return model if question_context == "sentence" else f"{model}-{question_context}"


def writer_parts(writer: str) -> tuple[str, str]:
    """(model, question_context) of a :func:`writer_label`."""
    return (writer.removesuffix("-passage"), "passage") if writer.endswith("-passage") else (writer, "sentence")


def writer_size(writer: str) -> str:
    """A writer as the tables name it: "qwen2.5-coder-1.5b" -> "1.5B", "qwen2.5-coder-1.5b-passage" -> "1.5B reading whole passages"."""
    model, context = writer_parts(writer)
    return model.split("-")[-1].upper() + (" reading whole passages" if context == "passage" else "")


def tau_text(value: float) -> str:
    """A τ as the tables print it: two decimals, more where two would round it up onto a tenth — the targets are
    tenths (0.6, 0.5), and 0.4975 printed "0.50" reads as meeting one it misses."""
    for places in (2, 3, 4):
        text = f"{value:.{places}f}"
        if not (float(text) > value and text.split(".")[1][1:] == "0" * (places - 1)):
            return text
    return f"{math.floor(value * 10_000) / 10_000:.4f}"  # within 0.00005 under a tenth: cut, never round onto it


def score_table(rows: Rows, measure: str, keep: Callable[[dict[str, Any]], bool]) -> tuple[list[str], dict[str, list[float]]]:
    """The items every strategy scored on ``measure`` (those ``keep`` accepts), and each strategy's values in that order."""
    by_id = {name: {r["id"]: r for r in strategy_rows} for name, strategy_rows in rows.items()}
    ids = sorted(set.intersection(*({i for i, r in table.items() if keep(r) and r.get(measure) is not None} for table in by_id.values())))
    return ids, {name: [float(by_id[name][i][measure]) for i in ids] for name in rows}


def agreement(first: Rows, second: Rows, measure: str, keep_first, keep_second=lambda r: True, seed: int = SEED,
              samples: int = BOOTSTRAP) -> dict[str, Any]:
    """Tau-b between the strategies' means on the two sets, with a bootstrap 95% interval."""
    first_ids, one = score_table(first, measure, keep_first)
    second_ids, two = score_table(second, measure, keep_second)
    result: dict[str, Any] = {"n_first": len(first_ids), "n_second": len(second_ids),
                              "first": {n: round(mean(v), 4) for n, v in one.items() if v}, "second": {n: round(mean(v), 4) for n, v in two.items() if v}}
    if not first_ids or not second_ids:
        return result | {"tau": None, "interval95": None}
    point = kendall_tau({n: mean(v) for n, v in one.items()}, {n: mean(v) for n, v in two.items()})
    rng, draws = random.Random(seed), []
    for _ in range(samples):
        a = [rng.randrange(len(first_ids)) for _ in first_ids]
        b = [rng.randrange(len(second_ids)) for _ in second_ids]
        draws.append(kendall_tau({n: mean(v[i] for i in a) for n, v in one.items()}, {n: mean(v[i] for i in b) for n, v in two.items()}))
    draws.sort()
    return result | {"tau": round(point, 4), "interval95": [round(draws[int(0.025 * samples)], 4), round(draws[int(0.975 * samples) - 1], 4)]}


def split_half(rows: Rows, measure: str, keep, seed: int = SEED, splits: int = BOOTSTRAP) -> dict[str, Any] | None:
    """Tau-b between the rankings of two random halves of one set's questions: median and 5-95 % over ``splits``."""
    ids, values = score_table(rows, measure, keep)
    half = len(ids) // 2
    if half < 1:
        return None
    rng, taus, tied = random.Random(seed), [], 0
    positions = list(range(len(ids)))
    for _ in range(splits):
        rng.shuffle(positions)
        a, b = positions[:half], positions[half:2 * half]
        value = kendall_tau_b({n: mean(v[i] for i in a) for n, v in values.items()}, {n: mean(v[i] for i in b) for n, v in values.items()})
        tied += value is None
        taus.append(0.0 if value is None else value)
    taus.sort()
    return {"median": round(taus[splits // 2], 4), "range90": [round(taus[int(0.05 * splits)], 4), round(taus[int(0.95 * splits) - 1], 4)], "half": half,
            "tied": round(tied / splits, 3)}  # splits where a half tied every strategy (counted as tau 0)


def verdict(figures: dict[str, Any], names: tuple[str, str]) -> str:
    """The figures in words (rules fixed before any data: interval above 0 → alike; a split-half range reaching 0 → noise)."""
    counts = (figures["n_first"], figures["n_second"])
    if min(counts) < MIN_ITEMS:
        short = names[counts.index(min(counts))]
        return f"too few items to rank on {short} ({min(counts)}; at least {MIN_ITEMS})"
    for name, side in zip(names, ("first", "second")):
        if len(set(figures[side].values())) == 1:
            return f"every strategy ties on {name}: nothing to rank"
    low, high = figures["interval95"]
    if low > 0:
        return f"the two test sets rank the strategies alike (τ {figures['tau']:+.2f}, 95% interval {low:+.2f} to {high:+.2f})"
    if high < 0:
        return f"the two test sets rank the strategies in opposite orders (τ {figures['tau']:+.2f}, 95% interval {low:+.2f} to {high:+.2f})"
    halves = {name: figures["split_half"][side] for name, side in zip(names, ("first", "second"))}
    noisy = [name for name, h in halves.items() if h["range90"][0] <= 0]
    reasons = [f"{name}'s halves tie every strategy in {h['tied']:.0%} of splits" if h.get("tied", 0) >= 0.5 else
               f"{name}'s own halves do not reliably agree (split-half τ reaches 0)" for name, h in halves.items() if name in noisy]
    why = (f"; {' and '.join(reasons)}, so at this size {'their rankings' if len(noisy) > 1 else 'its ranking'} cannot be told "
           f"from chance: more questions would tell") if noisy else ""
    return f"no evidence that the two test sets rank the strategies alike (the interval {low:+.2f} to {high:+.2f} covers 0){why}"


def _set_names(groups: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    names = {sha: Path(runs[0]["run"]["testset"]["path"]).name for sha, runs in groups.items()}
    if len(set(names.values())) < len(names):  # two files of one name: tell them apart by their hashes
        names = {sha: f"{name} ({sha[:8]})" for sha, name in names.items()}
    return names


def ranking_agreement(runs: list[dict[str, Any]], seed: int = SEED) -> dict[str, Any]:
    """Runs (:func:`ragkit.eval.runs.load_run`'s dicts) of the same strategies on two test sets → both rankings,
    their tau per measure with its interval, each set's split-half tau, and a verdict. Refused with why when
    the runs are not two test sets, a strategy runs twice on one, or fewer than three strategies ran on both."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(run["run"]["testset"]["sha256"], []).append(run)
    if len(groups) != 2:
        raise ValueError(f"these runs measured {len(groups)} test set{'s' if len(groups) != 1 else ''}; an agreement needs runs on exactly two")
    set_names = _set_names(groups)
    by_set: dict[str, dict[str, dict[str, Any]]] = {}
    for sha, group in groups.items():
        by_set[sha] = {}
        for run in group:
            if label(run) in by_set[sha]:
                raise ValueError(f"two runs of {label(run)} on {set_names[sha]}; give one run per strategy and test set")
            by_set[sha][label(run)] = run
    first, second = sorted(groups, key=lambda sha: set_names[sha])
    common = sorted(set(by_set[first]) & set(by_set[second]))
    left_out = sorted(set(by_set[first]) ^ set(by_set[second]))
    if len(common) < MIN_STRATEGIES:
        raise ValueError(f"{len(common)} strateg{'y' if len(common) == 1 else 'ies'} ran on both test sets; a ranking needs at least {MIN_STRATEGIES}"
                         + (f" (on one set only: {', '.join(left_out)})" if left_out else ""))
    names = (set_names[first], set_names[second])
    rows = [{n: by_set[sha][n]["rows"] for n in common} for sha in (first, second)]
    measures = {}
    for measure, (field, keep) in MEASURES.items():
        figures = agreement(rows[0], rows[1], field, keep, keep, seed=seed)
        figures["split_half"] = {side: split_half(side_rows, field, keep, seed=seed) for side, side_rows in zip(("first", "second"), rows)}
        if figures["tau"] is None:
            empty = names[0] if not figures["n_first"] else names[1]
            figures["verdict"] = f"no {measure} figure: {empty} has no item every strategy scored on {field}" + (
                " (its items name no source chunk)" if field == "mrr" else " (its items have no answer to check against)")
        else:
            figures["verdict"] = verdict(figures, names)
        measures[measure] = figures
    return {"testsets": {"first": names[0], "second": names[1]}, "strategies": common, "left_out": left_out, "measures": measures}


def run_folders(testset_paths: list[str | Path], strategies: list[Strategy], runs_dir: str | Path) -> list[Path]:
    """Where each strategy's run on each of the two test sets goes, ``runs_dir/<test set's file stem>-<its sha256's
    first 8 hex>/<strategy>`` (test set by test set): an edited test set starts new runs instead of being refused
    as another one, and two files of one name do not share folders. Refused (before anything loads) unless there
    are two different test sets and at least three strategies, each once."""
    if len(testset_paths) != 2:
        raise ValueError(f"an agreement needs two test sets, not {len(testset_paths)}")
    hashes = [testset_sha256(path) for path in testset_paths]
    if hashes[0] == hashes[1]:
        raise ValueError(f"{testset_paths[0]} and {testset_paths[1]} hold the same bytes; an agreement needs two different test sets")
    names = [run_label(strategy.name, strategy.version) for strategy in strategies]  # as ranking_agreement groups runs
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} named twice; give each strategy once")
    if len(names) < MIN_STRATEGIES:
        raise ValueError(f"{len(names)} strateg{'y' if len(names) == 1 else 'ies'} given; a ranking needs at least {MIN_STRATEGIES}")
    return [Path(runs_dir) / f"{Path(path).stem}-{sha[:8]}" / name for path, sha in zip(testset_paths, hashes) for name in names]


def agreement_runs(testsets: list[tuple[str | Path, list[EvalItem]]], strategies: list[Strategy], runs_dir: str | Path, config: Any,
                   known_chunks: set[str] | None = None, limit: int | None = None, chat_generator: Any = None) -> list[EvalRun]:
    """Each strategy's run on each of the two test sets (in :func:`run_folders`' folders and order), opened — new, or
    resumed where a stopped command left it — but not asked: the caller asks them (``EvalRun.execute``)."""
    folders = iter(run_folders([path for path, _ in testsets], strategies, runs_dir))
    return [EvalRun.open(next(folders), strategy, config, path, items, known_chunks=known_chunks, limit=limit, chat_generator=chat_generator)
            for path, items in testsets for strategy in strategies]
