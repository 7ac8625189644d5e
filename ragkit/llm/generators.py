"""Build the chat generator and the embedders that a :class:`~ragkit.config.ModelConfig` names.

Local GGUF models run in-process through llama-cpp-haystack's ``LlamaCppChatGenerator``; anything
serving the OpenAI chat API (Ollama, vLLM, llama.cpp server, OpenAI) goes through Haystack's
``OpenAIChatGenerator(api_base_url=...)``. The only network calls ragkit can make are to that
configured endpoint.

The local generator and the text embedder are :mod:`ragkit.llm.portable`'s: they keep the model's
name, so an exported pipeline loads on another machine. Building a generator checks that its model
is installed (a :class:`~ragkit.llm.models.MissingModelError` naming the ``pip install`` line), but
loads nothing: that is ``warm_up``'s.

Usage::

    llm = build_chat_generator(RagConfig().models)     # the embedded model, named, not yet loaded
    llm.to_dict()["init_parameters"]["model"]          # "qwen2.5-coder-1.5b", resolved again wherever it loads
"""

from __future__ import annotations

from typing import Any

from haystack.utils import Secret

from ragkit.config import ModelConfig
from ragkit.llm.models import check_gguf, hub_offline, resolve_embedder


def build_chat_generator(models: ModelConfig, streaming_callback=None):
    generation_kwargs = {"max_tokens": models.max_new_tokens, "temperature": models.temperature}
    if models.llm_backend == "openai":
        from haystack.components.generators.chat import OpenAIChatGenerator

        # The configured key's variable if set, else ragkit's dummy (a local server takes any key);
        # an env-var secret, unlike a token, survives `ragkit export`.
        key = Secret.from_env_var([models.openai_api_key_env, "RAGKIT_NO_API_KEY"])
        return OpenAIChatGenerator(
            api_key=key,
            model=models.llm,
            api_base_url=models.openai_base_url,
            generation_kwargs=generation_kwargs,
            timeout=models.timeout_s,
            max_retries=1,
            streaming_callback=streaming_callback,
        )

    from ragkit.llm.portable import PortableLlamaCppChatGenerator

    check_gguf(models.llm)
    return PortableLlamaCppChatGenerator(
        model=models.llm, n_ctx=models.n_ctx, n_threads=models.n_threads, seed=models.seed,
        generation_kwargs=generation_kwargs, streaming_callback=streaming_callback, repack_weights=models.repack_weights,
    )


def build_document_embedder(models: ModelConfig, progress_bar: bool = True, batch_size: int = 32):
    """The indexer's embedder (never serialized: an index records its embedder's name in its manifest)."""
    from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersDocumentEmbedder

    return SentenceTransformersDocumentEmbedder(
        model=resolve_embedder(models.embedder), normalize_embeddings=True, local_files_only=hub_offline(), progress_bar=progress_bar, batch_size=batch_size,
    )


_SHARED_TEXT_EMBEDDERS: dict[str, object] = {}


def reset_prompt_cache(generator: Any) -> None:
    """Empty llama.cpp's prompt cache (a no-op for other generators), so the next call reuses
    nothing: what benchmarks and A/B comparisons need to be fair."""
    llm = getattr(generator, "_model", None)
    if llm is not None and hasattr(llm, "reset"):
        llm.reset()


def shared_text_embedder(embedder: str = "all-MiniLM-L6-v2"):
    """One warmed-up text embedder per model per process, shared by the components that embed
    (router prototypes, HyDE passages, grader, bi-encoder reranker) instead of each loading its own."""
    if embedder not in _SHARED_TEXT_EMBEDDERS:
        component = build_text_embedder(ModelConfig(embedder=embedder))
        component.warm_up()
        _SHARED_TEXT_EMBEDDERS[embedder] = component
    return _SHARED_TEXT_EMBEDDERS[embedder]


def build_text_embedder(models: ModelConfig):
    from ragkit.llm.portable import PortableTextEmbedder

    return PortableTextEmbedder(model=models.embedder)
