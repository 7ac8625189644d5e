"""The notebook chat widget: its HTML (pure renderers) and the widget driven without a browser, on a
fake session that keeps its exchanges in a real session file. No LLM."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.dataclasses import StreamingChunk

from ragkit.conversation.session import ChatReply
from ragkit.conversation.store import Exchange, SessionStore
from ragkit.pipeline.result import AgenticResult
from ragkit.pipeline.trace import Step, Trace
from ragkit.ui import chat_widget
from ragkit.ui.chat_widget import (
    ChatWidget, exchange_timings, render_exchange, render_reply, render_status, render_streaming, render_user, timings_figure,
)

OPTIONS = [{"label": "Genghis Khan", "scope": {"source": ["wikipedia/Genghis_Khan.md"]}},
           {"label": "Nikola Tesla", "scope": {"source": ["wikipedia/Nikola_Tesla.md"]}}]


def result(answer="Smiljan [1]", confidence=0.82, symbol="●", n_sources=4, rewritten=None, first_token_s=0.4):
    sources = [Document(id=f"d{i}", content="text", meta={"source": f"wikipedia/Doc_{i}.md", "section": f"S{i}"}, score=0.9 - i / 10)
               for i in range(n_sources)]
    trace = Trace([Step("retrieve", seconds=0.1), Step("answer", seconds=1.0, llm_calls=1)])
    return AgenticResult(question="q", answer=answer, sources=sources, confidence=confidence, symbol=symbol, trace=trace, seconds=1.25,
                         rewritten_question=rewritten, first_token_s=first_token_s)


class FakeSession:
    """What ChatWidget uses of a ChatSession, scripted: "When was he born?" with no history is asked
    back; "the first"/"the second" to a pending question answers about that option; "2" is refused as
    the real session's input check does (the clarification stays pending); anything else is answered
    "Smiljan", streamed in tokens with the steps reported. Every exchange goes to a real session file."""

    def __init__(self, path, name="t"):
        self.store = SessionStore(path)
        self.name = self.store.ensure(name)
        self.notice = None
        self.sent: list[str] = []

    def exchanges(self, last=None):
        return self.store.exchanges(self.name, last)

    @property
    def pending(self):
        return self.store.pending(self.name)

    def send(self, message, on_token=None, on_step=None):
        self.sent.append(message)
        if message.isdigit():
            return ChatReply("invalid", "The message is only digits and punctuation; ask a question in words.")
        pending = self.store.take_pending(self.name)
        row = self.store.begin(self.name, message)
        if pending and message in ("the first", "the second"):
            option = pending["options"][("the first", "the second").index(message)]
            r = result(answer=f"about {option['label']}", confidence=0.55, symbol="◐")
            self.store.finish(row, reply=r.answer, status="complete", confidence=r.confidence, asked_as=f"{pending['question']} ({option['label']})",
                              meta={"seconds": r.seconds, "first_token_s": r.first_token_s, "llm_calls": 1, "note": f"answering about {option['label']}"})
            return ChatReply("answer", r.answer, result=r, asked_as=f"{pending['question']} ({option['label']})", note=f"answering about {option['label']}")
        if message == "When was he born?" and not self.exchanges()[:-1]:
            prompt = "“When was he born?” could mean more than one thing. Which one do you mean? 1) Genghis Khan  2) Nikola Tesla"
            self.store.set_pending(self.name, {"question": message, "options": OPTIONS, "asked": 1})
            self.store.finish(row, reply=prompt, status="clarification", meta={"seconds": 0.05, "first_token_s": None, "llm_calls": 0})
            return ChatReply("clarification", prompt, options=OPTIONS)
        if on_step:
            on_step("start", Step("retrieve"))
            on_step("end", Step("follow_up", decision={"rewrite": "What did Tesla study?", "verdict": "kept: names the subject"}))
            on_step("start", Step("answer"))
        for i, token in enumerate(["Smil", "jan", " [1]"]):
            if on_token:
                on_token(StreamingChunk(content=token, start=i == 0))
        r = result(rewritten="What did Tesla study?")
        self.store.finish(row, reply=r.answer, status="complete", confidence=r.confidence, asked_as=r.rewritten_question,
                          sources=[{"source": d.meta["source"], "title": "T", "score": d.score} for d in r.sources],
                          meta={"seconds": r.seconds, "first_token_s": r.first_token_s, "llm_calls": 1})
        return ChatReply("answer", r.answer, result=r, asked_as=r.rewritten_question)


@pytest.fixture
def session(tmp_path):
    return FakeSession(tmp_path / "sessions.sqlite")


# -- renderers ----------------------------------------------------------------------------------------
def test_answer_shows_confidence_rewrite_and_short_sources():
    text = render_reply(ChatReply("answer", "Smiljan [1]", result=result(rewritten="What did Tesla study?"), asked_as="What did Tesla study?"))
    assert "● 0.82</b> chance the answer is right" in text
    assert "↳ read as: What did Tesla study?" in text
    assert "[1] wikipedia/Doc_0.md · section S0 · 0.90" in text and "[3] wikipedia/Doc_2.md" in text
    assert "Doc_3" not in text and "+ 1 more" in text  # only the first three sources, the rest counted
    assert "first token 400 ms" in text and "1.2 s" in text and "1 LLM call" in text


def test_confidence_symbol_follows_the_bands():
    assert "◐ 0.55" in render_reply(ChatReply("answer", "x", result=result(confidence=0.55, symbol="◐")))
    low = render_reply(ChatReply("answer", "x", result=result(confidence=0.2, symbol="○")))
    assert "○ 0.20" in low and chat_widget.plots.LOW_COLOR in low


def test_text_is_escaped_not_markup():
    text = render_reply(ChatReply("answer", "<script>alert(1)</script>", result=result()))
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "<img" not in render_user("<img src=x onerror=alert(1)>")


def test_clarification_lists_its_options():
    text = render_reply(ChatReply("clarification", "Which one?", options=OPTIONS))
    assert "Which one do you mean?" in text and "1) Genghis Khan" in text and "2) Nikola Tesla" in text
    assert "chance the answer is right" not in text


def test_invalid_and_failed_replies():
    assert "Please ask a question" in render_reply(ChatReply("invalid", "Please ask a question"))
    failed = result(answer="The documents don't say.", confidence=0.0)
    failed.error = "answer: the model timed out"
    text = render_reply(ChatReply("failed", failed.answer, result=failed))
    assert "error: answer: the model timed out" in text and "chance the answer is right" not in text


def test_stored_exchange_renders_like_the_live_reply():
    e = Exchange(id=1, session="t", question="and what did he study?", asked_as="What did Nikola Tesla study?", reply="electrical engineering [1]",
                 status="complete", confidence=0.74, sources=[{"source": "wikipedia/Nikola_Tesla.md", "title": "Nikola Tesla", "score": 0.93}],
                 meta={"seconds": 3.2, "first_token_s": 1.1, "llm_calls": 1})
    text = render_exchange(e)
    assert "and what did he study?" in text and "↳ read as: What did Nikola Tesla study?" in text
    assert "● 0.74" in text and "[1] wikipedia/Nikola_Tesla.md · 0.93" in text and "first token 1.1 s" in text
    stopped = render_exchange(Exchange(id=2, session="t", question="q", asked_as=None, reply="Smil", status="incomplete", confidence=None))
    assert "partial answer is kept" in stopped and "chance" not in stopped


def test_streaming_and_status():
    assert "retrieve…" in render_streaming("q", step="retrieve")
    text = render_streaming("q", "Smil", step="answer", read_as="What did Tesla study?")
    assert "Smil" in text and "↳ read as" in text
    assert "running <b>answer</b>… 1.5 s" in render_status("answer", 1.5) and render_status(None, 0) == ""


def test_timings_rows_and_figure(session):
    session.send("Where was Nikola Tesla born?")
    session.send("When was he born?")  # history exists: answered
    rows = exchange_timings(session.exchanges())
    assert [r["#"] for r in rows] == [1, 2] and rows[0]["first token s"] == 0.4 and rows[0]["total s"] == 1.25
    fig = timings_figure(rows)
    assert len(fig.axes[0].patches) == 2 and fig.axes[0].get_xlabel().startswith("seconds")


# -- the widget ----------------------------------------------------------------------------------------
def test_send_streams_and_adds_the_exchange(session, monkeypatch):
    chat = ChatWidget(session)
    drawn: list[str] = []
    monkeypatch.setattr(chat_widget, "STREAM_EVERY_S", 0.0)  # every token redrawn, so each state can be seen
    chat.messages.observe(lambda change: None, names="children")
    original = chat_widget.render_streaming
    monkeypatch.setattr(chat_widget, "render_streaming", lambda *a, **k: drawn.append(original(*a, **k)) or drawn[-1])
    reply = chat.send("Where was Nikola Tesla born?")
    assert reply.kind == "answer" and chat.last_reply is reply
    assert any("retrieve…" in d for d in drawn) and any("Smiljan" in d and "▍" in d for d in drawn)
    assert any("↳ read as: What did Tesla study?" in d for d in drawn)
    assert len(chat.messages.children) == 1 and "● 0.82" in chat.messages.children[-1].value
    assert chat.status.value == "" and not chat.send_button.disabled and "1 exchange" in chat.header.value


def test_streaming_is_throttled(session, monkeypatch):
    chat = ChatWidget(session)
    drawn = []
    original = chat_widget.render_streaming
    monkeypatch.setattr(chat_widget, "render_streaming", lambda *a, **k: drawn.append(a) or original(*a, **k))
    monkeypatch.setattr(chat_widget, "STREAM_EVERY_S", 3600.0)
    chat.send("Where was Nikola Tesla born?")
    assert not any(len(a) > 1 and a[1] == "Smil" for a in drawn[1:])  # tokens within the interval are not redrawn one by one


def test_text_box_and_enter_send(session):
    chat = ChatWidget(session)
    chat.input.value = "Where was Nikola Tesla born?"
    chat.send_button.click()
    assert session.sent == ["Where was Nikola Tesla born?"] and chat.input.value == ""
    chat.input.value = "   "
    chat.send_button.click()  # nothing to send
    chat.input.value = "and what did he study?"
    chat.input._handle_string_msg(None, {"event": "submit"}, None)  # what the browser sends on Enter
    assert session.sent == ["Where was Nikola Tesla born?", "and what did he study?"]
    assert len(chat.messages.children) == 2


def test_clarification_shows_buttons_and_a_click_resolves(session):
    chat = ChatWidget(session)
    reply = chat.send("When was he born?")
    assert reply.kind == "clarification"
    buttons = chat.options.children
    assert [b.description for b in buttons] == ["1) Genghis Khan", "2) Nikola Tesla"]
    assert "Which one do you mean?" in chat.messages.children[-1].value
    buttons[1].click()
    assert session.sent[-1] == "the second"  # an ordinal the session resolves by rules
    last = chat.messages.children[-1].value
    assert "about Nikola Tesla" in last and "◐ 0.55" in last and "read as: When was he born? (Nikola Tesla)" in last
    assert chat.options.children == ()


def test_a_refused_reply_keeps_the_options(session):
    chat = ChatWidget(session)
    chat.send("When was he born?")
    chat.input.value = "2"
    chat.send_button.click()
    assert "only digits" in chat.messages.children[-1].value
    assert [b.description for b in chat.options.children] == ["1) Genghis Khan", "2) Nikola Tesla"]  # still waiting for a choice
    chat.options.children[1].click()
    assert "about Nikola Tesla" in chat.messages.children[-1].value and chat.options.children == ()


def test_a_new_widget_shows_the_stored_conversation_and_pending_options(session, tmp_path):
    ChatWidget(session).send("When was he born?")
    reopened = ChatWidget(FakeSession(tmp_path / "sessions.sqlite"))  # a new process on the same file
    assert len(reopened.messages.children) == 1 and "When was he born?" in reopened.messages.children[0].value
    assert [b.description for b in reopened.options.children] == ["1) Genghis Khan", "2) Nikola Tesla"]
    reopened.options.children[0].click()
    assert "about Genghis Khan" in reopened.messages.children[-1].value


def test_long_history_is_cut_with_a_count(session):
    for i in range(4):
        session.send(f"question {i}?")
    chat = ChatWidget(session, show_last=2)
    assert len(chat.messages.children) == 3 and "2 earlier exchanges not shown" in chat.messages.children[0].value


def test_an_error_is_shown_and_the_widget_stays_usable(session, monkeypatch):
    chat = ChatWidget(session)
    monkeypatch.setattr(session, "send", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("model gone")))
    chat.input.value = "Where?"
    chat.send_button.click()  # a click does not raise
    assert "RuntimeError: model gone" in chat.messages.children[-1].value
    assert not chat.send_button.disabled and not chat.input.disabled and chat.status.value == ""
    with pytest.raises(RuntimeError):
        chat.send("Where?")  # from code, it does


def test_layout_fits_a_narrow_notebook(session):
    chat = ChatWidget(session)
    boxes = [chat.widget, chat.messages, chat.options, chat.input, chat.send_button, *chat.widget.children]
    assert not [b for b in boxes if str(b.layout.width or "").endswith("px")]
    assert chat.options.layout.flex_flow == "row wrap"
    assert "overflow-wrap:anywhere" in render_user("x" * 500)
