"""Every code block of the README and of docs/*.md runs as written, so a page cannot publish a failing line.

* ``python`` blocks: a page's blocks run in order in one fresh interpreter, in a work folder that holds a
  copy of ``sample_docs/``, ``examples/`` and sample_docs' index at ``.ragkit/index`` (what the README's first block builds), with
  the 0.5B model (``RAGKIT_LLM``), as a reader following the page would.
* ``bash`` blocks: each command line runs in such a folder, in order; ``.venv/bin/`` is this
  interpreter's. A server (``ragkit serve``, ``jupyter lab``) is started, must answer HTTP, and is stopped
  by its process id (on a free port, and ``jupyter lab`` without a browser). ``make demo`` runs in the
  repository as a user runs it — the default 1.5B model, nothing set — and must print both parts'
  answers; ``make test`` is this very suite (``.ci/run`` runs it), so it is not run from inside itself.
* ``yaml`` blocks: parsed, and a ragkit config one loads as a ``RagConfig``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)

pytestmark = [pytest.mark.integration, pytest.mark.llm]


def blocks(page: Path, language: str) -> list[str]:
    return [code for lang, code in FENCE.findall(page.read_text(encoding="utf-8")) if lang == language]


def pages_with(language: str) -> list:
    return [pytest.param(page, id=str(page.relative_to(REPO))) for page in PAGES if blocks(page, language)]


def reader_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGKIT_")}
    # RAGKIT_DATA relative: chat sessions go to the work folder the page runs in, not the tester's home
    env.update({"RAGKIT_LLM": "qwen2.5-coder-0.5b", "RAGKIT_MAX_NEW_TOKENS": "64", "RAGKIT_DATA": "ragkit-data",
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", **extra})
    return env


@pytest.fixture
def work(tmp_path, sample_index_dir) -> Path:
    shutil.copytree(REPO / "sample_docs", tmp_path / "sample_docs")
    shutil.copytree(REPO / "examples", tmp_path / "examples")  # a reader's clone has them: the labelled sample questions
    shutil.copytree(sample_index_dir, tmp_path / ".ragkit" / "index")
    return tmp_path


def test_every_page_has_only_runnable_kinds_of_block():
    for page in PAGES:
        kinds = {lang for lang, _ in FENCE.findall(page.read_text(encoding="utf-8"))}
        assert kinds <= {"python", "bash", "yaml"}, f"{page.relative_to(REPO)}: blocks this test cannot run: {kinds}"
    assert blocks(REPO / "README.md", "python") and blocks(REPO / "README.md", "bash")


@pytest.mark.parametrize("page", pages_with("python"))
def test_python_blocks_run(page, work):
    script = "\n\n".join(blocks(page, "python"))
    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=reader_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{page.name}'s python blocks failed:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("page", pages_with("yaml"))
def test_yaml_blocks_load(page):
    from ragkit.config import RagConfig

    for code in blocks(page, "yaml"):
        data = yaml.safe_load(code)
        if {"models", "index", "top_k"} & set(data):
            RagConfig.from_dict(data)


def command_lines(page: Path) -> list[str]:
    lines = []
    for code in blocks(page, "bash"):
        for line in code.splitlines():
            command = re.split(r"\s{2,}#", line)[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


@pytest.mark.parametrize("page", pages_with("bash"))
def test_bash_blocks_run(page, work):
    for command in command_lines(page):
        if command == "make test":
            assert "make test" in (REPO / ".ci" / "run").read_text()  # CI's entry point runs it: this suite
            continue
        if command == "make demo":
            done = subprocess.run(["make", "demo"], cwd=REPO, env={k: v for k, v in os.environ.items() if not k.startswith("RAGKIT_")},
                                  capture_output=True, text=True, timeout=1200)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            assert "Where was Nikola Tesla born?" in done.stdout and "What did" in done.stdout, done.stdout[-2000:]
            continue
        command = command.replace(".venv/bin/", f"{BIN}/")
        if " serve " in command or "jupyter lab" in command:
            serve_and_stop(command, work)
            continue
        # no keyboard: an interactive command (`ragkit chat`) reads end-of-input and quits as after Ctrl-D
        done = subprocess.run(command, shell=True, cwd=work, env=reader_env(), capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{page.name}: `{command}` exited {done.returncode}:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_stop(command: str, work: Path) -> None:
    """Start the server the line starts, wait until it answers HTTP, stop it by its process id."""
    port = free_port()
    env = reader_env()
    if "jupyter lab" in command:
        for name in ("config", "data", "runtime", "settings", "workspaces"):
            (work / "jupyter" / name).mkdir(parents=True, exist_ok=True)
        env.update({"JUPYTER_CONFIG_DIR": str(work / "jupyter/config"), "JUPYTER_DATA_DIR": str(work / "jupyter/data"),
                    "JUPYTER_RUNTIME_DIR": str(work / "jupyter/runtime"), "JUPYTERLAB_SETTINGS_DIR": str(work / "jupyter/settings"),
                    "JUPYTERLAB_WORKSPACES_DIR": str(work / "jupyter/workspaces")})
        command += f" --no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 --IdentityProvider.token=doc-test"
        command += " --allow-root" if os.geteuid() == 0 else ""
        cwd, url = REPO, f"http://127.0.0.1:{port}/api/status?token=doc-test"
    else:
        command = re.sub(r"--port \d+", f"--port {port}", command)
        cwd, url = work, f"http://127.0.0.1:{port}/status"
    log = open(work / "server.log", "wb")
    proc = subprocess.Popen(command, shell=True, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"`{command}` exited {proc.returncode}:\n{(work / 'server.log').read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(url, timeout=5) as reply:
                    assert reply.status == 200
                    return
            except OSError:
                assert time.monotonic() < deadline, f"`{command}` did not answer {url} in 180 s"
                time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
