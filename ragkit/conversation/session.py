"""``ChatSession``: a conversation with the documents — follow-ups, clarification, streaming — kept on
disk so a kernel restart or a new ``ragkit chat --session NAME`` continues where it left off.

Each message goes through four things, in order:

1. **Validation** (:mod:`ragkit.conversation.validation`): empty, oversized, punctuation-only or
   nonsense messages get a clear ``invalid`` reply and no step runs.
2. **A pending clarification**: if the last reply asked "which one do you mean?", this message is read
   against its options (:func:`ragkit.conversation.clarification.resolve_reply`, rules) and the
   original question is answered with the chosen option's scope. A reply that matches nothing is asked
   again once; after that the question is answered without a scope, and the reply says so. The pending
   clarification lives in the session store, not in any prompt.
3. **The question**, through one :class:`~ragkit.pipeline.engine.AgenticRAG` whose features include
   ``follow_ups`` (the history, bounded by tokens, rewrites a follow-up) and ``clarify`` (ambiguity
   decided from the evidence) — both on by default here. The answer's tokens go to ``on_token`` as
   they are generated; the step now running to ``on_step``.
4. **Storage** (:class:`~ragkit.conversation.store.SessionStore`): the exchange is written before the
   question runs and completed after, so Ctrl-C mid-stream leaves it ``incomplete`` with the partial
   answer (never stored as complete), and two processes on one session each keep their turns.

Usage::

    chat = ChatSession("tesla", index_dir=".ragkit/index")
    chat.send("Where was Nikola Tesla born?", on_token=lambda c: print(c.content, end=""))
    reply = chat.send("and what did he study?")
    reply.asked_as            # "What did Nikola Tesla study?" — the rewrite, shown to the user
    chat.send("When was he born?").options     # asked back: Genghis Khan or Nikola Tesla?
    chat.send("the second")                    # answered about Nikola Tesla
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from haystack.dataclasses import ChatMessage, StreamingChunk

from ragkit.config import RagConfig
from ragkit.conversation.clarification import NO_MATCH_NOTE, ask_again_text, resolve_reply, title_of
from ragkit.conversation.store import Exchange, SessionInfo, SessionStore, check_session_name
from ragkit.conversation.validation import validate
from ragkit.index.retrieval import QueryError, check_query
from ragkit.index.filters import whole_index_scope
from ragkit.index.store import RagIndex
from ragkit.index.stores import load_index
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features
from ragkit.pipeline.result import AgenticResult

HISTORY_EXCHANGES = 8  # the most recent exchanges sent as history; the follow-up step bounds them by tokens
ASK_AGAIN = 1  # a reply that matches no option is asked again this many times, then answered without a scope


def chat_features(features: Features | None = None) -> Features:
    """``features`` (default plain RAG) with the conversation's two steps on."""
    return replace(features or Features(), follow_ups=True, clarify=True).validate()


@dataclass
class ChatReply:
    kind: str  # "answer", "clarification", "invalid", "failed"
    text: str
    result: AgenticResult | None = None
    asked_as: str | None = None  # the follow-up as it was searched and answered, when it was rewritten
    options: list[dict] = field(default_factory=list)  # a clarification's options: label, scope
    note: str | None = None  # how a clarification reply was read: "about Nikola Tesla", "answered without narrowing: …"
    exchange_id: int | None = None

    @property
    def confidence(self) -> float | None:
        return self.result.confidence if self.result is not None and self.kind == "answer" else None


class ChatSession:
    def __init__(
        self, name: str = "default", index_dir: str | Path = ".ragkit/index", features: Features | None = None, config: RagConfig | None = None,
        path: str | Path | None = None, rag: AgenticRAG | None = None, index: RagIndex | None = None, chat_generator: Any = None,
        store: SessionStore | None = None,
    ):
        """``features``: used as given (default: plain RAG with ``follow_ups`` and ``clarify`` on, :func:`chat_features`);
        ``path``: the session file (default ``sessions.sqlite`` in the user's data folder); ``rag``: an engine to reuse."""
        self.store = store or SessionStore(path)
        self.name = self.store.ensure(check_session_name(name))
        self.config = config or (rag.config if rag is not None else RagConfig())
        if rag is None:
            index = index if index is not None else load_index(self.config.store or index_dir, expected_embedder=self.config.models.embedder)
            rag = AgenticRAG(features or chat_features(), config=self.config, index=index, chat_generator=chat_generator)
        self.rag = rag

    # -- what the session holds ------------------------------------------------------------------------
    @property
    def notice(self) -> str | None:
        """What happened to an unreadable session file (moved aside, new one started), if anything."""
        return self.store.notice

    @property
    def features(self) -> Features:
        return self.rag.features

    def exchanges(self, last: int | None = None) -> list[Exchange]:
        return self.store.exchanges(self.name, last)

    def sessions(self) -> list[SessionInfo]:
        return self.store.sessions()

    @property
    def pending(self) -> dict | None:
        return self.store.pending(self.name)

    def history(self, last: int = HISTORY_EXCHANGES) -> list[ChatMessage]:
        """The conversation so far as chat messages: each question as it was answered (the rewrite, or the
        question with the option chosen), and each complete answer with its sources' titles in ``meta``."""
        messages = []
        for exchange in self.exchanges(last):
            if exchange.status in ("invalid", "answering"):
                continue
            messages.append(ChatMessage.from_user(exchange.asked_as or exchange.question))
            if exchange.status == "complete" and exchange.reply:
                titles = list(dict.fromkeys(s.get("title") for s in exchange.sources if s.get("title")))[:3]
                messages.append(ChatMessage.from_assistant(exchange.reply, meta={"titles": titles}))
        return messages

    # -- switching ---------------------------------------------------------------------------------------
    def switch(self, name: str) -> None:
        self.name = self.store.ensure(check_session_name(name))

    def new(self, name: str | None = None) -> str:
        self.switch(name or time.strftime("chat-%Y%m%d-%H%M%S"))
        return self.name

    def set_features(self, features: Features) -> None:
        """Rebuild the engine with ``features``, keeping the loaded model and index."""
        self.rag = AgenticRAG(features.validate(), config=self.config, index=self.rag.index, chat_generator=self.rag.chat_generator,
                              step_generators=self.rag.step_generators)

    # -- a message ---------------------------------------------------------------------------------------
    def send(self, message: str, on_token: Callable[[StreamingChunk], None] | None = None, on_step: Callable | None = None) -> ChatReply:
        """Answer ``message`` (or read it as the answer to a pending clarification); see the module."""
        checked = validate(message, self.rag.index)
        if not checked.valid and not self._answers_pending(message):
            return ChatReply("invalid", checked.reason)
        message = message.strip()
        pending = self.store.take_pending(self.name)
        if pending:
            resolved = self._resolve(message, pending, on_token, on_step)
            if resolved is not None:
                return resolved
        return self._ask(message, message, on_token=on_token, on_step=on_step)

    def _answers_pending(self, message: str) -> bool:
        """Whether ``message`` picks an option of the pending clarification ("2", "yes", "any"): a reply,
        not a question, so it is not refused as one (validation would call "2" digits only)."""
        try:
            check_query(message)
        except QueryError:  # empty, oversized or not text: invalid whatever is pending
            return False
        pending = self.store.pending(self.name)
        if not pending:
            return False
        choice = resolve_reply(message.strip(), pending["options"])
        return choice.option is not None or choice.how == "any"

    def _resolve(self, message: str, pending: dict, on_token, on_step) -> ChatReply | None:
        options = pending["options"]
        choice = resolve_reply(message, options)
        if choice.how == "new_question":
            return None  # a new question: the clarification is dropped
        if choice.option is not None:
            option = options[choice.option]
            return self._ask(message, pending["question"], scope=option["scope"], label=option["label"],
                             note=f"answering about {option['label']}", on_token=on_token, on_step=on_step)
        if choice.how == "any":
            return self._ask(message, pending["question"], scope=self._everything(), note="answered across every option, as asked",
                             on_token=on_token, on_step=on_step)
        if pending.get("asked", 1) <= ASK_AGAIN:  # ask once more, with the options numbered
            self.store.set_pending(self.name, {**pending, "asked": pending.get("asked", 1) + 1})
            text = ask_again_text(options)
            row = self.store.begin(self.name, message)
            self.store.finish(row, reply=text, status="clarification", meta={"asked_again": True})
            return ChatReply("clarification", text, options=options, exchange_id=row)
        return self._ask(message, pending["question"], scope=self._everything(),
                         note=NO_MATCH_NOTE, on_token=on_token, on_step=on_step)

    def _everything(self) -> dict:
        return whole_index_scope(self.rag.index)

    def _ask(self, message: str, question: str, scope: dict | None = None, label: str | None = None, note: str | None = None,
             on_token=None, on_step=None) -> ChatReply:
        # a clarified question was already read with the history when it was asked back: now its scope decides
        history = self.history() if scope is None else None
        row = self.store.begin(self.name, message, asked_as=f"{question} ({label})" if label else (question if question != message else None))
        streamed: list[str] = []

        def forward(chunk: StreamingChunk) -> None:
            if chunk.start:
                streamed.clear()  # a retry or a new part starts over
            streamed.append(chunk.content or "")
            if on_token is not None:
                on_token(chunk)

        self.rag.tracer.listener = on_step
        try:
            result = self.rag.ask(question, history=history, scope=scope, streaming_callback=forward)
        except BaseException:  # Ctrl-C while it streamed: keep what came, marked incomplete
            self.store.finish(row, reply="".join(streamed), status="incomplete", meta={"interrupted": True})
            raise
        finally:
            self.rag.tracer.listener = None
        return self._finish(row, message, result, note)

    def _finish(self, row: int, message: str, result: AgenticResult, note: str | None) -> ChatReply:
        meta = {"exit_reason": result.exit_reason, "seconds": round(result.seconds, 3), "first_token_s": result.first_token_s,
                "llm_calls": result.trace.llm_calls, "features": self.rag.features.to_dict(), "note": note}
        asked_as = result.rewritten_question
        if result.clarification:
            clarification = result.clarification
            self.store.set_pending(self.name, {"question": clarification["question"], "options": clarification["options"], "asked": 1, "exchange": row})
            self.store.finish(row, reply=clarification["prompt"], status="clarification", asked_as=asked_as, meta=meta)
            return ChatReply("clarification", clarification["prompt"], result=result, asked_as=asked_as, options=clarification["options"], exchange_id=row)
        sources = [{"source": d.meta.get("source"), "title": title_of(d), "score": d.score} for d in result.sources]
        status = "failed" if result.failed else "complete"
        self.store.finish(row, reply=result.answer, status=status, confidence=result.confidence, asked_as=asked_as, sources=sources, meta=meta)
        return ChatReply("failed" if result.failed else "answer", result.answer, result=result, asked_as=asked_as, note=note, exchange_id=row)
