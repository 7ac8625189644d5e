"""What ``ragkit report`` prints in a terminal: the runs' measures and each comparison, laid out for 80 columns.

The Markdown report (:func:`ragkit.eval.compare.markdown_report`) has a row a run and a column a measure,
sixteen columns: right for a file or a pull request, but a terminal 80 columns wide folds each of its
rows over several lines and no column lines up. Here, as in notebook 09, the measures go down and the runs
across (runs compared are few, measures many), and a comparison keeps its number columns whole — the
means, B − A, its interval — and gives the rest of the width to the verdict, folded between words.
``ragkit report`` prints this when its output is a terminal and the Markdown otherwise (a pipe, a file,
``--markdown``). The cells are the ones the Markdown and the notebook show
(:func:`~ragkit.eval.compare.aggregate_rows`, :func:`~ragkit.eval.compare.comparison_rows`).

Rendering only: a function of runs (:func:`ragkit.eval.runs.load_run`'s dicts) returning a Rich renderable,
so a test renders them into a console of a fixed width and reads the text.

Usage::

    console.print(report_group([load_run("runs/plain"), load_run("runs/grading")]))
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ragkit.eval.compare import aggregate_rows, cell_text, compare, comparison_rows, flipped_text, not_compared_note, pareto_front, run_names

NUMBERS = {"justify": "right", "no_wrap": True}


def _table(title: str) -> Table:
    # no vertical rules and one space of padding: at 80 columns every character saved goes to the verdict
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 1, 0, 0))


def aggregates_table(runs: list[dict[str, Any]]) -> Table:
    """A measure a row, a run a column; each mean says over how many items it was computed."""
    names = run_names(runs)
    table = _table("Each run")
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


def report_group(runs: list[dict[str, Any]], quality: str = "correct") -> Group:
    """The report :func:`~ragkit.eval.compare.markdown_report` writes, for a terminal: ``console.print(report_group(runs))``."""
    names = run_names(runs)
    testset = runs[0]["run"]["testset"]
    parts: list[Any] = [
        Text.assemble(("ragkit report: ", "bold"), ", ".join(names)),
        Text(f"test set {testset['path']} (sha256 {testset['sha256'][:12]}); model {runs[0]['run']['model']}"),
        Text(""),
        aggregates_table(runs),
        Text(f"Pareto front ({quality} vs p50 latency): {', '.join(pareto_front(runs, quality)) or '–'}"),
    ]
    for name, run in zip(names[1:], runs[1:]):
        result = compare(runs[0], run)
        parts += [Text(""), comparison_table(result, (names[0], name))]
        if note := not_compared_note(result):
            parts.append(Text(f"{note}, whose scores are on different scales.", style="dim"))
        parts.append(Text(f"{flipped_text(result)} (notebook 09 shows each, with both answers)."))
    return Group(*parts)
