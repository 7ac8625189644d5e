"""Grounded answers: decoding that can only copy a span of the sources, where the span sits, and the
answer mode each question gets. Fast: a toy vocabulary stands in for the model's."""

from __future__ import annotations

import random

import numpy as np
import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage

from ragkit.components.answer_mode import AnswerModeSelector
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.index.sentences import sentence_bounds
from ragkit.llm.prompts import NO_ANSWER
from ragkit.llm.source_spans import answer_type, candidate_starts, crosses_clause, evidence_for, locate_span, snap_to_span
from ragkit.llm.span_decoding import SpanMask, Vocabulary
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph import build_pipeline
from ragkit.pipeline.trace import RagkitTracer

SOURCES = ["Tesla was born in Smiljan, in the Austrian Empire. He studied at Graz in 1875.", "Edison was born in Milan, Ohio."]
END = 0


def toy_vocabulary() -> Vocabulary:
    words = ["Tesla", "Smil", "jan", "Smiljan", "Austrian", "Empire", "Graz", "18", "75", "1875", "Milan", "Ohio", "in", "the", "was", "born",
             "He", "studied", "at", "Edison", ",", ".", "Sm", "ilj", "an", "Ed", "ison", "ú"]
    pieces = [b""]  # id 0: end of turn
    for w in words:
        pieces += [w.encode(), b" " + w.encode()]
    pieces += [b" ", b"x", b"Paris", b" Paris"]
    return Vocabulary(pieces, end_ids=[END])


def decode(mask: SpanMask, vocab: Vocabulary, scores_for, max_steps: int = 20) -> bytes:
    ids = [999]  # the prompt
    for _ in range(max_steps):
        scores = scores_for(len(ids)).astype(np.float32)
        out = mask(np.array(ids), scores)
        token = int(np.argmax(out))
        if token == END:
            break
        ids.append(token)
    return vocab.text_of(ids[1:])


def test_the_first_token_can_only_open_a_span_at_a_word_start():
    vocab = toy_vocabulary()
    mask = SpanMask(vocab, SOURCES)
    scores = np.zeros(len(vocab.pieces), dtype=np.float32)
    allowed = {vocab.pieces[i] for i in np.flatnonzero(np.isfinite(mask(np.array([1]), scores)))}
    assert {b"Smiljan", b" Smiljan", b"Smil", b"Tesla", b"1875", b"18", b"Graz"} <= allowed
    assert not {b"Paris", b" Paris", b"jan", b"75", b"x", b""} & allowed  # not in a source / not at a word start / no empty reply


@pytest.mark.parametrize("seed", range(25))
def test_whatever_the_model_prefers_the_reply_is_a_span_of_a_source(seed):
    vocab = toy_vocabulary()
    rng = np.random.default_rng(seed)
    text = decode(SpanMask(vocab, SOURCES), vocab, lambda n: rng.normal(size=len(vocab.pieces))).decode().strip()
    assert text and any(text in s for s in SOURCES)
    assert locate_span(text, SOURCES) is not None


def test_a_span_may_be_written_with_any_split_of_tokens():
    vocab = toy_vocabulary()
    preferred = [vocab.by_piece[b" Sm"][0], vocab.by_piece[b"ilj"][0], vocab.by_piece[b"an"][0], END]

    def scores_for(n):
        s = np.zeros(len(vocab.pieces))
        s[preferred[min(n - 1, len(preferred) - 1)]] = 5.0
        return s

    assert decode(SpanMask(vocab, SOURCES), vocab, scores_for) == b" Smiljan"


def test_a_span_ends_at_its_clause_and_only_at_a_word_boundary():
    assert crosses_clause(b"Smiljan, in", 0, 9) and not crosses_clause(b"Smiljan, in", 0, 8)
    assert not crosses_clause(b"born in 2,000 cases", 0, 19) and crosses_clause(b"a\nb", 0, 3)
    vocab = toy_vocabulary()
    mask = SpanMask(vocab, SOURCES)
    ids = [1, vocab.by_piece[b"Smiljan"][0]]
    mask(np.array(ids[:1]), np.zeros(len(vocab.pieces), dtype=np.float32))
    after = mask(np.array(ids), np.zeros(len(vocab.pieces), dtype=np.float32))
    allowed = {vocab.pieces[i] for i in np.flatnonzero(np.isfinite(after))}
    assert allowed == {b"", b","}  # stop, or the comma — never " in" across it
    mask = SpanMask(vocab, SOURCES)
    mask(np.array([1]), np.zeros(len(vocab.pieces), dtype=np.float32))
    after = mask(np.array([1, vocab.by_piece[b"Smil"][0]]), np.zeros(len(vocab.pieces), dtype=np.float32))
    assert not np.isfinite(after[END])  # "Smil" is not a word


def test_a_retry_bans_the_rejected_span_and_a_forced_token_is_left_alone():
    vocab = toy_vocabulary()
    mask = SpanMask(vocab, SOURCES, banned_prefixes=["Smiljan [1]"[:7]])
    out = mask(np.array([1]), np.zeros(len(vocab.pieces), dtype=np.float32))
    assert not np.isfinite(out[vocab.by_piece[b"Smiljan"][0]]) and np.isfinite(out[vocab.by_piece[b"Tesla"][0]])
    mask = SpanMask(vocab, SOURCES)
    mask(np.array([1]), np.zeros(len(vocab.pieces), dtype=np.float32))
    scores = np.zeros(len(vocab.pieces), dtype=np.float32)
    assert np.array_equal(mask(np.array([1, vocab.by_piece[b"x"][0]]), scores.copy()), scores)  # off every span: no mask, no crash
    only_end = np.full(len(vocab.pieces), -np.inf, dtype=np.float32)
    only_end[END] = 0.0  # an earlier processor (the deadline) forces the end before any span began
    assert np.array_equal(SpanMask(vocab, SOURCES)(np.array([1]), only_end.copy()), only_end)


def test_multibyte_characters_split_across_tokens_still_match():
    vocab = Vocabulary([b"", "ú".encode()[:1], "ú".encode()[1:], b"Z", b"rich"], end_ids=[0])
    mask = SpanMask(vocab, ["Zúrich is a city."])
    rng = np.random.default_rng(0)
    text = decode(mask, vocab, lambda n: np.array([-1.0, 0, 0, 0, 0]) + rng.normal(size=5) * 0.01)
    assert text.decode("utf-8") == "Zúrich"


def test_where_a_span_sits_and_its_sentence():
    span = locate_span("Graz", SOURCES)
    assert (span.source, SOURCES[0][span.start:span.end]) == (1, "Graz")
    assert SOURCES[0][span.sentence_start:span.sentence_end] == "He studied at Graz in 1875."
    assert locate_span("milan", SOURCES).source == 2 and locate_span("Rome", SOURCES) is None
    assert sentence_bounds("One. Two three. Four", 5, 8) == (5, 15)
    docs = [Document(content=s) for s in SOURCES]
    assert evidence_for("Milan [2]", docs)["sentence"] == "Edison was born in Milan, Ohio."
    assert evidence_for("born [2]", docs)["source"] == 2  # the cited source first
    assert evidence_for("Somewhere else", docs) is None


@pytest.mark.parametrize(
    ("question", "kind", "allowed", "refused"),
    [
        ("Where was Tesla born?", "place", {"Smiljan", "Serb"}, {"1856", "July", "June", "in"}),
        ("When was Tesla born?", "time", {"1856", "July"}, {"Smiljan", "Serb"}),
        ("Who was born in Smiljan?", "name", {"Serb"}, {"1856", "born"}),
        ("How many days after June was Tesla born?", "number", {"1856", "10", "28"}, {"Smiljan", "July"}),
    ],
)
def test_a_grounded_answer_may_only_start_at_a_word_of_the_questions_answer_type(question, kind, allowed, refused):
    source = "Tesla was born on 10 July [O.S. 28 June] 1856 into a Serb family in the village of Smiljan. It rained."
    assert answer_type(question) == kind
    raw = source.encode()
    words = {raw[i:].split(b" ")[0].rstrip(b".,[]").decode() for _, i in candidate_starts(question, [source])}
    assert allowed <= words and not (refused & words), words


def test_extract_then_verify_snaps_a_free_reply_to_a_span_or_refuses():
    assert snap_to_span("Smiljan [1].", SOURCES)[0] == "Smiljan"
    text, span = snap_to_span("He studied in Graz", SOURCES)
    assert "Graz" in text and span.source == 1
    assert snap_to_span("Paris, France", SOURCES) is None
    assert snap_to_span("Tesla was born in Graz", SOURCES) is None  # words from two sentences verify nothing
    assert snap_to_span("Nikola Tesla was born in Smiljan", ["Tesla was born on 10 July 1856 in the village of Smiljan."]) is None


class NamedMock:
    """A generator with no logits (like an OpenAI-compatible server): grounded mode snaps its reply."""

    def __init__(self, reply: str):
        self.reply = reply

    def run(self, messages, generation_kwargs=None):
        return {"replies": [ChatMessage.from_assistant(self.reply)]}


def test_grounded_answer_without_logits_is_snapped_or_declined_with_the_reason_traced():
    docs = [Document(id="a", content=SOURCES[0]), Document(id="b", content=SOURCES[1])]
    out = GuardedGenerator(chat_generator=NamedMock("Smiljan."), answer_mode="grounded").run(messages=[], documents=docs)
    assert out["replies"][0].text == "Smiljan [1]" and out["ok"] and out["mode"] == "grounded"
    assert out["evidence"]["document_id"] == "a" and out["evidence"]["sentence"].startswith("Tesla was born in Smiljan")
    tracer = RagkitTracer()
    with tracer.collect() as trace:
        from haystack import Pipeline

        pipe = Pipeline()
        pipe.add_component("answer", GuardedGenerator(chat_generator=NamedMock("In Paris, obviously"), answer_mode="grounded"))
        declined = pipe.run({"answer": {"messages": [], "documents": docs}})["answer"]
    assert declined["replies"][0].text == NO_ANSWER and declined["evidence"] is None and declined["ok"]  # a decline, not a failure
    step = trace.step("answer")
    assert "no span of the sources matches" in step.decision["declined"] and not step.fallbacks
    free = GuardedGenerator(chat_generator=NamedMock("In Paris, obviously"), answer_mode="grounded").run(messages=[], documents=docs, mode="free")
    assert free["replies"][0].text == "In Paris, obviously" and free["mode"] == "free"
    with pytest.raises(ValueError):
        GuardedGenerator(chat_generator=NamedMock("x"), answer_mode="spans")


def test_guarded_generator_round_trips_its_answer_mode():
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.utils import Secret

    llm = OpenAIChatGenerator(api_key=Secret.from_env_var(["RAGKIT_NO_API_KEY"]), api_base_url="http://127.0.0.1:9/v1", model="m")
    again = GuardedGenerator.from_dict(GuardedGenerator(chat_generator=llm, answer_mode="grounded").to_dict())
    assert again.answer_mode == "grounded"


def test_answer_mode_selector_reads_the_question_with_the_rules():
    selector = AnswerModeSelector()
    assert selector.run(query="When was the bridge finished?")["mode"] == "grounded"
    assert selector.run(query="Why did the bridge fail?")["mode"] == "free"
    assert AnswerModeSelector.from_dict(selector.to_dict()).policy == selector.policy
    with pytest.raises(ValueError):
        AnswerModeSelector(policy={"FACTUAL": "span"})


def graph_steps(features: Features) -> set[str]:
    return set(build_pipeline(features, NamedMock("x"), index_path="unused").graph.nodes)


def test_the_answer_mode_comes_from_the_route_the_rules_or_the_config():
    assert "answer_mode" in graph_steps(Features())
    assert "answer_mode" not in graph_steps(Features(answer_mode="grounded")) | graph_steps(Features(answer_mode="free"))
    assert "answer_mode" not in graph_steps(Features(routing=True, router_backend="rules"))
    routed = build_pipeline(Features(routing=True, router_backend="rules"), NamedMock("x"), index_path="unused")
    edges = {(u, v, d.get("to_socket").name) for u, v, d in routed.graph.edges(data=True)}
    assert ("route_policy", "answer", "mode") in edges
    assert Features().answer_mode_for("FACTUAL") == "grounded" and Features().answer_mode_for("SUMMARY") == "free"
    assert Features(answer_mode="free").answer_mode_for("FACTUAL") == "free"
    with pytest.raises(ValueError):
        Features(answer_mode="spans").validate()
    bad_policy = Features().route_policy
    bad_policy["FACTUAL"]["answer"] = "span"
    with pytest.raises(ValueError):
        Features(route_policy=bad_policy).validate()


# -- with the real 0.5B --------------------------------------------------------------------------
README_FACT_QUESTIONS = {"Where was Nikola Tesla born?": "Smiljan", "Who did Tesla work for in New York?": "Edison"}
# The evidence step ranks the wrong sentence first for these (bench/evidence_dev.py: it finds the
# answer's sentence for ~80 % of development questions): "Super Bowl 50 was an American football game
# to determine the champion of the NFL" covers every term of the first better than the sentence that
# says the Broncos defeated the Panthers; "In late 1886 Tesla met ... New York attorney" covers
# tesla/new/york where the answer's sentence says "he relocated". Strict: a fix shows up as XPASS.
KNOWN_EVIDENCE_MISSES = {"Who won Super Bowl 50?": "Broncos", "When did Tesla move to New York?": "1884"}


def grounded_answer_of(sample_index, fast_config, local_llm, question):
    from ragkit.pipeline.engine import AgenticRAG

    result = AgenticRAG(Features(), config=fast_config, index=sample_index, chat_generator=local_llm).ask(question)
    assert result.answer_mode == "grounded" and not result.declined, result.answer
    span = result.evidence
    assert span is not None and result.answer == f"{span['text']} [{span['source']}]"
    assert span["text"] in result.sources[span["source"] - 1].content  # copied, not written
    step = result.trace.step("answer")  # one call, decoded under the span mask
    assert step.llm_calls == 1 and step.completion_tokens > 0 and step.decision.get("mode") == "grounded"
    return span


@pytest.mark.integration
@pytest.mark.llm
@pytest.mark.parametrize("question", README_FACT_QUESTIONS)
def test_the_real_model_answers_a_fact_with_a_copied_span_and_its_evidence(sample_index, fast_config, local_llm, question):
    """The README's fact questions: the right span, copied from the cited source."""
    assert README_FACT_QUESTIONS[question] in grounded_answer_of(sample_index, fast_config, local_llm, question)["text"]


@pytest.mark.integration
@pytest.mark.llm
@pytest.mark.xfail(strict=True, reason="the evidence step ranks a sentence without the answer first (see KNOWN_EVIDENCE_MISSES)")
@pytest.mark.parametrize("question", KNOWN_EVIDENCE_MISSES)
def test_known_evidence_misses_still_copy_a_span_but_not_the_answer(sample_index, fast_config, local_llm, question):
    assert KNOWN_EVIDENCE_MISSES[question] in grounded_answer_of(sample_index, fast_config, local_llm, question)["text"]


@pytest.mark.integration
@pytest.mark.llm
def test_the_real_model_all_features_grounded_then_free_by_route(sample_index, fast_config, local_llm):
    from ragkit.pipeline.engine import AgenticRAG

    rag = AgenticRAG(Features.all_on(router_backend="rules"), config=fast_config, index=sample_index, chat_generator=local_llm)
    fact = rag.ask("Who won Super Bowl 50?")
    assert fact.route == "FACTUAL" and fact.answer_mode == "grounded" and fact.evidence is not None
    assert fact.evidence["text"] in fact.sources[fact.evidence["source"] - 1].content
    essay = rag.ask("How does lru_cache differ from cache?")
    assert essay.route == "COMPARISON" and essay.answer_mode == "free"
