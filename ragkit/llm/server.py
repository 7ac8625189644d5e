"""The LLM behind a server: llama.cpp's own ``llama-server``, with parallel slots, for many users at once.

In-process, one llama-cpp-python model answers one question at a time (its ``Llama`` is not
thread-safe, so :func:`ragkit.pipeline.export.ask_exported` serializes the questions of a pipeline that
holds one). llama.cpp's server keeps ``parallel`` slots, each with its own context and prompt cache,
and decodes the requests of all busy slots in one batch (continuous batching): several users share
the model without queueing behind each other's whole answer.

* :func:`find_llama_server` — the binary: ``$RAGKIT_LLAMA_SERVER``, else the one ``make install``
  builds from the llama.cpp source inside the llama-cpp-python sdist (the same llama.cpp the
  in-process model runs: ``scripts/build_llama_server.sh``), else ``llama-server`` on ``PATH``.
* :func:`start_llama_server` — starts it on 127.0.0.1 and a free port, waits for ``/health``, and
  returns a :class:`LlamaServer` (its ``url`` is the OpenAI base URL; ``stop()`` stops it by pid).
  With ``die_with_parent`` the kernel kills it when the thread that started it exits (Linux).
* :func:`served_pipeline` — an exported pipeline's YAML with every in-process llama.cpp generator
  replaced by Haystack's ``OpenAIChatGenerator`` on that URL, same model name, same greedy settings.

What changes for a served model: an OpenAI-compatible server gives no next-token distribution, only
the top 20 log-probabilities of each reply token. A yes/no judgment's P(yes) is read from those of a
one-token reply (:mod:`ragkit.llm.judgments`: the in-process number); the grounded answer's span mask
is sent as a GBNF grammar the server decodes under (:mod:`ragkit.llm.span_grammar`), and the
grader's scores are a constrained JSON reply. Answers of the free-text path are the same greedy decoding. Hand-written because no library starts llama.cpp's server for a Haystack pipeline.

Usage::

    server = start_llama_server("qwen2.5-coder-0.5b", parallel=4)
    # RAGKIT_LLM_BACKEND=openai RAGKIT_OPENAI_BASE_URL=<server.url> RAGKIT_LLM=qwen2.5-coder-0.5b
    server.stop()

or from a shell, in the foreground: ``ragkit llm-server --llm qwen2.5-coder-0.5b --parallel 4 --port 8080``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragkit.config import ModelConfig
from ragkit.index.servers import free_port
from ragkit.llm.models import cache_dir, resolve_gguf

LLAMA_SERVER_ENV = "RAGKIT_LLAMA_SERVER"
PORTABLE_GENERATOR = "ragkit.llm.portable.PortableLlamaCppChatGenerator"


class LlamaServerError(RuntimeError):
    """llama-server is missing, would not start, or stopped; the message says what to do."""


def find_llama_server() -> Path:
    if os.environ.get(LLAMA_SERVER_ENV):
        path = Path(os.environ[LLAMA_SERVER_ENV]).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise LlamaServerError(f"{LLAMA_SERVER_ENV}={path} is not an executable file")
        return path
    try:
        from llama_cpp import __version__ as version
    except ImportError:  # pragma: no cover - llama-cpp-python is a dependency
        version = ""
    built = sorted((cache_dir() / "bin").glob(f"llama-server-{version}-*/llama-server")) if version else []
    if built:
        return built[-1]
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise LlamaServerError(
        "llama-server (llama.cpp's OpenAI-compatible server) is not installed: `make install` builds it into "
        f"{cache_dir() / 'bin'}, or set {LLAMA_SERVER_ENV} to a llama-server binary"
    )


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # SIGKILL, not SIGTERM: the kernel sends this signal each time the child is handed to a new parent,
    # and a process with many threads (Hayhooks) hands it on from thread to thread as they exit, so it
    # came two or three times in 5 of 6 stops of `ragkit serve --llm-server`; llama-server takes a second
    # SIGTERM as "exit now", calling exit() inside its signal handler, which can hang (once in CI its
    # server stayed up after Hayhooks had gone). With the parent gone nobody waits on a graceful stop,
    # and llama-server keeps nothing to save.
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class LlamaServer:
    """A running llama-server: ``url`` is its OpenAI base URL (``…/v1``), ``model`` the name it answers to."""

    process: subprocess.Popen
    url: str
    model: str
    parallel: int
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by its pid: SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def model_config(self, base: ModelConfig | None = None) -> ModelConfig:
        """``base`` (default: ragkit's defaults) with the LLM served here."""
        from dataclasses import replace

        return replace(base or ModelConfig(), llm_backend="openai", llm=self.model, openai_base_url=self.url)

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def llama_server_command(
    model: str, port: int, parallel: int = 4, n_ctx: int = 4096, threads: int | None = None, seed: int = 0, flash_attn: bool = True,
) -> list[str]:
    """The command line: ``parallel`` slots of ``n_ctx`` tokens each (llama-server splits its context
    between its slots), the in-process generator's seed and flash attention, the model's own chat
    template, no web UI."""
    return [
        str(find_llama_server()), "--model", str(resolve_gguf(model)), "--alias", model,
        "--host", "127.0.0.1", "--port", str(port),
        "--parallel", str(parallel), "--ctx-size", str(n_ctx * parallel), "--cont-batching",
        "--threads", str(threads or os.cpu_count() or 1), "--seed", str(seed),
        "--flash-attn", "on" if flash_attn else "off", "--jinja", "--no-webui",
        "--no-repack",  # as the in-process model (ragkit.llm.portable): no second copy of the weights
    ]


def start_llama_server(
    model: str, parallel: int = 4, n_ctx: int = 4096, threads: int | None = None, port: int | None = None, seed: int = 0,
    log_path: str | Path | None = None, die_with_parent: bool = True, timeout: float = 180.0,
) -> LlamaServer:
    """Start llama-server for ``model`` (an embedded model's name or a ``.gguf`` path) and wait until it
    answers ``/health``; :class:`LlamaServerError` with the end of its log if it exits or times out."""
    port = port or free_port()
    command = llama_server_command(model, port, parallel=parallel, n_ctx=n_ctx, threads=threads, seed=seed)
    log = Path(log_path) if log_path else None
    out = log.open("ab") if log else subprocess.DEVNULL
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=_die_with_parent if die_with_parent else None)
    finally:
        if log:
            out.close()
    server = LlamaServer(process=process, url=f"http://127.0.0.1:{port}/v1", model=model, parallel=parallel, log_path=log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LlamaServerError(f"llama-server exited with status {process.returncode} while loading {model}{_log_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass  # not listening yet, or 503 while the model loads
        time.sleep(0.25)
    server.stop()
    raise LlamaServerError(f"llama-server did not become ready within {timeout:.0f} s{_log_tail(log)}")


def _log_tail(log: Path | None, lines: int = 8) -> str:
    if log is None or not log.is_file():
        return ""
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    return "; its log ends:\n" + "\n".join(tail)


def served_generator_dict(portable: dict[str, Any], url: str) -> dict[str, Any]:
    """An in-process generator's serialized form → Haystack's ``OpenAIChatGenerator`` on ``url``, the same
    model name (the server's ``--alias``), token limit, temperature and seed."""
    from ragkit.llm.generators import build_chat_generator

    params = portable.get("init_parameters", {})
    kwargs = dict(params.get("generation_kwargs") or {})
    models = ModelConfig(llm_backend="openai", llm=params["model"], openai_base_url=url,
                         max_new_tokens=kwargs.pop("max_tokens", ModelConfig().max_new_tokens),
                         temperature=kwargs.pop("temperature", ModelConfig().temperature))
    served = build_chat_generator(models).to_dict()
    seed = params.get("seed", kwargs.pop("seed", None))
    served["init_parameters"]["generation_kwargs"] = {**served["init_parameters"]["generation_kwargs"], **kwargs, **({"seed": seed} if seed is not None else {})}
    return served


def in_process_models(data: Any) -> set[str]:
    """The models of every in-process llama.cpp generator in a serialized pipeline (sub-pipelines too)."""
    found: set[str] = set()
    if isinstance(data, dict):
        if data.get("type") == PORTABLE_GENERATOR:
            found.add(data.get("init_parameters", {}).get("model"))
        for value in data.values():
            found |= in_process_models(value)
    elif isinstance(data, list):
        for value in data:
            found |= in_process_models(value)
    return found


def served_pipeline(data: Any, url: str) -> Any:
    """A serialized pipeline (the dict of its YAML) with each in-process llama.cpp generator replaced by
    an ``OpenAIChatGenerator`` on ``url``; everything else unchanged."""
    if isinstance(data, dict):
        if data.get("type") == PORTABLE_GENERATOR:
            return served_generator_dict(data, url)
        return {key: served_pipeline(value, url) for key, value in data.items()}
    if isinstance(data, list):
        return [served_pipeline(value, url) for value in data]
    return data
