"""The evidence step of grounded answers: which sentence an answer may be copied from, how the
prompt, the span mask and the judge read it, and where it sits in the graph. Fast: no model."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage

from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.index.sentences import sentence_spans, split_sentences
from ragkit.index.sparse import BM25sIndex
from ragkit.llm.prompts import answer_prompt_builder, evidence_messages
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph import build_pipeline

DOCS = [
    Document(id="rhine", content="The Rhine flows north. It reaches the North Sea at Rotterdam.", meta={"title": "Rhine"}),
    Document(id="tesla", content="Tesla studied in Graz. Nikola Tesla was born in Smiljan in 1856. He moved to New York.", meta={"title": "Tesla"}),
]


class TermsOnly(EvidenceSelector):
    """Ranks by terms alone (no embedder in fast tests)."""

    def _cosines(self, question, texts):
        return [0.0] * len(texts)


def test_sentences_are_cut_once_for_every_reader():
    text = "Dr. Smith was born in the U.S. in 1901.\nHe moved to Paris. [O.S. 28 June] was the date."
    assert split_sentences(text) == ["Dr. Smith was born in the U.S. in 1901.", "He moved to Paris.", "[O.S. 28 June] was the date."]
    assert all(text[a:b] == s for (a, b), s in zip(sentence_spans(text), split_sentences(text)))
    from ragkit.components.reranker import split_passage

    assert split_passage(text) == split_sentences(text, 12)  # the reranker's sentences are the evidence step's


def test_term_weights_come_from_the_index_bm25_statistics():
    index = BM25sIndex()
    index.build(["a", "b", "c"], ["Tesla was born in Smiljan.", "Tesla moved to Graz.", "The Rhine flows north."])
    weights = index.term_weights("Where was Tesla born in Paris?")
    assert set(weights) == {"tesla", "born"}  # stopwords and words the corpus never saw drop out
    assert weights["born"] > weights["tesla"]  # rarer is heavier


def test_the_sentence_covering_the_question_is_the_evidence_and_knows_its_source():
    out = TermsOnly().run(query="Where was Nikola Tesla born?", documents=DOCS, mode="grounded")
    best = out["evidence"][0]
    assert best.content == "Nikola Tesla was born in Smiljan in 1856." and best.meta["cite"] == 2 and best.meta["chunk_id"] == "tesla"
    assert DOCS[1].content[best.meta["offset"]:].startswith(best.content)
    assert out["signals"]["evidence_margin"] > 0 and 0 < out["signals"]["evidence_coverage"] <= 1
    assert TermsOnly().run(query="Where was Tesla born?", documents=DOCS, mode="free") == {"evidence": [], "signals": {}}
    assert TermsOnly().run(query="Where was Tesla born?", documents=[], mode="grounded")["evidence"] == []


def test_the_selector_round_trips_by_index_path():
    again = EvidenceSelector.from_dict(EvidenceSelector(index_path="/some/index", sentences=2).to_dict())
    assert again._handle.index_path == "/some/index" and again.sentences == 2
    with pytest.raises(ValueError):
        EvidenceSelector(sentences=0)


def test_the_prompt_shows_only_the_evidence_under_its_source_number():
    evidence = TermsOnly().run(query="Where was Nikola Tesla born?", documents=DOCS, mode="grounded")["evidence"]
    built = answer_prompt_builder().run(documents=DOCS, query="Where was Nikola Tesla born?", mode="grounded", evidence=evidence)["prompt"]
    assert [m.text for m in built] == [m.text for m in evidence_messages(evidence, "Where was Nikola Tesla born?")]
    assert '<source id="2" title="Tesla">\nNikola Tesla was born in Smiljan in 1856.\n</source>' in built[1].text
    assert "Rhine" not in built[1].text and "Graz" not in built[1].text


class NoLogits:
    def __init__(self, reply: str):
        self.reply = reply

    def run(self, messages, generation_kwargs=None):
        return {"replies": [ChatMessage.from_assistant(self.reply)]}


def test_a_span_of_the_evidence_is_cited_and_placed_in_its_source():
    evidence = TermsOnly().run(query="Where was Nikola Tesla born?", documents=DOCS, mode="grounded")["evidence"]
    out = GuardedGenerator(chat_generator=NoLogits("Smiljan"), answer_mode="grounded").run(messages=[], documents=DOCS, evidence=evidence, query="Where was Tesla born?")
    assert out["replies"][0].text == "Smiljan [2]"
    e = out["evidence"]
    assert DOCS[1].content[e["start"]:e["end"]] == "Smiljan" and e["sentence"] == "Nikola Tesla was born in Smiljan in 1856."
    # a reply from outside the evidence sentence is not a copy of it: declined
    assert GuardedGenerator(chat_generator=NoLogits("Graz"), answer_mode="grounded").run(messages=[], documents=DOCS, evidence=evidence)["replies"][0].text == "The documents don't say."


class RecordingJudge:
    """A no-logits judge that records what it was shown."""

    def __init__(self):
        self.seen = []

    def run(self, messages, generation_kwargs=None):
        self.seen.append(messages[-1].text)
        return {"replies": [ChatMessage.from_assistant('["yes"]')]}


def test_the_judge_reads_the_evidence_the_answer_was_copied_from():
    evidence = TermsOnly().run(query="Where was Nikola Tesla born?", documents=DOCS, mode="grounded")["evidence"]
    judge = RecordingJudge()
    out = HallucinationDetector(chat_generator=judge).run(replies=["Smiljan [2]"], documents=DOCS, query="Where was Tesla born?", evidence=evidence)
    assert out["score"] == 1.0 and out["hallucination"]["judged_against"] == "evidence sentences"
    shown = judge.seen[0]
    assert shown.startswith(evidence_messages(evidence, "q")[1].text.split("\n\n")[0]) and "Rhine" not in shown


def nodes_and_edges(features: Features):
    pipe = build_pipeline(features, NoLogits("x"), index_path="unused")
    return set(pipe.graph.nodes), {(u, v, d["to_socket"].name) for u, v, d in pipe.graph.edges(data=True)}


def test_the_evidence_step_joins_the_graph_only_where_answers_may_be_grounded():
    nodes, edges = nodes_and_edges(Features())
    assert "evidence" in nodes and {("evidence", "answer", "evidence"), ("evidence", "answer_prompt", "evidence"), ("evidence", "confidence", "evidence_signals")} <= edges
    assert "evidence" not in nodes_and_edges(Features(answer_mode="free"))[0]
    nodes, edges = nodes_and_edges(Features.all_on())
    assert ("evidence", "self_correction", "evidence") in edges and ("route_policy", "evidence", "mode") in edges


def test_fact_lookups_are_not_graded_when_routed():
    features = Features.all_on()
    assert features.grader_for("FACTUAL") == "off" and features.grader_for("ANALYTICAL") == "llm"
    assert Features.all_on(grader_backend="embedding").grader_for("ANALYTICAL") == "embedding"
    capped = Features().route_policy
    capped["SUMMARY"]["grader"] = "embedding"
    assert Features(route_policy=capped).grader_for("SUMMARY") == "embedding"
    _, edges = nodes_and_edges(features)
    assert ("route_policy", "grade", "backend") in edges
    bad = Features().route_policy
    bad["FACTUAL"]["grader"] = "oracle"
    with pytest.raises(ValueError):
        Features(route_policy=bad).validate()


def test_the_grader_takes_its_backend_per_question():
    from ragkit.components.document_grader import DocumentGrader

    class Embeds(DocumentGrader):
        def _embedding_scores(self, query, documents):
            return [9.0, 1.0]

    grader = Embeds(backend="llm", chat_generator=NoLogits("[1,9]"), threshold=5)
    out = grader.run(query="Where was Tesla born?", documents=DOCS, backend="embedding")
    assert out["grading"]["backend"] == "embedding" and [d.id for d in out["documents"]] == ["rhine"]
    assert [d.id for d in grader.run(query="Where was Tesla born?", documents=DOCS)["documents"]] == ["tesla"]
    skipped = grader.run(query="Where was Tesla born?", documents=DOCS, backend="off")
    assert skipped["documents"] == DOCS and skipped["grading"]["backend"] == "off"
