"""Load Vectara's HHEM-2.1-Open without ``trust_remote_code`` and score (premise, hypothesis) pairs.

HHEM-2.1-Open is flan-t5-base's encoder with a 2-way token-classification head, published with its
own remote code, which no longer loads on transformers 5 (and remote code is not something ragkit
runs). The checkpoint's tensors are ``"t5." + T5ForTokenClassification`` keys, so the stock class
loads them with ``key_mapping={"^t5\\.": ""}``; its config.json holds no T5 hyper-parameters, so the
T5 config is rebuilt from the tensor shapes. Loading asserts that every tensor was used and that
the input embedding is tied to ``shared`` — a silent mismatch would otherwise leave random weights
and produce plausible-looking noise. Notes and sources: docs/design/hhem.md.

The score is P("consistent") = softmax(logits[:, 0])[1], with HHEM's prompt template; the model
card's reference pairs are checked by ``tests/test_hhem.py`` when ``RAGKIT_HHEM_PATH`` points at the
real weights.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ragkit.llm.models import MissingModelError

HHEM_HUB_ID = "vectara/hallucination_evaluation_model"
HHEM_TOKENIZER_HUB_ID = "google/flan-t5-base"
HHEM_PROMPT = "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}"


def t5_config_from_checkpoint(weights: Path):
    from safetensors import safe_open
    from transformers import T5Config

    with safe_open(str(weights), "pt") as fh:
        shapes = {key: fh.get_slice(key).get_shape() for key in fh.keys()}
    layer = "t5.transformer.encoder.block.0.layer."
    try:
        vocab, d_model = shapes["t5.transformer.shared.weight"]
        buckets, heads = shapes[layer + "0.SelfAttention.relative_attention_bias.weight"]
        labels = shapes["t5.classifier.weight"][0]
    except KeyError as exc:
        raise ValueError(f"{weights} is not an HHEM-2.1 checkpoint (missing tensor {exc})") from None
    gated = layer + "1.DenseReluDense.wi_0.weight" in shapes
    n_layers = len({m.group(1) for key in shapes if (m := re.match(r"t5\.transformer\.encoder\.block\.(\d+)\.", key))})
    return T5Config(
        vocab_size=vocab, d_model=d_model, num_layers=n_layers, num_heads=heads,
        d_ff=shapes[layer + ("1.DenseReluDense.wi_0.weight" if gated else "1.DenseReluDense.wi.weight")][0],
        d_kv=shapes[layer + "0.SelfAttention.q.weight"][0] // heads,
        relative_attention_num_buckets=buckets, relative_attention_max_distance=128, layer_norm_epsilon=1e-6,
        feed_forward_proj="gated-gelu" if gated else "relu", num_labels=labels, tie_word_embeddings=False,
    )


def resolve_hhem_dir(model: str) -> Path:
    """A local folder, or the hub id fetched only when the user allowed hub downloads."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if model != HHEM_HUB_ID:
        raise MissingModelError(f"HHEM model {model!r} is not a folder holding model.safetensors and config.json")
    if os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False"):
        raise MissingModelError(
            "HHEM-2.1-Open weights are not installed and ragkit is offline. Download "
            f"{HHEM_HUB_ID} (config.json, model.safetensors) and flan-t5-base's tokenizer files into one folder "
            "and pass that folder, or set HF_HUB_OFFLINE=0 to let ragkit fetch them."
        )
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(HHEM_HUB_ID, allow_patterns=["config.json", "model.safetensors"]))


class HHEMScorer:
    """Usage::

        scorer = HHEMScorer("/models/hhem-2.1-open")     # folder with weights (+ tokenizer)
        scorer.score([("The capital of France is Berlin.", "The capital of France is Paris.")])  # [0.011]
    """

    def __init__(self, model: str = HHEM_HUB_ID, max_length: int = 2048):
        self.model_name = model
        self.max_length = max_length
        self._model = None
        self._tokenizer = None
        self._consistent = 1

    def warm_up(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoTokenizer, T5ForTokenClassification

        folder = resolve_hhem_dir(self.model_name)
        weights = folder / "model.safetensors"
        if not weights.is_file():
            raise MissingModelError(f"{folder} has no model.safetensors")
        config = t5_config_from_checkpoint(weights)
        model, info = T5ForTokenClassification.from_pretrained(
            str(folder), config=config, key_mapping={r"^t5\.": ""}, output_loading_info=True
        )
        if any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")):
            raise ValueError(f"{weights} does not fit T5ForTokenClassification: {info}")
        encoder = model.transformer
        if encoder.shared.weight.data_ptr() != encoder.encoder.embed_tokens.weight.data_ptr():
            raise ValueError("HHEM's input embedding is not tied to its shared embedding: the scores would be noise")
        id2label = json.loads((folder / "config.json").read_text()).get("id2label", {"1": "consistent"}) if (folder / "config.json").is_file() else {"1": "consistent"}
        self._consistent = int(next((k for k, v in id2label.items() if v == "consistent"), 1))
        tokenizer_source = str(folder) if any((folder / f).is_file() for f in ("tokenizer.json", "spiece.model")) else HHEM_TOKENIZER_HUB_ID
        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        self._model = model.eval()

    def score(self, pairs: list[tuple[str, str]], batch_size: int = 8) -> list[float]:
        import torch

        self.warm_up()
        scores: list[float] = []
        for i in range(0, len(pairs), batch_size):
            batch = pairs[i : i + batch_size]
            encoded = self._tokenizer(
                [HHEM_PROMPT.format(text1=premise, text2=hypothesis) for premise, hypothesis in batch],
                return_tensors="pt", padding=True, truncation=True, max_length=self.max_length,
            )
            with torch.no_grad():
                logits = self._model(**encoded).logits[:, 0, :]
            scores.extend(torch.softmax(logits, dim=-1)[:, self._consistent].tolist())
        return scores
