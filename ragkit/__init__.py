"""ragkit: a Jupyter-first toolkit for teaching and prototyping agentic RAG on Haystack 3.

Importing ragkit turns Haystack's telemetry off and the Hugging Face hub offline unless the user
set those variables themselves: ragkit makes no network call unless an endpoint is configured.
"""

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
