"""The chat side of ``ragkit serve``: what ``POST /v1/chat/completions`` replies, whole or streamed.

Like the OpenAI API it mimics, every request carries the whole conversation; the server keeps only
what the model must not: a clarification still waiting for its answer.

* **History**: the messages before the last user message become the ``history`` (``ChatMessage`` s) that
  a graph with ``Features(follow_ups=True)`` rewrites a follow-up with ("and what did he study?"). A reply
  this module wrote is read back as :meth:`ragkit.conversation.session.ChatSession.history` sends it: the
  answer alone (not its sources and confidence lines), its sources' titles in ``meta["titles"]``, and its
  "(read as: …)" line in place of the user message before it.
* **Clarification**: a graph with ``Features(clarify=True)`` may ask back ("Which one do you mean? 1) …
  2) …"). The question and its options are kept in a :class:`~ragkit.conversation.store.SessionStore`
  file (``served_conversations.sqlite`` in the user's data folder, ``$RAGKIT_DATA``) under
  :func:`conversation_key` of the conversation up to and including that reply (roles and
  whitespace-collapsed text: a client that trims the reply still matches). A request whose earlier
  messages have that key is read against the options (:func:`plan_turn`, ``ChatSession._resolve`` for a
  server: "2", "the second", option words, "yes"/"no", "any") and the ORIGINAL question is answered with
  the chosen option's scope; a reply that matches nothing is asked again once, then the question is
  answered without narrowing the search (a scope of every collection, as the session does), saying so.
  The pending clarification is read, not taken: its key names the conversation, so the same
  conversation sent again (a client's retry, a "regenerate" button) is answered the same way.
* **Streaming** (``"stream": true``): :meth:`ChatReplies.reply` returns a generator of ``StreamingChunk`` s
  that Hayhooks sends as server-sent events: the "(read as: …)" line as soon as the follow-up step has
  rewritten the question, the answer's tokens as they are generated, then one last chunk
  (``finish_reason="stop"``) with what the final answer adds to the streamed text (a grounded answer's
  citation mark), the sources and the confidence line.

Only the answer steps' tokens are sent (``meta["ragkit_step"]`` ``answer`` / ``direct_answer``, named by
:class:`ragkit.llm.streaming.StepStream`), never a planning step's. A stream cannot take back what it
sent, so when the answer starts over (a self-correction retry: a second ``start=True`` chunk of the same
step and part) the retry streams after a marked line, :data:`REVISED`; when the final answer is not the
streamed text (a decline by the confidence floor, a decomposed question's merged answer after its
labelled parts) it follows under :data:`FINAL`. Never two answers run together: the last one the client
reads is the one ragkit gives.

Not Hayhooks' ``streaming_generator``: it calls ``Pipeline.run`` in a thread of its own, while ragkit's
trace — which :func:`~ragkit.pipeline.result.result_from_outputs` needs to tell a failed answer from a
real one, and which says when the follow-up was rewritten — and the question's deadline are kept per
thread around that call, and the helper has no hook to wrap it (``on_pipeline_end`` sees the outputs,
not the trace). :meth:`ChatReplies._stream` is the same pattern, a thread and a queue, with ragkit's run
inside.

Usage::

    chat = ChatReplies(load_exported(Path("pipeline.yaml")))
    asked = [{"role": "user", "content": "When was he born?"}]
    prompt = chat.reply(asked)                 # "… Which one do you mean? 1) Genghis Khan  2) Nikola Tesla"
    for chunk in chat.reply([*asked, {"role": "assistant", "content": prompt}, {"role": "user", "content": "the second"}], stream=True):
        print(chunk.content, end="")           # (read as: When was he born? — answering about Nikola Tesla) …
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re
import threading
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from queue import Queue
from typing import Any, Iterator

from haystack import Document, Pipeline
from haystack.dataclasses import ChatMessage, StreamingChunk

from ragkit.components.index_retriever import IndexRetriever
from ragkit.conversation.clarification import NO_MATCH_NOTE, ask_again_text, resolve_reply, title_of
from ragkit.conversation.session import ASK_AGAIN
from ragkit.conversation.store import SessionStore, data_dir
from ragkit.index.filters import whole_index_scope
from ragkit.index.handle import open_index
from ragkit.index.retrieval import QueryError, check_query
from ragkit.pipeline.export import ask_exported
from ragkit.pipeline.graph_io import walk_all
from ragkit.pipeline.result import ANSWER_STEPS, AgenticResult
from ragkit.pipeline.trace import Step

STORE_FILE = "served_conversations.sqlite"
REVISED = "\n\n(revised: the check found the draft above unsupported by the sources)\n\n"
FINAL = "\n\n(final answer)\n\n"
_READ_AS = re.compile(r"\A\(read as: (?P<asked>.*)\)[ \t]*(?:\n|\Z)")
_SOURCE_LINE = re.compile(r"^\[\d+\] (.+?)\s*$", re.M)
_CONFIDENCE_LINE = re.compile(r"\s*\nconfidence \S+ [\d.]+\s*\Z")


# -- the request -------------------------------------------------------------------------------------
def text_of(content: Any) -> str:
    """An OpenAI message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text"))
    return ""


def split_request(messages: list[dict]) -> tuple[str, list[dict]]:
    """The last user message's text, and the conversation before it."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return text_of(messages[i].get("content")), list(messages[:i])
    return "", list(messages)


def conversation_key(messages: list[dict]) -> str | None:
    """The session name a conversation's pending clarification is kept under (None: no conversation yet)."""
    turns = [[m["role"], " ".join(text_of(m.get("content")).split())] for m in messages if m.get("role") in ("user", "assistant")]
    if not turns:
        return None
    return "served-" + hashlib.sha256(json.dumps(turns, ensure_ascii=False).encode("utf-8")).hexdigest()


def read_reply(text: str) -> tuple[str | None, str, list[str]]:
    """A reply this module wrote, read back: how the question was read, the final answer, its sources' titles."""
    match = _READ_AS.match(text)
    body = text[match.end():] if match else text
    body, _, sources = body.partition("\nSources:\n")
    body = _CONFIDENCE_LINE.sub("", body)
    for marker in (REVISED.strip(), FINAL.strip()):  # only the last answer counts
        body = body.rpartition(marker)[2]
    titles = list(dict.fromkeys(title_of(Document(content="", meta={"source": s})) for s in _SOURCE_LINE.findall(sources)))[:3]
    return (match.group("asked") if match else None), body.strip(), titles


def history_of(messages: list[dict]) -> list[ChatMessage]:
    """The conversation before the question, as the follow-up step reads it (see the module)."""
    history: list[ChatMessage] = []
    for message in messages:
        role, text = message.get("role"), text_of(message.get("content"))
        if role == "user" and text.strip():
            history.append(ChatMessage.from_user(text))
        elif role == "assistant" and text.strip():
            asked_as, answer, titles = read_reply(text)
            if asked_as and history and history[-1].role.value == "user":
                history[-1] = ChatMessage.from_user(asked_as)  # the question as it was answered
            if answer:
                history.append(ChatMessage.from_assistant(answer, meta={"titles": titles}))
    return history


# -- what to run for the last message ------------------------------------------------------------------
@dataclass
class Turn:
    question: str | None = None  # what the pipeline is asked; None: nothing runs, ``reply`` is the reply
    history: list[ChatMessage] | None = None
    scope: dict | None = None  # a clarification's answer
    read_as: str | None = None  # a clarified question as it is answered: the reply's first line
    reply: str | None = None
    pending: dict | None = None  # the clarification, still open after this reply (asked again)


def pipeline_index_scope(pipe: Pipeline) -> dict | None:
    """:func:`~ragkit.index.filters.whole_index_scope` of the index the pipeline's retriever reads."""
    for _, instance in walk_all(pipe):
        if isinstance(instance, IndexRetriever):
            index_path = instance.to_dict()["init_parameters"]["index_path"]
            return whole_index_scope(open_index(index_path))
    return None


def plan_turn(pipe: Pipeline, message: str, history: list[ChatMessage], pending: dict | None) -> Turn:
    """``message`` as a new question, or read against the ``pending`` clarification (``ChatSession._resolve``)."""
    if not pending:
        return Turn(message, history)
    options, question = pending["options"], pending["question"]
    choice = resolve_reply(message, options)
    if choice.how == "new_question":
        return Turn(message, history)  # the clarification is dropped
    # the question was read with the history when it was asked back: now the chosen scope decides
    if choice.option is not None:
        option = options[choice.option]
        return Turn(question, scope=option["scope"], read_as=f"{question} — answering about {option['label']}")
    if choice.how == "any":
        return Turn(question, scope=pipeline_index_scope(pipe), read_as=f"{question} — answered across every option, as asked")
    if pending.get("asked", 1) <= ASK_AGAIN:
        return Turn(reply=ask_again_text(options), pending={**pending, "asked": pending.get("asked", 1) + 1})
    return Turn(question, scope=pipeline_index_scope(pipe),
                read_as=f"{question} — {NO_MATCH_NOTE}")


# -- the reply's text ------------------------------------------------------------------------------------
class ReplyText:
    """The reply as the client reads it, built in the order it is sent; ``sent`` is all of it so far."""

    def __init__(self) -> None:
        self.sent = ""
        self.streamed = False  # whether any answer token was sent
        self.attempt = ""  # the answer streamed since its current attempt (or part) began
        self.part: str | None = None
        self.read_as: str | None = None

    def _send(self, text: str) -> str:
        self.sent += text
        return text

    def reading(self, read_as: str | None) -> str:
        """"(read as: …)", once, and only as the first line (where :func:`read_reply` finds it)."""
        if not read_as or self.read_as or self.sent:
            return ""
        self.read_as = read_as
        return self._send(f"(read as: {read_as})\n\n")

    def token(self, chunk: StreamingChunk) -> str:
        meta = chunk.meta or {}
        if meta.get("ragkit_step") not in ANSWER_STEPS or not chunk.content:
            return ""  # a planning step's tokens are not the answer
        lead = ""
        if chunk.start:
            part = meta.get("part")
            if part != self.part:  # a decomposed question's next part
                self.part = part
                lead = ("\n\n" if self.streamed else "") + f"[{part}] "
            elif self.attempt:  # the same answer starts over: a self-correction retry
                lead = REVISED
            self.attempt = ""
        self.attempt += chunk.content
        self.streamed = True
        return self._send(lead + chunk.content)

    def ending(self, result: AgenticResult) -> str:
        """What follows the streamed tokens (all of the reply when nothing streamed)."""
        if result.clarification:  # asked back before any LLM call: nothing was streamed
            return self._send(result.clarification["prompt"])
        if result.failed:  # said as an error, never passed off as an answer
            lead = "\n\n(the text above is not an answer) " if self.streamed else ""
            return self._send(f"{lead}error: no answer could be produced: {result.error}")
        cited = "\n".join(f"[{i}] {d.meta.get('source')}" for i, d in enumerate(result.sources, 1))
        sureness = f"confidence {result.symbol} {result.confidence:.2f}" if result.confidence is not None else ""
        tail = "".join(f"\n\n{part}" for part in (f"Sources:\n{cited}" if cited else "", sureness) if part)
        return self._send(self._rest_of(result.answer.strip()) + tail)

    def _rest_of(self, answer: str) -> str:
        streamed = self.attempt.strip()
        if not self.streamed:
            return answer
        if answer == streamed:
            return ""
        if streamed and answer.startswith(streamed):  # e.g. a grounded span's citation mark, added after decoding
            rest = answer[len(streamed):]
            return rest.lstrip() if self.attempt[-1:].isspace() else rest
        return FINAL + answer


# -- the endpoint ------------------------------------------------------------------------------------------
class ChatReplies:
    """Chat completions for one loaded pipeline; pending clarifications in ``store_path``."""

    def __init__(self, pipe: Pipeline, store_path: str | Path | None = None):
        self.pipe = pipe
        self.store_path = Path(store_path) if store_path else data_dir() / STORE_FILE

    def _store(self) -> closing[SessionStore]:
        # one connection per use: Hayhooks calls from its thread pool, and a sqlite3 connection stays in its thread
        return closing(SessionStore(self.store_path))

    def reply(self, messages: list[dict], stream: bool = False) -> str | Iterator[StreamingChunk]:
        message, earlier = split_request(messages)
        try:
            message = check_query(message)
        except QueryError as exc:
            return f"error: {exc}"
        key = conversation_key(earlier)
        # read, not taken: the same conversation sent again (a retry, "regenerate") is read the same way
        with self._store() as store:
            pending = store.pending(key) if key else None
        turn = plan_turn(self.pipe, message, history_of(earlier), pending)
        if turn.question is None:  # asked again: the options, numbered, and nothing run
            self._keep_pending(messages, message, turn.reply, turn.pending, asked_again=True)
            return turn.reply
        if stream:
            return self._stream(messages, message, turn, key)
        text = ReplyText()
        result = ask_exported(self.pipe, turn.question, turn.history, turn.scope)
        text.reading(turn.read_as or result.rewritten_question)
        text.ending(result)
        self._after(messages, message, turn, key, result, text.sent)
        return text.sent

    def _stream(self, messages: list[dict], message: str, turn: Turn, key: str | None) -> Iterator[StreamingChunk]:
        events: Queue = Queue()

        def on_step(event: str, step: Step) -> None:
            if event == "end" and step.name == "follow_up" and step.decision.get("rewrite") and str(step.decision.get("verdict", "")).startswith("kept"):
                events.put(("read_as", str(step.decision["rewrite"])))

        def work() -> None:
            try:
                events.put(("result", ask_exported(self.pipe, turn.question, turn.history, turn.scope, lambda chunk: events.put(("token", chunk)), on_step)))
            except BaseException as exc:  # told to the client, never a stream that hangs
                events.put(("error", exc))

        # the caller's context goes along (an active LLM cache, say), as it would with the run in this thread
        threading.Thread(target=contextvars.copy_context().run, args=(work,), name="ragkit-chat-answer", daemon=True).start()
        text = ReplyText()
        if turn.read_as:
            yield StreamingChunk(content=text.reading(turn.read_as))
        while True:
            kind, value = events.get()
            if kind == "error":
                yield StreamingChunk(content=f"\n\nerror: the question could not be answered: {type(value).__name__}: {value}", finish_reason="stop")
                return
            if kind == "result":
                ending = text.ending(value)
                self._after(messages, message, turn, key, value, text.sent)  # before the client can send its next message
                yield StreamingChunk(content=ending, finish_reason="stop")
                return
            sent = text.token(value) if kind == "token" else text.reading(value)
            if sent:
                yield StreamingChunk(content=sent)

    def _after(self, messages: list[dict], message: str, turn: Turn, key: str | None, result: AgenticResult, reply: str) -> None:
        """Keep a clarification for the next message; record a clarified question's answer beside it."""
        if result.clarification:
            c = result.clarification
            self._keep_pending(messages, message, reply, {"question": c["question"], "options": c["options"], "asked": 1})
        elif turn.read_as is not None and key:  # a clarification's answer
            with self._store() as store:
                row = store.begin(key, message, asked_as=turn.read_as)
                store.finish(row, reply=reply, status="failed" if result.failed else "complete", confidence=result.confidence,
                             sources=[{"source": d.meta.get("source")} for d in result.sources], meta={"exit_reason": result.exit_reason})

    def _keep_pending(self, messages: list[dict], message: str, reply: str, pending: dict, asked_again: bool = False) -> None:
        key = conversation_key([*messages, {"role": "assistant", "content": reply}])
        with self._store() as store:
            row = store.begin(key, message)
            store.finish(row, reply=reply, status="clarification", meta={"asked_again": asked_again})
            store.set_pending(key, {**pending, "exchange": row})
