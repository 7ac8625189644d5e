"""An LLM that is unreachable, hangs, answers with nothing, with broken JSON or with megabytes of
babble is reported as such — through the API (a failed result, never ``supported``, confidence 0)
and the CLI (one line naming the step and the endpoint, exit status 3) — within the question's
deadline. The server is tests/reliability/fake_openai.py on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, refused_url

from ragkit.config import RagConfig
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features
from ragkit.pipeline.trace import per_question_seconds

pytestmark = pytest.mark.integration  # the real embedder retrieves; the LLM is the fake server
REPO = Path(__file__).resolve().parents[2]
QUESTION = "Where was Nikola Tesla born?"
FAULTS = ("refused", "hang", "empty", "broken", "babble", "error")


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI() as fake:
        yield fake


def remote(url: str, deadline_s: float = 6.0) -> RagConfig:
    config = RagConfig(deadline_s=deadline_s)
    config.models = replace(config.models, llm_backend="openai", openai_base_url=url, llm="fake", timeout_s=30.0)
    return config


def url_for(server, mode: str) -> str:
    return refused_url() if mode == "refused" else server.url(mode)


@pytest.mark.fault("hidden_failure")
@pytest.mark.parametrize("features", [Features(), Features.all_on()], ids=["plain", "all_features"])
@pytest.mark.parametrize("mode", FAULTS)
def test_a_failing_llm_gives_an_explicit_failed_result_never_a_supported_answer(server, sample_index, mode, features):
    rag = AgenticRAG(features, config=remote(url_for(server, mode)), index=sample_index)
    result = rag.ask(QUESTION)
    # one-time preparation (the reranker's sentence vectors) is not the question's time
    assert per_question_seconds(result) < 15, "the question's 6 s deadline bounds a hanging server"
    assert result.failed and result.exit_reason == "answer_failed"
    assert result.confidence == 0.0 and result.symbol == "○"
    assert "lorem ipsum" not in result.answer, "babble is never passed on as the answer"
    assert result.error.startswith("answer: ") and ("127.0.0.1" in result.error or "deadline" in result.error)
    assert "answer" in result.failed_steps


@pytest.mark.fault("hidden_failure")
def test_each_fault_is_named_in_words_with_its_endpoint(server, sample_index):
    wording = {"refused": "could not be reached", "hang": "did not answer in time", "empty": "returned no choices",
               "broken": "not valid JSON", "babble": "more than max_tokens=", "error": "HTTP 500"}
    for mode, words in wording.items():
        url = url_for(server, mode)
        result = AgenticRAG(Features(), config=remote(url, deadline_s=4.0), index=sample_index).ask(QUESTION)
        assert url in result.error and words in result.error, (mode, result.error)


@pytest.mark.fault("hidden_failure")
def test_a_working_server_still_answers(server, sample_index):
    result = AgenticRAG(Features.all_on(answer_mode="free"), config=remote(server.url("ok")), index=sample_index).ask(QUESTION)
    assert not result.failed and result.answer.startswith("Nikola Tesla was born in Smiljan") and result.error is None
    # grounded, the server's reply is not a span of any source: a decline (not a failure), never passed on
    grounded = AgenticRAG(Features.all_on(answer_mode="grounded"), config=remote(server.url("ok")), index=sample_index).ask(QUESTION)
    assert not grounded.failed and grounded.declined and "Smiljan" not in grounded.answer


@pytest.mark.fault("hidden_failure")
def test_the_deadline_comes_from_config_and_environment():
    assert RagConfig.from_env(environ={"RAGKIT_DEADLINE_S": "7.5"}).deadline_s == 7.5
    assert RagConfig.from_env(environ={"RAGKIT_LLM_TIMEOUT_S": "9"}).models.timeout_s == 9.0
    assert RagConfig().deadline_s == 180.0
    with pytest.raises(ValueError, match="deadline_s"):
        RagConfig.from_dict({"deadline_s": -1})


@pytest.mark.fault("hidden_failure")
def test_a_call_after_the_deadline_is_not_made_and_says_why():
    from haystack.components.generators.chat import OpenAIChatGenerator  # noqa: F401  (the real class name matters below)
    from haystack.dataclasses import ChatMessage

    from ragkit.llm.faults import question_deadline
    from ragkit.llm.structured import call_llm

    class Never:
        calls = 0

        def run(self, messages, generation_kwargs=None):
            Never.calls += 1
            raise AssertionError("called after the deadline")

    with question_deadline(0.01):
        time.sleep(0.02)
        reply = call_llm(Never(), [ChatMessage.from_user("hi")], str, step="answer")
    assert not reply.ok and reply.error.startswith("deadline_exceeded") and Never.calls == 0


@pytest.mark.fault("hidden_failure")
def test_a_prompt_longer_than_the_context_is_trimmed_with_a_note_not_sent_whole():
    from haystack.dataclasses import ChatMessage

    from ragkit.llm.faults import fit_to_context

    messages = [ChatMessage.from_system("system rules"), ChatMessage.from_user("Sources: " + "word " * 5000 + "\n\nTask: answer. Question: where?")]
    count = lambda ms: sum(len((m.text or "").split()) for m in ms)  # noqa: E731  (one token a word)
    trimmed, note = fit_to_context(messages, count(messages), n_ctx=1000, max_tokens=100, count=count)
    assert count(trimmed) <= 1000 - 100 and "trimmed from" in note
    assert trimmed[0].text == "system rules" and trimmed[1].text.endswith("Question: where?")
    same, none = fit_to_context(messages[:1], 2, n_ctx=1000, max_tokens=100, count=count)
    assert none is None and same == messages[:1]


@pytest.mark.fault("hidden_failure")
def test_an_exported_and_served_pipeline_reports_the_failure_too(sample_index_dir, tmp_path):
    from ragkit.pipeline.export import export_yaml, load_exported, run_exported
    from ragkit.pipeline.serve import PipelineWrapper

    path = tmp_path / "pipeline.yaml"
    path.write_text(export_yaml(Features.all_on(), sample_index_dir, remote(refused_url(), deadline_s=5.0)), encoding="utf-8")
    out = run_exported(load_exported(path), QUESTION)
    assert out["failed"] and out["exit_reason"] == "answer_failed" and out["confidence"] == 0.0 and "could not be reached" in out["error"]
    wrapper = PipelineWrapper()
    wrapper.pipeline = load_exported(path)
    reply = wrapper.run_chat_completion("ragkit", [{"role": "user", "content": QUESTION}], {})
    assert reply.startswith("error: no answer could be produced: answer:")
    assert wrapper.run_chat_completion("ragkit", [{"role": "user", "content": "  "}], {}).startswith("error: The question is empty")


# -- the command line ------------------------------------------------------------------------------
def run_cli(*args: str, url: str, deadline: str = "6", timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGKIT_LLM_BACKEND": "openai", "RAGKIT_OPENAI_BASE_URL": url, "RAGKIT_LLM": "fake", "RAGKIT_DEADLINE_S": deadline}
    return subprocess.run([sys.executable, "-m", "ragkit.ui.cli", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.fault("hidden_failure")
def test_cli_unreachable_llm_one_line_error_naming_endpoint_and_step_exit_3(sample_index_dir):
    url = refused_url()
    done = run_cli("ask", QUESTION, "--all-features", "--json", "--index-dir", str(sample_index_dir), url=url)
    assert done.returncode == 3, done.stderr[-500:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "answer" in errors[0] and url in errors[0] and "could not be reached" in errors[0]
    out = json.loads(done.stdout)
    assert out["failed"] and out["exit_reason"] == "answer_failed" and out["confidence"] == 0.0 and "Traceback" not in done.stderr


@pytest.mark.fault("hidden_failure")
def test_cli_babble_is_cut_not_printed(server, sample_index_dir):
    done = run_cli("ask", QUESTION, "--index-dir", str(sample_index_dir), url=server.url("babble"))
    assert done.returncode == 3 and len(done.stdout) < 20_000, (done.returncode, len(done.stdout))
    assert "more than max_tokens=" in done.stderr


@pytest.mark.fault("clear_error")
def test_cli_prints_brackets_and_escape_sequences_as_text(sample_index_dir):
    with FakeOpenAI(answer="See [/quote] and [draft] \x1b[31mred [1].") as fake:
        done = run_cli("ask", "[/] what is [bold]this?", "--index-dir", str(sample_index_dir), "--answer-mode", "free", url=fake.url("ok"))
    assert done.returncode == 0, done.stderr[-800:]
    assert "[/quote]" in done.stdout and "[draft]" in done.stdout and "[/] what is [bold]this?" in done.stdout
    assert "\x1b[31m" not in done.stdout and "\\x1b[31m" in done.stdout


@pytest.mark.fault("clear_error")
def test_cli_invalid_utf8_question_is_a_clear_error(sample_index_dir):
    question = b"bad\xffbyte?".decode("utf-8", "surrogateescape")
    env = {**os.environ, "RAGKIT_LLM_BACKEND": "openai", "RAGKIT_OPENAI_BASE_URL": refused_url(), "RAGKIT_LLM": "fake"}
    done = subprocess.run([sys.executable, "-m", "ragkit.ui.cli", "ask", os.fsencode(question), "--index-dir", str(sample_index_dir)],
                          env=env, capture_output=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and b"not valid UTF-8" in done.stderr and b"Traceback" not in done.stderr


@pytest.mark.llm
@pytest.mark.fault("hidden_failure")
def test_the_real_model_gets_a_trimmed_prompt_not_a_context_overflow(local_llm):
    from haystack.dataclasses import ChatMessage

    from ragkit.llm.structured import call_llm
    from ragkit.pipeline.trace import RagkitTracer

    sources = "Sources:\n<source id=\"1\">" + "The lighthouse keeper logged the weather every hour. " * 900 + "</source>"
    messages = [ChatMessage.from_system("Answer from the sources."), ChatMessage.from_user(sources + "\n\nQuestion: what did the keeper log?")]
    with RagkitTracer().collect() as trace:
        from haystack import tracing

        with tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": "answer"}):
            reply = call_llm(local_llm, messages, str, {"max_tokens": 16, "temperature": 0.0}, step="answer")
    assert reply.ok, reply.error
    assert any("prompt trimmed from" in w and "4096-token context" in w for w in trace.steps[0].warnings)


@pytest.mark.fault("hidden_failure")
def test_agent_steps_go_to_an_openai_compatible_server_as_a_json_schema_and_its_failure_is_traced(server, sample_index):
    from ragkit.pipeline.agent_mode import AgentRAG

    before = len(server.requests)
    result = AgentRAG(config=remote(server.url("ok")), index=sample_index).ask(QUESTION)
    steps = [r for _, r in server.requests[before:] if (r.get("response_format") or {}).get("json_schema", {}).get("name") == "agent_action"]
    assert steps and steps[0]["response_format"]["json_schema"]["schema"]["properties"]["action"]["enum"] == ["search", "answer"]
    assert result.details["agent"][0]["arguments"] == {"query": "Nikola Tesla born"} and result.details["agent_stats"]["unparsed_tool_calls"] == 0
    assert result.exit_reason == "answered" and result.sources
    broken = AgentRAG(config=remote(server.url("broken"), deadline_s=4.0), index=sample_index).ask(QUESTION)
    assert broken.exit_reason == "unreadable" and "127.0.0.1" in broken.error and broken.confidence == 0.0
