"""Shared fixtures: the real embedded models are loaded once per session."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import random
import signal
import sys
from pathlib import Path

import ragkit  # noqa: F401,I001  (offline defaults, telemetry off: must run before anything imports Haystack)

import pytest
from haystack import Document

from ragkit.config import FAST_LLM, RagConfig

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DOCS = REPO / "sample_docs"


@contextlib.contextmanager
def bench_module(name: str):
    """``bench/<name>.py`` imported as a module, with ``bench/`` on ``sys.path`` while it is in use (the bench
    scripts import their siblings, some inside functions)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "bench"))


def fake_embedding(text: str, dim: int = 8) -> list[float]:
    """A deterministic vector per text, for unit tests that need no model."""
    rng = random.Random(hashlib.sha256(text.encode()).hexdigest())
    return [rng.uniform(-1, 1) for _ in range(dim)]


def reply_dict(out: dict) -> dict:
    """A GuardedGenerator's output with its one reply message as ``"text"`` (what the tests compare)."""
    out = dict(out)
    replies = out.pop("replies")
    assert len(replies) == 1, replies
    return {"text": replies[0].text, **out}


def make_chunks(source: str, texts: list[str], dim: int = 8) -> list[Document]:
    return [
        Document(content=t, meta={"source": source, "chunk_index": i}, embedding=fake_embedding(t, dim))
        for i, t in enumerate(texts)
    ]


@pytest.fixture
def ctrl_c_delivered():
    """SIGINT handled as a terminal's Ctrl-C is, here and in the processes a test starts: a shell script that
    runs the tests in the background (``make test &``) starts them with SIGINT ignored, which every child
    inherits, and a Ctrl-C test would then measure the shell, not ragkit."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def fast_config() -> RagConfig:
    """Default config but with the 0.5B LLM, so CI stays inside its time budget."""
    config = RagConfig()
    config.models.llm = FAST_LLM
    config.models.max_new_tokens = 64
    return config


@pytest.fixture(scope="session")
def sample_index_dir(tmp_path_factory, fast_config) -> Path:
    """sample_docs/ indexed once with the real embedded embedder."""
    from ragkit.index.indexer import build_index

    index_dir = tmp_path_factory.mktemp("sample") / "index"
    report = build_index(SAMPLE_DOCS, index_dir, fast_config, progress=False)
    assert not report.skipped, report.skipped
    return index_dir


@pytest.fixture(scope="session")
def sample_index(sample_index_dir):
    from ragkit.index.store import RagIndex

    return RagIndex.load(sample_index_dir)


@pytest.fixture(scope="session")
def hybrid(sample_index, fast_config):
    from ragkit.index.retrieval import HybridRetriever

    return HybridRetriever(sample_index, fast_config.models)


@pytest.fixture(scope="session")
def local_llm(fast_config):
    """The real 0.5B GGUF through llama.cpp, loaded once."""
    from ragkit.llm.generators import build_chat_generator

    generator = build_chat_generator(fast_config.models)
    generator.warm_up()
    return generator


# -- the fault-injection suite's bookkeeping (tests/reliability) -----------------------------------
# Here rather than in tests/reliability/conftest.py: a second module named `conftest` would shadow
# this one for the tests that `from conftest import ...`.
# Every test in tests/reliability says what a failure of it would mean:
#
# ``@pytest.mark.fault("data_loss")``: it checks that nothing already indexed is lost;
# ``@pytest.mark.fault("hidden_failure")``: that a fault is reported (clear error, exit code, failed
# result), never passed off as a good answer; ``@pytest.mark.fault("clear_error")``: that bad input
# gets a clear error instead of a crash. With ``RAGKIT_RELIABILITY_REPORT=path`` the session writes
# ``{"cases", "passed", "data_loss", "hidden_failures"}`` there (``make reliability`` writes
# ``bench/results/reliability.json``): the counts are of failed tests of each kind.
RELIABILITY = Path(__file__).resolve().parent / "reliability"
sys.path.insert(0, str(RELIABILITY))  # fake_openai
KINDS = ("data_loss", "hidden_failure", "clear_error")
_outcomes: dict[str, tuple[str, str]] = {}  # test id -> (kind, "passed" | "failed" | "skipped")


def _kind(item) -> str:
    marker = item.get_closest_marker("fault")
    return marker.args[0] if marker is not None and marker.args and marker.args[0] in KINDS else "unclassified"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if Path(str(item.fspath)).parent != RELIABILITY:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _outcomes[item.nodeid] = (_kind(item), report.outcome)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("RAGKIT_RELIABILITY_REPORT")
    if not path or not _outcomes:
        return
    failed = [kind for kind, outcome in _outcomes.values() if outcome == "failed"]
    summary = {
        "cases": len(_outcomes),
        "passed": sum(outcome == "passed" for _, outcome in _outcomes.values()),
        "skipped": sum(outcome == "skipped" for _, outcome in _outcomes.values()),
        "data_loss": failed.count("data_loss"),
        # an unclassified failure is counted as hidden: nothing says it was reported
        "hidden_failures": failed.count("hidden_failure") + failed.count("unclassified"),
        "command": "RAGKIT_RELIABILITY_REPORT=" + path + " python -m pytest " + " ".join(session.config.invocation_params.args),
        "by_kind": {kind: sum(1 for k, _ in _outcomes.values() if k == kind) for kind in (*KINDS, "unclassified")},
    }
    Path(path).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
