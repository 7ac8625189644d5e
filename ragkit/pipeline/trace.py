"""A per-question record of every pipeline step, collected through Haystack's tracing API.

``RagkitTracer`` is a ``haystack.tracing.Tracer``: while it collects, every ``Pipeline.run`` — ragkit's
or one a user assembled — reports each component run as a :class:`Step` (wall time, documents in
and out with scores). ragkit components add what only they know through :func:`record`: LLM calls,
prompt/completion tokens, decisions, fallbacks (an LLM reply that could not be parsed, an LLM
that raised), and when a streamed step's first token came. Haystack ships an OpenTelemetry/Datadog/logging tracer but nothing that keeps spans
in memory for a notebook to show, which is why this one exists.

It sits *beside* a tracer the user enabled (``LoggingTracer``, OpenTelemetry, Langfuse): while
:meth:`RagkitTracer.collect` runs, every span goes to both (ragkit's tags too), and Haystack's
content-tracing switch stays as the user set it (ragkit reads a step's documents regardless).

Usage::

    with RagkitTracer().collect() as trace:
        pipeline.run(...)
    trace.table()   # list of dicts, one per step
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from haystack import tracing
from haystack.dataclasses import Document

_PREFIX = "ragkit."
ONE_TIME_STEPS = ("sentence_vectors",)  # one-time preparation that may run inside a question


@dataclass
class Step:
    name: str
    component: str = ""
    seconds: float = 0.0
    started: float = 0.0  # time.perf_counter() at the start, for waterfall plots
    llm_calls: int = 0
    cache_hits: int = 0  # LLM replies served by the LLM cache (ragkit.llm.cache): no call was made
    cache_seconds: float = 0.0  # what those calls took when they were made
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_reused: int = 0
    docs_in: list[tuple[str, float | None]] = field(default_factory=list)
    docs_out: list[tuple[str, float | None]] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # degraded but usable: a reply cut at max_tokens, a trimmed prompt
    first_token: float | None = None  # time.perf_counter() when this step's first streamed token arrived (streamed runs only)

    def row(self) -> dict[str, Any]:
        return {
            "stage": self.name,
            "ms": round(self.seconds * 1000, 1),
            "llm_calls": self.llm_calls,
            **({"cache_hits": self.cache_hits} if self.cache_hits else {}),
            "prompt_tokens": self.prompt_tokens,
            "reused": self.prompt_tokens_reused,
            "completion_tokens": self.completion_tokens,
            "docs": f"{len(self.docs_in)} → {len(self.docs_out)}" if (self.docs_in or self.docs_out) else "",
            "decision": ", ".join(f"{k}={v}" for k, v in self.decision.items()),
            "fallbacks": "; ".join([*self.fallbacks, *(f"note: {w}" for w in self.warnings)]),
            "error": self.error or "",
        }


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def llm_calls(self) -> int:
        return sum(s.llm_calls for s in self.steps)

    @property
    def cache_hits(self) -> int:
        return sum(s.cache_hits for s in self.steps)

    @property
    def cache_seconds(self) -> float:
        return sum(s.cache_seconds for s in self.steps)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.steps)

    @property
    def prompt_tokens_reused(self) -> int:
        return sum(s.prompt_tokens_reused for s in self.steps)

    @property
    def prompt_tokens_evaluated(self) -> int:
        """Prompt tokens the LLM actually computed: the rest came from llama.cpp's prompt cache."""
        return self.prompt_tokens - self.prompt_tokens_reused

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion_tokens for s in self.steps)

    @property
    def fallbacks(self) -> list[str]:
        return [f"{s.name}: {f}" for s in self.steps for f in s.fallbacks]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def first_token(self) -> float | None:
        """``time.perf_counter()`` of the first token streamed in this run (None if nothing streamed)."""
        return min((s.first_token for s in self.steps if s.first_token is not None), default=None)

    def table(self) -> list[dict[str, Any]]:
        return [s.row() for s in self.steps]

    def offsets(self) -> list[tuple[str, float, float]]:
        """(step, start offset, seconds) with offsets from the first step's start, in run order."""
        if not self.steps:
            return []
        t0 = min(s.started for s in self.steps)
        return [(s.name, s.started - t0, s.seconds) for s in sorted(self.steps, key=lambda s: s.started)]


def _doc_list(value: Any) -> list[tuple[str, float | None]]:
    if isinstance(value, list) and all(isinstance(d, Document) for d in value):
        return [(d.id, d.score) for d in value]
    return []


class StepReached(Exception):
    """Raised by a tracer told to stop before a step (:meth:`RagkitTracer.collect` with ``stop_before``):
    the step's inputs, as the pipeline assembled them, before it ran."""

    def __init__(self, step: str, inputs: dict[str, Any]):
        super().__init__(f"stopped before {step!r}")
        self.step, self.inputs = step, inputs


_INPUT_TAG = "haystack.component.input"


class _Span(tracing.Span):
    def __init__(self, operation: str, tags: dict[str, Any] | None, stop: bool = False):
        self.operation = operation
        self.tags: dict[str, Any] = dict(tags or {})
        self.started = time.perf_counter()
        self.stop = stop  # raise StepReached when the step's inputs arrive, before it runs

    def set_content_tag(self, key: str, value: Any) -> None:
        # ragkit's trace always reads what a step received and returned (documents and scores),
        # whatever Haystack's content-tracing switch says for other tracers
        self.set_tag(key, value)

    def set_tag(self, key: str, value: Any) -> None:
        if self.stop and key == _INPUT_TAG:
            raise StepReached(self.tags.get("haystack.component.name", self.operation), dict(value or {}))
        if key.startswith(_PREFIX) and key in self.tags and isinstance(value, (int, float)) and key.endswith(("_calls", "_tokens", "_reused", "_hits", "_seconds")):
            self.tags[key] += value  # counters accumulate over several LLM calls in one step
        elif key == _PREFIX + "first_token":
            self.tags.setdefault(key, value)  # the step's first streamed token, not its last call's
        elif key in (_PREFIX + "fallback", _PREFIX + "warning"):
            self.tags.setdefault(key, []).append(value)
        elif key == _PREFIX + "decision" and isinstance(value, dict):
            self.tags.setdefault(key, {}).update(value)
        else:
            self.tags[key] = value

    def to_step(self) -> Step:
        tags = self.tags
        step = Step(
            name=tags.get("haystack.component.name", self.operation),
            component=tags.get("haystack.component.type", ""),
            seconds=time.perf_counter() - self.started,
            started=self.started,
            llm_calls=int(tags.get(_PREFIX + "llm_calls", 0)),
            cache_hits=int(tags.get(_PREFIX + "cache_hits", 0)),
            cache_seconds=float(tags.get(_PREFIX + "cache_seconds", 0.0)),
            prompt_tokens=int(tags.get(_PREFIX + "prompt_tokens", 0)),
            completion_tokens=int(tags.get(_PREFIX + "completion_tokens", 0)),
            prompt_tokens_reused=int(tags.get(_PREFIX + "prompt_tokens_reused", 0)),
            decision=dict(tags.get(_PREFIX + "decision", {})),
            fallbacks=list(tags.get(_PREFIX + "fallback", [])),
            error=tags.get(_PREFIX + "error"),
            warnings=list(tags.get(_PREFIX + "warning", [])),
            first_token=tags.get(_PREFIX + "first_token"),
        )
        inputs = tags.get("haystack.component.input") or {}
        outputs = tags.get("haystack.component.output") or {}
        step.docs_in = _doc_list(inputs.get("documents")) if isinstance(inputs, dict) else []
        step.docs_out = _doc_list(outputs.get("documents")) if isinstance(outputs, dict) else []
        if step.component.endswith("Router") and isinstance(outputs, dict) and not step.decision:
            # which branch a router (e.g. Haystack's ConditionalRouter) took, and short scalar values
            step.decision = {k: v for k, v in outputs.items() if isinstance(v, (int, float, bool)) or (isinstance(v, str) and len(v) <= 40)} or {"branch": ",".join(outputs)}
        return step


StepListener = Callable[[str, Step], None]


# Components that only wrap a pipeline whose steps are traced themselves: not a step of their own.
WRAPPER_TYPES = {"SuperComponent", "SelfCorrectingAnswerer"}


class RagkitTracer(tracing.Tracer):
    """Keeps component spans of the current thread's :meth:`collect` block as :class:`Step` s.

    ``listener``, if set, is called as ``listener("start", step)`` when a component starts (only
    ``name``, ``component`` and ``started`` are known then) and ``listener("end", step)`` with the
    finished step, so a notebook can show the step now running while the question is still going."""

    def __init__(self, listener: StepListener | None = None) -> None:
        self._local = threading.local()
        self.listener = listener

    def _notify(self, event: str, step: Step) -> None:
        if self.listener is None:
            return
        try:
            self.listener(event, step)
        except Exception:  # a display hook must never break the question it watches
            pass

    def _stack(self) -> list[_Span]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def _stops_here(self, name: str) -> bool:
        target = getattr(self._local, "stop_before", None)
        if target is None or target[0] != name:
            return False
        seen = self._local.visits = getattr(self._local, "visits", 0) + 1
        return seen == target[1] + 1

    @contextlib.contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: tracing.Span | None = None) -> Iterator[tracing.Span]:
        collecting = getattr(self._local, "trace", None) is not None and operation_name == "haystack.component.run"
        name = (tags or {}).get("haystack.component.name", operation_name)
        span = _Span(operation_name, tags, stop=collecting and self._stops_here(name))
        stack = self._stack()
        stack.append(span)
        # A SuperComponent's own span only wraps its inner components, which are traced as steps themselves.
        collecting = collecting and span.tags.get("haystack.component.type") not in WRAPPER_TYPES
        if collecting:
            self._notify("start", Step(name=name, component=span.tags.get("haystack.component.type", ""), started=span.started))
        ran = True
        try:
            yield span
        except StepReached:
            ran = False  # stopped before it ran: not a step of the trace
            raise
        finally:
            stack.pop()
            trace = getattr(self._local, "trace", None)
            if collecting and ran and trace is not None:
                self._notify("end", trace.add(span.to_step()))

    def current_span(self) -> tracing.Span | None:
        stack = self._stack()
        return stack[-1] if stack else None

    @contextlib.contextmanager
    def collect(self, stop_before: tuple[str, int] | None = None) -> Iterator[Trace]:
        """Collect this thread's steps into a :class:`Trace`, beside any tracer the user enabled.

        ``stop_before=(step, visit)``: raise :class:`StepReached` with that step's inputs when its
        ``visit``-th run (from 0) is about to start, before it runs."""
        previous = tracing.tracer.actual_tracer if tracing.is_tracing_enabled() else None
        if previous is self or (isinstance(previous, _BesideTracer) and previous.ours is self):
            active = None  # already collecting (a nested collect): the outer one stays in place
        else:
            active = self if previous is None else _BesideTracer(self, previous)
            tracing.enable_tracing(active)
        self._local.trace = Trace()
        self._local.stop_before, self._local.visits = stop_before, 0
        try:
            yield self._local.trace
        finally:
            self._local.trace = None
            self._local.stop_before = None
            if active is not None:
                if previous is None:
                    tracing.disable_tracing()
                else:
                    tracing.enable_tracing(previous)


class _BesideSpan(tracing.Span):
    """One span of ragkit's tracer and one of the user's: every tag goes to both."""

    def __init__(self, ours: tracing.Span, theirs: tracing.Span):
        self.ours, self.theirs = ours, theirs

    def set_tag(self, key: str, value: Any) -> None:
        self.ours.set_tag(key, value)
        self.theirs.set_tag(key, value)

    def set_content_tag(self, key: str, value: Any) -> None:
        self.ours.set_content_tag(key, value)
        self.theirs.set_content_tag(key, value)  # honours the user's content-tracing switch

    def raw_span(self) -> Any:
        return self.theirs.raw_span()

    def get_correlation_data_for_logs(self) -> dict[str, Any]:
        return self.theirs.get_correlation_data_for_logs()


class _BesideTracer(tracing.Tracer):
    """ragkit's tracer beside the user's, for the length of one :meth:`RagkitTracer.collect`."""

    def __init__(self, ours: RagkitTracer, theirs: tracing.Tracer):
        self.ours, self.theirs = ours, theirs
        self._local = threading.local()  # the open spans of this thread (a user's tracer may keep none)

    @contextlib.contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: tracing.Span | None = None) -> Iterator[tracing.Span]:
        their_parent = parent_span.theirs if isinstance(parent_span, _BesideSpan) else parent_span
        stack = self._local.__dict__.setdefault("stack", [])
        with self.theirs.trace(operation_name, tags=tags, parent_span=their_parent) as theirs, self.ours.trace(operation_name, tags=tags) as ours:
            span = _BesideSpan(ours, theirs)
            stack.append(span)
            try:
                yield span
            finally:
                stack.pop()

    def current_span(self) -> tracing.Span | None:
        stack = self._local.__dict__.get("stack")
        if stack:
            return stack[-1]
        return self.ours.current_span() or self.theirs.current_span()  # a span opened on one tracer alone (an agent's tool step)


def record(**tags: Any) -> None:
    """Attach ragkit facts to the current step: ``record(llm_calls=1, prompt_tokens=310,
    decision={"route": "FACTUAL"}, fallback="router: parse_failed", warning="cut at max_tokens")``. A no-op without a tracer."""
    span = tracing.tracer.current_span()
    if span is None:
        return
    for key, value in tags.items():
        span.set_tag(_PREFIX + key, value)


def collecting_tracer() -> RagkitTracer | None:
    """The :class:`RagkitTracer` enabled right now (alone or beside the user's tracer), if any."""
    tracer = tracing.tracer.actual_tracer
    if isinstance(tracer, _BesideTracer):
        tracer = tracer.ours
    return tracer if isinstance(tracer, RagkitTracer) else None


def active_trace() -> Trace | None:
    """The trace a :class:`RagkitTracer` is collecting on this thread right now, if any."""
    return getattr(collecting_tracer()._local, "trace", None) if collecting_tracer() is not None else None


def failed_steps(trace: Trace) -> list[str]:
    """Steps that raised, or whose LLM call failed or gave an unusable reply (each named once, in order)."""
    return list(dict.fromkeys(s.name for s in trace.steps if s.error or s.fallbacks))


def degraded_steps(trace: Trace) -> list[str]:
    """Failed steps, and steps whose reply was usable but degraded (cut at max_tokens, trimmed prompt)."""
    return list(dict.fromkeys(s.name for s in trace.steps if s.error or s.fallbacks or s.warnings))


def first_failure(trace: Trace, prefer: tuple[str, ...] = ()) -> str | None:
    """``"step: what failed"`` for the first failed step (of ``prefer`` if any of those failed): the
    one line a CLI or API caller is shown."""
    for step in sorted(trace.steps, key=lambda s: s.name not in prefer):
        if step.error or step.fallbacks:
            return f"{step.name}: {step.error or step.fallbacks[0]}"
    return None


def one_time_seconds(trace: Trace) -> dict[str, float]:
    """Seconds spent in one-time preparation steps (e.g. ``sentence_vectors``) during this question."""
    spent: dict[str, float] = {}
    for step in trace.steps:
        if step.name in ONE_TIME_STEPS:
            spent[step.name] = spent.get(step.name, 0.0) + step.seconds
    return spent


def per_question_seconds(result: Any) -> float:
    """The result's wall time without one-time preparation that happened to run inside it."""
    return max(result.seconds - sum(one_time_seconds(result.trace).values()), 0.0)
