import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.confidence import ConfidenceScorer, symbol
from ragkit.components.reranker import Reranker

DOCS = [
    Document(content="The Rhine flows into the North Sea.", meta={"source": "rhine.md"}, score=0.9),
    Document(content="Nikola Tesla was born in Smiljan in 1856.", meta={"source": "tesla.md"}, score=0.8),
]


# -- confidence ----------------------------------------------------------------------------------
def test_confidence_is_a_weighted_mean_of_the_signals_present():
    out = ConfidenceScorer().run(documents=DOCS, grades=[8, 2], support=0.9)
    assert out["components"] == {"retrieval": 0.9, "grading": 0.8, "support": 0.9}
    assert out["confidence"] == pytest.approx(0.2 * 0.9 + 0.3 * 0.8 + 0.5 * 0.9)
    assert out["symbol"] == "●" and not out["decline"]
    only_retrieval = ConfidenceScorer().run(documents=DOCS)
    assert only_retrieval["confidence"] == pytest.approx(0.9) and set(only_retrieval["components"]) == {"retrieval"}


def test_support_is_rescaled_to_the_judges_threshold_and_a_failed_check_caps_confidence():
    from ragkit.components.confidence import rescale_support

    assert rescale_support(0.39, 0.39) == 0.5 and rescale_support(0.0, 0.39) == 0.0 and rescale_support(1.0, 0.39) == 1.0
    assert rescale_support(0.2, 0.4) == pytest.approx(0.25) and rescale_support(0.7, 0.4) == pytest.approx(0.75)
    passed = ConfidenceScorer(floor=0.35).run(documents=DOCS, grades=[8], support=0.45, support_threshold=0.39)
    assert passed["components"]["support"] > 0.5 and not passed["decline"]
    # strong evidence, but the answer failed its check: shown as ○ at most; far below the threshold: declined
    borderline = ConfidenceScorer(floor=0.35).run(documents=DOCS, grades=[9], support=0.35, support_threshold=0.39)
    assert borderline["symbol"] == "○" and not borderline["decline"]
    failed = ConfidenceScorer(floor=0.35).run(documents=DOCS, grades=[9], support=0.1, support_threshold=0.39)
    assert failed["decline"] and failed["confidence"] == pytest.approx(0.5 * 0.1 / 0.39, abs=1e-4)


def test_low_confidence_declines_and_no_documents_is_zero():
    assert ConfidenceScorer(floor=0.5).run(documents=DOCS, grades=[1], support=0.1)["decline"]
    empty = ConfidenceScorer().run(documents=[])
    assert empty["confidence"] == 0.0 and empty["symbol"] == "○" and empty["decline"]


def test_bm25_scores_are_squashed_and_unknown_grades_ignored():
    docs = [Document(content="x", score=15.0)]
    out = ConfidenceScorer().run(documents=docs, grades=[None, None])
    assert out["components"] == {"retrieval": 0.75}


@pytest.mark.parametrize("value, mark", [(0.71, "●"), (0.7, "◐"), (0.5, "◐"), (0.49, "○")])
def test_symbols(value, mark):
    assert symbol(value) == mark


def test_confidence_round_trip_and_validation():
    scorer = ConfidenceScorer.from_dict(ConfidenceScorer(floor=0.4, weights={"support": 1.0}).to_dict())
    assert scorer.floor == 0.4 and scorer.weights == {"support": 1.0}
    with pytest.raises(ValueError):
        ConfidenceScorer(weights={"vibes": 1.0})


# -- reranker ------------------------------------------------------------------------------------
def test_llm_reranker_needs_llama_cpp_and_keeps_order_otherwise():
    out = Reranker(backend="llm", generator=MockChatGenerator(responses="yes")).run(query="Where was Tesla born?", documents=DOCS)
    assert [d.meta["source"] for d in out["documents"]] == ["rhine.md", "tesla.md"]
    assert "llama.cpp" in out["reranking"]["fallback"]


def test_reranker_configuration_errors():
    with pytest.raises(ValueError):
        Reranker(backend="cross-encoder")
    with pytest.raises(ValueError):
        Reranker(backend="llm")
    again = Reranker.from_dict(Reranker(backend="bi-encoder", top_k=3).to_dict())
    assert again.backend == "bi-encoder" and again.top_k == 3


@pytest.mark.integration
def test_bi_encoder_reranker_moves_the_relevant_chunk_up():
    out = Reranker(backend="bi-encoder").run(query="Where was Nikola Tesla born?", documents=DOCS)
    assert out["documents"][0].meta["source"] == "tesla.md"
    assert out["documents"][0].meta["retrieval_score"] == 0.8 and out["reranking"]["order"] == [1, 0]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised BERT cross-encoder with a WordPiece tokenizer, built offline."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path = tmp_path_factory.mktemp("ce")
    words = "where was nikola tesla born the rhine flows into north sea in smiljan 1856 .".split()
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return str(path)


@pytest.mark.integration
def test_cross_encoder_backend_loads_a_local_model(tiny_cross_encoder):
    reranker = Reranker(backend="cross-encoder", model=tiny_cross_encoder, top_k=2)
    out = reranker.run(query="where was tesla born", documents=DOCS)
    assert len(out["documents"]) == 2 and all(0.0 <= d.score <= 1.0 for d in out["documents"])
    assert "fallback" not in out["reranking"]
    assert sorted(out["reranking"]["order"]) == [0, 1]
