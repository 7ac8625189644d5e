"""The panel's drawing of the pipeline: the graph the current toggles compile to, redrawn on every flip.

JupyterLab (≥ 4.1) renders Mermaid itself, so the drawing is a Markdown ``mermaid`` block (with the
raw ``text/vnd.mermaid`` beside it) in an ``Output`` widget — no web service is called, unlike
Haystack's ``Pipeline.show()``. The text is :func:`ragkit.pipeline.graph.draw` of the same features
the Run button compiles, so the graph a learner sees is the graph that runs (``ControlPanel.run``
records the running graph's text; the tests compare the two).

The drawing is the compact one (steps grouped by stage, the self-correction loop as one node); the
"every step and socket" checkbox redraws it with ``detail=True`` (:mod:`ragkit.pipeline.mermaid`).

Usage::

    view = GraphView()
    view.update(Features(grading=True))   # view.widget shows it; view.text is the Mermaid source
    view.update(panel.features)           # a callable: an invalid toggle combination is shown, not raised
    view.detail.value = True              # what the checkbox does: every step and socket
"""

from __future__ import annotations

from typing import Callable

import ipywidgets as widgets

from ragkit.config import RagConfig
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import draw
from ragkit.ui.text_safety import html_text


class GraphView:
    def __init__(self, config: RagConfig | None = None, expanded: bool = False):
        self.config = config
        self.text = ""
        self.error = ""  # why the last toggle combination could not be drawn (shown in the view)
        self.output = widgets.Output(layout=widgets.Layout(width="100%", max_width="100%", overflow="auto"))
        self.detail = widgets.Checkbox(value=False, description="every step and socket", indent=False)
        self._features: Features | Callable[[], Features] | None = None
        self.detail.observe(lambda _change: self._features is not None and self.update(self._features), names="value")
        self.widget = widgets.Accordion(children=[widgets.VBox([self.detail, self.output])], layout=widgets.Layout(width="100%"))
        self.widget.set_title(0, "pipeline graph — redrawn when a toggle flips")
        self.widget.selected_index = 0 if expanded else None

    def update(self, features: Features | Callable[[], Features]) -> str:
        """Redraw for ``features`` (or what a callable returns, e.g. the panel reading its controls)."""
        from IPython.display import HTML, display

        self._features = features
        try:
            text = draw(features() if callable(features) else features, self.config, detail=self.detail.value)
        except ValueError as exc:  # an invalid combination of toggles: say which, keep the last drawing
            self.error = str(exc)
            self.output.clear_output(wait=True)
            with self.output:
                display(HTML(f"<b style='color:#d1495b'>{html_text(str(exc))}</b>"))
            return self.text
        self.text, self.error = text, ""
        self.output.clear_output(wait=True)
        with self.output:
            display({"text/markdown": f"```mermaid\n{text}\n```", "text/vnd.mermaid": text, "text/plain": text}, raw=True)
        return text
