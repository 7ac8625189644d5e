"""Shared fixtures: the real embedded models are loaded once per session."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import ragkit  # noqa: F401,I001  (offline defaults, telemetry off: must run before anything imports Haystack)

import pytest
from haystack import Document

from ragkit.config import FAST_LLM, RagConfig

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DOCS = REPO / "sample_docs"


def fake_embedding(text: str, dim: int = 8) -> list[float]:
    """A deterministic vector per text, for unit tests that need no model."""
    rng = random.Random(hashlib.sha256(text.encode()).hexdigest())
    return [rng.uniform(-1, 1) for _ in range(dim)]


def make_chunks(source: str, texts: list[str], dim: int = 8) -> list[Document]:
    return [
        Document(content=t, meta={"source": source, "chunk_index": i}, embedding=fake_embedding(t, dim))
        for i, t in enumerate(texts)
    ]


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
