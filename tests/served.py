"""`ragkit serve` started for a test: a real Hayhooks server on a free port, stopped by its process group id."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ragkit_serve(yaml_path: Path, log_path: Path, env: dict[str, str] | None = None, timeout: float = 180,
                 extra_args: tuple[str, ...] = (), started: list | None = None) -> Iterator[str]:
    """Yield the server's base URL once its ``/status`` lists the pipeline (bounded by ``timeout``);
    ``started``, if given, receives the server's Popen."""
    port = free_port()
    log = log_path.open("w")
    server = subprocess.Popen([sys.executable, "-m", "ragkit.ui.cli", "serve", str(yaml_path), "--port", str(port), *extra_args],
                              stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    if started is not None:
        started.append(server)
    try:
        deadline = time.monotonic() + timeout
        while True:  # bounded wait for the server to load the pipeline
            assert server.poll() is None, log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as response:
                    if "ragkit" in response.read().decode():
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"hayhooks did not come up in {timeout:.0f} s: " + log_path.read_text()[-3000:]
            time.sleep(1)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # stopped by its own process id (ragkit serve execs hayhooks)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()
