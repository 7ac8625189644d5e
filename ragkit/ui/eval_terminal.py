"""What the evaluation commands print in a terminal, laid out for 80 columns: ``ragkit report``'s runs and
comparisons, ``ragkit eval``'s run, ``ragkit tune``'s candidates and progress, ``ragkit agreement``'s rankings,
``ragkit strategies list``.

The Markdown report (:func:`ragkit.eval.compare.markdown_report`) has a row a run and a column a measure,
sixteen columns: right for a file or a pull request, but a terminal 80 columns wide folds each of its
rows over several lines and no column lines up. Here, as in notebook 09, the measures go down and the runs
across (runs compared are few, measures many), and a comparison keeps its number columns whole — the
means, B − A, its interval — and gives the rest of the width to the verdict, folded between words.
``ragkit report`` prints this when its output is a terminal and the Markdown otherwise (a pipe, a file,
``--markdown``). The cells are the ones the Markdown and the notebook show
(:func:`~ragkit.eval.compare.aggregate_rows`, :func:`~ragkit.eval.compare.comparison_rows`).

Rendering only (but :class:`RunBars`, tqdm bars a run, and :class:`GenerationBar`, the questions a generation kept): a function of runs (:func:`ragkit.eval.runs.load_run`'s dicts) returning a Rich renderable,
so a test renders them into a console of a fixed width and reads the text.

Usage::

    console.print(report_group([load_run("runs/plain"), load_run("runs/grading")]))
"""

from __future__ import annotations

import sys
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ragkit.eval.compare import (aggregate_rows, cell_text, compare, comparison_rows, flipped_text, measure_cell, report_notes,
                                 not_compared_note, pareto_front, run_names)
from ragkit.ui.text_safety import visible

NUMBERS = {"justify": "right", "no_wrap": True}


def _table(title: str) -> Table:
    # no vertical rules and one space of padding: at 80 columns every character saved goes to the verdict
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 1, 0, 0))


def aggregates_table(runs: list[dict[str, Any]], title: str = "Each run") -> Table:
    """A measure a row, a run a column; each mean says over how many items it was computed."""
    names = run_names(runs)
    table = _table(title)
    table.add_column("measure", no_wrap=True)
    for name in names:
        table.add_column(Text(name), justify="right")  # "0.476 (n=40, 1 failed)" may fold after the mean
    for row in aggregate_rows(runs):
        table.add_row(Text(row["measure"]), *(Text(cell_text(row[n])) for n in names))
    return table


def comparison_table(result: dict[str, Any], names: tuple[str, str]) -> Table:
    """One measure a row: n, both means, B − A and its 95% interval whole; the verdict folds between words.
    The means' columns are headed A and B (named in the title): a strategy's name over a five-character
    number would take the verdict's room or be cut."""
    table = _table(f"{names[1]} (B) vs {names[0]} (A): {result['questions_in_both']} questions in both")
    table.add_column("measure", no_wrap=True)
    for header in ("n", "A", "B", "B − A", "95% interval"):
        table.add_column(header, **NUMBERS)
    table.add_column("verdict", ratio=1, min_width=12)
    for row in comparison_rows(result, names):
        table.add_row(*(Text(str(v)) for v in row.values()))
    return table


def _report_notes(runs: list[dict[str, Any]]) -> list[Text]:
    return [Text(note, style="dim") for note in report_notes(runs)]


def run_summary(run: dict[str, Any], where: str) -> Group:
    """What ``ragkit eval`` prints when a run is done: where it is, then its measures a row each (on one
    line they wrapped over four at 80 columns, a number parted from its measure)."""
    return Group(Text.assemble((visible(where), "bold"), f": {run['aggregates']['rows']} rows"),
                 aggregates_table([run], title=""), *_report_notes([run]))


def report_group(runs: list[dict[str, Any]], quality: str = "correct") -> Group:
    """The report :func:`~ragkit.eval.compare.markdown_report` writes, for a terminal: ``console.print(report_group(runs))``."""
    names = run_names(runs)
    testset = runs[0]["run"]["testset"]
    parts: list[Any] = [
        Text.assemble(("ragkit report: ", "bold"), ", ".join(names)),
        Text(f"test set {visible(testset['path'])} (sha256 {testset['sha256'][:12]}); model {runs[0]['run']['model']}"),
        Text(""),
        aggregates_table(runs),
        *_report_notes(runs),
        Text(f"Pareto front ({quality} vs p50 latency): {', '.join(pareto_front(runs, quality)) or '–'}"),
    ]
    for name, run in zip(names[1:], runs[1:]):
        parts += [Text(""), *_comparison_parts(compare(runs[0], run), (names[0], name), " (notebook 09 shows each, with both answers).")]
    return Group(*parts)


def _comparison_parts(result: dict[str, Any], names: tuple[str, str], flipped_tail: str = ".") -> list[Any]:
    """One comparison as a report shows it: the table, what was left out and why, how many questions flipped."""
    parts: list[Any] = [comparison_table(result, names)]
    if note := not_compared_note(result):
        parts.append(Text(f"{note}, whose scores are on different scales.", style="dim"))
    return parts + [Text(f"{flipped_text(result)}{flipped_tail}")]


def tuning_table(report: dict[str, Any]) -> Table:
    """Every candidate on the tuning half, best first: its quality (over how many questions), p50 seconds, and
    whether it was chosen, is on the Pareto front or went over the latency budget — why the choice is what it is."""
    quality = report["quality"]
    table = _table("")  # its title is a line above it: a title wraps at the table's width, narrower than the terminal's
    table.add_column("strategy", ratio=2, min_width=12)  # a searched strategy's name runs to 60 characters: it folds at its "+"
    table.add_column(quality, justify="right", no_wrap=True)
    table.add_column("p50 s", **NUMBERS)
    table.add_column("", ratio=1, min_width=12)
    front = set(report["pareto_front"])

    def order(item):
        q, t = item[1][quality], item[1]["p50_s"]
        return (q is None, -(q or 0.0), t if t is not None else float("inf"))

    for name, entry in sorted(report["tuning_half"].items(), key=order):
        mean = measure_cell({quality: {"mean": entry[quality], "n": entry["n"], "failed": entry["failed"]}}, quality)
        marks = (["chosen"] if name == report["chosen"] else []) + (["Pareto front"] if name in front else []) \
            + ([] if entry["within_budget"] else ["over the budget"])
        table.add_row(Text(name.replace("+", " + ")), Text(mean or "–"), Text(cell_text(entry["p50_s"])),
                      Text(" · ".join(marks), style="bold" if name == report["chosen"] else ""))
    return table


def tune_group(report: dict[str, Any]) -> Group:
    """What ``ragkit tune`` prints: the candidates on the tuning half, then the chosen strategy against the
    baseline on the other half — the figure to believe, since the tuning half's own are biased up by the choice."""
    result, names = report["report_half"], (report["baseline"], report["chosen"])
    budget = report["latency_budget_s"]
    within = f", latency budget {budget:g} s p50" if budget is not None else ""
    search = report["search"]
    searched = (f"{search['trials']} trials of Optuna's TPE sampler over {search['space_size']} combinations, {search['strategies_run']} "
                f"strategies run" if search["method"] != "exhaustive" else f"every one of {search['space_size']} strategies run")
    parts: list[Any] = [Text(f"Tuning half ({report['halves']['tuning']} questions): {report['quality']} and p50 seconds{within}", style="bold"),
                        Text(f"Searched: {searched}."), tuning_table(report), Text("")]
    if names[0] == names[1]:
        parts.append(Text(f"{names[0]} was chosen: it is the baseline, so there is nothing to compare on the reporting half "
                          f"({report['halves']['reporting']} questions)."))
    else:
        parts += [Text(f"On the reporting half ({report['halves']['reporting']} questions), the figures to believe:", style="bold"),
                  *_comparison_parts(result, names)]
    return Group(*parts)


def _ranked(means: dict[str, float]) -> dict[str, str]:
    """'0.722 #2': a strategy's mean and its rank on that set (tied means share a rank)."""
    return {n: f"{v:.3f} #{1 + sum(1 for m in means.values() if m > v)}" for n, v in means.items()}


MEASURE_TITLES = {"retrieval": "Retrieval: MRR against each question's source (its chunks, or its file)", "answer": "Answers: share right"}


def agreement_group(result: dict[str, Any]) -> Group:
    """What ``ragkit agreement`` prints: per measure, each strategy's mean and rank on both test sets, the tau between the
    rankings with its interval, each set's agreement with itself, and the verdict in words."""
    names = result["testsets"]["first"], result["testsets"]["second"]
    parts: list[Any] = [Text.assemble(("ragkit agreement: ", "bold"), f"do {visible(names[0])} and {visible(names[1])} rank the strategies alike?")]
    if result["left_out"]:
        parts.append(Text(f"Left out (run on one test set only): {visible(', '.join(result['left_out']))}", style="dim"))
    for measure, figures in result["measures"].items():
        parts += [Text(""), Text(MEASURE_TITLES.get(measure, measure), style="bold")]
        if figures["tau"] is not None:
            table = _table("")
            table.add_column("strategy", ratio=1, min_width=12)
            for name in names:
                table.add_column(Text(visible(name)), justify="right", ratio=1, min_width=12)
            cells = [_ranked(figures[side]) for side in ("first", "second")]
            for strategy in result["strategies"]:
                table.add_row(Text(visible(strategy)), *(Text(side.get(strategy, "–")) for side in cells))
            low, high = figures["interval95"]
            halves = [f"{name} {h['median']:+.2f} (90% of splits {h['range90'][0]:+.2f} to {h['range90'][1]:+.2f}, halves of {h['half']}"
                      + (f"; a half ties every strategy in {h['tied']:.0%} of splits" if h.get("tied") else "") + ")"
                      for name, h in zip(names, (figures["split_half"]["first"], figures["split_half"]["second"])) if h]
            parts += [table, Text(f"τ {figures['tau']:+.2f}, 95% interval {low:+.2f} to {high:+.2f}, over {figures['n_first']} and {figures['n_second']} items"),
                      Text(f"Each set against itself (split-half τ): {'; '.join(halves)}", style="dim")]
        verdict = visible(figures["verdict"])  # it names the test sets' files
        parts.append(Text(verdict[:1].upper() + verdict[1:] + ".", style="bold"))  # capitalize() would lower a file's name
    return Group(*parts)


def strategies_table(strategies: list[Any]) -> Table:
    """``ragkit strategies list``: each strategy's name, version and what it changes from plain RAG; a long list of
    changes folds under its own column at 80 columns, not under the names."""
    from ragkit.pipeline.features import Features

    default = Features().to_dict()
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")
    table.add_column("strategy", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("what it turns on or sets (the rest as plain RAG)", ratio=1)
    for strategy in strategies:
        changed = [k if v is True else f"{k}={v}" for k, v in strategy.features.to_dict().items() if v != default[k]] or ["plain RAG"]
        table.add_row(Text(visible(strategy.label)), Text(visible(strategy.version)), Text(visible(", ".join(changed))))
    return table


class RunBars:
    """One progress bar a run, for a command that runs several in turn (``ragkit tune``): ``bars(what, done, total)``
    closes the last run's bar when another run starts. A run of 50 questions is minutes of LLM calls; its name
    alone printed nothing until it was over."""

    LONGEST_DESC = 36  # leaves a bar half of 80 columns

    def __init__(self, quiet: bool = False):
        self.quiet, self.what, self.bar = quiet, None, None

    def __call__(self, what: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if what != self.what:
            self.close()
            desc = what
            if len(what) > self.LONGEST_DESC:  # a searched strategy's long name: on its own line, not squeezing the bar to nothing
                if not self.quiet:
                    tqdm.write(what, file=sys.stderr)
                desc = what.split(":")[0]
            self.what, self.bar = what, tqdm(total=total, initial=done, desc=desc, disable=self.quiet)
        else:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.what, self.bar = None, None


class GenerationBar:
    """A bar of the questions a test set generation has kept, for ``generate_testset(progress=bar)``: its total
    is what the generator says it needs (singles also make the two-part and unanswerable items, so it can be
    more than the items asked for; a bar of ``n`` ran past its end as "7/?"), with the candidates tried beside it.
    A terminal bar in a terminal, a widget in a notebook (``tqdm.auto``)."""

    def __init__(self, desc: str = "questions kept", quiet: bool = False):
        from tqdm.auto import tqdm

        self.tried, self.bar = 0, tqdm(desc=desc, unit="q", disable=quiet)

    def __call__(self, kept: int, needed: int) -> None:
        self.tried += 1
        if self.bar.total != needed:  # known at the first candidate; reset() also widens a notebook's unknown-total stub
            self.bar.reset(total=needed)
        self.bar.set_postfix_str(f"{self.tried} tried", refresh=False)
        self.bar.update(kept - self.bar.n)

    def close(self) -> None:
        self.bar.close()

