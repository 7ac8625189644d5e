"""Serve an exported ragkit pipeline over HTTP with Hayhooks.

``ragkit serve pipeline.yaml`` writes a one-line Hayhooks pipeline folder (``pipeline_wrapper.py``
re-exporting :class:`PipelineWrapper` below) next to nothing the user owns — a temporary folder —
and replaces itself with ``hayhooks run`` on it, so the server's process id is the one ``ragkit serve``
started with (stop it with that pid). Endpoints (Hayhooks'):

* ``POST /ragkit/run`` with ``{"question": "..."}`` → answer, sources, confidence, exit reason, trace;
* ``POST /v1/chat/completions`` with ``{"model": "ragkit", "messages": [...]}`` — OpenAI-compatible
  (:mod:`ragkit.pipeline.serve_chat`): the last user message is the question and the earlier messages its
  history (a follow-up is rewritten with them when the pipeline has ``follow_ups``; the reply then opens
  with "(read as: …)"); the reply is the answer, its sources and its confidence. A pipeline with
  ``clarify`` may ask back with numbered options: the next message answers it ("2", "the second"), the
  pending question kept server-side in ``served_conversations.sqlite`` (user data folder, ``$RAGKIT_DATA``).
  With ``"stream": true`` the reply comes as server-sent events — the answer's tokens as they are
  generated, then the sources and confidence — ending with ``data: [DONE]`` (:class:`DoneMarker`).

Hayhooks' local tracing dashboard is turned off; nothing is sent anywhere. No web page from another
origin may read the replies (Hayhooks' default allows every origin); name the origins that may in
``HAYHOOKS_CORS_ALLOW_ORIGINS`` (a JSON list, e.g. ``'["http://localhost:3000"]'``).

``--llm-server`` serves the LLM too: llama.cpp's ``llama-server`` with ``parallel`` slots starts first
(:mod:`ragkit.llm.server`, killed by the kernel when the Hayhooks process exits), and the pipeline's
in-process generators are replaced by ``OpenAIChatGenerator`` on it, so concurrent users' questions
run side by side instead of one at a time (an in-process model answers one question at a time).

Usage::

    ragkit export --all-features -o pipeline.yaml
    ragkit serve pipeline.yaml --port 1416
    ragkit serve pipeline.yaml --llm-server --parallel 4     # the LLM behind llama-server, 4 slots
    curl -s localhost:1416/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "ragkit", "messages": [{"role": "user", "content": "Where was Tesla born?"}]}'
    curl -sN localhost:1416/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "ragkit", "stream": true, "messages": [
        {"role": "user", "content": "Where was Nikola Tesla born?"}, {"role": "assistant", "content": "Smiljan [1]"},
        {"role": "user", "content": "and what did he study?"}]}'
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from hayhooks import BasePipelineWrapper
from haystack.dataclasses import StreamingChunk

from ragkit.index.retrieval import QueryError
from ragkit.pipeline.export import load_exported, run_exported
from ragkit.pipeline.serve_chat import ChatReplies

PIPELINE_NAME = "ragkit"
YAML_ENV = "RAGKIT_PIPELINE_YAML"


class PipelineWrapper(BasePipelineWrapper):
    """Hayhooks' wrapper around an exported ragkit pipeline (the YAML named by ``RAGKIT_PIPELINE_YAML``)."""

    def setup(self) -> None:
        path = os.environ.get(YAML_ENV)
        if not path:
            raise RuntimeError(f"set {YAML_ENV} to the pipeline YAML written by `ragkit export`")
        self.pipeline = load_exported(Path(path))

    @property
    def chat(self) -> ChatReplies:
        """The chat replies for ``self.pipeline`` (made on first use, and again if the pipeline is replaced)."""
        if getattr(self, "_chat", None) is None or self._chat.pipe is not self.pipeline:
            self._chat = ChatReplies(self.pipeline)
        return self._chat

    def run_api(self, question: str) -> dict[str, Any]:
        """Ask the pipeline one question: answer, sources, confidence, route, exit reason, trace rows;
        ``failed`` and ``error`` (step, endpoint, cause) when no answer could be produced. An empty,
        oversized or undecodable question is HTTP 400."""
        from fastapi import HTTPException

        try:
            return run_exported(self.pipeline, question)
        except QueryError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None

    def run_chat_completion(self, model: str, messages: list[dict], body: dict) -> str | Iterator[StreamingChunk]:
        """The reply to the conversation's last user message; a generator of chunks (sent as server-sent
        events by Hayhooks) when the request asks for ``"stream": true``."""
        return self.chat.reply(messages, stream=bool(body.get("stream")))


class DoneMarker:
    """ASGI middleware: ends each chat-completion event stream with OpenAI's ``data: [DONE]`` line, which
    Hayhooks 2.1.0 leaves out (OpenAI's clients stop at it; some wait for it)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not scope.get("path", "").endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        event_stream = False

        async def send_with_done(message: dict) -> None:
            nonlocal event_stream
            if message["type"] == "http.response.start":
                event_stream = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in message.get("headers", []))
            elif event_stream and message["type"] == "http.response.body" and not message.get("more_body", False):
                message = {**message, "body": message.get("body", b"") + b"data: [DONE]\n\n"}
            await send(message)

        await self.app(scope, receive, send_with_done)


def with_done_marker(make_app: Callable[[], Any]) -> Callable[[], Any]:
    """``make_app`` (Hayhooks' app factory), its app ending event streams with ``data: [DONE]``."""

    def make() -> Any:
        app = make_app()
        app.add_middleware(DoneMarker)
        return app

    return make


def serve(pipeline_yaml: str | Path, host: str = "127.0.0.1", port: int = 1416, llm_server: bool = False, parallel: int = 4) -> int:
    path = Path(pipeline_yaml).resolve()
    load_exported(path)  # fail here, with a clear error, rather than inside the server
    work = Path(tempfile.mkdtemp(prefix="ragkit-hayhooks-"))
    folder = work / "pipelines" / PIPELINE_NAME  # Hayhooks deploys every YAML in its folder: only the wrapper goes there
    folder.mkdir(parents=True)
    if llm_server:
        path = _with_served_llm(path, work, parallel)
    (folder / "pipeline_wrapper.py").write_text("from ragkit.pipeline.serve import PipelineWrapper  # noqa: F401\n", encoding="utf-8")
    # Hayhooks lets every web origin read its replies (CORS "*"): any page open in the user's browser could
    # ask their documents through 127.0.0.1. None may, unless the user names some in this variable.
    env = {"HAYHOOKS_CORS_ALLOW_ORIGINS": "[]", **os.environ, YAML_ENV: str(path)}
    # `python -m hayhooks` does nothing (its __main__ is empty): call the CLI its console script calls, its
    # app factory wrapped so that event streams end as OpenAI's do
    launcher = (
        "import sys; import hayhooks.cli.base as cli; from hayhooks.cli import hayhooks_cli; from ragkit.pipeline.serve import with_done_marker; "
        "cli.get_app = with_done_marker(cli.get_app); sys.argv[0] = 'hayhooks'; sys.exit(hayhooks_cli())"
    )
    args = [sys.executable, "-c", launcher, "run", "--host", host, "--port", str(port), "--pipelines-dir", str(folder.parent), "--without-tracing"]
    os.execve(sys.executable, args, env)  # the server takes this process over: its pid is ours
    return 0  # pragma: no cover


def _with_served_llm(path: Path, folder: Path, parallel: int) -> Path:
    """Start llama-server for the pipeline's model; the pipeline, its generators on that server, written
    into ``folder`` (not Hayhooks' pipelines folder, where it would be deployed as a second pipeline, and
    fail). The server is this process's child and is killed when it exits (the Hayhooks process, after execve)."""
    import yaml

    from ragkit.llm.server import in_process_models, served_pipeline, start_llama_server

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    models = sorted(in_process_models(data))
    if len(models) != 1:
        raise ValueError(f"--llm-server serves one in-process model; {path.name} has {len(models)}: {', '.join(models) or 'none'}")
    server = start_llama_server(models[0], parallel=parallel, log_path=folder / "llama-server.log")
    print(f"LLM {models[0]} served by llama-server (pid {server.pid}, {parallel} parallel slots) at {server.url}; log {server.log_path}",
          file=sys.stderr, flush=True)
    served = folder / f"{path.stem}.served.yaml"
    served.write_text(yaml.safe_dump(served_pipeline(data, server.url), sort_keys=False, allow_unicode=True), encoding="utf-8")
    return served
