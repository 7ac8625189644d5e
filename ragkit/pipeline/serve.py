"""Serve an exported ragkit pipeline over HTTP with Hayhooks.

``ragkit serve pipeline.yaml`` writes a one-line Hayhooks pipeline folder (``pipeline_wrapper.py``
re-exporting :class:`PipelineWrapper` below) next to nothing the user owns — a temporary folder —
and replaces itself with ``hayhooks run`` on it, so the server's process id is the one ``ragkit serve``
started with (stop it with that pid). Endpoints (Hayhooks'):

* ``POST /ragkit/run`` with ``{"question": "..."}`` → answer, sources, confidence, exit reason, trace;
* ``POST /v1/chat/completions`` with ``{"model": "ragkit", "messages": [...]}`` — OpenAI-compatible;
  the last user message is the question, the reply is the answer followed by its sources.

Hayhooks' local tracing dashboard is turned off; nothing is sent anywhere.

Usage::

    ragkit export --all-features -o pipeline.yaml
    ragkit serve pipeline.yaml --port 1416
    curl -s localhost:1416/v1/chat/completions -d '{"model": "ragkit", "messages": [{"role": "user", "content": "Where was Tesla born?"}]}'
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hayhooks import BasePipelineWrapper, get_last_user_message

from ragkit.index.retrieval import QueryError
from ragkit.pipeline.export import load_exported, run_exported

PIPELINE_NAME = "ragkit"
YAML_ENV = "RAGKIT_PIPELINE_YAML"


class PipelineWrapper(BasePipelineWrapper):
    """Hayhooks' wrapper around an exported ragkit pipeline (the YAML named by ``RAGKIT_PIPELINE_YAML``)."""

    def setup(self) -> None:
        path = os.environ.get(YAML_ENV)
        if not path:
            raise RuntimeError(f"set {YAML_ENV} to the pipeline YAML written by `ragkit export`")
        self.pipeline = load_exported(Path(path))

    def run_api(self, question: str) -> dict[str, Any]:
        """Ask the pipeline one question: answer, sources, confidence, route, exit reason, trace rows;
        ``failed`` and ``error`` (step, endpoint, cause) when no answer could be produced. An empty,
        oversized or undecodable question is HTTP 400."""
        from fastapi import HTTPException

        try:
            return run_exported(self.pipeline, question)
        except QueryError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None

    def run_chat_completion(self, model: str, messages: list[dict], body: dict) -> str:
        question = get_last_user_message(messages)
        try:
            out = run_exported(self.pipeline, question or "")
        except QueryError as exc:
            return f"error: {exc}"
        if out["failed"]:  # said as an error, never passed off as an answer
            return f"error: no answer could be produced: {out['error']}"
        cited = "\n".join(f"[{i}] {s['source']}" for i, s in enumerate(out["sources"], 1))
        sureness = f"confidence {out['symbol']} {out['confidence']:.2f}" if out["confidence"] is not None else ""
        return "\n\n".join(part for part in (out["answer"], f"Sources:\n{cited}" if cited else "", sureness) if part)


def serve(pipeline_yaml: str | Path, host: str = "127.0.0.1", port: int = 1416) -> int:
    path = Path(pipeline_yaml).resolve()
    load_exported(path)  # fail here, with a clear error, rather than inside the server
    folder = Path(tempfile.mkdtemp(prefix="ragkit-hayhooks-")) / PIPELINE_NAME
    folder.mkdir()
    (folder / "pipeline_wrapper.py").write_text("from ragkit.pipeline.serve import PipelineWrapper  # noqa: F401\n", encoding="utf-8")
    env = {**os.environ, YAML_ENV: str(path)}
    # `python -m hayhooks` does nothing (its __main__ is empty): call the CLI its console script calls
    launcher = "import sys; from hayhooks.cli import hayhooks_cli; sys.argv[0] = 'hayhooks'; sys.exit(hayhooks_cli())"
    args = [sys.executable, "-c", launcher, "run", "--host", host, "--port", str(port), "--pipelines-dir", str(folder.parent), "--without-tracing"]
    os.execve(sys.executable, args, env)  # the server takes this process over: its pid is ours
    return 0  # pragma: no cover
