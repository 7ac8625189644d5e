"""The notebooks as a person sees them: JupyterLab in a real Chromium at a 1280 x 800 laptop viewport.

A headless nbclient run (tests/test_notebooks.py) proves the cells execute; it cannot see a widget
that renders as "HBox(children=…)", a blank or duplicated figure, a browser console error, or a panel
that scrolls sideways at laptop width. This test opens each notebook in JupyterLab, runs
Kernel → Restart Kernel and Run All Cells (with RAGKIT_QUICK=1, the notebooks' quick variant), clicks
the feature lab's toggles and Run and the conversation notebook's clarification buttons the way a
person does, and checks what the page shows.

Each notebook runs once per session (``NotebookRuns``); the tests below only read what that run
recorded, so one slow browser run reports every failing check separately. Screenshots and the
restart-and-run-all wall times go to ``.browser-shots/`` (git-ignored).

    .venv/bin/python -m pytest tests/browser -m browser      # needs /usr/bin/chromium (`make test` installs it)
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / ".browser-shots"
_spec = importlib.util.spec_from_file_location("jupyterlab_driver", REPO / "bench" / "jupyterlab_driver.py")
driver = importlib.util.module_from_spec(_spec)
sys.modules["jupyterlab_driver"] = driver
_spec.loader.exec_module(driver)

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.llm]

NOTEBOOKS = ["01_quickstart", "07_feature_lab", "08_planning", "09_evaluate_your_documents", "10_conversation"]
PANEL_NOTEBOOKS = ["07_feature_lab"]
CHAT_NOTEBOOKS = ["10_conversation"]  # notebooks with a chat widget (ragkit.ui.chat_widget) left waiting for a choice
# committed figures a notebook shows in a table, found by a header only that table has
SHOWN_TABLES = {"09_evaluate_your_documents": "τ retrieval"}
# tables photographed for a person to look at (the widest ones), by a text only they hold
PHOTOGRAPHED_TABLES = {"07_feature_lab": "prompt tokens / question", "09_evaluate_your_documents": re.compile("LLM calls/q|candidates")}
# What a person does in the feature lab: each step flips these checkboxes, then presses Run.
PANEL_STEPS = [("grading",), ("hyde",)]
# The on/off features, each a checkbox a person can tick.
TOGGLES = ("routing", "hyde", "rerank", "grading", "hallucination check", "self correction")
RUN_ALL_TIMEOUT = 900  # s per notebook in quick mode; a hang fails here, not at CI's 90-minute limit
PANEL_RUN_TIMEOUT = 300  # s per press of Run
RUN_TEXT = re.compile(r"^\s*Run\s*$")
CONFIDENCE = re.compile(r"[●◐○]\s*[01]\.\d+")  # the panel's confidence readout, e.g. "○ 0.33"
WIDGET_FAILURES = ("Error displaying widget", "HBox(children=", "VBox(children=", "GridBox(children=", "Output()")

HARMLESS_CONSOLE = driver.HARMLESS_CONSOLE

# The panel's text (answer, summary, tables), the PNGs it shows, and the PNGs in its cell outside it.
_JS_PANEL_STATE = """async (panel) => { const pngOf = %s;
    const pngs = async (imgs) => (await Promise.all([...imgs].map(pngOf))).filter(Boolean);
    const cell = panel.closest('.jp-Cell');
    return {
        text: [...panel.querySelectorAll('.widget-html')].map(e => e.innerText.trim()).filter(Boolean).join('\\n'),
        images: await pngs(panel.querySelectorAll('img')),
        outside: await pngs([...cell.querySelectorAll('.jp-OutputArea img')].filter(i => !panel.contains(i))),
        mutations: window.__ragkitMutations ?? 0,
    };
}""" % driver.JS_PNG_OF

_JS_WATCH = """(panel) => {
    window.__ragkitMutations = 0;
    if (window.__ragkitObserver) window.__ragkitObserver.disconnect();
    window.__ragkitObserver = new MutationObserver(records => { for (const r of records) {
        const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
        if (el && el.closest('.widget-html')) window.__ragkitMutations++; } });
    window.__ragkitObserver.observe(panel, {subtree: true, childList: true, characterData: true});
}"""

_JS_DESCRIBE = """const describe = (el) => `${el.tagName.toLowerCase()}.${[...el.classList].slice(0, 3).join('.')} "${(el.innerText || el.value || '').trim().replace(/\\s+/g, ' ').slice(0, 50)}"`;"""

# Every table a notebook's output shows, scrolled into view as a person reads it: where it ends
# beyond what is visible (at laptop width every column should be in view without scrolling sideways)
_JS_CUT_TABLES = """async () => { %s
    const cut = [];
    for (const t of document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output table')) {
        t.scrollIntoView({block: 'center'});
        await new Promise(r => requestAnimationFrame(r));
        const right = t.getBoundingClientRect().right;
        const visible = Math.min(window.innerWidth, ...[t.parentElement, t.closest('.jp-OutputArea-output')].map(e => e.getBoundingClientRect().right));
        if (right > visible + 1) cut.push(`${describe(t)}: ends at x ${Math.round(right)}, visible to ${Math.round(visible)}`);
    }
    return cut;
}""" % _JS_DESCRIBE

_JS_OVERFLOW = """(panel) => { %s
    return [panel, ...panel.querySelectorAll('*')].filter(el => {
        const x = getComputedStyle(el).overflowX;
        return (x === 'auto' || x === 'scroll') && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1;
    }).map(el => `${describe(el)}: content ${el.scrollWidth} px wide in ${el.clientWidth} px`);
}""" % _JS_DESCRIBE

# Every slider's value readout, as a person sees it once the slider is scrolled into view
# vertically (a person scrolls the notebook, not each feature group sideways): it has a size, and
# no ancestor that clips sideways (or the window) cuts it off.
_JS_READOUTS = """(panel) => { %s
    const problems = []; let n = 0;
    for (const slider of panel.querySelectorAll('.widget-slider')) {
        const box = slider.getBoundingClientRect();
        if (box.width === 0 && box.height === 0) continue;  // a hidden control, nothing to see
        for (let a = slider.parentElement; a; a = a.parentElement) {  // scroll vertically only
            const s = getComputedStyle(a);
            if ((s.overflowY === 'auto' || s.overflowY === 'scroll') && a.scrollHeight > a.clientHeight) {
                const r = slider.getBoundingClientRect(), ar = a.getBoundingClientRect();
                a.scrollTop += (r.top + r.height / 2) - (ar.top + ar.height / 2);
            }
        }
        n++;
        const readout = slider.querySelector('.widget-readout');
        const label = describe(slider);
        if (!readout) { problems.push(`${label}: no value readout`); continue; }
        const r = readout.getBoundingClientRect();
        if (r.width < 1 || r.height < 1 || getComputedStyle(readout).visibility === 'hidden') {
            problems.push(`${label}: readout has no size`); continue; }
        if (r.left < -1 || r.right > window.innerWidth + 1) {
            problems.push(`${label}: readout at x ${Math.round(r.left)}..${Math.round(r.right)} outside the ${window.innerWidth} px window`); continue; }
        for (let a = readout.parentElement; a && a !== document.body; a = a.parentElement) {
            if (getComputedStyle(a).overflowX === 'visible') continue;
            const ar = a.getBoundingClientRect();
            if (r.left < ar.left - 1 || r.right > ar.right + 1) {
                problems.push(`${label}: readout "${readout.innerText || readout.value || ''}" at x ${Math.round(r.left)}..${Math.round(r.right)} cut off by ${describe(a)} (x ${Math.round(ar.left)}..${Math.round(ar.right)})`);
                break;
            }
        }
    }
    return {sliders: n, problems};
}""" % _JS_DESCRIBE


@dataclass
class NotebookRun:
    name: str
    seconds: float = 0.0
    cells: list[dict] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    panel: dict[str, Any] | None = None
    chat: dict[str, Any] | None = None
    table: dict[str, Any] | None = None
    cut_tables: list[str] = field(default_factory=list)
    error: BaseException | None = None
    panel_error: BaseException | None = None
    chat_error: BaseException | None = None


class NotebookRuns:
    """Runs each notebook in the browser once, on first request, and keeps what it saw."""

    def __init__(self, lab, browser):
        self.lab, self.browser = lab, browser
        self.runs: dict[str, NotebookRun] = {}

    def get(self, name: str) -> NotebookRun:
        if name not in self.runs:
            run = NotebookRun(name)
            try:
                self._run(run)
            except Exception as exc:  # noqa: BLE001 - kept, so every test of this notebook reports it once
                run.error = exc
            self.runs[name] = run
        run = self.runs[name]
        if run.error is not None:
            pytest.fail(f"{name} did not run in the browser: {type(run.error).__name__}: {run.error}", pytrace=False)
        return run

    def panel(self, name: str) -> dict[str, Any]:
        run = self.get(name)
        if run.panel_error is not None:
            pytest.fail(f"{name}: working the panel failed: {type(run.panel_error).__name__}: {run.panel_error}"
                        f" (see {SHOTS / name}_panel_failed.png)", pytrace=False)
        return run.panel

    def chat(self, name: str) -> dict[str, Any]:
        run = self.get(name)
        if run.chat_error is not None:
            pytest.fail(f"{name}: working the chat widget failed: {type(run.chat_error).__name__}: {run.chat_error}"
                        f" (see {SHOTS / name}_chat_failed.png)", pytrace=False)
        return run.chat

    def _run(self, run: NotebookRun) -> None:
        path = f"notebooks/{run.name}.ipynb"
        page = driver.LabPage.open(self.browser, self.lab, path)
        try:
            try:
                run.seconds = page.restart_and_run_all(timeout=RUN_ALL_TIMEOUT)
            finally:
                page.scroll_notebook("top")
                page.screenshot(SHOTS / f"{run.name}.png")
            _record_time(run.name, run.seconds)
            run.cells = page.cells()
            run.cut_tables = page.page.evaluate(_JS_CUT_TABLES)
            if run.name in PHOTOGRAPHED_TABLES:
                tables = page.page.locator(".jp-OutputArea-output table", has_text=PHOTOGRAPHED_TABLES[run.name])
                for i in range(tables.count()):
                    tables.nth(i).evaluate("el => el.scrollIntoView({block: 'center'})")
                    page.screenshot(SHOTS / f"{run.name}_wide_table_{i + 1}.png")
            page.scroll_notebook("bottom")
            page.screenshot(SHOTS / f"{run.name}_end.png")
            if run.name in SHOWN_TABLES:
                run.table = look_at_table(page, run.name, SHOWN_TABLES[run.name])
            if run.name in PANEL_NOTEBOOKS:
                try:
                    run.panel = exercise_panel(page, run.name)
                except Exception as exc:  # noqa: BLE001 - the panel tests report it; the notebook's own checks still run
                    run.panel_error = exc
                    page.screenshot(SHOTS / f"{run.name}_panel_failed.png")
            if run.name in CHAT_NOTEBOOKS:
                try:
                    run.chat = exercise_chat(page, run.name)
                except Exception as exc:  # noqa: BLE001 - the chat tests report it; the notebook's own checks still run
                    run.chat_error = exc
                    page.screenshot(SHOTS / f"{run.name}_chat_failed.png")
            run.console_errors = list(page.console_errors)
        finally:
            page.close()
        saved = json.loads((REPO / path).read_text(encoding="utf-8"))
        if any(c.get("outputs") for c in saved["cells"]):
            raise AssertionError(f"{path} was saved with outputs by the browser run (autosave must be off)")


def _record_time(name: str, seconds: float) -> None:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / "notebook_times_quick.json"
    times = json.loads(path.read_text()) if path.exists() else {}
    times[name] = round(seconds, 1)
    path.write_text(json.dumps(times, indent=2) + "\n")


def run_button(scope):
    # by its text: the accessible name also holds the play icon's glyph
    return scope.locator("button", has_text=RUN_TEXT)


def look_at_table(page, name: str, header: str) -> dict[str, Any]:
    """Scroll the table with ``header`` into view as a person would, take its picture, and record its
    rows as shown and whether it fits the notebook at laptop width."""
    table = page.page.locator(".jp-OutputArea-output table", has_text=header)
    if table.count() != 1:
        return {"found": table.count()}
    table.first.evaluate("el => el.scrollIntoView({block: 'center'})")
    page.page.wait_for_timeout(300)
    page.screenshot(SHOTS / f"{name}_table.png")
    return {"found": 1, "rows": table.first.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))"),
            "overflow": table.first.evaluate(f"t => ({_JS_OVERFLOW})(t.closest('.jp-OutputArea-output'))"),
            "right": table.first.evaluate("t => t.getBoundingClientRect().right"),
            # the visible part ends at the output area, or earlier where the table's wrapper ends (it scrolls beyond)
            "visible_right": table.first.evaluate("""t => Math.min(...[t.parentElement, t.closest('.jp-OutputArea-output')]
                .map(e => e.getBoundingClientRect().right))"""),
            "window": page.page.evaluate("window.innerWidth")}


def find_panel(page):
    """The feature lab's panel: the one cell output that holds a Run button."""
    outputs = page.page.locator(".jp-OutputArea-output").filter(has=run_button(page.page))
    # nested output areas (the panel's figure area) hold no Run button, so only the panel matches
    count = outputs.count()
    assert count == 1, f"expected one panel (cell output with a Run button), found {count}"
    return outputs.first


def exercise_panel(page, name: str) -> dict[str, Any]:
    """Look at the panel, then flip toggles and press Run as a person does, recording what shows."""
    panel = find_panel(page)
    panel.evaluate("el => el.scrollIntoView({block: 'start'})")
    record: dict[str, Any] = {
        "toggles": {label: panel.get_by_role("checkbox", name=label, exact=True).count() for label in TOGGLES},
        "run_buttons": run_button(panel).count(),
        "layout": [("after run all", panel.evaluate(_JS_OVERFLOW), panel.evaluate(_JS_READOUTS))],
        "runs": [],
    }
    panel.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.screenshot(SHOTS / f"{name}_panel.png")
    for step in PANEL_STEPS:
        ticked = {}
        for label in step:
            box = panel.get_by_role("checkbox", name=label, exact=True)
            box.scroll_into_view_if_needed()
            box.click()
            ticked[label] = box.is_checked()
        label = "+".join(step)
        outcome = press_run(page, panel)
        outcome["step"] = f"{label} -> {ticked}"
        record["runs"].append(outcome)
        panel.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(SHOTS / f"{name}_panel_after_{label}.png")
        if panel.locator("img").count():  # the panel's figures, as they show after this Run
            panel.locator("img").first.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.screenshot(SHOTS / f"{name}_panel_figures_after_{label}.png")
        record["layout"].append((f"after {label} and Run", panel.evaluate(_JS_OVERFLOW), panel.evaluate(_JS_READOUTS)))
    return record


def press_run(page, panel) -> dict[str, Any]:
    """Press Run and wait (bounded) until the kernel is idle again and the panel has stopped changing."""
    before = panel.evaluate(_JS_PANEL_STATE)
    panel.evaluate(_JS_WATCH)
    t0 = time.monotonic()
    run_button(panel).click()
    driver.wait_until(lambda: panel.evaluate(_JS_PANEL_STATE)["mutations"] > 0 or page.kernel_state() == "busy",
                      60, "the panel to react to Run")
    page.wait_kernel_idle(PANEL_RUN_TIMEOUT, "the panel's Run to finish")
    last: list[dict] = []

    def settled():
        state = panel.evaluate(_JS_PANEL_STATE)
        steady = bool(last) and state == last[-1] and "thinking" not in state["text"]
        last.append(state)
        return steady and page.kernel_state() == "idle"

    driver.wait_until(settled, 60, "the panel to settle after Run", interval=1.0)
    after = last[-1]
    return {"seconds": round(time.monotonic() - t0, 1), "before": before, "after": after,
            "cell_images": after["images"] + after["outside"]}


# What a chat widget shows: its last message, the step line, its option buttons and whether each
# button's label fits (a label cut off by the button or the notebook's width is a bug).
_JS_CHAT_STATE = """(chat) => {
    const last = chat.querySelector('.ragkit-chat-messages')?.lastElementChild;
    const box = chat.getBoundingClientRect();
    return {
        messages: chat.querySelector('.ragkit-chat-messages')?.children.length ?? 0,
        last: (last?.innerText ?? '').trim(),
        status: (chat.querySelector('.ragkit-chat-status')?.innerText ?? '').trim(),
        options: [...chat.querySelectorAll('.ragkit-chat-option')].map(b => {
            const r = b.getBoundingClientRect();
            return {label: b.innerText.trim(), cut: b.scrollWidth > b.clientWidth + 1 || r.right > box.right + 1 || r.right > window.innerWidth + 1};
        }),
        right: box.right, window: window.innerWidth,
    };
}"""

# Every state the chat widget passes through while a question runs (the step line, the streamed answer).
_JS_CHAT_WATCH = """(chat) => {
    window.__ragkitChatSeen = [];
    if (window.__ragkitChatObserver) window.__ragkitChatObserver.disconnect();
    window.__ragkitChatObserver = new MutationObserver(() => window.__ragkitChatSeen.push({
        status: (chat.querySelector('.ragkit-chat-status')?.innerText ?? '').trim(),
        last: (chat.querySelector('.ragkit-chat-messages')?.lastElementChild?.innerText ?? '').trim()}));
    window.__ragkitChatObserver.observe(chat, {subtree: true, childList: true, characterData: true});
}"""


def exercise_chat(page, name: str) -> dict[str, Any]:
    """Screenshot every chat widget, then click the second option of the one left waiting for a choice
    and wait (bounded) until its last message holds the answer with its confidence."""
    chats = page.page.locator(".ragkit-chat")
    record: dict[str, Any] = {"widgets": chats.count(), "layout": []}
    for i in range(record["widgets"]):
        chats.nth(i).evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(SHOTS / f"{name}_chat_{i + 1}.png")
        record["layout"].append((f"chat widget {i + 1} after run all", chats.nth(i).evaluate(_JS_OVERFLOW), chats.nth(i).evaluate(_JS_CHAT_STATE)))
    with_options = chats.evaluate_all("els => els.map(el => !!el.querySelector('.ragkit-chat-option'))")
    assert any(with_options), "no chat widget shows option buttons after run all (the last one should be waiting for a choice)"
    chat = chats.nth(max(i for i, has in enumerate(with_options) if has))  # by position: its buttons go once clicked
    record["before"] = chat.evaluate(_JS_CHAT_STATE)
    button = chat.locator(".ragkit-chat-option").nth(1)
    record["clicked"] = button.inner_text().strip()
    chat.evaluate(_JS_CHAT_WATCH)
    t0 = time.monotonic()
    button.click()
    driver.wait_until(lambda: CONFIDENCE.search(chat.evaluate(_JS_CHAT_STATE)["last"]), PANEL_RUN_TIMEOUT,
                      "the chat's last message to show the answer with its confidence")
    page.wait_kernel_idle(PANEL_RUN_TIMEOUT, "the chat's answer to finish")
    record["seconds"] = round(time.monotonic() - t0, 1)
    record["after"] = chat.evaluate(_JS_CHAT_STATE)
    record["seen"] = page.page.evaluate("() => window.__ragkitChatSeen")
    chat.evaluate("el => el.scrollIntoView({block: 'end'})")
    page.screenshot(SHOTS / f"{name}_chat_after_click.png")
    record["layout"].append(("after the click", chat.evaluate(_JS_OVERFLOW), record["after"]))
    return record


def blank_images(srcs: list[str]) -> list[str]:
    return [p for p in (driver.png_problem(s) for s in srcs) if p]


def duplicates(srcs: list[str]) -> int:
    return sum(n - 1 for n in Counter(srcs).values() if n > 1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    with driver.chromium() as browser:  # no chromium: a clear failure here, never a skip
        with driver.JupyterLab(REPO, tmp_path_factory.mktemp("jupyterlab"), env={"RAGKIT_QUICK": "1"}) as lab:
            yield NotebookRuns(lab, browser)


# -- every notebook ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_runs_to_the_end(runs, name):
    run = runs.get(name)
    code = [c for c in run.cells if c["code"]]
    assert code and all(re.fullmatch(r"\[\d+\]:", c["prompt"]) for c in code), [c["prompt"] for c in code]
    assert not [c for c in code if c["errors"]], [c["errors"] for c in code if c["errors"]]


@pytest.mark.parametrize("name", list(SHOWN_TABLES))
def test_committed_figures_table_shows_them_and_fits_at_1280(runs, name):
    """09's agreement table, as a person sees it: one row per committed measurement, the judge cells in each
    set's first row reading the JSON's figures (the larger run's too), and nothing cut off or scrolled sideways
    at laptop width with the file browser open."""
    table = runs.get(name).table
    assert table and table["found"] == 1, f"the table with {SHOWN_TABLES[name]!r} is not shown once: {table}"
    header, *rows = table["rows"]
    sets = json.loads((REPO / "bench" / "results" / "eval_agreement.json").read_text(encoding="utf-8"))["sets"]
    measured = {set_name: 1 + bool(e.get("larger_real")) + sum(len(by_size) for by_size in e.get("by_writer", {}).values())
                for set_name, e in sets.items()}
    assert [r[0] for r in rows] == [set_name for set_name, n in measured.items() for _ in range(n)], (rows, measured)
    judge = header.index("judge AUC")
    firsts = [row for i, row in enumerate(rows) if i == 0 or rows[i - 1][0] != row[0]]
    for row, entry in zip(firsts, sets.values()):
        assert row[judge] == f"{entry['judge_auc']:.2f}", row
        if entry.get("larger_judge"):
            assert row[header.index("judge, larger set")].startswith(
                f"{entry['larger_judge']['judge_auc']:.2f} on {entry['larger_judge']['real_questions']}"), row
    assert not table["overflow"] and table["right"] <= min(table["window"], table["visible_right"]) + 1, \
        f"the table is cut off or scrolls sideways: {table}; see {SHOTS / name}_table.png"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_table_cut_off_at_1280(runs, name):
    """Every table in the outputs ends inside what is visible at laptop width, file browser open."""
    cut = runs.get(name).cut_tables
    assert not cut, "\n".join(cut) + f"\nsee {SHOTS / name}*.png"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_widgets_render_as_controls(runs, name):
    run = runs.get(name)
    shown = [(c["index"], text) for c in run.cells for text in WIDGET_FAILURES if text in c["output_text"]]
    assert not shown, f"widgets shown as text instead of controls (cell, text): {shown}; see {SHOTS / name}.png"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_image_has_content(runs, name):
    run = runs.get(name)
    assert any(c["images"] for c in run.cells), f"{name} shows no image at all"
    blank = [(c["index"], b) for c in run.cells for b in blank_images(c["images"])]
    assert not blank, f"blank images (cell, why): {blank}"


def test_the_quickstart_draws_plain_and_all_on_as_two_graphs(runs):
    """Notebook 01 shows each engine's graph as a diagram JupyterLab drew from Mermaid text itself
    (no web service), readable at laptop width: every step a node, all-on bigger than plain."""
    run = runs.get("01_quickstart")
    diagrams = [d for c in run.cells for d in c["diagrams"]]
    assert len(diagrams) >= 2, f"expected two drawn graphs, found {len(diagrams)}; see {SHOTS / '01_quickstart.png'}"
    plain, full = diagrams[0], diagrams[1]
    assert plain["nodes"] >= 6 and full["nodes"] > plain["nodes"] + 5, (plain["nodes"], full["nodes"])
    assert "answer_prompt" in plain["text"] and "route_policy" in full["text"] and "self_correction" in full["text"]
    assert all(d["width"] > 200 and d["height"] > 200 and not d["error"] for d in (plain, full)), (plain, full)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_figure_rendered_twice(runs, name):
    run = runs.get(name)
    twice = {c["index"]: duplicates(c["images"]) for c in run.cells if duplicates(c["images"])}
    assert not twice, f"identical figures repeated in one cell's output (cell: extra copies): {twice}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_browser_console_errors(runs, name):
    run = runs.get(name)
    errors = [e for e in run.console_errors if not any(h.search(e) for h in HARMLESS_CONSOLE)]
    assert not errors, "\n".join(errors)


# -- the feature lab's panel ---------------------------------------------------------------------
@pytest.mark.parametrize("name", PANEL_NOTEBOOKS)
def test_panel_controls_exist(runs, name):
    panel = runs.panel(name)
    missing = [label for label, n in panel["toggles"].items() if n != 1]
    assert not missing, f"no single checkbox for {missing} in the panel ({panel['toggles']})"
    assert panel["run_buttons"] == 1


@pytest.mark.parametrize("name", PANEL_NOTEBOOKS)
def test_panel_run_updates_answer_and_confidence(runs, name):
    problems = []
    for run in runs.panel(name)["runs"]:
        before, after = run["before"]["text"], run["after"]["text"]
        if not run["after"]["mutations"]:
            problems.append(f"{run['step']}: Run changed no text in the panel")
        if after == before:
            problems.append(f"{run['step']}: the panel's answer and summary read the same as before Run")
        if not CONFIDENCE.search(after):
            problems.append(f"{run['step']}: no confidence (● / ◐ / ○ and a number) after Run: {after[:300]!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", PANEL_NOTEBOOKS)
def test_panel_images_update_and_have_content(runs, name):
    problems = []
    for run in runs.panel(name)["runs"]:
        before, after = run["before"]["images"], run["after"]["images"]
        if not after:
            problems.append(f"{run['step']}: no image in the panel after Run")
        elif set(after) == set(before):
            problems.append(f"{run['step']}: the panel's images did not change after Run")
        for why in blank_images(after):
            problems.append(f"{run['step']}: blank panel image: {why}")
    assert not problems, "\n".join(problems) + f"\nsee {SHOTS}/{name}_panel_after_*.png"


@pytest.mark.parametrize("name", PANEL_NOTEBOOKS)
def test_panel_cell_shows_each_figure_once(runs, name):
    """After each Run the panel's cell shows the new figures once each, and no stale copies under the panel."""
    problems = []
    for run in runs.panel(name)["runs"]:
        if duplicates(run["cell_images"]):
            problems.append(f"{run['step']}: {duplicates(run['cell_images'])} figure(s) shown twice in the panel's cell")
        if run["after"]["outside"]:
            problems.append(f"{run['step']}: {len(run['after']['outside'])} figure(s) under the panel, outside it (stale copies)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", PANEL_NOTEBOOKS)
def test_panel_has_no_horizontal_scrollbar_at_1280(runs, name):
    problems = [f"{when}: {what}" for when, overflow, _ in runs.panel(name)["layout"] for what in overflow]
    assert not problems, "\n".join(problems) + f"\nsee {SHOTS / name}_panel.png"


@pytest.mark.parametrize("name", PANEL_NOTEBOOKS)
def test_panel_slider_values_visible_at_1280(runs, name):
    layout = runs.panel(name)["layout"]
    assert all(readouts["sliders"] > 0 for _, _, readouts in layout), "no slider found in the panel"
    problems = [f"{when}: {what}" for when, _, readouts in layout for what in readouts["problems"]]
    assert not problems, "\n".join(problems) + f"\nsee {SHOTS / name}_panel.png"


# -- the conversation notebook's chat widget -----------------------------------------------------
@pytest.mark.parametrize("name", CHAT_NOTEBOOKS)
def test_chat_click_on_an_option_answers_it(runs, name):
    """A person clicks "2) Nikola Tesla" under "Which one do you mean?": the step now running shows,
    the answer streams into the last message, and it ends with the answer, ● ◐ ○ and the option chosen."""
    chat = runs.chat(name)
    labels = [o["label"] for o in chat["before"]["options"]]
    assert len(labels) >= 2 and "Which one do you mean?" in chat["before"]["last"], chat["before"]
    after = chat["after"]
    assert after["messages"] == chat["before"]["messages"] + 1, (chat["before"]["messages"], after["messages"])
    chosen = chat["clicked"].split(") ", 1)[-1]
    assert CONFIDENCE.search(after["last"]) and chosen in after["last"], after["last"]
    assert not after["options"] and not after["status"], after  # the question is answered: no buttons, no step running
    assert any(s["status"].startswith("running") for s in chat["seen"]), "no step was shown while the answer ran"
    assert any("▍" in s["last"] for s in chat["seen"]), "the answer never showed streaming (a partial answer with its caret)"


@pytest.mark.parametrize("name", CHAT_NOTEBOOKS)
def test_chat_fits_at_1280(runs, name):
    """No chat widget scrolls sideways or cuts an option's label off at laptop width."""
    chat = runs.chat(name)
    assert chat["widgets"] >= 2, chat["widgets"]
    problems = [f"{when}: {what}" for when, overflow, _ in chat["layout"] for what in overflow]
    problems += [f"{when}: option {o['label']!r} cut off" for when, _, state in chat["layout"] for o in state["options"] if o["cut"]]
    problems += [f"{when}: widget ends at x {state['right']:.0f} in a {state['window']} px window" for when, _, state in chat["layout"]
                 if state["right"] > state["window"] + 1]
    assert not problems, "\n".join(problems) + f"\nsee {SHOTS / name}_chat_*.png"
