"""The front of the graph — what happens to the question before retrieval: the follow-up rewrite
(``Features(follow_ups=True)``), the noise-stripping rewrite and the retrieval gate, and the direct
answer the gate's "no" and the router's SIMPLE route lead to.

Split from :mod:`ragkit.pipeline.graph` to keep each file readable; the builder there calls these.
Each function rewires ``inputs["query"]`` — the sockets the caller's question goes to — so the step
it adds takes the caller's question and feeds every step that read it before.
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.components.joiners import BranchJoiner
from haystack.dataclasses import ChatMessage

from ragkit.components.follow_up_rewriter import FollowUpRewriter
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.query_rewriter import QueryRewriter
from ragkit.components.retrieval_gate import RetrievalGate
from ragkit.index.store import RagIndex
from ragkit.pipeline.features import Features

DIRECT_SYSTEM = "Answer briefly and helpfully."
# Components that start retrieval: with the gate on they get the question only when it says "retrieve".
GATED = {"router", "route_policy", "embed", "hyde", "retrieve", "sql", "select", "intent", "expand", "clarify"}  # (fallback waits on retrieve's documents)


def add_gate_and_rewrite(b: Any) -> None:
    """``rewrite`` (strip conversational noise) and ``gate`` (does it need the documents?) in front of
    retrieval, and the direct answer that the gate's no and the router's SIMPLE route both reach;
    ``b`` is :mod:`ragkit.pipeline.graph`'s builder (``f``, ``pipe``, ``inputs``, ``llm()``, ``prompt()``, ``config``)."""
    f, pipe = b.f, b.pipe
    direct_routes = f.routing and any(not p["retrieve"] for p in f.route_policy.values())
    direct_senders = ["route_policy.direct_query"] if direct_routes else []
    if f.rewrite or f.gate:
        front = None
        if f.rewrite:
            pipe.add_component("rewrite", QueryRewriter(backend=f.rewrite_backend, chat_generator=b.llm("rewrite") if f.rewrite_backend == "llm" else None,
                                                        prompt=b.prompt("rewrite")))
            front = "rewrite.query"
        if f.gate:
            pipe.add_component("gate", RetrievalGate(backend=f.gate_backend, chat_generator=b.llm("gate") if f.gate_backend == "llm" else None,
                                                     prompt=b.prompt("gate")))
            if front:
                pipe.connect(front, "gate.query")
            direct_senders.append("gate.direct_query")
        given = ["rewrite.query"] if f.rewrite else ["gate.query"]
        for socket in b.inputs["query"]:
            if f.gate and socket.split(".")[0] in GATED:  # retrieval and what starts it wait for the gate's yes
                pipe.connect("gate.search_query", socket)
            elif front:
                pipe.connect(front, socket)
            else:
                given.append(socket)
        b.inputs["query"] = given
    if direct_senders:
        pipe.add_component("direct_prompt", ChatPromptBuilder(
            template=[ChatMessage.from_system(b.prompt("direct_answer") or DIRECT_SYSTEM), ChatMessage.from_user("{{ query }}")], required_variables=["query"],
        ))
        pipe.add_component("direct_answer", GuardedGenerator(chat_generator=b.llm("direct_answer"), max_tokens=b.config.models.max_new_tokens, step="direct_answer"))
        b.inputs["streaming_callback"].append("direct_answer.streaming_callback")
        if len(direct_senders) > 1:  # the gate's no and the router's SIMPLE route both answer without sources
            pipe.add_component("direct_question", BranchJoiner(str))
            for sender in direct_senders:
                pipe.connect(sender, "direct_question.value")
            pipe.connect("direct_question.value", "direct_prompt.query")
        else:
            pipe.connect(direct_senders[0], "direct_prompt.query")
        pipe.connect("direct_prompt.prompt", "direct_answer.messages")


def add_follow_up(pipe: Pipeline, inputs: dict[str, list[str]], f: Features, llm: Any, index: RagIndex | None, index_path: str | None, embedder: str) -> None:
    """``follow_up`` at the front: it takes the caller's question and history, and every step that read
    the question reads its (possibly rewritten) question instead."""
    pipe.add_component("follow_up", FollowUpRewriter(
        chat_generator=llm if f.follow_up_backend == "llm" else None, backend=f.follow_up_backend, index=index, index_path=index_path,
        embedder=embedder, history_tokens=f.history_tokens,
    ))
    for socket in inputs["query"]:
        pipe.connect("follow_up.query", socket)
    inputs["query"] = ["follow_up.query"]
    inputs["history"] = ["follow_up.history"]
