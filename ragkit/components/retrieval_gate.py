"""RetrievalGate: does this question need the documents at all?

"Hi!", "what is 12 * 7?" or "tell me a joke" need no retrieval: searching costs time and puts
unrelated chunks in front of the model. The gate sends the question on one of two outputs —
``search_query`` (retrieve as usual) or ``direct_query`` (answer with the no-context prompt) — so the
graph's retrieval, reranking and grading never run on the direct branch (Haystack runs a component
only when its inputs arrive).

Backends:

* ``"rules"`` — the router's chit-chat / arithmetic / translation patterns
  (:func:`~ragkit.components.query_router.route_by_rules` says SIMPLE) and talk to the assistant
  itself ("hi there", "how are you", "thank you …"); microseconds, and when in doubt it retrieves.
* ``"llm"`` — one yes/no question to the LLM, "does answering need facts from the user's
  documents?"; with llama.cpp P(yes) is read from one forward pass (no generation) and the question
  retrieves unless P(yes) < ``threshold``; a server gives it from its top log-probabilities
  (:mod:`ragkit.llm.judgments`; one that sends none, a constrained yes/no reply). A failed
  or unusable reply retrieves, and the trace says so — skipping retrieval by mistake is the costly error.

Without a router this is the only way a ragkit graph skips retrieval; with one, the router's SIMPLE
route does the same job per route, and the gate runs before it.

Usage::

    gate = RetrievalGate(backend="rules")
    gate.run(query="Hi there!")              # {"direct_query": "Hi there!", "gate": {...}}
    gate.run(query="Where was Tesla born?")  # {"search_query": "Where was Tesla born?", "gate": {...}}
"""

from __future__ import annotations

import re
from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.components.query_router import route_by_rules
from ragkit.llm.judgments import yes_probability
from ragkit.llm.structured import generator_from_dict, generator_to_dict, llm_error
from ragkit.pipeline.trace import record

GATE_BACKENDS = ("rules", "llm")
# Talk to the assistant itself, on top of the router's SIMPLE patterns (which only know bare greetings)
_SMALL_TALK = re.compile(r"^\s*(hi|hello|hey)\s+(there|again|everyone)\b[\s!.?]*$|\bhow are you\b|\bwho are you\b|\bwhat can you do\b|^\s*(thanks|thank you)\b.*[!.]?\s*$", re.I)
GATE_SYSTEM = "You decide whether a question needs facts from the user's documents (articles, manuals, notes) to be answered."


def gate_task(question: str) -> str:
    return f"Question: {question}\nDoes answering it need facts from the documents? Reply yes or no."


@component
class RetrievalGate:
    def __init__(self, backend: str = "rules", chat_generator: Any = None, threshold: float = 0.5, prompt: Optional[str] = None):
        """``prompt``: a custom system prompt for the LLM backend (the task line stays)."""
        if backend not in GATE_BACKENDS:
            raise ValueError(f"backend must be one of {GATE_BACKENDS}, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm gate needs a chat generator")
        if not 0 <= threshold <= 1:
            raise ValueError("threshold must be in [0, 1]")
        self.backend, self.chat_generator, self.threshold, self.prompt = backend, chat_generator, threshold, prompt

    def warm_up(self) -> None:
        if self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator), threshold=self.threshold, prompt=self.prompt)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RetrievalGate":
        return default_from_dict(cls, generator_from_dict(data))

    def _p_needs_documents(self, question: str) -> float:
        messages = [ChatMessage.from_system(self.prompt or GATE_SYSTEM), ChatMessage.from_user(gate_task(question))]
        return yes_probability(self.chat_generator, messages, step="gate")

    @component.output_types(search_query=str, direct_query=str, gate=dict)
    def run(self, query: str) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.backend}
        if self.backend == "rules":
            retrieve = route_by_rules(query) != "SIMPLE" and not _SMALL_TALK.search(query)
            info["why"] = "chit-chat, arithmetic or translation (the router's SIMPLE rules)" if not retrieve else "not chit-chat or arithmetic"
        else:
            try:
                self.warm_up()
                p = self._p_needs_documents(query)
                info["p_needs_documents"] = round(p, 3)
                retrieve = p >= self.threshold
            except Exception as exc:  # unsure: retrieve (a needless search costs less than a missed one)
                error = llm_error(exc, self.chat_generator)
                record(fallback=f"gate: {error}; retrieved")
                info["fallback"] = error
                retrieve = True
        info["retrieve"] = retrieve
        record(decision={"retrieve": "yes" if retrieve else "no"})
        return {"search_query": query, "gate": info} if retrieve else {"direct_query": query, "gate": info}
