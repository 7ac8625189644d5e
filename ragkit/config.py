"""One place that says which models and index settings ragkit uses.

``RagConfig()`` is the offline default — the embedded all-MiniLM-L6-v2 embedder and the embedded
Qwen2.5-Coder-1.5B GGUF through llama.cpp — with any ``RAGKIT_*`` environment variable that is set
taking a default's place, so ``RAGKIT_LLM=qwen2.5-coder-0.5b`` means the same to ``AgenticRAG(...)``
in a notebook as to the CLI. A value given in code or in a YAML file (:meth:`RagConfig.from_yaml`)
wins over the environment; :meth:`RagConfig.from_env` puts the environment over a given config
(what the CLI does with ``--config``). So the same notebook runs against an Ollama / vLLM /
llama.cpp-server / OpenAI endpoint by changing configuration only::

    RAGKIT_LLM_BACKEND=openai RAGKIT_OPENAI_BASE_URL=http://localhost:11434/v1 RAGKIT_LLM=qwen2.5:1.5b
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

LLMBackend = Literal["llama.cpp", "openai"]
RetrievalMode = Literal["dense", "sparse", "hybrid"]

DEFAULT_LLM = "qwen2.5-coder-1.5b"
FAST_LLM = "qwen2.5-coder-0.5b"


def _from_env(var: str, cast: Any, default: Any) -> Any:
    """A field's default: ``$var`` cast to the field's type when set, else ``default``."""
    value = os.environ.get(var)
    if not value:
        return default
    try:
        return cast(value)
    except ValueError:
        raise ValueError(f"{var}={value!r} is not a valid {getattr(cast, '__name__', cast)}") from None


def _flag(value: str) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off."""
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


_flag.__name__ = "yes/no flag (1/0, true/false)"


def _env(var: str, cast: Any, default: Any) -> Any:
    return field(default_factory=lambda: _from_env(var, cast, default))


@dataclass
class ModelConfig:
    """Which embedder and which chat LLM to use (each default can come from its ``RAGKIT_*`` variable)."""

    embedder: str = _env("RAGKIT_EMBEDDER", str, "all-MiniLM-L6-v2")  # embedded copy; or any sentence-transformers hub id / folder
    llm_backend: LLMBackend = _env("RAGKIT_LLM_BACKEND", str, "llama.cpp")
    llm: str = _env("RAGKIT_LLM", str, DEFAULT_LLM)  # embedded name or .gguf path (llama.cpp), or the server's model name (openai)
    openai_base_url: str | None = _env("RAGKIT_OPENAI_BASE_URL", str, None)  # e.g. http://localhost:11434/v1 for Ollama
    openai_api_key_env: str = _env("RAGKIT_OPENAI_API_KEY_ENV", str, "OPENAI_API_KEY")  # name of the env var holding the key (may be unset for local servers)
    n_ctx: int = _env("RAGKIT_N_CTX", int, 4096)
    n_threads: int | None = _env("RAGKIT_THREADS", int, None)  # None: all cores of the machine that runs it
    max_new_tokens: int = _env("RAGKIT_MAX_NEW_TOKENS", int, 256)
    temperature: float = 0.0
    seed: int = 0
    # llama.cpp's weight repacking: another copy of the weights in memory (+0.6 GB for the 1.5B), same outputs
    repack_weights: bool = _env("RAGKIT_REPACK_WEIGHTS", _flag, False)
    timeout_s: float = _env("RAGKIT_LLM_TIMEOUT_S", float, 120.0)  # one remote call (retried once); the question's deadline bounds the total


@dataclass
class IndexConfig:
    """How documents are cut into chunks."""

    chunk_tokens: int = 200  # all-MiniLM-L6-v2 reads at most 256 word pieces; stay under it
    chunk_overlap_tokens: int = 40
    hierarchical: bool = False  # also keep parent blocks ("small to find, large to answer")
    parent_words: int = 400
    child_words: int = 100
    merge_threshold: float = 0.5  # share of a parent's children that must be retrieved to answer from the parent


@dataclass
class RagConfig:
    models: ModelConfig = field(default_factory=ModelConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    retrieval_mode: RetrievalMode = _env("RAGKIT_RETRIEVAL", str, "hybrid")
    top_k: int = _env("RAGKIT_TOP_K", int, 5)
    hybrid_sparse_weight: float = 0.5  # BM25's weight in the hybrid score fusion; see ragkit.index.retrieval.DEFAULT_SPARSE_WEIGHT
    # One budget per question for every LLM call in it (RAGKIT_DEADLINE_S; 0 or None: none). The
    # embedded 1.5B answers an all-features question in 20-60 s on 2 cores; a hung server must not
    # hold a notebook for minutes. Past it, calls fail at once and the answer says so.
    deadline_s: float | None = _env("RAGKIT_DEADLINE_S", float, 180.0)
    # Where the index lives when not in the local folder: postgresql://user@host:5432/db?table=name or
    # milvus://host:19530?collection=name (RAGKIT_STORE; ragkit.index.stores). None: the local index.
    store: str | None = _env("RAGKIT_STORE", str, None)

    def __post_init__(self) -> None:
        self.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "RagConfig":
        data = dict(data or {})
        reject_unknown_keys(cls, data, "ragkit config")
        models = _build(ModelConfig, data.pop("models", None))
        index = _build(IndexConfig, data.pop("index", None))
        return cls(models=models, index=index, **data)

    @classmethod
    def from_yaml(cls, path: str | Path) -> "RagConfig":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(yaml.safe_load(fh))

    @classmethod
    def from_env(cls, base: "RagConfig | None" = None, environ: dict[str, str] | None = None) -> "RagConfig":
        """``base`` (default: ``RagConfig()``) overridden by any ``RAGKIT_*`` variables that are set."""
        env = os.environ if environ is None else environ
        config = dataclasses.replace(base) if base else cls()
        config.models = dataclasses.replace(config.models)
        for var, attr, cast in _ENV_VARS:
            if env.get(var):
                setattr(config.models, attr, cast(env[var]))
        if env.get("RAGKIT_TOP_K"):
            config.top_k = int(env["RAGKIT_TOP_K"])
        if env.get("RAGKIT_DEADLINE_S"):
            config.deadline_s = float(env["RAGKIT_DEADLINE_S"])
        if env.get("RAGKIT_STORE"):
            config.store = env["RAGKIT_STORE"]
        if env.get("RAGKIT_RETRIEVAL"):
            config.retrieval_mode = env["RAGKIT_RETRIEVAL"]  # type: ignore[assignment]
        config.validate()
        return config

    def validate(self) -> None:
        if self.models.llm_backend not in ("llama.cpp", "openai"):
            raise ValueError(f"llm_backend must be 'llama.cpp' or 'openai', not {self.models.llm_backend!r}")
        if self.models.llm_backend == "openai" and not self.models.openai_base_url:
            raise ValueError("llm_backend 'openai' needs openai_base_url (RAGKIT_OPENAI_BASE_URL)")
        if self.retrieval_mode not in ("dense", "sparse", "hybrid"):
            raise ValueError(f"retrieval_mode must be dense, sparse or hybrid, not {self.retrieval_mode!r}")
        if not 0.0 < self.hybrid_sparse_weight < 1.0:
            raise ValueError("hybrid_sparse_weight must be between 0 and 1 (exclusive)")
        if self.deadline_s is not None and self.deadline_s < 0:
            raise ValueError("deadline_s must be >= 0 (0 or None: no deadline)")
        if self.models.timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        if self.store is not None and not self.store.startswith(("postgresql://", "postgres://", "milvus://", "milvus+https://")):
            raise ValueError(f"store must be a postgresql://… or milvus://… URL (or None for the local index), not {self.store!r}")
        if self.top_k < 1:
            raise ValueError("top_k must be at least 1")
        if not 0 <= self.index.chunk_overlap_tokens < self.index.chunk_tokens:
            raise ValueError("chunk_overlap_tokens must be >= 0 and smaller than chunk_tokens")


_ENV_VARS = [
    ("RAGKIT_EMBEDDER", "embedder", str),
    ("RAGKIT_LLM_BACKEND", "llm_backend", str),
    ("RAGKIT_LLM", "llm", str),
    ("RAGKIT_OPENAI_BASE_URL", "openai_base_url", str),
    ("RAGKIT_OPENAI_API_KEY_ENV", "openai_api_key_env", str),
    ("RAGKIT_N_CTX", "n_ctx", int),
    ("RAGKIT_THREADS", "n_threads", int),
    ("RAGKIT_MAX_NEW_TOKENS", "max_new_tokens", int),
    ("RAGKIT_LLM_TIMEOUT_S", "timeout_s", float),
    ("RAGKIT_REPACK_WEIGHTS", "repack_weights", _flag),
]


def reject_unknown_keys(kind, data: dict[str, Any], label: str) -> None:
    """A misspelt key in YAML must be an error, not a silently ignored setting."""
    unknown = set(data) - {f.name for f in dataclasses.fields(kind)}
    if unknown:
        raise ValueError(f"Unknown {label} keys: {sorted(unknown)}")


def _build(kind, data):
    if data is None:
        return kind()
    reject_unknown_keys(kind, data, kind.__name__)
    return kind(**data)
