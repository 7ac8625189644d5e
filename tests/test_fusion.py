"""HybridScoreJoiner on tiny hand-made lists (no models, no index)."""

import pytest
from haystack import Document, Pipeline

from ragkit.components.score_fusion import HybridScoreJoiner, fill_score, scaled_scores


def docs(*pairs):
    return [Document(id=i, content=i, score=s) for i, s in pairs]


def ids(out):
    return [d.id for d in out["documents"]]


def test_scores_are_shares_of_the_list_best():
    assert scaled_scores(docs(("a", 20.0), ("b", 10.0), ("c", 5.0))) == {"a": 1.0, "b": 0.5, "c": 0.25}
    assert scaled_scores([]) == {}
    # nothing positive (a cosine list pointing away from the question): shifted, order kept, best = 1
    assert scaled_scores(docs(("a", -0.1), ("b", -0.3))) == pytest.approx({"a": 1.0, "b": 0.8})


def test_first_in_both_lists_scores_one_and_leads():
    out = HybridScoreJoiner().run(dense_documents=docs(("x", 0.7), ("y", 0.6)), sparse_documents=docs(("x", 12.0), ("z", 3.0)))
    assert ids(out)[0] == "x" and out["documents"][0].score == pytest.approx(1.0)


def test_confident_bm25_hit_beats_a_flat_dense_list():
    # dense cannot tell its candidates apart (0.42 vs 0.40); BM25 has a clear winner the dense list ranks second
    dense = docs(("d1", 0.42), ("gold", 0.41), ("d3", 0.40))
    sparse = docs(("gold", 18.0), ("s2", 6.0), ("d1", 5.0))
    out = HybridScoreJoiner().run(dense_documents=dense, sparse_documents=sparse)
    assert ids(out)[0] == "gold"


def test_confident_dense_hit_beats_a_flat_bm25_list():
    dense = docs(("gold", 0.80), ("d2", 0.35), ("s1", 0.30))
    sparse = docs(("s1", 7.1), ("s2", 7.0), ("gold", 6.9))
    assert ids(HybridScoreJoiner().run(dense_documents=dense, sparse_documents=sparse))[0] == "gold"


def test_missing_document_gets_the_lists_lowest_score_or_zero_when_the_list_ran_out():
    assert fill_score({"a": 1.0, "b": 0.4}, this_len=2, other_len=2) == 0.4  # cut at the depth: at most its last score
    assert fill_score({"a": 1.0}, this_len=1, other_len=3) == 0.0  # shorter: BM25 ran out of matching documents
    assert fill_score({}, this_len=0, other_len=3) == 0.0
    # "only_dense" is missing from the (full-depth) sparse list: it gets 0.25 there, not 0
    out = HybridScoreJoiner(sparse_weight=0.5).run(
        dense_documents=docs(("only_dense", 0.5), ("both", 0.25)), sparse_documents=docs(("both", 8.0), ("only_sparse", 2.0))
    )
    scores = {d.id: d.score for d in out["documents"]}
    assert scores["only_dense"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.25)
    assert scores["both"] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    assert scores["only_sparse"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.25)
    assert ids(out) == ["both", "only_dense", "only_sparse"]


def test_one_empty_list_keeps_the_other_lists_order():
    dense = docs(("a", 0.9), ("b", 0.5), ("c", 0.4))
    assert ids(HybridScoreJoiner().run(dense_documents=dense, sparse_documents=[])) == ["a", "b", "c"]
    sparse = docs(("c", 9.0), ("a", 3.0))
    assert ids(HybridScoreJoiner().run(dense_documents=[], sparse_documents=sparse)) == ["c", "a"]
    assert HybridScoreJoiner().run(dense_documents=[], sparse_documents=[]) == {"documents": []}


def test_weight_moves_the_balance():
    dense = docs(("d", 0.9), ("s", 0.45))
    sparse = docs(("s", 10.0), ("d", 5.0))  # d: 1.0 dense / 0.5 sparse; s: 0.5 / 1.0
    assert ids(HybridScoreJoiner(sparse_weight=0.3).run(dense_documents=dense, sparse_documents=sparse))[0] == "d"
    assert ids(HybridScoreJoiner(sparse_weight=0.7).run(dense_documents=dense, sparse_documents=sparse))[0] == "s"


def test_top_k_from_the_constructor_or_the_call():
    dense = docs(("a", 0.9), ("b", 0.8), ("c", 0.7))
    sparse = docs(("c", 3.0), ("b", 2.0), ("a", 1.0))
    assert len(HybridScoreJoiner(top_k=2).run(dense_documents=dense, sparse_documents=sparse)["documents"]) == 2
    assert len(HybridScoreJoiner(top_k=2).run(dense_documents=dense, sparse_documents=sparse, top_k=1)["documents"]) == 1


def test_duplicate_ids_and_missing_scores_do_not_break_it():
    dense = [Document(id="a", content="a", score=None), Document(id="b", content="b", score=0.5), Document(id="b", content="b", score=0.1)]
    out = HybridScoreJoiner().run(dense_documents=dense, sparse_documents=docs(("a", 1.0)))
    assert sorted(ids(out)) == ["a", "b"]


@pytest.mark.parametrize("weight", [0.0, 1.0, -0.1, 1.5])
def test_weight_must_be_strictly_between_0_and_1(weight):
    with pytest.raises(ValueError, match="sparse_weight"):
        HybridScoreJoiner(sparse_weight=weight)


def test_serializes_in_a_pipeline():
    pipe = Pipeline()
    pipe.add_component("joiner", HybridScoreJoiner(sparse_weight=0.6, top_k=3))
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=["ragkit.*"])
    joiner = loaded.get_component("joiner")
    assert (joiner.sparse_weight, joiner.top_k) == (0.6, 3)
    out = loaded.run({"joiner": {"dense_documents": docs(("a", 0.9)), "sparse_documents": docs(("b", 4.0), ("a", 2.0))}})
    assert ids(out["joiner"]) == ["a", "b"]
