"""Swap one step of the engine's graph for your own: a plain function, or any Haystack component.

Usage::

    def shortest_first(query: str, documents: list, top_k: int | None = None) -> dict:
        ranked = sorted(documents, key=lambda d: len(d.content or ""))
        return {"documents": ranked[: top_k or 5]}

    rag = AgenticRAG(Features(rerank=True), replace_steps={"rerank": shortest_first})
    rag.ask("Where was Tesla born?").trace.table()     # the "rerank" row is your function

A **function** is wrapped in :class:`CustomStep`, which copies the replaced step's own sockets (names,
types, defaults), so every edge of the graph reconnects unchanged; the function is called with the
inputs the step would have received and returns a dict of the step's outputs. It need only return the
outputs the graph reads (``documents`` for a reranker); the replaced step's other outputs
(``reranking``, its own report) are left out. A **component** is put in as it is, after checking that
it has every socket the graph connects to that step (the error lists what is missing before anything
runs). The sockets are read with Haystack's public ``Pipeline.inputs()`` / ``outputs()``.

An error in a replaced step stays on the result and the rest of the graph degrades rather than
crashing: when the function raises, returns something that is not a dict, or leaves out an output the
graph reads, each such output that has an input of the same name passes that input through
(``documents`` in → ``documents`` out, cut to the step's ``top_k`` when it has one), an output of a
dict type becomes ``{}``, and the failure is recorded on the step's trace row as a fallback — which
the confidence step counts and the panel shows. A step whose outputs cannot be filled that way
(say ``answer``'s reply) re-raises, and the engine returns ``pipeline_error`` with confidence 0.

Written here because Haystack's ``Pipeline`` has no "replace a node": ``remove_component`` drops the
node's edges, so :func:`replace_steps` records them first and connects the new node the same way.
"""

from __future__ import annotations

from typing import Any, Callable

from haystack import Pipeline, component, default_from_dict, default_to_dict
from haystack.utils import deserialize_callable, serialize_callable

from ragkit.pipeline.graph_io import inner_pipeline
from ragkit.pipeline.trace import record


@component
class CustomStep:
    """A function in the place of step ``step``, with that step's sockets.

    ``inputs``: ``{name: (type, default, mandatory)}``; ``outputs``: ``{name: type}``; ``required``: the
    outputs the graph reads (a missing one is a failure; the others may be left out)."""

    def __init__(self, function: Callable[..., Any], inputs: dict[str, tuple[Any, Any, bool]], outputs: dict[str, Any], step: str = "custom",
                 required: list[str] | None = None):
        if not callable(function):
            raise TypeError(f"the replacement for {step!r} must be callable or a Haystack component, not {type(function).__name__}")
        self.function, self.step = function, step
        self.input_spec, self.output_spec = dict(inputs), dict(outputs)
        self.required = list(required if required is not None else outputs)
        for name, (kind, default, mandatory) in self.input_spec.items():
            if mandatory:
                component.set_input_type(self, name, kind)
            else:
                component.set_input_type(self, name, kind, default)
        component.set_output_types(self, **self.output_spec)

    @classmethod
    def like(cls, function: Callable[..., Any], pipe: Pipeline, step: str) -> "CustomStep":
        """A step with the sockets ``step`` has in ``pipe`` (connected or not)."""
        inputs = {name: (spec["type"], spec.get("default_value"), "default_value" not in spec) for name, spec in sockets_of(pipe, step, "inputs").items()}
        outputs = {name: spec["type"] for name, spec in sockets_of(pipe, step, "outputs").items()}
        required = sorted({d["from_socket"].name for _, _, d in pipe.graph.out_edges(step, data=True)})
        return cls(function, inputs, outputs, step=step, required=required)

    def to_dict(self) -> dict[str, Any]:
        if getattr(self.function, "__name__", "<lambda>") == "<lambda>" or "<locals>" in getattr(self.function, "__qualname__", ""):
            raise ValueError(f"the replacement for {self.step!r} is a lambda or a nested function: define it at module level to export the graph")
        inputs = {name: [_type_name(kind), default, mandatory] for name, (kind, default, mandatory) in self.input_spec.items()}
        return default_to_dict(self, function=serialize_callable(self.function), inputs=inputs, outputs={n: _type_name(t) for n, t in self.output_spec.items()},
                               step=self.step, required=self.required)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CustomStep":
        params = data["init_parameters"]
        params["function"] = deserialize_callable(params["function"])
        # an exported step's socket types are kept as names; Any accepts what the graph sends
        params["inputs"] = {name: (Any, default, mandatory) for name, (_, default, mandatory) in params["inputs"].items()}
        params["outputs"] = {name: Any for name in params["outputs"]}
        return default_from_dict(cls, data)

    def run(self, **inputs: Any) -> dict[str, Any]:
        try:
            out = self.function(**inputs)
            if not isinstance(out, dict):
                raise TypeError(f"returned {type(out).__name__}, not a dict of outputs {sorted(self.output_spec)}")
        except Exception as exc:  # the step's error stays on the result; later steps run on what passes through
            return self._degrade(inputs, f"{type(exc).__name__}: {str(exc)[:160]}", exc, self.required)
        given = {k: v for k, v in out.items() if k in self.output_spec}
        missing = [name for name in self.required if name not in given]
        if missing:
            return {**self._degrade(inputs, f"returned no {missing}", None, missing), **given}
        return given

    def _degrade(self, given: dict[str, Any], why: str, exc: Exception | None, names: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in names:
            if name in given:
                value = given[name]
                if isinstance(value, list) and isinstance(given.get("top_k"), int):
                    value = value[: given["top_k"]]  # a failed reranker keeps the step's own bound
                out[name] = value
            elif self.output_spec[name] in (dict, dict[str, Any]) or getattr(self.output_spec[name], "__origin__", None) is dict:
                out[name] = {}
            elif exc is not None:
                raise exc  # nothing to pass through: the graph stops and the result says pipeline_error
            # a missing output that cannot be filled is left out: the steps that wait on it do not run
        record(fallback=f"{self.step}: custom step failed ({why}); passed its inputs through")
        return out


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or str(kind)


def sockets_of(pipe: Pipeline, step: str, kind: str) -> dict[str, dict[str, Any]]:
    """``step``'s input or output sockets in ``pipe`` (Haystack's ``Pipeline.inputs``/``outputs`` description)."""
    if kind == "inputs":
        return pipe.inputs(include_components_with_connected_inputs=True).get(step, {})
    return pipe.outputs(include_components_with_connected_outputs=True).get(step, {})


def component_sockets(instance: Any) -> tuple[set[str], set[str]]:
    """A component's input and output socket names, read by placing it alone in a scratch pipeline."""
    scratch = Pipeline()
    scratch.add_component("step", instance)
    try:
        return set(sockets_of(scratch, "step", "inputs")), set(sockets_of(scratch, "step", "outputs"))
    finally:
        scratch.remove_component("step")  # frees it to join the real pipeline


def replace_steps(pipe: Pipeline, replacements: dict[str, Any], caller_sockets: list[str] | None = None) -> Pipeline:
    """Put each replacement (a function or a component) in the place of the step of that name, same edges."""
    for name, replacement in (replacements or {}).items():
        if name not in pipe.graph.nodes:
            # a decomposed graph answers each part with an inner graph (per_part): the step is in there
            inner = [p for p in (inner_pipeline(c) for _, c in pipe.walk()) if p is not None and name in p.graph.nodes]
            if inner:
                replace_steps(inner[0], {name: replacement}, caller_sockets=inner[0].metadata.get("ragkit", {}).get("inputs", {}).get("query", []))
                continue
            raise ValueError(f"no step {name!r} in this graph to replace; its steps: {sorted(pipe.graph.nodes)}")
        incoming = [(s, d["from_socket"].name, d["to_socket"].name) for s, _, d in pipe.graph.in_edges(name, data=True)]
        outgoing = [(d["from_socket"].name, r, d["to_socket"].name) for _, r, d in pipe.graph.out_edges(name, data=True)]
        given = [s.split(".", 1)[1] for s in caller_sockets or [] if s.split(".", 1)[0] == name]
        if not callable(getattr(replacement, "run", None)):  # a function, not a component
            new = CustomStep.like(replacement, pipe, step=name)
        else:
            have_in, have_out = component_sockets(replacement)
            lacking = sorted({f"input {to}" for _, _, to in incoming if to not in have_in} | {f"input {g}" for g in given if g not in have_in}
                             | {f"output {out}" for out, _, _ in outgoing if out not in have_out})
            if lacking:
                raise ValueError(f"the component replacing {name!r} lacks the sockets the graph connects: {', '.join(lacking)}")
            new = replacement
        pipe.remove_component(name)
        pipe.add_component(name, new)
        for sender, out, to in incoming:
            pipe.connect(f"{sender}.{out}", f"{name}.{to}")
        for out, receiver, to in outgoing:
            pipe.connect(f"{name}.{out}", f"{receiver}.{to}")
    return pipe
