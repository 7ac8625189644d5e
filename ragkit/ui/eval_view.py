"""What notebook 09 shows of an evaluation on your own documents: the generated test set, the report with its
intervals, the quality-vs-latency plot, and the questions that flipped — and the lab that does it with widgets.

The tables and figures are pure functions of test items, runs (:func:`ragkit.eval.runs.load_run`'s dicts)
and comparisons (:func:`ragkit.eval.compare.compare`), so a test checks what the notebook shows; every value
is escaped (:func:`ragkit.ui.html.table_html`). :class:`EvalLab` wires them to controls: a folder, how many
questions, Generate (with a progress bar), two strategies, Run, the report, and a list of flipped questions
where choosing one shows both answers and the sources each was written from.

Usage::

    lab = EvalLab(folder="sample_docs", index_dir=".ragkit/eval_index", config=config)
    lab.widget                       # in a notebook cell
    lab.generate(12); lab.run("plain", "grading"); lab.show_flip(0)    # what the buttons do
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragkit.eval.agreement import tau_text, writer_size
from ragkit.eval.compare import (aggregate_rows, compare, comparison_rows, label, not_compared_note, pareto_front, report_notes,
                                 quality_and_latency, run_names)
from ragkit.ui import plots
from ragkit.ui.html import table_html
from ragkit.ui.text_safety import html_text

MEASURES = ("recall@k", "mrr", "f1", "correct", "faithfulness", "context_relevance", "correct_decline", "false_decline")


def generation_html(summary: dict[str, Any]) -> str:
    rows = [{"kind": kind, "in the set": e["in_set"], "candidates": e["candidates"], "passed": f"{e['accepted']} ({e['acceptance']:.0%})",
             # in words, most first, as `ragkit testset generate` prints them ("refers to its text 5", not "refers_to_its_text 5")
             "rejected": ", ".join(f"{r.replace('_', ' ')} {n}" for r, n in sorted(e["rejected"].items(), key=lambda rn: -rn[1])) or "–"}
            for kind, e in summary["by_kind"].items()]
    head = (f"<p>{summary['accepted']} items from {summary['questions_tried']} questions tried ({summary['requested']} asked for), "
            f"{summary['llm_calls']} LLM calls, {summary['cache_hits']} from the cache, {summary['seconds']:.0f} s</p>")
    return head + table_html(rows)


def items_html(items: list[Any], n: int = 8) -> str:
    return table_html([{"kind": it.kind, "question": it.question, "answer": " | ".join(it.answers) or "(decline)"} for it in items[:n]])


NOTE_STYLE = "font-size:0.85em;color:#666;margin-top:4px"


def aggregates_html(runs: list[dict[str, Any]]) -> str:
    """Each run's aggregates, a measure a row and a run a column: ten measures side by side would run
    past the notebook at laptop width, while runs compared are few."""
    notes = "".join(f"<div style='{NOTE_STYLE}'>{html_text(note)}</div>" for note in report_notes(runs))  # as ragkit report says them
    return table_html(aggregate_rows(runs, MEASURES)) + notes


def comparison_html(result: dict[str, Any], names: tuple[str, str]) -> str:
    head = f"<p><b>{html_text(names[1])} vs {html_text(names[0])}</b>, {result['questions_in_both']} questions in both; {len(result['flipped'])} flipped between right and wrong</p>"
    note = not_compared_note(result)  # as ragkit report says it
    if note:
        note = f"<div style='{NOTE_STYLE}'>{html_text(note)}, whose scores are on different scales</div>"
    return head + table_html(comparison_rows(result, names)) + (note or "")


def quality_latency_figure(runs: list[dict[str, Any]], quality: str = "correct", ax=None, title: str = "quality vs latency"):
    """Each run a point (p50 seconds, quality); the Pareto front joined by a line."""
    fig, ax = plots.axes(ax, (6, 3.2))
    front = set(pareto_front(runs, quality))
    points = [(label(r), *quality_and_latency(r, quality)) for r in runs]
    points = [(n, q, t) for n, q, t in points if q is not None and t is not None]
    for name, q, t in points:
        ax.scatter([t], [q], color="#2b7bb9" if name in front else "#999999", zorder=3)
        ax.annotate(name, (t, q), textcoords="offset points", xytext=(5, 4), fontsize=8)
    line = sorted((t, q) for n, q, t in points if n in front)
    if len(line) > 1:
        ax.plot([t for t, _ in line], [q for _, q in line], color="#2b7bb9", linewidth=1, label="Pareto front")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("p50 seconds per question")
    ax.set_ylabel(quality)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return fig


def per_kind_figure(runs: list[dict[str, Any]], measure: str = "correct", ax=None, title: str | None = None):
    """``measure`` per kind of question, one bar per run."""
    fig, ax = plots.axes(ax, (6, 3.2))
    kinds = sorted({k for r in runs for k in (r["aggregates"].get("by_kind") or {})}) or ["all"]
    width = 0.8 / max(len(runs), 1)
    for i, run in enumerate(runs):
        by_kind = run["aggregates"].get("by_kind") or {"all": run["aggregates"]}
        values = [((by_kind.get(k) or {}).get(measure) or {}).get("mean") or 0.0 for k in kinds]
        ax.bar([x + i * width for x in range(len(kinds))], values, width=width, label=label(run))
    ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(kinds))], kinds, fontsize=8)
    ax.set_ylabel(measure)
    ax.set_ylim(0, 1)
    ax.set_title(title or f"{measure} by kind of question", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def flip_html(flip: dict[str, Any], names: tuple[str, str], index: Any = None) -> str:
    """One flipped question: the gold answer, both answers (right or wrong), and each one's sources."""
    def sources(ids: list[str] | None) -> str:
        if not ids:
            return "<i>no sources</i>"
        chunks = getattr(index, "chunks", {}) if index is not None else {}
        items = []
        for i, doc_id in enumerate(ids[:3], 1):
            doc = chunks.get(doc_id)
            text = " ".join(((doc.content if doc else "") or "").split())[:220]
            items.append(f"<li>[{i}] {html_text(str(doc.meta.get('source') if doc else doc_id))}: {html_text(text)}…</li>")
        return "<ul>" + "".join(items) + "</ul>"

    verdict = lambda ok: "✔ right" if ok else "✘ wrong"  # noqa: E731
    return (f"<p><b>{html_text(flip['question'])}</b><br/>gold: {html_text(' | '.join(flip.get('gold') or []) or '(decline)')}</p>"
            f"<p>{html_text(names[0])} ({verdict(flip['a_correct'])}): {html_text(flip['a'])}</p>{sources(flip.get('a_sources'))}"
            f"<p>{html_text(names[1])} ({verdict(flip['b_correct'])}): {html_text(flip['b'])}</p>{sources(flip.get('b_sources'))}")


class EvalLab:
    """Generate a test set from a folder, run two strategies on it, read the report and the flips."""

    def __init__(self, folder: str | Path = "sample_docs", index_dir: str | Path = ".ragkit/eval_index", config: Any = None,
                 runs_dir: str | Path = ".ragkit/eval_runs", chat_generator: Any = None, cache: Any = None, judge: Any = None,
                 writer: Any = None):
        import ipywidgets as widgets

        from ragkit.config import RagConfig
        from ragkit.eval.strategies import BUILTIN

        self.config = config or RagConfig()
        self.index_dir, self.runs_dir, self.cache, self.judge = Path(index_dir), Path(runs_dir), cache, judge
        self._llm, self.index, self.items, self.runs, self.comparison = chat_generator, None, [], [], None
        self._writer = writer  # the test set's writer (default: the strategies' model); notebook 09 passes the 1.5B
        layout = widgets.Layout(width="auto")
        self.folder = widgets.Text(value=str(folder), description="folder", layout=widgets.Layout(width="320px"))
        self.n = widgets.IntSlider(value=12, min=4, max=60, step=2, description="questions", layout=widgets.Layout(width="320px"))
        self.generate_button = widgets.Button(description="Generate", button_style="primary", layout=layout)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="", layout=widgets.Layout(width="220px"))
        self.strategy_a = widgets.Dropdown(options=list(BUILTIN), value="plain", description="A", layout=widgets.Layout(width="200px"))
        self.strategy_b = widgets.Dropdown(options=list(BUILTIN), value="grading", description="B", layout=widgets.Layout(width="200px"))
        self.run_button = widgets.Button(description="Run", button_style="primary", layout=layout, disabled=True)
        self.status = widgets.HTML()
        self.test_set = widgets.Output()
        self.report = widgets.Output()
        self.flips = widgets.Dropdown(options=[], description="flipped", layout=widgets.Layout(width="95%"))
        self.flip = widgets.Output()
        self.generate_button.on_click(lambda _: self._guarded(lambda: self.generate(self.n.value)))
        self.run_button.on_click(lambda _: self._guarded(lambda: self.run(self.strategy_a.value, self.strategy_b.value)))
        self.flips.observe(lambda change: change["new"] is not None and self.show_flip(change["new"]), names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.folder, self.n, self.generate_button, self.progress], layout=widgets.Layout(flex_flow="row wrap")),
            self.test_set,
            widgets.HBox([self.strategy_a, self.strategy_b, self.run_button], layout=widgets.Layout(flex_flow="row wrap")),
            self.status, self.report, self.flips, self.flip,
        ], layout=widgets.Layout(width="100%"))

    def _guarded(self, work) -> None:
        try:
            work()
        except Exception as exc:  # a click must say what went wrong, not leave a traceback in the log
            self.status.value = f"<b style='color:#d1495b'>{html_text(type(exc).__name__)}: {html_text(str(exc)[:300])}</b>"

    def _generator(self):
        if self._llm is None:
            from ragkit.llm.generators import build_chat_generator

            self._llm = build_chat_generator(self.config.models)
        return self._llm

    def generate(self, n: int) -> list[Any]:
        from IPython.display import HTML, display

        from ragkit.eval.generate import generate_testset
        from ragkit.index.indexer import build_index
        from ragkit.index.stores import load_index
        from ragkit.llm.cache import llm_cache

        self.status.value = f"indexing {html_text(self.folder.value)} …"
        build_index(self.folder.value, self.index_dir, self.config, progress=False)
        self.index = load_index(self.config.store or self.index_dir)
        self.progress.max, self.progress.value = n, 0

        def step(done: int, total: int) -> None:
            self.progress.max, self.progress.value = total, done

        self.status.value = f"writing {n} questions from {len(self.index)} chunks …"
        with llm_cache(self.cache):
            self.items, report = generate_testset(self.index, self._writer or self._generator(), n=n, progress=step)
        self.testset_path = self.runs_dir / "testset.jsonl"
        from ragkit.eval.testset import save_testset

        save_testset(self.items, self.testset_path)
        self.test_set.clear_output(wait=True)
        with self.test_set:
            display(HTML(generation_html(report.summary()) + items_html(self.items)))
        self.run_button.disabled = not self.items
        self.status.value = f"{len(self.items)} questions ready: pick two strategies and press Run"
        return self.items

    def run(self, a: str, b: str) -> dict[str, Any]:
        from ragkit.eval.runs import EvalRun
        from ragkit.eval.strategies import resolve
        from ragkit.eval.testset import testset_sha256
        from ragkit.pipeline.engine import AgenticRAG

        self.runs = []
        for name in (a, b):
            self.status.value = f"running {html_text(name)} on {len(self.items)} questions …"
            strategy = resolve(name)
            folder = self.runs_dir / testset_sha256(self.testset_path)[:12] / name  # a new test set, new runs
            evaluation = EvalRun.open(folder, strategy, self.config, self.testset_path, self.items, known_chunks=set(self.index.chunks),
                                      judge_model=getattr(self.judge, "label", None), chat_generator=self._generator())
            evaluation.execute(AgenticRAG(strategy.features, config=self.config, index=self.index, chat_generator=self._generator()), judge=self.judge, cache=self.cache)
            self.runs.append({"run": evaluation.meta, "rows": evaluation.rows(), "aggregates": evaluation.summary()["aggregates"]})
        self._show_runs()
        self.status.value = f"done: {len(self.comparison['flipped'])} questions flipped between {html_text(a)} and {html_text(b)}"
        return self.comparison

    def _show_runs(self) -> None:
        from IPython.display import HTML, display

        from ragkit.ui.panel import display_figure

        self.comparison = compare(*self.runs)
        names = tuple(run_names(self.runs))  # the same strategy twice: "plain (1)" and "plain (2)", two columns
        self.report.clear_output(wait=True)
        with self.report:
            display(HTML(aggregates_html(self.runs) + comparison_html(self.comparison, names)))
            display_figure(quality_latency_figure(self.runs))
        self.flips.options = [(f"{f['question'][:90]}", i) for i, f in enumerate(self.comparison["flipped"])]
        self.flips.value = None

    def show(self, items: list[Any], index: Any, runs: list[dict[str, Any]], testset_path: str | Path) -> None:
        """Start from a test set and two runs made outside the lab (a notebook's cells above it)."""
        from IPython.display import HTML, display

        self.items, self.index, self.runs, self.testset_path = items, index, runs, Path(testset_path)
        self.test_set.clear_output(wait=True)
        with self.test_set:
            display(HTML(items_html(items)))
        self.run_button.disabled = False
        # the pickers name the runs shown below them, so Run without a change repeats what is on screen
        for picker, run in zip((self.strategy_a, self.strategy_b), runs):
            name = run["run"]["strategy"]["name"]
            if name in picker.options:
                picker.value = name
        self._show_runs()
        self.status.value = f"{len(items)} questions, {label(runs[0])} vs {label(runs[1])}: pick a flipped question, or Generate and Run again"

    def show_flip(self, i: int) -> str:
        from IPython.display import HTML, display

        text = flip_html(self.comparison["flipped"][i], tuple(run_names(self.runs)), self.index)
        self.flip.clear_output(wait=True)
        with self.flip:
            display(HTML(text))
        return text


def agreement_html(data: dict[str, Any]) -> str:
    """``bench/results/eval_agreement.json``: per set, how well a generated test set ranks strategies like real questions —
    one row per measurement (the first run, the same set against a larger real draw, a set another model wrote), so the
    notebook shows every committed figure and not only each set's first."""
    def tau(e: dict[str, Any], which: str) -> str:
        low_high = (e.get("kendall_tau_interval95") or {}).get(which)
        return tau_text(e["kendall_tau"][which]) + (f" [{low_high[0]:.2f}, {low_high[1]:.2f}]" if low_high else "")

    def larger(e: dict[str, Any]) -> str:
        more = e.get("larger_judge")  # the judge alone on a larger real set, beside the first run's figure
        if not more:
            return "–"
        other = more.get("judge_task", "correct") != e.get("judge_task", "correct")  # read by another faithfulness task
        return f"{more['judge_auc']:.2f} on {more['real_questions']}" + (" *" if other else "")

    def written(e: dict[str, Any]) -> str:
        size = writer_size(e.get("writer_model", e["model"]))  # no writer_model: the answering model wrote it
        return f"{size}, {e['generated']['accepted']} of {e['generated']['requested']}"

    sets = data.get("sets") or {}
    if not sets:
        return "<i>no committed agreement run yet (bench/eval_agreement.py)</i>"
    # short cells, the judge in the set's first row and what is the same for every set in the note under the
    # table: the table must fit the notebook at laptop width beside the file browser
    with_larger = any(e.get("larger_judge") for e in sets.values())
    rows, itself = [], []
    for name, e in sets.items():
        judge = {"judge AUC": "–" if e["judge_auc"] is None else f"{e['judge_auc']:.2f}",  # a run whose judge scored nothing
                 **({"judge, larger set": larger(e)} if with_larger else {})}
        measured = [(e, e), *([(e, e["larger_real"])] if e.get("larger_real") else []),
                    *((other, other) for by_size in e.get("by_writer", {}).values() for other in by_size.values())]
        for i, (generated_by, figures) in enumerate(measured):
            rows.append({"set": name, "generated set": written(generated_by), "real": figures["real_questions"],
                         "τ retrieval [95% CI]": tau(figures, "retrieval"), "τ answers [95% CI]": tau(figures, "answer"),
                         **(judge if i == 0 else dict.fromkeys(judge, ""))})
        most = max((f for _, f in measured), key=lambda f: f["real_questions"])
        half = ((most.get("split_half_tau") or {}).get("answer") or {}).get("real")
        if half:
            itself.append(f"{name}'s {most['real_questions']}: {half['median']:.2f}")
    counts = sorted({len(e["strategies"]) for e in sets.values()})
    note = (f"{' or '.join(map(str, counts))} strategies ranked on each set's generated and real questions; \"generated set\": "
            "the model that wrote it and how many items it kept. Rows of one set share its paragraphs; a larger real draw keeps the first one's questions.")
    if itself:
        note += (" How far the real questions' answer ranking agrees with itself (split-half τ, median) — "
                 + "; ".join(itself) + ": a low one says that order is mostly noise at that size, and no test set can agree with noise.")
    if with_larger and any(r.get("judge, larger set", "").endswith("*") for r in rows):
        note += (" * the judge's faithfulness there is P(yes) to \"is this answer correct?\" times the judge's own likelihood"
                 " of the answer (the default since it was chosen on dev questions); the other judge figures are P(yes) alone.")
    return table_html(rows) + f"<div style='font-size:0.85em;margin-top:0.3em'>{html_text(note)}</div>"


# -- confidence on the user's text (ragkit calibrate) -----------------------------------------------------
def confidence_refit_figure(rag: Any, items: list, model: str, measured: Path) -> tuple[Any, str]:
    """The before/after reliability diagram of ``ragkit calibrate``: recalibrated on ``items`` when they hold enough
    answerable questions (out-of-fold, as the command reports it), else the committed measurement in
    ``measured`` (``bench/calibration_refit.py refit``: fitted on generated new_wiki questions, scored on gold ones).
    Returns the figure and a sentence saying which it is."""
    import json

    from ragkit.eval.refit import MIN_ROWS, collect_rows, offset_interval_text, refit

    answerable = [it for it in items if it.answerable and it.answers]
    if len(answerable) >= MIN_ROWS:
        outcome = refit(collect_rows(rag, answerable), model, agentic=False)
        pairs = {"shipped fit": outcome["before"]["pairs"], "recalibrated on your test set": outcome["after"]["pairs"]}
        offset = outcome["offset"]["logit"]
        caption = (f"Your test set: {outcome['scored']} questions, {outcome['right']:.0%} right; 'recalibrated' is out of fold (each question "
                   f"scored by a fit that never saw its chunk). ECE {outcome['before']['ece']:.3f} → {outcome['after']['ece']:.3f}, "
                   f"ROC AUC {outcome['before']['auc']:.3f} → {outcome['after']['auc']:.3f}."
                   + (f" The saved fit includes the generated-question offset ({offset:+.2f} logit{offset_interval_text(outcome['offset'])}): it is meant "
                      "for people's questions, "
                      "which are harder than generated ones, so it reads low on these." if offset else ""))
        return plots.reliability_diagram(pairs, title="confidence on your documents, before and after recalibrating"), caption
    committed = json.loads(measured.read_text()) if measured.exists() else {}
    # the gold splits pooled where measured (ECE on 80 questions is noisy), else the first split
    entry = (committed.get("refit_pooled") or {}).get(model) or (committed.get("refit") or {}).get(model)
    if not entry:
        return None, f"{len(answerable)} answerable questions here (a recalibration needs {MIN_ROWS}) and no committed measurement for {model}."
    scored = entry["scored_on"]
    pairs = {"shipped fit": [tuple(p) for p in scored["before"]["pairs"]]}
    without = scored.get("after_without_offset")
    if without:
        pairs["recalibrated, no offset"] = [tuple(p) for p in without["pairs"]]
    pairs["recalibrated" + (" + offset" if without else "")] = [tuple(p) for p in scored["after"]["pairs"]]
    ece = " → ".join(f"{x['ece']:.3f}" for x in (scored["before"], without, scored["after"]) if x)
    shares = f"({entry['fit_on']['right']:.0%} right against {scored['right']:.0%} for the real ones)"
    offset = f"the offset ({entry['offset']['logit']:+.2f} logit{offset_interval_text(entry['offset'])}, measured on SQuAD dev)"
    if entry["fit_on"]["right"] - scored["right"] > 0.05:
        gap = f"The generated questions were easier {shares}" + (
            f"; {offset} moves the fit toward real questions." if without else ", so a fit on them alone overclaims on real questions.")
    else:  # the offset was measured where generated questions were easier; here they were not
        gap = f"The generated questions were about as hard as the real ones here {shares}" + (
            f"; {offset} moves the fit further than this text needs." if without else ".")
    caption = (f"{len(answerable)} answerable questions here: a recalibration needs {MIN_ROWS}, so this is the committed measurement — fitted on "
               f"{entry['fit_on']['what']}, scored on {scored['what']}. ECE {ece} ({' → '.join(pairs)}), "
               f"ROC AUC {scored['before']['auc']:.3f} → {scored['after']['auc']:.3f}. {gap}"
               + (" new_wiki is Wikipedia text, the shipped fit's own kind, so there the shipped fit stays the better one: the command is "
                  "for text unlike it." if scored["before"]["ece"] < scored["after"]["ece"] else ""))
    return plots.reliability_diagram(pairs, title=f"confidence recalibrated on generated questions ({model})"), caption
