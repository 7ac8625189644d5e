"""The LLM behind llama.cpp's server: finding and starting llama-server, the pipeline's generators pointed
at it, `ragkit serve --llm-server`, and an in-process model answering one question at a time."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import nullcontext

import psutil
import pytest
import yaml
from haystack import Document, Pipeline
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage

from served import ragkit_serve

from ragkit.components.document_grader import DocumentGrader
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.components.query_router import QueryRouter
from ragkit.components.reranker import Reranker
from ragkit.config import FAST_LLM, ModelConfig
from ragkit.eval.judge import correct_task
from ragkit.llm import judgments
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.judgments import constrained_yes, yes_probability
from ragkit.llm.portable import PortableLlamaCppChatGenerator
from ragkit.llm.prompts import context_messages, sufficiency_task
from ragkit.llm.server import (
    LLAMA_SERVER_ENV, LlamaServerError, find_llama_server, in_process_models, llama_server_command, served_pipeline, start_llama_server,
)
from ragkit.llm.structured import answer_constraint, call_llm, parse_answer
from ragkit.pipeline.export import _one_question_at_a_time, export_yaml, load_exported
from ragkit.pipeline.features import Features
from ragkit.ui.cli import main


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: not when it is gone, nor when it is a zombie no parent has reaped yet."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def fake_binary(tmp_path, body: str):
    path = tmp_path / "llama-server"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def chat_generators(data):
    """Every serialized chat generator in a serialized pipeline, however deep."""
    if isinstance(data, dict):
        if str(data.get("type", "")).endswith("ChatGenerator"):
            yield data
        else:
            for value in data.values():
                yield from chat_generators(value)
    elif isinstance(data, list):
        for value in data:
            yield from chat_generators(value)


# -- without a model ---------------------------------------------------------------------------------------
def test_the_served_pipeline_has_every_in_process_generator_on_the_server_with_the_same_settings(tmp_path, fast_config):
    text = export_yaml(Features.all_on(), tmp_path / "index", fast_config)
    data = yaml.safe_load(text)
    assert in_process_models(data) == {FAST_LLM}
    served = served_pipeline(data, "http://127.0.0.1:9/v1")
    assert in_process_models(served) == set()
    served_text = json.dumps(served)
    assert "PortableLlamaCppChatGenerator" not in served_text
    generators = list(chat_generators(served))
    assert len(generators) >= 5 and all(g["type"].endswith("OpenAIChatGenerator") for g in generators)
    for g in generators:
        params = g["init_parameters"]
        assert params["api_base_url"] == "http://127.0.0.1:9/v1" and params["model"] == FAST_LLM
        assert params["generation_kwargs"]["max_tokens"] == fast_config.models.max_new_tokens
        assert params["generation_kwargs"]["temperature"] == 0.0 and params["generation_kwargs"]["seed"] == 0
    # everything else is as exported: the same components, the same connections, and it loads
    assert served["components"].keys() == data["components"].keys() and served["connections"] == data["connections"]
    assert load_exported(yaml.safe_dump(served)).metadata["ragkit"] == data["metadata"]["ragkit"]


def test_llama_server_is_found_by_its_variable_and_a_missing_one_says_how_to_build_it(tmp_path, monkeypatch):
    binary = fake_binary(tmp_path, "exit 0")
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(binary))
    assert find_llama_server() == binary
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(LlamaServerError, match="not an executable"):
        find_llama_server()
    monkeypatch.delenv(LLAMA_SERVER_ENV)
    monkeypatch.setenv("RAGKIT_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(LlamaServerError, match="make install"):
        find_llama_server()


def test_the_command_splits_the_context_between_the_slots_and_serves_the_model_under_its_name(tmp_path, monkeypatch):
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(fake_binary(tmp_path, "exit 0")))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    command = llama_server_command(str(gguf), 8123, parallel=4, n_ctx=2048, threads=2)
    flags = {flag: command[i + 1] for i, flag in enumerate(command) if flag.startswith("--") and i + 1 < len(command) and not command[i + 1].startswith("--")}
    assert flags["--parallel"] == "4" and flags["--ctx-size"] == "8192" and flags["--alias"] == str(gguf)
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8123" and flags["--threads"] == "2"


def test_a_server_that_exits_while_loading_is_a_clear_error_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(fake_binary(tmp_path, "echo 'error: unknown model architecture'; exit 3")))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(LlamaServerError, match=r"exited with status 3(.|\n)*unknown model architecture"):
        start_llama_server(str(gguf), log_path=tmp_path / "server.log", timeout=20)


def test_a_server_that_never_answers_is_stopped_and_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(fake_binary(tmp_path, "echo $$ > " + str(tmp_path / "pid") + "; exec sleep 60")))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(LlamaServerError, match="did not become ready"):
        start_llama_server(str(gguf), timeout=2)
    pid = int((tmp_path / "pid").read_text())
    assert not running(pid)


STUBBORN_SERVER = """
import http.server, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a graceful stop that never ends, as llama-server's can hang
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def test_a_server_whose_parent_dies_is_killed_even_if_it_ignores_sigterm(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN_SERVER)
    binary = fake_binary(tmp_path, f'exec {sys.executable} {script} "$@"')
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    starter = ("import os; from ragkit.llm.server import start_llama_server; "
               f"print(start_llama_server({str(gguf)!r}, timeout=30).pid, flush=True); os._exit(0)")
    done = subprocess.run([sys.executable, "-c", starter], env={**os.environ, LLAMA_SERVER_ENV: str(binary)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[-1])  # its parent has exited
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = running(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive


def test_serving_the_llm_of_a_pipeline_without_an_in_process_model_is_refused(tmp_path, capsys):
    yaml_path = tmp_path / "pipeline.yaml"
    yaml_path.write_text(export_yaml(Features(), tmp_path / "index", chat_generator=MockChatGenerator()))
    assert main(["serve", str(yaml_path), "--llm-server"]) == 2
    assert "serves one in-process model" in capsys.readouterr().err


def test_an_in_process_model_answers_one_question_at_a_time_a_served_one_does_not_wait():
    def pipeline_with(generator):
        from ragkit.components.query_rewriter import QueryRewriter

        pipe = Pipeline()
        pipe.add_component("rewrite", QueryRewriter(backend="llm", chat_generator=generator))
        return pipe

    local = pipeline_with(PortableLlamaCppChatGenerator(model=FAST_LLM))
    lock = _one_question_at_a_time(local)
    assert isinstance(lock, type(threading.Lock())) and _one_question_at_a_time(local) is lock
    served = pipeline_with(build_chat_generator(ModelConfig(llm_backend="openai", llm=FAST_LLM, openai_base_url="http://127.0.0.1:9/v1")))
    assert isinstance(_one_question_at_a_time(served), nullcontext)


# -- the real llama-server, the real model -----------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.llm
def test_llama_server_decodes_as_the_in_process_model_and_serves_two_requests_at_once(tmp_path):
    messages = [ChatMessage.from_user("Name the capital of France in one word.")]
    local = PortableLlamaCppChatGenerator(model=FAST_LLM, generation_kwargs={"max_tokens": 16, "temperature": 0.0})
    local.warm_up()
    expected = local.run(messages)["replies"][0].text
    del local
    with start_llama_server(FAST_LLM, parallel=2, log_path=tmp_path / "llama-server.log") as server:
        generator = build_chat_generator(ModelConfig(**{**server.model_config().__dict__, "max_new_tokens": 16}))
        assert generator.run(messages)["replies"][0].text == expected  # greedy: the same llama.cpp, the same tokens
        questions = [[ChatMessage.from_user(f"What is {a} plus {a}? Answer with a number.")] for a in (2, 3)]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda m: generator.run(m)["replies"][0].text, questions))
        assert "4" in replies[0] and "6" in replies[1]
        with urllib.request.urlopen(server.url.removesuffix("/v1") + "/slots", timeout=10) as reply:
            assert len(json.loads(reply.read())) == 2  # two slots
        pid = server.pid
    assert not running(pid)


@pytest.mark.integration
@pytest.mark.llm
def test_a_served_answers_token_probabilities_are_the_in_process_ones(tmp_path):
    """The confidence's strongest signals, the answer's own token probabilities: llama.cpp's logits
    in-process, the server's ``logprobs`` of its chosen tokens when served — the same greedy tokens, the
    same numbers (the first may differ a little: in-process a citation mark cannot start the answer)."""
    docs = [Document(content="Nikola Tesla was born in Smiljan in 1856. He moved to New York in 1884."),
            Document(content="Thomas Edison founded a laboratory in Menlo Park.")]
    prompts = [context_messages(docs, f"Question: {q}\nAnswer in a few words.") for q in ("Where was Tesla born?", "Who founded a laboratory in Menlo Park?")]
    local = PortableLlamaCppChatGenerator(model=FAST_LLM, generation_kwargs={"max_tokens": 32, "temperature": 0.0})
    local.warm_up()
    kwargs = {"max_tokens": 32, "temperature": 0.0}
    expected = [call_llm(local, m, parse_answer, {**kwargs, **answer_constraint(local)}, step="answer") for m in prompts]
    del local
    with start_llama_server(FAST_LLM, parallel=1, log_path=tmp_path / "llama-server.log") as server:
        generator = build_chat_generator(server.model_config())
        got = [call_llm(generator, m, parse_answer, {**kwargs, **answer_constraint(generator)}, step="answer") for m in prompts]
    for a, b in zip(expected, got):
        assert b.ok and b.text == a.text and b.tokens["tokens"] == a.tokens["tokens"]
        assert b.tokens["token_p_mean"] == pytest.approx(a.tokens["token_p_mean"], abs=0.03)
        assert b.tokens["token_p_min"] == pytest.approx(a.tokens["token_p_min"], abs=0.05)


@pytest.mark.integration
@pytest.mark.llm
def test_a_served_grounded_answer_is_decoded_under_the_span_grammar_as_in_process_under_the_mask(tmp_path):
    """In-process a grounded answer is decoded under a logits mask; llama-server takes the same rule as a
    GBNF grammar (ragkit/llm/span_grammar.py), so the served answer is the span the model chose, not a free
    draft snapped afterwards (which declined 54 of 200 SQuAD dev questions against 2 in-process), and its token
    probabilities, renormalised over what the grammar allowed, are close to the mask's."""
    docs = [Document(content="Nikola Tesla was born in Smiljan in 1856. He moved to New York in 1884."),
            Document(content="Thomas Edison founded a laboratory in Menlo Park, New Jersey, in 1876.")]
    questions = ("Where was Tesla born?", "When did Tesla move to New York?", "Where did Edison found a laboratory?")
    prompts = [context_messages(docs, f"Question: {q}\nAnswer with words copied from a source.") for q in questions]

    def answers(generator) -> list[dict]:
        step = GuardedGenerator(chat_generator=generator, answer_mode="grounded")
        return [step.run(messages=m, documents=docs, query=q) for m, q in zip(prompts, questions)]

    local = PortableLlamaCppChatGenerator(model=FAST_LLM, generation_kwargs={"max_tokens": 32, "temperature": 0.0})
    local.warm_up()
    expected = answers(local)
    del local
    with start_llama_server(FAST_LLM, parallel=1, log_path=tmp_path / "llama-server.log") as server:
        got = answers(build_chat_generator(server.model_config()))
    assert [a["replies"][0].text for a in got] == [a["replies"][0].text for a in expected]
    assert all(a["ok"] and a["evidence"] for a in got)
    for a, b in zip(expected, got):  # the span's tokens among what the grammar allowed, as the mask's (top 20 listed: close, not equal)
        assert b["tokens"]["token_p_mean"] == pytest.approx(a["tokens"]["token_p_mean"], abs=0.05)
        assert b["tokens"]["token_p_min"] == pytest.approx(a["tokens"]["token_p_min"], abs=0.1)


@pytest.mark.integration
@pytest.mark.llm
def test_served_yes_no_judgments_read_the_in_process_p_yes_and_every_constrained_reply_fits(tmp_path):
    """P(yes) behind llama-server is read from its top log-probabilities: the in-process number, not a 1 or a
    0. And every JSON reply a served step asks for fits its max_tokens: llama-server pretty-prints them
    ('{\\n  "label": "yes"\\n}', 14 tokens), which cut every one of them (a failed call) at the old budgets."""
    docs = [Document(content="Nikola Tesla was born in Smiljan in 1856. He moved to New York in 1884."),
            Document(content="Thomas Edison founded a laboratory in Menlo Park.")]
    tasks = [correct_task("Where was Tesla born?", "Smiljan"), correct_task("Where was Tesla born?", "Menlo Park"), sufficiency_task("Where was Tesla born?")]
    prompts = [context_messages(docs, task) for task in tasks]
    local = PortableLlamaCppChatGenerator(model=FAST_LLM, generation_kwargs={"max_tokens": 16, "temperature": 0.0})
    local.warm_up()
    expected = [yes_probability(local, m, step="judge") for m in prompts]
    del local
    with start_llama_server(FAST_LLM, parallel=1, log_path=tmp_path / "llama-server.log") as server:
        generator = build_chat_generator(server.model_config())
        p_yes = [yes_probability(generator, m, step="judge") for m in prompts]
        assert p_yes == pytest.approx(expected, abs=0.03) and all(0.0 < p < 1.0 for p in p_yes)
        assert constrained_yes(generator, prompts[0], step="judge") in (0.0, 1.0)
        route = QueryRouter(backend="llm", chat_generator=generator).run(query="Compare Tesla and Edison")["routing"]
        grading = DocumentGrader(backend="llm", chat_generator=generator).run(query="Where was Tesla born?", documents=docs * 3)["grading"]
        judgments._WITHOUT_LOGPROBS.add((generator.api_base_url, generator.model))  # the one-call yes/no list of a server without them
        try:
            check = HallucinationDetector(chat_generator=generator, judge_spans=True).run(
                replies=["Tesla was born in Smiljan. He moved to New York. Edison was in Menlo Park."], documents=docs)
        finally:
            judgments._WITHOUT_LOGPROBS.clear()
        reranked = Reranker(backend="llm", chat_generator=generator).run(query="Where was Tesla born?", documents=docs)["reranking"]
    assert "fallback" not in route, route
    assert "fallback" not in grading and len(grading["scores"]) == 6, grading
    assert check["score"] in (0.0, 1.0) and "fallback" not in check["hallucination"], check
    assert "fallback" not in reranked, reranked


@pytest.mark.integration
@pytest.mark.llm
def test_ragkit_serve_with_the_llm_server_answers_and_its_llm_stops_with_it(sample_index_dir, fast_config, tmp_path):
    yaml_path = tmp_path / "pipeline.yaml"
    yaml_path.write_text(export_yaml(Features(answer_mode="free"), sample_index_dir, fast_config))
    started: list = []
    with ragkit_serve(yaml_path, tmp_path / "serve.log", env={**os.environ, "RAGKIT_DATA": str(tmp_path / "data")},
                      extra_args=("--llm-server", "--parallel", "2"), started=started) as url:
        hayhooks = psutil.Process(started[0].pid)
        llm = [p for p in hayhooks.children() if p.name() == "llama-server"]
        assert len(llm) == 1
        body = {"model": "ragkit", "messages": [{"role": "user", "content": "Which team won Super Bowl 50?"}]}
        request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            reply = json.loads(response.read())["choices"][0]["message"]["content"]
        assert "Broncos" in reply and "[1] wikipedia/Super_Bowl_50.md" in reply
        log = (tmp_path / "serve.log").read_text()
        assert "Skipping pipeline" not in log and "1/1 pipelines deployed" in log  # the served YAML is not deployed as a second one
        # the model is llama-server's: its weights are mapped there, not in the Hayhooks process
        assert any(m.path.endswith(".gguf") for m in llm[0].memory_maps())
        assert not any(m.path.endswith(".gguf") for m in hayhooks.memory_maps())
        os.kill(started[0].pid, signal.SIGTERM)  # the server stopped by its pid alone: its llama-server goes with it
        started[0].wait(30)
        deadline = time.monotonic() + 15
        while running(llm[0].pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(llm[0].pid)
