import json
import os
import string
from pathlib import Path

import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.hallucination_detector import HallucinationDetector, split_sentences
from ragkit.llm.prompts import NO_ANSWER

DOCS = [Document(content="Nikola Tesla was born in Smiljan in 1856. He studied engineering in Graz.")]


def test_sentences_are_split_and_citations_dropped():
    assert split_sentences("Tesla was born in Smiljan [1]. He studied in Graz [1, 2]!") == ["Tesla was born in Smiljan.", "He studied in Graz!"]


def test_batched_judge_takes_the_weakest_sentence():
    llm = MockChatGenerator(responses='["yes", "no"]')
    out = HallucinationDetector(chat_generator=llm).run(replies=["Tesla was born in Smiljan. He won a Nobel Prize."], documents=DOCS)
    assert out["score"] == 0.0 and out["supported"] is False
    assert [s["p_supported"] for s in out["hallucination"]["sentences"]] == [1.0, 0.0]


@pytest.mark.parametrize("reply", ['["yes"]', "maybe", '["yes", "perhaps"]'])
def test_unparseable_judgement_is_unknown_not_a_guess(reply):
    out = HallucinationDetector(chat_generator=MockChatGenerator(responses=reply)).run(replies=["Tesla was born here. He is tall."], documents=DOCS)
    assert out["score"] is None and out["supported"] is None
    assert out["hallucination"]["fallback"].startswith("parse_failed")


def test_declined_answer_and_missing_documents_need_no_call():
    def boom(messages):
        raise AssertionError("the judge must not be called")

    detector = HallucinationDetector(chat_generator=MockChatGenerator(response_fn=boom))
    assert detector.run(replies=[NO_ANSWER], documents=DOCS)["score"] == 1.0
    assert detector.run(replies=["Tesla was born in Paris."], documents=[])["score"] == 0.0


def test_judge_exception_is_unknown():
    def boom(messages):
        raise ConnectionError("server gone")

    out = HallucinationDetector(chat_generator=MockChatGenerator(response_fn=boom)).run(replies=["Tesla was born in Smiljan."], documents=DOCS)
    assert out["score"] is None and "ConnectionError" in out["hallucination"]["fallback"]


def test_round_trip():
    detector = HallucinationDetector(chat_generator=MockChatGenerator(responses='["yes"]'), threshold=0.7)
    again = HallucinationDetector.from_dict(detector.to_dict())
    assert again.threshold == 0.7 and again.run(replies=["Tesla was born in Smiljan."], documents=DOCS)["supported"]


# -- HHEM, on a tiny random model of the same architecture ------------------------------------------
def make_tiny_hhem(path: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForTokenClassification, T5Tokenizer

    words = "Determine if the hypothesis is true given premise Premise Hypothesis Tesla born Smiljan Paris".split()
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)] + [("▁" + w, -5.0) for w in words]
    vocab += [(c, -8.0) for c in string.ascii_letters + string.digits + ".,?:!'-"]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(tokenizer), d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu", num_labels=2)
    state = {"t5." + k: v.contiguous() for k, v in T5ForTokenClassification(config).state_dict().items() if k != "transformer.encoder.embed_tokens.weight"}
    path.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps({"architectures": ["HHEMv2ForSequenceClassification"], "model_type": "HHEMv2Config", "id2label": {"0": "hallucinated", "1": "consistent"}}))
    tokenizer.save_pretrained(str(path))


@pytest.mark.integration
def test_hhem_loader_and_scoring_path_on_a_tiny_model(tmp_path):
    from ragkit.llm.hhem import HHEMScorer

    make_tiny_hhem(tmp_path / "hhem")
    scorer = HHEMScorer(str(tmp_path / "hhem"))
    pairs = [("Tesla was born in Smiljan.", "Tesla was born in Paris."), ("Tesla was born in Smiljan.", "Tesla was born in Smiljan.")]
    batch = scorer.score(pairs)
    assert all(0.0 <= s <= 1.0 for s in batch)
    assert batch == pytest.approx([scorer.score([p])[0] for p in pairs], abs=1e-5)
    detector = HallucinationDetector(backend="hhem", hhem_model=str(tmp_path / "hhem"))
    out = detector.run(replies=["Tesla was born in Paris."], documents=[Document(content="Tesla was born in Smiljan.")])
    assert 0.0 <= out["score"] <= 1.0 and out["hallucination"]["backend"] == "hhem"


@pytest.mark.integration
def test_a_checkpoint_that_is_not_hhem_is_refused(tmp_path):
    from safetensors.torch import save_file
    import torch

    from ragkit.llm.hhem import HHEMScorer

    (tmp_path / "bad").mkdir()
    save_file({"weight": torch.zeros(2, 2)}, str(tmp_path / "bad" / "model.safetensors"))
    with pytest.raises(ValueError, match="not an HHEM-2.1 checkpoint"):
        HHEMScorer(str(tmp_path / "bad")).warm_up()


def test_hhem_offline_without_weights_is_a_clear_error():
    from ragkit.llm.hhem import HHEMScorer
    from ragkit.llm.models import MissingModelError

    with pytest.raises(MissingModelError, match="offline"):
        HHEMScorer().warm_up()


HHEM_PATH = os.environ.get("RAGKIT_HHEM_PATH")


@pytest.mark.skipif(not HHEM_PATH, reason="HHEM-2.1-Open weights are not installable here; set RAGKIT_HHEM_PATH to a folder with them to run")
def test_hhem_reproduces_the_model_card_scores():
    from ragkit.llm.hhem import HHEMScorer

    pairs = [
        ("The capital of France is Berlin.", "The capital of France is Paris.", 0.011061512865126133),
        ("I am in California", "I am in United States.", 0.6473632454872131),
        ("I am in United States", "I am in California.", 0.1290171593427658),
        ("A person on a horse jumps over a broken down airplane.", "A person is outdoors, on a horse.", 0.8969419002532959),
        ("A boy is jumping on skateboard in the middle of a red bridge.", "The boy skates down the sidewalk on a red bridge", 0.18462494015693665),
        ("A man with blond-hair, and a brown shirt drinking out of a public water fountain.", "A blond man wearing a brown shirt is reading a book.", 0.005031010136008263),
        ("Mark Wahlberg was a fan of Manny.", "Manny was a fan of Mark Wahlberg.", 0.05432349815964699),
    ]
    scores = HHEMScorer(HHEM_PATH).score([(p, h) for p, h, _ in pairs])
    assert scores == pytest.approx([s for _, _, s in pairs], abs=1e-3)


# -- grounded spans: checked verbatim, not judged (judge_spans=False) ------------------------------------
def never_called(messages):
    raise AssertionError("a verbatim span must not reach the judge")


def test_a_verbatim_grounded_span_is_not_sent_to_the_judge():
    detector = HallucinationDetector(chat_generator=MockChatGenerator(response_fn=never_called), judge_spans=False)
    out = detector.run(replies=["Smiljan [1]"], documents=DOCS, query="Where was Tesla born?", mode="grounded")
    assert out["score"] is None and out["supported"] is True and "verbatim" in out["hallucination"]["skipped"]


def test_spans_are_judged_when_asked_for_or_when_not_verbatim_or_in_free_mode():
    judged = HallucinationDetector(chat_generator=MockChatGenerator(responses='["no"]'), judge_spans=True)
    assert judged.run(replies=["Smiljan [1]"], documents=DOCS, mode="grounded")["score"] == 0.0
    skipping = HallucinationDetector(chat_generator=MockChatGenerator(responses='["no"]'), judge_spans=False)
    assert skipping.run(replies=["Paris [1]"], documents=DOCS, mode="grounded")["score"] == 0.0  # not in the sources: judged
    assert skipping.run(replies=["Smiljan [1]"], documents=DOCS, mode="free")["score"] == 0.0  # free text is always judged
    assert HallucinationDetector.from_dict(skipping.to_dict()).judge_spans is False
