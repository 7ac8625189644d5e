"""`ragkit serve`'s chat endpoint: streamed replies, the conversation's history, clarification kept server-side."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request

import pytest
from haystack import Pipeline
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import StreamingChunk

from served import ragkit_serve

from ragkit.conversation.store import SessionStore
from ragkit.pipeline import serve_chat
from ragkit.pipeline.export import export_yaml
from ragkit.pipeline.features import Features
from ragkit.pipeline.result import AgenticResult
from ragkit.pipeline.serve import YAML_ENV, DoneMarker, PipelineWrapper
from ragkit.pipeline.serve_chat import FINAL, REVISED, STORE_FILE, ChatReplies, ReplyText, conversation_key, history_of, plan_turn

ANSWER = "Nikola Tesla studied engineering at Graz [1]."
OPTIONS = [{"label": "Genghis Khan", "scope": {"source": ["wikipedia/Genghis_Khan.md"]}},
           {"label": "Nikola Tesla", "scope": {"source": ["wikipedia/Nikola_Tesla.md"]}}]


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def chunk(text: str, step: str = "answer", start: bool = False, part: str | None = None, finish_reason: str | None = None) -> StreamingChunk:
    meta = {"ragkit_step": step, **({"part": part} if part else {})}
    return StreamingChunk(content=text, meta=meta, start=start, finish_reason=finish_reason)


# -- reading the request, without a pipeline -----------------------------------------------------------
def test_the_conversation_key_ignores_whitespace_and_system_messages():
    messages = [user("When was he born?"), assistant("Which one?  1) A  2) B\n")]
    assert conversation_key(messages) == conversation_key([{"role": "system", "content": "Be brief."}, user(" When was he born? "), assistant("Which one? 1) A 2) B")])
    assert conversation_key(messages) != conversation_key(messages[:1]) and conversation_key([]) is None
    assert len(conversation_key(messages)) <= 80  # a valid session name


def test_a_served_reply_is_read_back_as_the_answer_with_the_question_as_it_was_read():
    reply = "(read as: What did Nikola Tesla study?)\n\nEngineering [1].\n\nSources:\n[1] wikipedia/Nikola_Tesla.md\n\nconfidence ◐ 0.51"
    history = history_of([user("Where was he born?"), assistant("Smiljan"), user("and what did he study?"), assistant(reply)])
    assert [(m.role.value, m.text) for m in history] == [
        ("user", "Where was he born?"), ("assistant", "Smiljan"), ("user", "What did Nikola Tesla study?"), ("assistant", "Engineering [1]."),
    ]
    assert history[-1].meta["titles"] == ["Nikola Tesla"]
    revised = "Paris" + REVISED + "Smiljan" + FINAL + "I don't know.\n\nconfidence ○ 0.00"
    parts = [{"type": "text", "text": "Where"}, {"type": "text", "text": " was he born?"}]
    assert [m.text for m in history_of([{"role": "user", "content": parts}, assistant(revised)])] == ["Where was he born?", "I don't know."]


def test_a_reply_to_a_pending_clarification_picks_its_option_or_is_asked_again_once():
    pending = {"question": "When was he born?", "options": OPTIONS, "asked": 1}
    no_index = Pipeline()  # no retriever: no whole-index scope to answer without narrowing
    chosen = plan_turn(no_index, "the second", [], pending)
    assert (chosen.question, chosen.scope, chosen.history) == ("When was he born?", OPTIONS[1]["scope"], None)
    assert chosen.read_as == "When was he born? — answering about Nikola Tesla"
    again = plan_turn(no_index, "blue", [], pending)
    assert again.question is None and again.pending["asked"] == 2 and "1) Genghis Khan  2) Nikola Tesla" in again.reply
    assert "matched none of the options" in plan_turn(no_index, "blue", [], again.pending).read_as
    new = plan_turn(no_index, "Where does the Rhine flow into the sea?", ["h"], pending)
    assert (new.question, new.history, new.scope) == ("Where does the Rhine flow into the sea?", ["h"], None)


# -- what streams ----------------------------------------------------------------------------------------
def test_only_the_answer_streams_and_a_retry_is_marked_never_run_together():
    text = ReplyText()
    sent = [text.reading("What did Tesla study?"), text.token(chunk("Tesla", step="follow_up", start=True)),
            text.token(chunk("Physics ", start=True)), text.token(chunk("at Graz")),
            text.token(chunk("Engineering ", start=True)), text.token(chunk("at Graz"))]
    assert sent[1] == ""  # a planning step's tokens are not the answer
    result = AgenticResult(question="q", answer="Engineering at Graz [1]", sources=[], confidence=0.7, symbol="●")
    sent.append(text.ending(result))
    assert "".join(sent) == text.sent == f"(read as: What did Tesla study?)\n\nPhysics at Graz{REVISED}Engineering at Graz [1]\n\nconfidence ● 0.70"
    declined = ReplyText()
    declined.token(chunk("Paris", start=True))
    assert declined.ending(AgenticResult(question="q", answer="I don't know.", sources=[])) == FINAL + "I don't know."
    parts = ReplyText()
    assert parts.token(chunk("Smiljan", start=True, part="1/2: a")) + parts.token(chunk("Graz", start=True, part="2/2: b")) == "[1/2: a] Smiljan\n\n[2/2: b] Graz"


def test_a_streamed_reply_sends_tokens_as_they_come_and_keeps_a_clarification_before_it_ends(tmp_path, monkeypatch):
    def fake_ask(pipe, question, history, scope, streaming_callback=None, on_step=None):
        for i, word in enumerate(["Tesla ", "was ", "born ", "in ", "Smiljan"]):
            streaming_callback(chunk(word, start=i == 0, finish_reason="stop" if i == 4 else None))
        return AgenticResult(question=question, answer="Tesla was born in Smiljan [1]", sources=[], confidence=0.6, symbol="◐")

    monkeypatch.setattr(serve_chat, "ask_exported", fake_ask)
    chat = ChatReplies(pipe=None, store_path=tmp_path / STORE_FILE)
    chunks = list(chat.reply([user("Where was Tesla born?")], stream=True))
    assert [c.content for c in chunks] == ["Tesla ", "was ", "born ", "in ", "Smiljan", " [1]\n\nconfidence ◐ 0.60"]
    assert [c.finish_reason for c in chunks] == [None] * 5 + ["stop"]  # the answer's own "stop" would end the message before its sources

    clarification = {"question": "When was he born?", "reason": "r", "options": OPTIONS, "prompt": "Which one? 1) Genghis Khan  2) Nikola Tesla"}
    monkeypatch.setattr(serve_chat, "ask_exported", lambda pipe, question, *a, **k: AgenticResult(question=question, answer="", sources=[], clarification=clarification))
    asked = [user("When was he born?")]
    for last in chat.reply(asked, stream=True):
        assert last.content == clarification["prompt"] and last.finish_reason == "stop"
        store = SessionStore(tmp_path / STORE_FILE)
        try:  # kept before the last chunk went out, under the conversation as the client will send it back
            assert store.pending(conversation_key([*asked, assistant(last.content)]))["question"] == "When was he born?"
        finally:
            store.close()


def test_the_done_marker_ends_only_event_streams():
    async def app(scope, receive, send):
        kind = b"text/event-stream" if scope["path"] == "/v1/chat/completions" else b"application/json"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def bodies(path: str) -> bytes:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        asyncio.run(DoneMarker(app)({"type": "http", "path": path}, None, send))
        return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

    assert bodies("/v1/chat/completions") == b"data: {}\n\ndata: [DONE]\n\n"
    assert bodies("/ragkit/run") == b"data: {}\n\n"


# -- the wrapper over an exported graph (the real embedder, a mock LLM) -------------------------------------
@pytest.fixture
def wrapper(sample_index_dir, fast_config, tmp_path, monkeypatch):
    """Hayhooks' wrapper, as ``ragkit serve`` loads it, over a graph with follow-ups and clarification."""
    features = Features(answer_mode="free", follow_ups=True, follow_up_backend="rules", clarify=True)
    yaml_path = tmp_path / "pipeline.yaml"
    yaml_path.write_text(export_yaml(features, sample_index_dir, fast_config, chat_generator=MockChatGenerator(responses=ANSWER)))
    monkeypatch.setenv(YAML_ENV, str(yaml_path))
    monkeypatch.setenv("RAGKIT_DATA", str(tmp_path / "data"))
    served = PipelineWrapper()
    served.setup()
    return served


def ask(wrapper: PipelineWrapper, messages: list[dict], stream: bool = False):
    return wrapper.run_chat_completion("ragkit", messages, {"model": "ragkit", "messages": messages, "stream": stream})


@pytest.mark.integration
def test_the_earlier_messages_are_the_history_that_rewrites_a_follow_up(wrapper):
    first = [user("Where was Nikola Tesla born?")]
    reply = ask(wrapper, first)
    assert reply.startswith(ANSWER + "\n\nSources:\n[1] wikipedia/Nikola_Tesla.md") and "(read as" not in reply
    follow_up = [*first, assistant(reply), user("and what did he study?")]
    answered = ask(wrapper, follow_up)
    assert answered.startswith("(read as: What did Nikola Tesla study?)\n\n" + ANSWER)
    streamed = list(ask(wrapper, follow_up, stream=True))
    assert len(streamed) > 5 and "".join(c.content for c in streamed) == answered  # the same reply, token by token


@pytest.mark.integration
def test_a_clarification_is_kept_server_side_and_the_second_option_answers_the_original_question(wrapper):
    asked = [user("When was he born?")]
    prompt = ask(wrapper, asked)
    assert "Which one do you mean? 1) Genghis Khan  2) Nikola Tesla" in prompt
    reply = ask(wrapper, [*asked, assistant(prompt), user("the second")])
    assert reply.startswith("(read as: When was he born? — answering about Nikola Tesla)\n\n" + ANSWER)
    sources = [line for line in reply.splitlines() if line.startswith("[")]
    assert sources and all(line.endswith(" wikipedia/Nikola_Tesla.md") for line in sources)  # searched in the chosen scope only
    again = ask(wrapper, [*asked, assistant(prompt), user("the second")])  # a client's "regenerate": the same conversation, the same reading
    assert again == reply


@pytest.mark.integration
def test_a_reply_matching_no_option_is_asked_again_then_answered_without_narrowing(wrapper):
    conversation = [user("When was he born?")]
    conversation += [assistant(ask(wrapper, conversation)), user("blue")]
    again = ask(wrapper, conversation)
    assert again.startswith("I could not tell which one you meant.") and "1) Genghis Khan  2) Nikola Tesla" in again
    conversation += [assistant(again), user("purple")]
    answered = "".join(c.content for c in ask(wrapper, conversation, stream=True))
    assert answered.startswith("(read as: When was he born? — your reply matched none of the options, so this answers without narrowing the search)")
    assert ANSWER in answered and "Sources:" in answered


# -- the real server, the real model ----------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.llm
def test_ragkit_serve_streams_the_answer_then_its_sources_as_server_sent_events(sample_index_dir, fast_config, tmp_path):
    yaml_path = tmp_path / "pipeline.yaml"
    yaml_path.write_text(export_yaml(Features(answer_mode="free"), sample_index_dir, fast_config))
    env = {key: value for key, value in os.environ.items() if key != "HAYHOOKS_CORS_ALLOW_ORIGINS"}
    with ragkit_serve(yaml_path, tmp_path / "serve.log", env={**env, "RAGKIT_DATA": str(tmp_path / "data")}) as url:
        # a page from another origin may not read the replies: its browser's preflight is not granted
        preflight = urllib.request.Request(f"{url}/v1/chat/completions", method="OPTIONS", headers={
            "Origin": "https://example.org", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
        try:
            with urllib.request.urlopen(preflight, timeout=10) as response:
                granted = response.headers.get("Access-Control-Allow-Origin")
        except urllib.error.HTTPError as refused:
            granted = refused.headers.get("Access-Control-Allow-Origin")
        assert granted is None
        assert "Using default CORS settings" not in (tmp_path / "serve.log").read_text()
        body = {"model": "ragkit", "stream": True, "messages": [user("Which team won Super Bowl 50?")]}
        request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(request, timeout=300) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            for line in response:  # read as the events arrive
                if line.startswith(b"data: "):
                    events.append(line[len(b"data: "):].strip().decode())
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
        contents = [c["delta"].get("content") or "" for c in chunks]
        tail = next(i for i, c in enumerate(contents) if "Sources:" in c)
        assert tail >= 3, contents  # the answer came token by token, before its sources
        assert chunks[-1]["finish_reason"] == "stop" and all(c["finish_reason"] is None for c in chunks[:tail])
        reply = "".join(contents)
        answer, _, rest = reply.partition("\n\nSources:\n")
        assert "Broncos" in answer and rest.startswith("[1] wikipedia/Super_Bowl_50.md") and "\n\nconfidence " in rest
        del body["stream"]  # the same question, not streamed: one JSON reply, as before streaming existed
        request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            whole = json.loads(response.read())["choices"][0]["message"]["content"]
        # the same answer and sources; not the same confidence: a model's first question scores its tokens a
        # little differently from a later one with the prompt cache warm (0.31, then 0.33), streamed or not
        assert whole.rpartition("\n\nconfidence ")[0] == reply.rpartition("\n\nconfidence ")[0]
