"""Draw a Haystack ``Pipeline`` as Mermaid text, offline, readable at laptop width.

Haystack's ``Pipeline.show()`` / ``draw()`` send the graph to a Mermaid web service (mermaid.ink);
ragkit makes no network call the user did not configure, and JupyterLab renders Mermaid itself
(since 4.1: a ``mermaid`` code block in Markdown, or a ``text/vnd.mermaid`` output). Haystack's
text builder is private and labels every node with HTML lists of its inputs, too wide for a
notebook at laptop width; this writes a compact flowchart from the pipeline's own graph instead:

* where the question enters (a ``question`` node, with an arrow to each step of the first stage that
  reads it; a later step that reads it again says so on its node) and where a run ends
  (``metadata["ragkit"]["ends"]``: the answer, or a decline before any LLM call);
* the steps grouped by stage — the question, retrieval, checking the sources, the answer, the
  confidence (:data:`STAGES`; a step of no known stage goes in its own group);
* one arrow per pair of connected steps, dashed where every receiving socket is optional (a branch
  or a loop edge); only the arrows that leave a branching step (a router, the gate) are labelled
  with the branch they carry, and settings a step hands to many others (``top_k``, the answer mode,
  the grader, the signals the confidence step reads) are said on the step instead of drawn as
  arrows — at laptop width those arrows made the all-on graph twice as wide as the notebook;
* a step that holds a pipeline of its own — the self-correction loop — as one node that says what
  it does inside. ``detail=True`` opens it as a subgraph and labels every arrow with its sockets
  (``sender → receiver``). The planning step (``per_part``) always shows the graph it runs per part.

Usage::

    from IPython.display import Markdown
    Markdown(mermaid_markdown(rag.pipeline))        # rendered by JupyterLab, no network
    print(to_mermaid(rag.pipeline, detail=True))     # every step and socket
"""

from __future__ import annotations

import re

from haystack import Pipeline

from ragkit.pipeline.graph_io import inner_pipeline

# Node colours by role, so a learner sees at a glance what each step is.
ROLE_STYLE = {
    "llm": "fill:#fde2c8,stroke:#c26a1b",
    "route": "fill:#e4dcf5,stroke:#6b4fb3",
    "retrieve": "fill:#d6ecf7,stroke:#2b7bb9",
    "other": "fill:#eeeeee,stroke:#777777",
    "io": "fill:#ffffff,stroke:#333333",
}
# The graph's steps by stage, in the order a question meets them.
STAGES: list[tuple[str, str, set[str]]] = [
    ("question", "1 · the question", {"rewrite", "gate", "decompose", "router", "route_policy"}),
    ("retrieval", "2 · retrieve", {"select", "intent", "embed", "hyde", "query_embedding", "expand", "retrieve"}),
    ("sources", "3 · check the sources", {"guard", "rerank", "grade", "sql", "fallback", "context_check", "multi_hop"}),
    ("answer", "4 · answer", {"answer_mode", "evidence", "answer_prompt", "answer", "self_correction", "direct_prompt", "direct_question",
                              "direct_answer", "per_part"}),
    ("confidence", "5 · confidence", {"confidence"}),
]
# Outputs that carry the question itself on (rewritten, or once the gate says "retrieve").
QUESTION_OUTPUTS = {("QueryRewriter", "query"), ("RetrievalGate", "search_query")}
# Steps that always open as a subgraph: the planning step's per-part graph is the graph itself.
ALWAYS_OPEN = {"PerPartAnswerer": "once for each part"}
# What a collapsed step does inside, said on its node.
COLLAPSED = {"SelfCorrectingAnswerer": "answer → judge → retry, bounded"}
BRANCHING = ("ConditionalRouter", "QueryRouter", "RetrievalGate", "QueryDecomposer")
# Receiving sockets that carry a setting or a side signal, not the flow of the question: drawn with detail=True only.
NODE_SPACING, RANK_SPACING = 20, 35
FAN_OUT = 3  # an output sent to this many steps or more is drawn as one arrow per stage it reaches
SIDE_SOCKETS = {"top_k", "mode", "backend", "signals", "evidence_signals", "filters", "support_threshold"}
# What a step hands out as settings (said on its node when those arrows are not drawn).
SETTINGS_NOTE = {"route_policy": "sets top_k, answer mode, grader per route", "answer_mode": "sets the answer mode",
                 "confidence": "also reads the retrieval and evidence signals"}
LLM_STEPS = {"answer", "direct_answer", "hyde", "grade", "hallucination", "self_correction", "multi_hop", "decompose", "rewrite"}


def _node_id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _label(text: str) -> str:
    return text.replace('"', "'").replace("<", "&lt;").replace(">", "&gt;")


def _role(name: str, type_name: str) -> str:
    if type_name in ("ConditionalRouter", "BranchJoiner", "QueryRouter", "OutputAdapter", "RetrievalGate"):
        return "route"
    if name in LLM_STEPS or type_name in ("GuardedGenerator", "SelfCorrectingAnswerer"):
        return "llm"
    if name in ("embed", "retrieve", "guard", "rerank", "query_embedding", "fallback", "expand"):
        return "retrieve"
    return "other"


def _stage_index(name: str) -> int:
    return next((i for i, (_, _, members) in enumerate(STAGES) if name in members), len(STAGES))


def question_flow(pipeline: Pipeline) -> tuple[dict[str, list[str]], set[str]]:
    """Where the question goes: ``{sender: receivers drawn}`` (the caller is ``""``) and the steps that
    read it again later, said on their nodes instead of drawn as arrows across the graph."""
    meta = pipeline.metadata.get("ragkit") or {}
    flows: dict[str, list[str]] = {"": [socket.split(".", 1)[0] for socket in (meta.get("inputs") or {}).get("query", [])]}
    for sender, receiver, data in pipeline.graph.edges(data=True):
        if (type(pipeline.get_component(sender)).__name__, data["from_socket"].name) in QUESTION_OUTPUTS:
            flows.setdefault(sender, []).append(receiver)
    drawn, later = {}, set()
    for sender, receivers in flows.items():
        if not receivers:
            continue
        first = min(_stage_index(r) for r in receivers)
        drawn[sender] = list(dict.fromkeys(r for r in receivers if _stage_index(r) == first))
        later |= {r for r in receivers if _stage_index(r) != first}
    return drawn, later


class _Drawing:
    def __init__(self, detail: bool):
        self.detail = detail
        self.lines: list[str] = []
        self.roles: dict[str, list[str]] = {}
        self.stage_of: dict[str, str] = {}  # step (with its prefix) -> the stage subgraph it is drawn in
        # per staged pipeline (by prefix), without detail: the question's arrows drawn and the steps that read it later
        self.flows: dict[str, tuple[dict[str, list[str]], set[str]]] = {}

    def node(self, node: str, name: str, type_name: str, indent: str, note: str | None = None) -> None:
        small = _label(type_name) + (f"<br/><i>{_label(note)}</i>" if note else "")
        self.lines.append(f'{indent}{node}["<b>{_label(name)}</b><br/><small>{small}</small>"]')
        self.roles.setdefault(_role(name, type_name), []).append(node)

    def body(self, pipeline: Pipeline, prefix: str, indent: str, staged: bool, question: str = "question") -> None:
        """Nodes (grouped by stage when ``staged``), the question's way in and out, and the edges of ``pipeline``."""
        if staged and not self.detail:
            self.flows[prefix] = question_flow(pipeline)
        names = list(pipeline.graph.nodes)
        groups: list[tuple[str, str, list[str]]] = []
        if staged:
            opened = [n for n in names if type(pipeline.get_component(n)).__name__ in ALWAYS_OPEN]  # big enough to stand alone
            placed: set[str] = set(opened)
            for key, title, members in STAGES:
                inside = [n for n in names if n in members and n not in placed]
                placed.update(inside)
                if inside:
                    groups.append((key, title, inside))
            rest = [n for n in names if n not in placed]
            if rest:
                groups.append(("other", "other steps", rest))
            groups.append(("", "", opened))
        else:
            groups.append(("", "", names))
        for key, title, members in groups:
            inner_indent = indent
            if key:
                self.lines.append(f'{indent}subgraph {_node_id(prefix + "stage_" + key)}["{title}"]')
                inner_indent = indent + "    "
            for name in members:
                if key:
                    self.stage_of[prefix + name] = _node_id(prefix + "stage_" + key)
                self.step(pipeline, name, prefix, inner_indent)
            if key:
                self.lines.append(f"{indent}end")
        if staged:
            self.entry_and_ends(pipeline, prefix, indent, question)
        self.edges(pipeline, prefix, indent)

    def step(self, pipeline: Pipeline, name: str, prefix: str, indent: str) -> None:
        instance = pipeline.get_component(name)
        type_name = type(instance).__name__
        node = _node_id(prefix + name)
        inner = inner_pipeline(instance)
        if inner is not None and (self.detail or type_name in ALWAYS_OPEN):
            what = ALWAYS_OPEN.get(type_name) or COLLAPSED.get(type_name) or type_name
            self.lines.append(f'{indent}subgraph {node}["{_label(name)} ({_label(type_name)}: {_label(what)})"]')
            self.lines.append(f"{indent}    direction TB")
            self.body(inner, prefix + name + "__", indent + "    ", staged=type_name in ALWAYS_OPEN, question="one part of the question")
            self.lines.append(f"{indent}end")
            return
        notes = [COLLAPSED.get(type_name) if inner is not None else (None if self.detail else SETTINGS_NOTE.get(name))]
        if name in self.flows.get(prefix, ({}, set()))[1]:
            notes.append("reads the question")
        self.node(node, name, type_name, indent, ", ".join(n for n in notes if n) or None)

    def edges(self, pipeline: Pipeline, prefix: str, indent: str) -> None:
        connections = [(sender, d["from_socket"], receiver, d["to_socket"]) for sender, receiver, d in pipeline.graph.edges(data=True)]
        if not self.detail:
            connections = [c for c in connections if c[3].name not in SIDE_SOCKETS]
            drawn = self.flows.get(prefix, ({}, set()))[0]
            # the question's own arrows go only to the first stage that reads it (question_flow)
            connections = [c for c in connections if not self.carries_question(pipeline, c) or c[2] in drawn.get(c[0], [c[2]])]
            connections = self.fan_out(pipeline, connections, prefix, indent)
        # one arrow per pair of steps, listing every connection between them (solid if any is mandatory)
        pairs: dict[tuple[str, str], list] = {}
        for sender, out, receiver, into in connections:
            pairs.setdefault((sender, receiver), []).append((out, into))
        for (sender, receiver), sockets in pairs.items():
            arrow = "-->" if any(i.is_mandatory for _, i in sockets) else "-.->"
            if self.detail:
                label = "<br/>".join(_label(o.name if o.name == i.name else f"{o.name} → {i.name}") for o, i in sockets)
            elif type(pipeline.get_component(sender)).__name__ in BRANCHING:
                label = "<br/>".join(dict.fromkeys(_label(o.name) for o, _ in sockets))
            else:
                label = ""
            self.arrow(indent, _node_id(prefix + sender), arrow, label, _node_id(prefix + receiver))

    def fan_out(self, pipeline: Pipeline, connections: list, prefix: str, indent: str) -> list:
        """One output sent to many steps in other stages: one arrow per stage it reaches, to the stage;
        returns the connections still to draw one by one."""
        by_output: dict[tuple[str, str], list] = {}
        for c in connections:
            by_output.setdefault((c[0], c[1].name), []).append(c)
        rest = []
        for (sender, out_name), group in by_output.items():
            own = self.stage_of.get(prefix + sender)
            far = [c for c in group if self.stage_of.get(prefix + c[2]) not in (None, own)]
            if len(group) < FAN_OUT or not far:
                rest += group
                continue
            rest += [c for c in group if c not in far]
            label = _label(out_name) if type(pipeline.get_component(sender)).__name__ in BRANCHING else ""
            for stage in dict.fromkeys(self.stage_of[prefix + c[2]] for c in far):
                self.arrow(indent, _node_id(prefix + sender), "-->", label, stage)
        return rest

    @staticmethod
    def carries_question(pipeline: Pipeline, connection: tuple) -> bool:
        return (type(pipeline.get_component(connection[0])).__name__, connection[1].name) in QUESTION_OUTPUTS

    def arrow(self, indent: str, sender: str, arrow: str, label: str, receiver: str) -> None:
        text = f'|"{label}"|' if label else ""
        self.lines.append(f"{indent}{sender} {arrow}{text} {receiver}")

    def entry_and_ends(self, pipeline: Pipeline, prefix: str, indent: str, question: str) -> None:
        """The question's way in and the ways a run ends (``metadata["ragkit"]``)."""
        meta = pipeline.metadata.get("ragkit") or {}
        receivers = [socket.split(".", 1)[0] for socket in (meta.get("inputs") or {}).get("query", [])]
        if receivers:
            entry = _node_id(prefix + "question")
            self.lines.append(f'{indent}{entry}(["{_label(question)}"])')
            self.roles.setdefault("io", []).append(entry)
            for receiver in self.flows.get(prefix, ({"": receivers}, set()))[0].get("", receivers):
                self.lines.append(f"{indent}{entry} --> {_node_id(prefix + receiver)}")
        for i, (where, label) in enumerate((meta.get("ends") or {}).items()):
            step, _, socket = where.partition(".")
            if step not in pipeline.graph.nodes:
                continue
            end = _node_id(f"{prefix}end_{i}")
            self.lines.append(f'{indent}{end}(["{_label(label)}"])')
            self.roles.setdefault("io", []).append(end)
            self.arrow(indent, _node_id(prefix + step), "-->", _label(socket), end)


def to_mermaid(pipeline: Pipeline, title: str | None = None, direction: str = "TD", detail: bool = False) -> str:
    """``detail``: open every step that holds a pipeline and label every arrow with its sockets."""
    drawing = _Drawing(detail)
    # tighter spacing than Mermaid's defaults (50 / 50 px): the all-on graph is as wide as its widest
    # stage, and at laptop width every pixel of it is scaled down with the text
    lines = ["---", *([f"title: {_label(title)}"] if title else []), "config:", "  flowchart:", f"    nodeSpacing: {NODE_SPACING}",
             f"    rankSpacing: {RANK_SPACING}", "---"]
    lines.append(f"flowchart {direction}")
    drawing.body(pipeline, "", "    ", staged=True)
    lines += drawing.lines
    for role, nodes in drawing.roles.items():
        lines.append(f"    classDef {role} {ROLE_STYLE[role]}")
        lines.append(f"    class {','.join(nodes)} {role}")
    return "\n".join(lines)


def mermaid_markdown(pipeline: Pipeline, title: str | None = None, detail: bool = False) -> str:
    """A Markdown ``mermaid`` code block, which JupyterLab (≥ 4.1) draws in the notebook."""
    return "```mermaid\n" + to_mermaid(pipeline, title, detail=detail) + "\n```"
