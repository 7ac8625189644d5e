"""ragkit: a Jupyter-first toolkit for teaching and prototyping agentic RAG on Haystack 3.

Importing ragkit turns Haystack's telemetry off and the Hugging Face hub offline unless the user
set those variables themselves: ragkit makes no network call unless an endpoint is configured.
"""

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Local OpenAI-compatible servers take any key, OpenAI's client refuses to start without one, and
# Haystack will not serialize a key given as a token: name a variable that always holds a dummy,
# so an exported pipeline stays serializable (ragkit.llm.generators).
os.environ.setdefault("RAGKIT_NO_API_KEY", "no-key-needed")

__version__ = "0.1.0"

# The public API, imported on first use so `import ragkit` stays cheap (no torch, no Haystack).
_PUBLIC = {
    "Features": "ragkit.pipeline.features",
    "AgenticRAG": "ragkit.pipeline.engine",
    "AgenticResult": "ragkit.pipeline.engine",
    "build_index": "ragkit.index.indexer",
    "RagConfig": "ragkit.config",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'ragkit' has no attribute {name!r}")
