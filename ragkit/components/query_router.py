"""QueryRouter: classify a question as SIMPLE, FACTUAL, ANALYTICAL, COMPARISON or SUMMARY.

Three backends, chosen by ``backend``:

* ``"rules"`` — keyword and pattern rules; microseconds, transparent, brittle.
* ``"embedding"`` — nearest class prototype in embedding space (the built-in example questions
  below, or your own); milliseconds, no LLM.
* ``"llm"`` — the chat LLM picks a label; its output is constrained to the five labels (llama.cpp
  grammar / JSON-schema enum), so a small model cannot answer anything else.

Whatever goes wrong in the LLM backend (an exception, a reply that is not a label) falls back to
the rules backend, and the output says so: ``routing["fallback"] = "parse_failed: …"`` — the route
is never a silent guess. The downstream meaning of each route (skip retrieval, retrieve deeper,
gather broader context) belongs to the pipeline's ``Features.route_policy``, not to this component.

Usage::

    router = QueryRouter(backend="embedding")
    router.warm_up()
    router.run(query="Compare the Rhine and the Amazon")   # {"route": "COMPARISON", "routing": {...}}
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

import numpy as np
from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.llm.structured import call_llm, choice_constraint, generator_from_dict, generator_to_dict, json_reply_max_tokens, parse_choice
from ragkit.pipeline.trace import record

ROUTES = ["SIMPLE", "FACTUAL", "ANALYTICAL", "COMPARISON", "SUMMARY"]
RouterBackend = Literal["rules", "embedding", "llm"]

# Generic examples, deliberately about no document in sample_docs/, so the labelled evaluation set
# in tests/data/ measures generalisation rather than memorisation.
PROTOTYPES: dict[str, list[str]] = {
    "SIMPLE": [
        "hello", "hi there, how are you?", "thanks!", "what is 15 times 4?", "what does CPU stand for?",
        "translate good morning into Spanish", "what day comes after Monday?", "tell me a joke",
    ],
    "FACTUAL": [
        "When was the Eiffel Tower completed?", "Who wrote Pride and Prejudice?", "What is the population of Lagos?",
        "Which function returns the length of a list?", "Where is the headquarters of the company located?",
        "What year did the treaty get signed?", "How tall is Mount Kilimanjaro?", "What is the default value of the timeout parameter?",
    ],
    "ANALYTICAL": [
        "Why did the Roman Empire decline?", "How does garbage collection affect latency, and why?",
        "What caused the financial crisis of 2008?", "Explain why the bridge design failed under load.",
        "How did the printing press change European society?", "What are the implications of raising interest rates?",
        "Why is the algorithm slower on sorted input?", "How does the immune system decide what to attack?",
    ],
    "COMPARISON": [
        "How does Python differ from Java?", "Compare the French and American revolutions.",
        "What are the differences between TCP and UDP?", "Which is larger, Canada or Brazil?",
        "Tea versus coffee: which has more caffeine?", "What do lions and tigers have in common?",
        "Contrast classical and operant conditioning.", "Is a tuple or a list better for fixed records?",
    ],
    "SUMMARY": [
        "Summarize this article.", "Give me an overview of the report.", "What are the main points of the chapter?",
        "Can you outline the history of the city?", "TL;DR of the document please", "Briefly describe what the guide covers.",
        "Write a short summary of the paper's findings.", "What is this document about?",
    ],
}

_RULES: list[tuple[str, re.Pattern]] = [
    ("SUMMARY", re.compile(r"\b(summar\w*|overview|outline|tl;?dr|main (points|ideas|themes)|key points|what is (this|the) (document|article|page|chapter) about|recap|gist)\b", re.I)),
    ("COMPARISON", re.compile(r"\b(compar\w*|contrast\w*|differ\w*|difference|versus|vs\.?|similarit\w*|in common|better than|worse than|(larger|smaller|bigger|longer|shorter|older|newer|faster|slower) than|which is (better|larger|bigger|longer|older)|both .+ and)\b", re.I)),
    ("ANALYTICAL", re.compile(r"^\s*(why|how (does|did|do|could|can|would|is|was)|explain|what (caused|causes|led to|explains|are the (implications|consequences|effects|reasons))|in what way)\b|\b(impact|implication|consequence|reason|effect) of\b", re.I)),
    ("SIMPLE", re.compile(r"^\s*(hi|hello|hey|thanks?( you)?|good (morning|evening|afternoon)|bye|ok(ay)?)\b[\s!.?]*$|^\s*(what is|what's|calculate|compute)?\s*[\d\s+\-*/().x×÷^=]+\??\s*$|^\s*what is \d+ (times|plus|minus|divided by) \d+\??\s*$|\btranslate\b|\bstand for\b|\btell me a joke\b", re.I)),
]

ROUTER_SYSTEM = (
    "Classify the user's question for a document question-answering system. Labels: "
    "SIMPLE = chit-chat, arithmetic or general knowledge that needs no documents; "
    "FACTUAL = one specific fact to look up; "
    "ANALYTICAL = why/how reasoning over several facts; "
    "COMPARISON = compares two or more things; "
    "SUMMARY = asks for a summary or overview. Reply with the label only."
)


def route_by_rules(query: str) -> str:
    for label, pattern in _RULES:
        if pattern.search(query):
            return label
    return "FACTUAL"


@component
class QueryRouter:
    def __init__(
        self,
        backend: RouterBackend = "embedding",
        chat_generator: Any = None,
        embedder_model: str = "all-MiniLM-L6-v2",
        prototypes: dict[str, list[str]] | None = None,
        prompt: str | None = None,
    ):
        if backend not in ("rules", "embedding", "llm"):
            raise ValueError(f"backend must be rules, embedding or llm, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm backend needs a chat generator")
        self.backend = backend
        self.chat_generator = chat_generator
        self.embedder_model = embedder_model
        self.prototypes = prototypes or PROTOTYPES
        self.prompt = prompt  # the llm backend's system prompt (ROUTER_SYSTEM when None); the reply is still one of ROUTES
        if set(self.prototypes) != set(ROUTES):
            raise ValueError(f"prototypes must have exactly the labels {ROUTES}")
        self._embedder = None
        self._centroids: np.ndarray | None = None

    def warm_up(self) -> None:
        if self.backend == "embedding" and self._centroids is None:
            from ragkit.llm.generators import shared_text_embedder

            self._embedder = shared_text_embedder(self.embedder_model)
            model = self._embedder.embedding_backend
            centroids = []
            for label in ROUTES:
                vectors = np.asarray(model.embed(self.prototypes[label], normalize_embeddings=True, show_progress_bar=False))
                centroid = vectors.mean(axis=0)
                centroids.append(centroid / np.linalg.norm(centroid))
            self._centroids = np.vstack(centroids)
        if self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            backend=self.backend,
            chat_generator=generator_to_dict(self.chat_generator),
            embedder_model=self.embedder_model,
            prototypes=self.prototypes if self.prototypes is not PROTOTYPES else None,
            prompt=self.prompt,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QueryRouter":
        return default_from_dict(cls, generator_from_dict(data))

    def _embedding_route(self, query: str) -> tuple[str, dict[str, float]]:
        self.warm_up()
        vector = np.asarray(self._embedder.run(text=query)["embedding"], dtype="float32")
        sims = self._centroids @ (vector / np.linalg.norm(vector))
        scores = {label: round(float(s), 4) for label, s in zip(ROUTES, sims)}
        return ROUTES[int(np.argmax(sims))], scores

    @component.output_types(route=str, routing=dict)
    def run(self, query: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        routing: dict[str, Any] = {"backend": self.backend}
        if self.backend == "rules":
            route = route_by_rules(query)
        elif self.backend == "embedding":
            route, routing["scores"] = self._embedding_route(query)
        else:
            messages = [ChatMessage.from_system(self.prompt or ROUTER_SYSTEM), ChatMessage.from_user(query)]
            reply = call_llm(
                self.chat_generator, messages, lambda text: parse_choice(text, ROUTES),
                generation_kwargs={**choice_constraint(self.chat_generator, ROUTES), "max_tokens": json_reply_max_tokens(self.chat_generator, 8, items=2), "temperature": 0.0},
                step="router",
            )
            if reply.ok:
                route = reply.value
            else:
                route = route_by_rules(query)
                routing["fallback"] = reply.error
                routing["fallback_route_from"] = "rules"
        routing["route"] = route
        routing["ms"] = round((time.perf_counter() - t0) * 1000, 2)
        record(decision={"route": route, "router": self.backend})
        return {"route": route, "routing": routing}
