import numpy as np
import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.document_grader import DocumentGrader
from ragkit.components.hyde import HyDEEmbedder
from ragkit.pipeline.trace import RagkitTracer

DOCS = [
    Document(content="Nikola Tesla was born in Smiljan in 1856.", meta={"source": "tesla.md"}),
    Document(content="The Rhine flows into the North Sea.", meta={"source": "rhine.md"}),
    Document(content="Tesla moved to New York in 1884.", meta={"source": "tesla.md"}),
]


def counting_llm(reply):
    calls = []

    def respond(messages):
        calls.append(messages)
        if isinstance(reply, Exception):
            raise reply
        return reply

    return MockChatGenerator(response_fn=respond), calls


# -- grader --------------------------------------------------------------------------------------
def test_llm_grader_makes_one_call_for_the_whole_batch_and_drops_low_scores():
    llm, calls = counting_llm("[9, 1, 6]")
    out = DocumentGrader(backend="llm", chat_generator=llm, threshold=4).run(query="Where was Tesla born?", documents=DOCS)
    assert len(calls) == 1
    assert [d.meta["source"] for d in out["documents"]] == ["tesla.md", "tesla.md"]
    assert out["grading"]["scores"] == [9, 1, 6]
    assert out["grading"]["dropped"] == [{"id": DOCS[1].id, "source": "rhine.md", "grade": 1.0}]
    assert [d.meta["grade"] for d in out["documents"]] == [9.0, 6.0]
    user = calls[0][1].text
    assert user.count("<source id=") == 3 and user.index("Sources:") < user.index("Question:")


@pytest.mark.parametrize("reply", ["[9, 1]", "relevant, not, relevant", "[11, 2, 3]", '{"scores": "high"}', ""])
def test_unparseable_grades_keep_everything_and_say_so(reply):
    llm, _ = counting_llm(reply)
    grader = DocumentGrader(backend="llm", chat_generator=llm)
    with RagkitTracer().collect() as trace:
        from haystack import Pipeline

        p = Pipeline()
        p.add_component("grader", grader)
        out = p.run({"grader": {"query": "q", "documents": DOCS}})["grader"]
    assert len(out["documents"]) == 3 and out["grading"]["fallback"].startswith("parse_failed")
    step = trace.step("grader")
    assert step.fallbacks and step.docs_in and len(step.docs_out) == 3


def test_grader_survives_an_llm_exception():
    llm, _ = counting_llm(RuntimeError("server down"))
    out = DocumentGrader(backend="llm", chat_generator=llm).run(query="q", documents=DOCS)
    assert len(out["documents"]) == 3 and "llm_error: " in out["grading"]["fallback"] and "(RuntimeError" in out["grading"]["fallback"]


def test_min_keep_never_empties_the_context():
    llm, _ = counting_llm("[1, 0, 2]")
    out = DocumentGrader(backend="llm", chat_generator=llm, threshold=5, min_keep=1).run(query="q", documents=DOCS)
    assert [d.content for d in out["documents"]] == [DOCS[2].content]


def test_no_documents_no_call():
    llm, calls = counting_llm("[]")
    assert DocumentGrader(backend="llm", chat_generator=llm).run(query="q", documents=[])["documents"] == []
    assert calls == []


def test_grader_round_trip():
    grader = DocumentGrader(backend="llm", chat_generator=MockChatGenerator(responses="[5]"), threshold=6)
    again = DocumentGrader.from_dict(grader.to_dict())
    assert again.threshold == 6 and again.run(query="q", documents=DOCS[:1])["grading"]["scores"] == [5]


@pytest.mark.integration
def test_embedding_grader_prefers_the_relevant_chunk():
    out = DocumentGrader(backend="embedding", threshold=3).run(query="Where was Nikola Tesla born?", documents=DOCS)
    scores = out["grading"]["scores"]
    assert scores[0] > scores[1] and DOCS[1].id in {d["id"] for d in out["grading"]["dropped"]}


# -- HyDE ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def question_vector():
    from ragkit.config import ModelConfig
    from ragkit.llm.generators import build_text_embedder

    embedder = build_text_embedder(ModelConfig())
    embedder.warm_up()
    return embedder.run(text="Where was Tesla born?")["embedding"]


@pytest.mark.integration
def test_hyde_averages_question_and_passage_and_caches(question_vector):
    llm, calls = counting_llm("Nikola Tesla was born in the village of Smiljan, in today's Croatia.")
    hyde = HyDEEmbedder(chat_generator=llm, n_passages=1)
    out = hyde.run(query="Where was Tesla born?", query_embedding=question_vector)
    vec = np.asarray(out["embedding"])
    assert abs(np.linalg.norm(vec) - 1) < 1e-5 and not np.allclose(vec, question_vector)
    assert out["hyde"]["passages"][0].startswith("Nikola Tesla")
    hyde.run(query="Where was Tesla born?", query_embedding=question_vector)
    assert len(calls) == 1  # cached by (question, model)


@pytest.mark.integration
@pytest.mark.parametrize("reply", ["", RuntimeError("boom")])
def test_hyde_failure_returns_the_question_embedding(question_vector, reply):
    llm, _ = counting_llm(reply)
    out = HyDEEmbedder(chat_generator=llm).run(query="Where was Tesla born?", query_embedding=question_vector)
    assert out["embedding"] == list(question_vector) and out["hyde"]["fallback"]


def test_hyde_round_trip():
    hyde = HyDEEmbedder(chat_generator=MockChatGenerator(responses="x"), n_passages=2)
    again = HyDEEmbedder.from_dict(hyde.to_dict())
    assert again.n_passages == 2
