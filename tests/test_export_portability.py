"""An exported pipeline loads on another machine: YAML written under one home folder answers under another.

Two fresh ``HOME`` folders stand for two machines with ragkit installed: ``ragkit export`` runs in
the first, the YAML is loaded and asked a question in the second, in separate processes. The YAML
may name the index folder (the user's data, which they copy), but nothing of the machine that wrote
it: no model file in its cache, no embedder inside its virtualenv, no thread count, no anchors.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.llm]

LOAD_AND_ASK = """
import json, sys
from ragkit.pipeline.export import load_exported, run_exported
pipe = load_exported(sys.argv[1])
out = run_exported(pipe, "Where was Nikola Tesla born?")
print(json.dumps({k: out[k] for k in ("answer", "failed", "error", "confidence", "exit_reason")}))
"""


def machine(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAGKIT_CACHE", "XDG_CACHE_HOME") and not k.startswith("RAGKIT_")}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home)}


def test_yaml_exported_on_one_machine_answers_on_another(sample_index_dir, tmp_path):
    from ragkit.config import ModelConfig, RagConfig
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    first, second = tmp_path / "first-home", tmp_path / "second-home"
    yaml_path = tmp_path / "pipeline.yaml"
    ragkit = Path(sys.executable).with_name("ragkit")
    subprocess.run([str(ragkit), "export", "--all-features", "--index-dir", str(sample_index_dir), "--llm", "qwen2.5-coder-0.5b", "-o", str(yaml_path)],
                   env=machine(first), check=True, capture_output=True, timeout=300)
    text = yaml_path.read_text()
    assert str(first) not in text and "site-packages" not in text and ".gguf" not in text  # nothing of the first machine
    assert not re.search(r"&id\d+|\*id\d+", text)  # no YAML anchors to chase
    assert "model: qwen2.5-coder-0.5b" in text and "model: all-MiniLM-L6-v2" in text and "n_threads: null" in text
    assert "n_threads: 2" not in text and "device:" not in text

    done = subprocess.run([sys.executable, "-c", LOAD_AND_ASK, str(yaml_path)], env=machine(second), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert not out["failed"] and out["answer"] and out["error"] is None, out
    config = RagConfig(models=ModelConfig(llm="qwen2.5-coder-0.5b"))  # what `ragkit export --llm` configured
    engine = AgenticRAG(Features.all_on(), index_dir=sample_index_dir, config=config).ask("Where was Nikola Tesla born?")
    assert out["answer"] == engine.answer and out["exit_reason"] == engine.exit_reason  # the engine's answer, on the other machine
    assert (second / ".cache" / "ragkit" / "models" / "qwen2.5-coder-0.5b.Q4_K_M.gguf").is_file()  # resolved there, by name
