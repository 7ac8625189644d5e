"""The default configuration never opens a network connection: index, retrieve and answer
with every socket connect and DNS lookup turned into a recorded failure."""

import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.llm]


def test_default_configuration_makes_no_network_call(tmp_path):
    script = textwrap.dedent(
        f"""
        import socket, sys
        attempts = []
        def refuse(*args, **kwargs):
            attempts.append(args)
            raise OSError("network disabled by test")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        import os
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HAYSTACK_TELEMETRY_ENABLED"):
            os.environ.pop(var, None)   # ragkit must set its own defaults
        from ragkit.config import RagConfig
        from ragkit.index.indexer import build_index
        from ragkit import AgenticRAG, Features
        config = RagConfig()
        config.models.llm = "qwen2.5-coder-0.5b"   # the default family, smaller for CI
        config.models.max_new_tokens = 24
        build_index({str(tmp_path)!r} + "/docs", {str(tmp_path)!r} + "/idx", config, progress=False)
        answer = AgenticRAG(Features(), {str(tmp_path)!r} + "/idx", config).ask("Where was Tesla born?")
        print("ANSWER", answer.answer)
        print("ATTEMPTS", len(attempts), attempts[:3])
        sys.exit(1 if attempts else 0)
        """
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tesla.md").write_text("# Tesla\n\nNikola Tesla was born in Smiljan in 1856.\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "HAYSTACK_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert "ATTEMPTS 0" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0
    assert "ANSWER" in done.stdout


def test_haystack_telemetry_is_off_in_the_test_process():
    """conftest imports ragkit before Haystack, so Haystack's telemetry never starts (no network call)."""
    from haystack.telemetry import _telemetry

    assert _telemetry.telemetry is None
