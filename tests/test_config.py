import pytest

from ragkit.config import RagConfig


def test_defaults_are_the_offline_embedded_models():
    config = RagConfig()
    assert config.models.llm_backend == "llama.cpp"
    assert config.models.llm == "qwen2.5-coder-1.5b"
    assert config.models.embedder == "all-MiniLM-L6-v2"
    assert config.retrieval_mode == "hybrid"


def test_yaml_round_trip(tmp_path):
    path = tmp_path / "ragkit.yaml"
    path.write_text(
        "models:\n  llm_backend: openai\n  llm: qwen2.5:1.5b\n  openai_base_url: http://localhost:11434/v1\n"
        "index:\n  chunk_tokens: 120\n  chunk_overlap_tokens: 20\ntop_k: 7\nretrieval_mode: sparse\n"
    )
    config = RagConfig.from_yaml(path)
    assert config.models.llm_backend == "openai" and config.models.openai_base_url.endswith("/v1")
    assert config.index.chunk_tokens == 120 and config.top_k == 7 and config.retrieval_mode == "sparse"
    assert RagConfig.from_dict(config.to_dict()) == config


def test_environment_overrides():
    env = {"RAGKIT_LLM_BACKEND": "openai", "RAGKIT_OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "RAGKIT_LLM": "x", "RAGKIT_TOP_K": "3"}
    config = RagConfig.from_env(environ=env)
    assert (config.models.llm_backend, config.models.llm, config.top_k) == ("openai", "x", 3)
    assert RagConfig().models.llm_backend == "llama.cpp"  # defaults untouched


@pytest.mark.parametrize(
    "data, message",
    [
        ({"models": {"llm_backend": "openai"}}, "openai_base_url"),
        ({"retrieval_mode": "fuzzy"}, "retrieval_mode"),
        ({"top_k": 0}, "top_k"),
        ({"index": {"chunk_tokens": 50, "chunk_overlap_tokens": 50}}, "chunk_overlap_tokens"),
        ({"colour": "blue"}, "Unknown"),
        ({"models": {"size": 3}}, "Unknown ModelConfig"),
    ],
)
def test_invalid_config_is_a_clear_error(data, message):
    with pytest.raises(ValueError, match=message):
        RagConfig.from_dict(data)


def test_the_store_is_one_config_line_or_one_variable(monkeypatch, tmp_path):
    from ragkit.index.stores import is_store_url, without_password
    from ragkit.pipeline.export import _location

    assert RagConfig().store is None
    monkeypatch.setenv("RAGKIT_STORE", "milvus://127.0.0.1:19530?collection=wiki")
    assert RagConfig().store == "milvus://127.0.0.1:19530?collection=wiki"
    assert RagConfig.from_dict({"store": "postgresql://ragkit@db:5432/ragkit"}).store == "postgresql://ragkit@db:5432/ragkit"
    with pytest.raises(ValueError, match="store must be a postgresql://… or milvus://… URL"):
        RagConfig(store="sqlite:///x.db")
    assert is_store_url("postgres://u@h/db") and not is_store_url(str(tmp_path))
    # exported pipelines record where the index is, never a password
    assert without_password("postgresql://ragkit:s3cret@db:5432/ragkit?table=t") == "postgresql://ragkit@db:5432/ragkit?table=t"
    assert _location("postgresql://ragkit:s3cret@db/ragkit") == "postgresql://ragkit@db/ragkit"
    assert _location(tmp_path / "index") == str((tmp_path / "index").resolve())


def test_weight_repacking_is_off_unless_asked_and_a_bad_flag_is_named(monkeypatch):
    from ragkit.config import ModelConfig

    assert ModelConfig().repack_weights is False
    monkeypatch.setenv("RAGKIT_REPACK_WEIGHTS", "yes")
    assert ModelConfig().repack_weights is True
    monkeypatch.setenv("RAGKIT_REPACK_WEIGHTS", "maybe")
    with pytest.raises(ValueError, match="RAGKIT_REPACK_WEIGHTS='maybe'"):
        ModelConfig()


def test_the_generator_keeps_its_repacking_setting_and_restores_llama_cpps_defaults_after_loading():
    import llama_cpp.llama_cpp as low_level

    from ragkit.llm.portable import PortableLlamaCppChatGenerator, model_params

    generator = PortableLlamaCppChatGenerator(model="qwen2.5-coder-0.5b", repack_weights=True)
    data = generator.to_dict()
    assert data["init_parameters"]["repack_weights"] is True
    assert PortableLlamaCppChatGenerator.from_dict(data).repack_weights is True
    original = low_level.llama_model_default_params
    with model_params(use_extra_bufts=False):
        assert low_level.llama_model_default_params().use_extra_bufts is False
    assert low_level.llama_model_default_params is original and original().use_extra_bufts is True
