"""The pipeline drawings as a person sees them: JupyterLab in Chromium at 1280 x 800, file browser open.

JupyterLab scales a Mermaid drawing down to the notebook's width, text and all; a graph twice as
wide as the notebook shows its step names at half size. This test draws the smallest and the
biggest graphs the toggles compile to — plain RAG, ``Features.all_on()``, every toggle but planning,
every toggle with planning — in a notebook written for the purpose, runs it in the browser, and
checks each drawing: rendered without a Mermaid error, every step drawn, where the question enters
and where a run ends, and shown at no less than :data:`MIN_SCALE` of its natural size. The detail
drawing (every socket, the loop opened) must render too. Screenshots land in ``.browser-shots/``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / ".browser-shots"
_spec = importlib.util.spec_from_file_location("jupyterlab_driver", REPO / "bench" / "jupyterlab_driver.py")
driver = sys.modules.get("jupyterlab_driver") or importlib.util.module_from_spec(_spec)
if "jupyterlab_driver" not in sys.modules:
    sys.modules["jupyterlab_driver"] = driver
    _spec.loader.exec_module(driver)

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# At 0.6 of natural size a step's name is ~10 px high, the smallest a person reads without zooming.
MIN_SCALE = 0.6
SETUP = """from IPython.display import Markdown
from ragkit.pipeline.drawing import draw
from ragkit.pipeline.features import Features
TOGGLES = dict(routing=True, hyde=True, rerank=True, grading=True, hallucination_check=True, self_correction=True, multi_hop=True,
               fallback=True, gate=True, rewrite=True, expand=True, intent_filters=True, sql_route=True)
CONFIGS = {"plain": Features(), "all_on": Features.all_on(), "every_toggle": Features(**TOGGLES), "every_toggle_planning": Features(**TOGGLES, decompose=True)}
def show(name, detail=False):
    return Markdown("```mermaid\\n" + draw(CONFIGS[name], detail=detail) + "\\n```")"""
DRAWINGS = ["plain", "all_on", "every_toggle", "every_toggle_planning"]

_JS_SIZES = """() => [...document.querySelectorAll('.jp-RenderedMermaid img')].map(img => {
    const svg = decodeURIComponent((img.getAttribute('src') || '').split(',').slice(1).join(','));
    const viewBox = svg.match(/viewBox="([^"]+)"/);
    const natural = viewBox ? parseFloat(viewBox[1].split(/[\\s,]+/)[2]) : 0;
    return {natural, shown: img.getBoundingClientRect().width};
})"""


def expected_steps(name: str) -> set[str]:
    """The steps the compact drawing shows: every step, the per-part graph's too; the loop as one node."""
    from ragkit.pipeline.drawing import DrawingOnlyLLM
    from ragkit.pipeline.graph import build_pipeline
    from ragkit.pipeline.graph_io import inner_pipeline
    from ragkit.pipeline.mermaid import ALWAYS_OPEN

    namespace: dict = {}
    exec(SETUP, namespace)

    def steps(pipe) -> set[str]:
        found = set()
        for step, component in pipe.walk():
            inner = inner_pipeline(component)
            found |= steps(inner) if inner is not None and type(component).__name__ in ALWAYS_OPEN else {step}
        return found

    return steps(build_pipeline(namespace["CONFIGS"][name], DrawingOnlyLLM(), index_path="(drawing)"))


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    import nbformat

    root = tmp_path_factory.mktemp("drawings")
    cells = [nbformat.v4.new_code_cell(SETUP)]
    cells += [nbformat.v4.new_code_cell(f"show({name!r})") for name in DRAWINGS]
    cells.append(nbformat.v4.new_code_cell("show('all_on', detail=True)"))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "drawings.ipynb")
    with driver.chromium() as browser, driver.JupyterLab(root, tmp_path_factory.mktemp("jupyterlab")) as lab:
        page = driver.LabPage.open(browser, lab, "drawings.ipynb")
        try:
            page.restart_and_run_all(timeout=300)
            page.page.wait_for_timeout(1000)  # Mermaid draws after the output arrives
            cells = page.cells()
            sizes = page.page.evaluate(_JS_SIZES)
            images = page.page.locator(".jp-RenderedMermaid img")
            for i, name in enumerate([*DRAWINGS, "all_on_detail"][: images.count()]):
                images.nth(i).scroll_into_view_if_needed()
                page.page.wait_for_timeout(200)
                page.screenshot(SHOTS / f"graph_{name}_1280.png")
            errors = list(page.console_errors)
        finally:
            page.close()
    diagrams = [d for c in cells if c["code"] for d in c["diagrams"]]
    return {"diagrams": diagrams, "sizes": sizes, "errors": errors}


def test_every_drawing_renders(drawn):
    assert len(drawn["diagrams"]) == len(DRAWINGS) + 1, drawn["diagrams"]
    assert not [d for d in drawn["diagrams"] if d["error"]], "a Mermaid syntax error: see .browser-shots/graph_*_1280.png"
    assert not [e for e in drawn["errors"] if not any(h.search(e) for h in driver.HARMLESS_CONSOLE)], drawn["errors"]


@pytest.mark.parametrize("index,name", list(enumerate(DRAWINGS)))
def test_each_configuration_shows_every_step_the_question_and_the_ends(drawn, index, name):
    diagram = drawn["diagrams"][index]
    missing = [step for step in expected_steps(name) if step not in diagram["text"]]
    assert not missing, f"{name}: steps not drawn: {missing}"
    assert "question" in diagram["text"] and ("answer + confidence" in diagram["text"] or "one answer per part" in diagram["text"])


@pytest.mark.parametrize("index,name", list(enumerate(DRAWINGS)))
def test_each_configuration_is_readable_at_1280(drawn, index, name):
    size = drawn["sizes"][index]
    scale = size["shown"] / size["natural"]
    assert scale >= MIN_SCALE, (f"{name}: drawn at {scale:.2f} of its natural {size['natural']:.0f} px in {size['shown']:.0f} px: "
                                f"step names would be {16 * scale:.0f} px high; see .browser-shots/graph_{name}_1280.png")


def test_the_detail_drawing_opens_the_correction_loop(drawn):
    detail = drawn["diagrams"][len(DRAWINGS)]
    assert all(step in detail["text"] for step in ("answer_prompt", "hallucination", "correction_router", "correction_count")), detail["text"][:400]
    assert detail["nodes"] > drawn["diagrams"][1]["nodes"]
    Path(SHOTS / "graph_sizes_1280.json").write_text(json.dumps(dict(zip([*DRAWINGS, "all_on_detail"], drawn["sizes"])), indent=1) + "\n")
