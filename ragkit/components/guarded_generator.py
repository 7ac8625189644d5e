"""GuardedGenerator: a chat generator inside a pipeline that never takes the pipeline down — and
the answer step's two modes, free text and grounded spans.

A bare ``ChatGenerator`` in a ``Pipeline`` raises on a dead server or a timeout, and its token
counts stay in reply metadata no tracer reads. This wrapper calls the chat generator through
:func:`ragkit.llm.structured.call_llm`, so each call is recorded on the trace (calls, prompt tokens,
tokens reused from llama.cpp's prompt cache, completion tokens) and a failure or an empty reply
becomes a traced fallback: the ``fallback`` input if one was sent (e.g. the previous answer in a
self-correction loop), else "The documents don't say.".

Two answer modes (``answer_mode``, or per question through the ``mode`` input, e.g. from the route):

* ``"free"`` — text with citations. With ``answer_format=True`` (the default) on llama.cpp its first
  token may not be a citation mark (:func:`ragkit.llm.structured.answer_constraint`), and on any
  backend a reply that is only citation marks is a fallback too (:func:`ragkit.llm.structured.parse_answer`).
* ``"grounded"`` — a span copied from a source followed by its citation, for questions that ask for
  a fact. The span comes from the ``evidence`` sentence the evidence step chose
  (:class:`ragkit.components.evidence_selector.EvidenceSelector`: the sentence covering most of the
  question's rare terms and closest to it in embedding space); the prompt shows the model only that
  sentence, under its source's number. On llama.cpp the decoding itself can only copy
  (:class:`ragkit.llm.span_decoding.SpanMask`), starting at a word of the question's answer type (a
  number for "how many", a name for "who": :func:`ragkit.llm.span_decoding.candidate_starts`); through
  an OpenAI-compatible server the same rule is sent as a GBNF grammar, which llama-server decodes under
  (:mod:`ragkit.llm.span_grammar`). A reply from a backend without either — a server that ignores the
  grammar — is kept only if it matches a span of the evidence (:func:`ragkit.llm.span_decoding.snap_to_span`),
  else the step declines and says why. One
  call, as for free text, over a prompt a fifth as long. Without evidence (the step used alone) the
  span may start in the one source sentence sharing most words with the question. With a
  ``fallback`` (a self-correction retry) spans starting like the rejected answer are banned, so the
  retry gives the model's next-best span. ``evidence`` in the output says where the span sits in its
  source.

Usage::

    pipe.add_component("answer", GuardedGenerator(chat_generator=llm, max_tokens=256, answer_mode="grounded"))
    pipe.connect("prompt.prompt", "answer.messages")
    pipe.connect("retrieve.documents", "answer.documents")   # -> answer.replies, .ok, .tokens, .evidence, .mode
    pipe.connect("evidence.evidence", "answer.evidence")      # grounded: copy from the evidence sentence
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage, StreamingChunk

from ragkit.eval.metrics import strip_citations
from ragkit.llm.prompts import NO_ANSWER
from ragkit.llm.source_spans import Span, candidate_starts, clean_span, locate_span, snap_to_span
from ragkit.llm.span_decoding import SpanMask, vocabulary_for
from ragkit.llm.served_logprobs import REFUSES_GRAMMAR, endpoint, token_summary
from ragkit.llm.span_grammar import SpanGrammar
from ragkit.llm.streaming import StepStream
from ragkit.llm.structured import TokenProbabilities, answer_constraint, backend_of, call_llm, generator_from_dict, generator_to_dict, parse_answer
from ragkit.pipeline.trace import record

ANSWER_MODES = ("free", "grounded")
# A SQuAD answer is 3 words on average; a clause-bounded span rarely needs more than 32 tokens, and a
# bound keeps a model that copies a whole clause from spending the time of a free answer.
SPAN_MAX_TOKENS = 32
DRAFT_MAX_TOKENS = 48  # extract-then-verify's reply only has to name the answer
# A served span's tokens' alternatives, to renormalise over the grammar's: the allowed tokens outside the list are
# what the reading misses (llama-server lists any number; OpenAI and vLLM refuse over 20 and get a free draft)
TOP_ALTERNATIVES = 100


def _nonempty(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("empty reply")
    return text


def _span(text: str) -> str:
    span = clean_span(text)
    if not span:
        raise ValueError("empty span")
    return span


@component
class GuardedGenerator:
    def __init__(self, chat_generator: Any, max_tokens: int = 256, step: str = "answer", answer_format: bool = True, answer_mode: str = "free"):
        if answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode must be one of {ANSWER_MODES}, not {answer_mode!r}")
        self.chat_generator = chat_generator
        self.max_tokens = max_tokens
        self.step = step
        self.answer_format = answer_format
        self.answer_mode = answer_mode

    def warm_up(self) -> None:
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()
        if self.step == "answer" and backend_of(self.chat_generator) == "llama.cpp" and getattr(self.chat_generator, "_model", None) is not None:
            vocabulary_for(self.chat_generator)  # the span mask's index of the vocabulary (~1 s once per model): setup, not a question's time

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator), max_tokens=self.max_tokens, step=self.step,
            answer_format=self.answer_format, answer_mode=self.answer_mode,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GuardedGenerator":
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(replies=list[ChatMessage], ok=bool, tokens=dict, evidence=Optional[dict], mode=str)
    def run(
        self,
        messages: list[ChatMessage],
        fallback: Optional[str] = None,
        documents: Optional[list[Document]] = None,
        mode: Optional[str] = None,
        query: Optional[str] = None,
        evidence: Optional[list[Document]] = None,
        streaming_callback: Optional[Callable[[StreamingChunk], None]] = None,
    ) -> dict[str, Any]:
        """``replies``: one assistant message, as Haystack's chat generators reply (the fallback text when
        the call failed: ``ok`` says which). ``evidence``: the sentences a grounded answer may copy from
        (:class:`~ragkit.components.evidence_selector.EvidenceSelector`); without them, the whole ``documents``.
        ``streaming_callback``: gets the answer's tokens as they are generated (:class:`ragkit.llm.streaming.StepStream`
        names the step on each chunk; a retry's first chunk is ``start=True`` with ``meta["attempt"] == 1``)."""
        stream = StepStream(streaming_callback, self.step, attempt=1 if fallback else 0) if streaming_callback is not None else None
        out = self._answer(messages, fallback, documents, mode, query, evidence, stream)
        text = out.pop("text")
        return {"replies": [ChatMessage.from_assistant(text, meta={"ok": out["ok"], "mode": out["mode"]})], **out}

    def _answer(
        self, messages: list[ChatMessage], fallback: Optional[str], documents: Optional[list[Document]], mode: Optional[str],
        question: Optional[str], evidence: Optional[list[Document]], stream: Optional[StepStream] = None,
    ) -> dict[str, Any]:
        mode = mode or self.answer_mode
        if mode not in ANSWER_MODES:
            record(fallback=f"{self.step}: unknown answer mode {mode!r}, answered free")
            mode = "free"
        if mode == "grounded" and documents:
            return self._grounded(messages, documents, fallback, question, evidence, stream)
        if documents is not None:  # an answer step (the direct answer has no mode to report)
            record(decision={"mode": "free"})
        kwargs = {"max_tokens": self.max_tokens, "temperature": 0.0}
        if self.answer_format:
            kwargs.update(answer_constraint(self.chat_generator))
        reply = call_llm(self.chat_generator, messages, parse_answer if self.answer_format else _nonempty, kwargs, step=self.step, streaming_callback=stream)
        tokens = dict(reply.tokens or {})  # the reply's token probabilities, a confidence signal (llama.cpp, or a server that sends logprobs)
        if reply.ok:
            return {"text": reply.value, "ok": True, "tokens": tokens, "evidence": None, "mode": "free"}
        return {"text": fallback if fallback else NO_ANSWER, "ok": False, "tokens": {}, "evidence": None, "mode": "free"}

    def _grounded(
        self, messages: list[ChatMessage], documents: list[Document], fallback: Optional[str], question: Optional[str], evidence: Optional[list[Document]],
        stream: Optional[StepStream] = None,
    ) -> dict[str, Any]:
        sources = [d.content or "" for d in documents]
        # what the answer may be copied from: the evidence sentences when the evidence step chose
        # them (each knows its source's number and offset), else the whole sources
        pool = [e for e in (evidence or []) if e.content]
        texts = [e.content for e in pool] if pool else sources
        failed = {"text": fallback if fallback else NO_ANSWER, "ok": False, "tokens": {}, "evidence": None, "mode": "grounded"}
        banned = [strip_citations(fallback)] if fallback and fallback.strip() != NO_ANSWER else []
        # without evidence sentences: the one source sentence sharing most words with the question (a
        # retry, whose best span there was rejected, gets the three best)
        if question:
            starts = candidate_starts(question, texts, sentences=len(texts) if pool else (3 if banned else 1))
        else:
            starts = None
        if backend_of(self.chat_generator) != "llama.cpp":  # no logits: a server's grammar, else extract then verify
            return self._served(messages, documents, pool, texts, question, starts, banned, failed, stream)
        from llama_cpp import LogitsProcessorList

        self.warm_up()
        mask = SpanMask(vocabulary_for(self.chat_generator), texts, banned_prefixes=banned, starts=starts)
        kwargs = {"max_tokens": min(self.max_tokens, SPAN_MAX_TOKENS), "temperature": 0.0, "logits_processor": LogitsProcessorList([mask, TokenProbabilities()])}
        reply = call_llm(self.chat_generator, messages, _span, kwargs, step=self.step, streaming_callback=stream)
        if not reply.ok:
            return failed
        found = locate_span(reply.value, texts)
        if found is None:
            return self._no_span(reply.value)
        span_text = texts[found.source - 1][found.start:found.end]
        return self._span_result(documents, *self._in_source(pool, span_text, found), "copied (constrained decoding)", reply.tokens)

    def _served(
        self, messages: list[ChatMessage], documents: list[Document], pool: list[Document], texts: list[str], question: Optional[str],
        starts: Optional[set], banned: list[str], failed: dict[str, Any], stream: Optional[StepStream],
    ) -> dict[str, Any]:
        """A grounded answer from a backend without logits. An OpenAI-compatible server is sent the mask's rule as a
        GBNF grammar (llama-server decodes under it: :mod:`ragkit.llm.span_grammar`) and asked for each token's top
        alternatives, so the span's token probabilities are read as the mask's would be; the reply is kept only as a
        span of the evidence (:func:`~ragkit.llm.source_spans.snap_to_span`: a server that ignores the grammar gives
        a free draft), else the step declines. A free draft's own token probabilities are not used: the confidence
        is fitted on a span's (bench/served_confidence.py: with a draft's, its mean was 0.31 where 0.45 were right)."""
        kwargs: dict[str, Any] = {"max_tokens": min(self.max_tokens, DRAFT_MAX_TOKENS), "temperature": 0.0}
        grammar = SpanGrammar(texts, starts, banned) if backend_of(self.chat_generator) == "openai" else None
        if grammar is not None and grammar.text:
            kwargs.update(max_tokens=min(self.max_tokens, SPAN_MAX_TOKENS), extra_body={"grammar": grammar.text}, logprobs=True, top_logprobs=TOP_ALTERNATIVES)
        draft = call_llm(self.chat_generator, messages, parse_answer, kwargs, step=self.step, streaming_callback=stream)
        if not draft.ok:
            return failed
        snapped = snap_to_span(draft.value, texts, question or "")
        if snapped is None:
            return self._no_span(draft.value)
        decoded = grammar is not None and grammar.text and endpoint(self.chat_generator) not in REFUSES_GRAMMAR and grammar.allows(draft.text)
        tokens = token_summary(grammar.token_probabilities(draft.logprobs)) if decoded else None
        if tokens:
            record(decision={k: round(v, 4) for k, v in tokens.items() if k != "tokens"})  # the span's, not the raw ones call_llm recorded
        return self._span_result(documents, *self._in_source(pool, *snapped), "copied (a server's grammar)" if decoded else "snapped to the sources", tokens)

    @staticmethod
    def _in_source(pool: list[Document], span_text: str, found: Span) -> tuple[str, Span]:
        """A span found in an evidence sentence, placed in the source it came from."""
        if not pool:
            return span_text, found
        sentence = pool[found.source - 1]
        offset = int(sentence.meta.get("offset", 0))
        return span_text, Span(
            int(sentence.meta.get("cite", found.source)), offset + found.start, offset + found.end, offset, offset + len(sentence.content or ""),
        )

    def _no_span(self, reply: str) -> dict[str, Any]:
        # declining beats passing on words no source supports (a decline, not a failure: the calls worked)
        record(decision={"mode": "grounded", "declined": f"no span of the sources matches the reply {reply[:60]!r}"})
        return {"text": NO_ANSWER, "ok": True, "tokens": {}, "evidence": None, "mode": "grounded"}

    def _span_result(self, documents: list[Document], span_text: str, found: Any, how: str, tokens: Optional[dict]) -> dict[str, Any]:
        text = documents[found.source - 1].content or ""
        evidence = {**found.to_dict(), "document_id": documents[found.source - 1].id, "text": span_text, "sentence": text[found.sentence_start:found.sentence_end]}
        record(decision={"mode": "grounded", "span": how, "source": found.source})
        return {"text": f"{span_text} [{found.source}]", "ok": True, "tokens": dict(tokens or {}), "evidence": evidence, "mode": "grounded"}
