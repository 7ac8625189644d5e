import math

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
# A tiny calibration with known weights, so the arithmetic is checkable by hand.
def one_feature_fit(name: str, coef: float, intercept: float = 0.0) -> dict:
    return {"features": [name], "mean": [0.0], "scale": [1.0], "coef": [coef], "intercept": intercept, "n": 10}


CALIBRATION = {"models": {"tiny-llm": {
    "answer": {"base": one_feature_fit("token_p_mean", 4.0, -2.0), "agentic": one_feature_fit("support", 6.0, -3.0)},
    "lacks_answer": one_feature_fit("dense_top", -5.0, 2.0),
}}}


def test_confidence_is_the_calibrated_probability_of_the_signals():
    scorer = ConfidenceScorer(model="tiny-llm", calibration=CALIBRATION)
    out = scorer.run(documents=DOCS, replies=["Smiljan [2]"], query="Where was Tesla born?", signals={"token_p_mean": 0.9, "dense_top": 0.8})
    assert out["confidence"] == pytest.approx(1 / (1 + math.exp(-(4.0 * 0.9 - 2.0))))
    assert out["components"]["calibration"] == "tiny-llm/base" and out["components"]["token_p_mean"] == 0.9
    assert out["components"]["lexical_support"] == 1.0 and out["components"]["verbatim"] == 1.0  # "smiljan" is in a source
    assert out["p_lacks_answer"] == pytest.approx(1 / (1 + math.exp(-(2.0 - 5.0 * 0.8))), abs=1e-4)
    # with the judge's score present the agentic fit is used, on the rescaled score (threshold -> 0.5)
    judged = scorer.run(documents=DOCS, replies=["Smiljan"], signals={"token_p_mean": 0.9}, support=0.39, support_threshold=0.39)
    assert judged["components"]["calibration"] == "tiny-llm/agentic"
    assert judged["confidence"] == pytest.approx(1 / (1 + math.exp(-(6.0 * 0.5 - 3.0))))


def test_support_is_rescaled_to_the_judges_threshold():
    from ragkit.components.confidence import rescale_support

    assert rescale_support(0.39, 0.39) == 0.5 and rescale_support(0.0, 0.39) == 0.0 and rescale_support(1.0, 0.39) == 1.0
    assert rescale_support(0.2, 0.4) == pytest.approx(0.25) and rescale_support(0.7, 0.4) == pytest.approx(0.75)


def test_a_decline_is_not_a_confident_answer():
    scorer = ConfidenceScorer(model="tiny-llm", calibration=CALIBRATION)
    out = scorer.run(documents=DOCS, replies=["The documents don't say."], signals={"token_p_mean": 0.99, "dense_top": 0.1})
    assert out["confidence"] == 0.0 and out["symbol"] == "○" and not out["decline"]
    assert out["p_lacks_answer"] > 0.8  # weak retrieval: the system is fairly sure the sources lack it
    empty = scorer.run(documents=[], replies=["The documents don't say."])
    assert empty["confidence"] == 0.0 and empty["p_lacks_answer"] == 1.0


def test_a_failed_step_can_never_raise_confidence_and_is_named():
    scorer = ConfidenceScorer(model="tiny-llm", calibration=CALIBRATION)
    sure = {"token_p_mean": 1.0}
    assert scorer.run(documents=DOCS, replies=["Smiljan"], signals=sure)["symbol"] == "●"
    failed = scorer.run(documents=DOCS, replies=["Smiljan"], signals=sure, failed_steps=["grade"])
    assert failed["symbol"] == "○" and failed["confidence"] < 0.5 and failed["components"]["failed_steps"] == ["grade"]


def test_floor_declines_answers_below_it_only():
    scorer = ConfidenceScorer(floor=0.3, model="tiny-llm", calibration=CALIBRATION)
    assert scorer.run(documents=DOCS, replies=["Smiljan"], signals={"token_p_mean": 0.1})["decline"]
    assert not scorer.run(documents=DOCS, replies=["Smiljan"], signals={"token_p_mean": 0.95})["decline"]


def test_unknown_models_borrow_a_calibration_and_say_so_and_none_at_all_never_claims_high():
    borrowed = ConfidenceScorer(model="my-server-model", calibration=CALIBRATION).run(documents=DOCS, replies=["x"], signals={"token_p_mean": 1.0})
    assert "borrowed" in borrowed["components"]["calibration"]
    by_name = ConfidenceScorer(model="/models/tiny-llm-q4.gguf", calibration=CALIBRATION).run(documents=DOCS, replies=["x"], signals={})
    assert by_name["components"]["calibration"] == "tiny-llm/base"
    none = ConfidenceScorer(model="x", calibration={}).run(documents=DOCS, replies=["Smiljan"], signals={"token_p_mean": 1.0})
    assert none["components"]["calibration"] == "uncalibrated" and none["symbol"] == "○"


@pytest.mark.parametrize("value, mark", [(0.71, "●"), (0.7, "◐"), (0.5, "◐"), (0.49, "○")])
def test_symbols(value, mark):
    assert symbol(value) == mark


def test_confidence_round_trip_and_validation():
    scorer = ConfidenceScorer.from_dict(ConfidenceScorer(floor=0.4, model="tiny-llm", calibration=CALIBRATION).to_dict())
    assert scorer.floor == 0.4 and scorer.model == "tiny-llm" and scorer.calibration == CALIBRATION
    with pytest.raises(ValueError):
        ConfidenceScorer(floor=2.0)


# -- reranker ------------------------------------------------------------------------------------
def test_llm_reranker_needs_llama_cpp_and_keeps_order_otherwise():
    out = Reranker(backend="llm", chat_generator=MockChatGenerator(responses="yes")).run(query="Where was Tesla born?", documents=DOCS)
    assert [d.meta["source"] for d in out["documents"]] == ["rhine.md", "tesla.md"]
    assert "llama.cpp" in out["reranking"]["fallback"]


def test_reranker_configuration_errors():
    with pytest.raises(ValueError):
        Reranker(backend="cross-encoder")
    with pytest.raises(ValueError):
        Reranker(backend="llm")
    with pytest.raises(ValueError, match="retrieval_weight"):
        Reranker(backend="bi-encoder", retrieval_weight=0)
    again = Reranker.from_dict(Reranker(backend="bi-encoder", top_k=3, retrieval_weight=2.0).to_dict())
    assert again.backend == "bi-encoder" and again.top_k == 3 and again.retrieval_weight == 2.0
    assert Reranker.from_dict({"type": "ragkit.components.reranker.Reranker", "init_parameters": {"backend": "bi-encoder"}}).retrieval_weight == 1.0


def test_a_heavier_retrieval_weight_lets_the_reranker_break_near_ties_but_not_outvote_retrieval():
    from ragkit.components.reranker import fused_order

    scores = [0.1, 0.2, 0.9, 0.3]  # the reranker likes retrieval's third best most
    assert fused_order(scores) == [2, 0, 1, 3]  # equal votes: its favourite jumps to first
    assert fused_order(scores, retrieval_weight=2.0) == [0, 2, 1, 3]  # retrieval's first holds; the favourite moves up one
    # two candidates the reranker orders the other way: a tie at equal votes (the reranker breaks it), retrieval's at 2
    assert fused_order([0.1, 0.9]) == [1, 0] and fused_order([0.1, 0.9], retrieval_weight=2.0) == [0, 1]


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


def test_the_rerank_bench_scores_a_gold_paragraph_by_its_place_in_the_top_five_and_marks_where_the_weight_was_chosen():
    from conftest import bench_module

    with bench_module("rerank_questions") as bench:
        assert bench.gold_measures(["a", "g", "b"], "g") == {"mrr@5": 0.5, "r@1": 0.0, "r@5": 1.0}
        assert bench.gold_measures(["a", "b", "c", "d", "e", "g"], "g") == {"mrr@5": 0.0, "r@1": 0.0, "r@5": 0.0}  # sixth is out
        plain, other = [{"mrr@5": 1.0, "r@1": 1.0, "r@5": 1.0}, {"mrr@5": 0.0, "r@1": 0.0, "r@5": 0.0}], [{"mrr@5": 0.5, "r@1": 0.0, "r@5": 1.0}] * 2
        figures = bench.against_plain(plain, other)
        assert figures["mrr@5"]["change"] == 0.0 and (figures["worse"], figures["better"]) == (1, 1) and figures["r@1"]["change"] == -0.5
    with bench_module("tables") as tables:
        part = {"questions": 2, "plain": {"mrr@5": 0.5, "r@1": 0.5, "r@5": 0.5}, "rerank": figures, "rerank, retrieval weighted 2": figures}
        table = tables.rerank_questions_table({"chosen_on": "squad_dev other_paragraphs", "sets": {
            "squad_dev": {"other_paragraphs": part}, "new_wiki": {"other_paragraphs": part}}})
        assert table.count("← chosen here") == 1 and "| squad_dev | other paragraphs (1,000 drawn) | 2 | 0.500 / 0.500 / 0.500 | retrieval weighted 2 (candidate) ← chosen here |" in table


def test_notebook_05_shows_every_committed_rerank_measurement_against_plain():
    import json
    from pathlib import Path

    from ragkit.eval.experiments import rerank_question_rows

    data = json.loads((Path(__file__).resolve().parent.parent / "bench" / "results" / "rerank_questions.json").read_text())
    rows = rerank_question_rows(data)
    measured = [(name, part, label) for name, parts in data["sets"].items() for part, f in parts.items() for label in f if label not in ("questions", "plain")]
    assert len(rows) == len(measured) == 8
    first = data["sets"]["squad_dev"]["agreement_paragraphs"]
    assert rows[0] == {"set": "squad_dev", "questions": f"{first['questions']} (its 300)", "fusion": "1:1 (default)",
                       **{f"{m.upper()} Δ [95%]": f"{first['rerank'][m]['change']:+.3f} [{first['rerank'][m]['interval95'][0]:+.3f},"
                          f"{first['rerank'][m]['interval95'][1]:+.3f}]" for m in ("mrr@5", "r@1", "r@5")}}
    assert {row["fusion"] for row in rows} == {"1:1 (default)", "2:1"}
    # at 1280 px with the file browser open the table fit when no row was longer than this (screenshot, notebook 05)
    assert max(len(" ".join(row.values())) for row in rows) <= 110
