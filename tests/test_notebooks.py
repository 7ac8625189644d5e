"""The walkthrough notebooks: committed without outputs, and each runs top to bottom headless."""

import json
import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    """The convention: notebooks are stored stripped (outputs come from your own run)."""
    book = json.loads(path.read_text(encoding="utf-8"))
    dirty = [i for i, c in enumerate(book["cells"]) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; strip them (jupyter nbconvert --clear-output --inplace {path.name})"


@pytest.mark.integration
@pytest.mark.llm
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_top_to_bottom(path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("RAGKIT_QUICK", "1")  # the notebooks' parameter cell shrinks the work
    # the kernel is started as "python -m ipykernel_launcher": make that the python running the tests
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    shown = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for c in book.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Loading weights" not in shown  # transformers' bar: a stray widget a learner reads as something to wait for
    figures = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert figures, f"{path.name} drew no figure"
