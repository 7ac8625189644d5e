"""Draw a Haystack ``Pipeline`` as Mermaid text, offline.

Haystack's ``Pipeline.show()`` / ``draw()`` send the graph to a Mermaid web service (mermaid.ink);
ragkit makes no network call the user did not configure, and JupyterLab renders Mermaid itself
(since 4.1: a ``mermaid`` code block in Markdown, or a ``text/vnd.mermaid`` output). Haystack's
text builder is private and labels every node with HTML lists of optional inputs, too wide for a
notebook at laptop width; this writes a compact flowchart from the pipeline's own graph instead:
one node per component (name and type), one arrow per pair of connected steps labelled with its sockets
(``sender → receiver``), dashed where every receiving socket is optional (a branch or a loop edge);
a ``SuperComponent`` (the self-correction loop) and the planning step's ``PerPartAnswerer`` are
drawn as subgraphs of their own pipelines.

Usage::

    from IPython.display import Markdown
    Markdown(mermaid_markdown(rag.pipeline))        # rendered by JupyterLab, no network
    print(to_mermaid(rag.pipeline))                  # or save it: ragkit pipeline --features f.yaml
"""

from __future__ import annotations

import re

from haystack import Pipeline

# Node colours by role, so a learner sees at a glance what each step is.
ROLE_STYLE = {
    "llm": "fill:#fde2c8,stroke:#c26a1b",
    "route": "fill:#e4dcf5,stroke:#6b4fb3",
    "retrieve": "fill:#d6ecf7,stroke:#2b7bb9",
    "other": "fill:#eeeeee,stroke:#777777",
}
# The loop's steps stacked top to bottom: side by side they made the all-on graph so wide that
# JupyterLab scaled it to unreadable text at laptop width (screenshots, 1280 px).
SUBGRAPH_DIRECTION = "TB"
# components that hold a pipeline of their own, drawn as a subgraph with what they do with it
SUBGRAPH_TYPES = {"SuperComponent": "SuperComponent", "PerPartAnswerer": "PerPartAnswerer: once for each part"}
LLM_STEPS = {"answer", "direct_answer", "hyde", "grade", "hallucination"}


def _node_id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _label(text: str) -> str:
    return text.replace('"', "'").replace("<", "&lt;").replace(">", "&gt;")


def _role(name: str, type_name: str) -> str:
    if type_name in ("ConditionalRouter", "BranchJoiner", "QueryRouter", "OutputAdapter"):
        return "route"
    if name in LLM_STEPS or type_name == "GuardedGenerator":
        return "llm"
    if name in ("embed", "retrieve", "guard", "rerank", "query_embedding"):
        return "retrieve"
    return "other"


def _body(pipeline: Pipeline, prefix: str, lines: list[str], roles: dict[str, list[str]], indent: str) -> None:
    """Nodes and edges of ``pipeline``; a SuperComponent is drawn as a subgraph of its own pipeline."""
    graph = pipeline.graph
    for name, data in graph.nodes(data=True):
        instance = data["instance"]
        type_name = type(instance).__name__
        node = _node_id(prefix + name)
        inner = getattr(instance, "pipeline", None) if type_name in SUBGRAPH_TYPES else None
        if isinstance(inner, Pipeline):
            lines.append(f'{indent}subgraph {node}["{_label(name)} ({SUBGRAPH_TYPES[type_name]})"]')
            lines.append(f"{indent}    direction {SUBGRAPH_DIRECTION}")
            _body(inner, prefix + name + "__", lines, roles, indent + "    ")
            lines.append(f"{indent}end")
            continue
        lines.append(f'{indent}{node}["<b>{_label(name)}</b><br/><small>{_label(type_name)}</small>"]')
        roles.setdefault(_role(name, type_name), []).append(node)
    # one arrow per pair of steps, listing every connection between them (solid if any is mandatory)
    pairs: dict[tuple[str, str], list] = {}
    for sender, receiver, data in graph.edges(data=True):
        pairs.setdefault((sender, receiver), []).append((data.get("from_socket"), data.get("to_socket")))
    for (sender, receiver), sockets in pairs.items():
        label = "<br/>".join(_label(o.name if o.name == i.name else f"{o.name} → {i.name}") for o, i in sockets)
        arrow = "-->" if any(i.is_mandatory for _, i in sockets) else "-.->"
        lines.append(f'{indent}{_node_id(prefix + sender)} {arrow}|"{label}"| {_node_id(prefix + receiver)}')


def to_mermaid(pipeline: Pipeline, title: str | None = None, direction: str = "TD") -> str:
    lines = ["---", f"title: {_label(title)}", "---"] if title else []
    lines.append(f"flowchart {direction}")
    roles: dict[str, list[str]] = {}
    _body(pipeline, "", lines, roles, "    ")
    for role, nodes in roles.items():
        lines.append(f"    classDef {role} {ROLE_STYLE[role]}")
        lines.append(f"    class {','.join(nodes)} {role}")
    return "\n".join(lines)


def mermaid_markdown(pipeline: Pipeline, title: str | None = None) -> str:
    """A Markdown ``mermaid`` code block, which JupyterLab (≥ 4.1) draws in the notebook."""
    return "```mermaid\n" + to_mermaid(pipeline, title) + "\n```"
