"""Conversations: follow-up detection and rewriting (rules and a constrained LLM), clarification decided
from the evidence and the person's reply read by rules, message validation, streaming, the graph's
conversation sockets, and ChatSession end to end with a scripted MockChatGenerator.

The unit tests need no model; the ChatSession tests (``integration``) index three short documents with
the real embedded all-MiniLM-L6-v2 and answer with a MockChatGenerator."""

from __future__ import annotations

import time
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage, ComponentInfo, StreamingChunk

from ragkit.components.ambiguity_check import AmbiguityCheck
from ragkit.components.follow_up_rewriter import REWRITE_SYSTEM, FollowUpRewriter, rewrite_grammar
from ragkit.conversation.clarification import Choice, find_ambiguity, resolve_reply
from ragkit.conversation.follow_ups import allowed_words, antecedents, bounded, detect, rules_rewrite, uses_only, words
from ragkit.conversation.validation import validate
from ragkit.index.filters import scoped
from ragkit.index.store import RagIndex
from ragkit.llm.streaming import StepStream, labelled
from ragkit.pipeline.features import Features
from ragkit.pipeline.trace import RagkitTracer

TESLA = [ChatMessage.from_user("Where was Nikola Tesla born?"), ChatMessage.from_assistant("Smiljan [1]")]


def fake_index() -> RagIndex:
    """An empty in-memory index: the rewriter needs one for its keep check, which these tests replace."""
    return RagIndex(embedder="fake", dim=8)


def traced(name: str, instance: Any, **inputs: Any) -> tuple[dict, Any]:
    """Run one component in a pipeline under ragkit's tracer: (its output, its trace step)."""
    pipe = Pipeline()
    pipe.add_component(name, instance)
    with RagkitTracer().collect() as trace:
        out = pipe.run({name: inputs})[name]
    return out, trace.step(name)


class Recording:
    """A MockChatGenerator's response_fn that keeps every prompt it was sent."""

    def __init__(self, reply: str | Exception):
        self.reply, self.prompts = reply, []

    def __call__(self, messages: list[ChatMessage]) -> str:
        self.prompts.append(messages)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


# -- follow-ups: detection --------------------------------------------------------------------------
@pytest.mark.parametrize("question", [
    "and what did he study?",  # an elliptical opener
    "And Edison?",
    "what about Edison?",
    "How about Thomas Edison?",
    "Also, where did she die?",
    "What did he study?",  # a pronoun with no name before it
    "What was his nationality?",
    "Where did they go to school?",
    "Who was its first president?",
    "When did that happen?",  # a demonstrative used as a pronoun
    "How many people live there?",  # "there" as a place
    "Why?",  # too short to stand alone
    "In what year?",
])
def test_questions_that_lean_on_the_conversation_are_detected(question):
    found = detect(question)
    assert found.needed and found.reason != "self-contained", found


@pytest.mark.parametrize("question", [
    "Where was Nikola Tesla born?",
    "What did Marie Curie study in Paris?",
    "When did Tesla say he left?",  # "he" has its name before it
    "How long does it take to boil an egg?",  # an "it" that refers to nothing
    "Is there a museum in Graz?",  # the existential "there"
    "Which river flows through Vienna?",
    "Who founded the Ford Motor Company?",
])
def test_self_contained_questions_are_left_alone(question):
    assert detect(question).needed is False


# -- follow-ups: the rules' rewrite -----------------------------------------------------------------
@pytest.mark.parametrize("question, expected", [
    ("and what did he study?", "What did Nikola Tesla study?"),
    ("What was his nationality?", "What was Nikola Tesla's nationality?"),
    ("what about Edison?", "Where was Edison born?"),
    ("How about Thomas Edison?", "Where was Thomas Edison born?"),
    ("and what about Edison?", "Where was Edison born?"),
])
def test_the_rules_put_the_antecedent_in(question, expected):
    assert rules_rewrite(question, TESLA) == expected


def test_the_latest_turn_is_the_antecedent_and_a_history_without_names_gives_none():
    history = TESLA + [ChatMessage.from_user("Who was Marie Curie?"), ChatMessage.from_assistant("A physicist and chemist [2].")]
    assert antecedents(history)[:2] == ["Marie Curie", "Nikola Tesla"]
    assert rules_rewrite("What did she study?", history) == "What did Marie Curie study?"
    # an answer's sources (meta["titles"]) name what it was about when its text does not
    titled = [ChatMessage.from_user("who invented the radio?"), ChatMessage.from_assistant("he did [1]", meta={"titles": ["Guglielmo Marconi"]})]
    assert rules_rewrite("where was he born?", titled) == "Where was Guglielmo Marconi born?"
    assert rules_rewrite("what did he study?", [ChatMessage.from_user("hello there"), ChatMessage.from_assistant("hi")]) is None


def test_the_history_is_bounded_by_tokens_newest_first():
    history = []
    for i in range(10):
        history += [ChatMessage.from_user(f"question number {i} about the river delta"), ChatMessage.from_assistant(f"answer {i} is long " * 3)]
    kept, tokens, dropped = bounded(history, max_tokens=40)
    assert kept == history[-len(kept):] and dropped == len(history) - len(kept) and dropped > 0
    assert tokens <= 40 and tokens + round(len(history[-len(kept) - 1].text.split()) * 1.3) > 40  # the next older one would not fit
    assert bounded(history, max_tokens=10_000) == (history, sum(round(len(m.text.split()) * 1.3) for m in history), 0)
    one, _, dropped = bounded([ChatMessage.from_user("word " * 500)], max_tokens=5)  # the newest message is always kept
    assert len(one) == 1 and dropped == 0


def test_the_allowed_words_are_the_question_and_the_history_only():
    allowed = allowed_words("and what did he study?", TESLA)
    lowered = {w.lower() for w in allowed}
    expected = {w.lower() for text in ["and what did he study?", "Where was Nikola Tesla born?", "Smiljan"] for w in words(text)}
    assert lowered == expected  # no citation number, nothing else
    assert "1" not in lowered and len(allowed) == len(set(allowed))
    assert uses_only("What did Nikola Tesla study?", allowed) and not uses_only("What did Nikola Tesla study in Vienna?", allowed)
    grammar = rewrite_grammar(allowed)
    assert '"Smiljan"' in grammar and "Vienna" not in grammar


def test_the_rewrite_grammar_parses_in_llama_cpp():
    from llama_cpp import LlamaGrammar

    LlamaGrammar.from_string(rewrite_grammar(allowed_words('and what did "he" study?', TESLA)), verbose=False)


# -- FollowUpRewriter ---------------------------------------------------------------------------------
def test_follow_up_rewriter_round_trips_and_checks_its_arguments():
    step = FollowUpRewriter(chat_generator=MockChatGenerator(responses="x"), index_path="/data/index", history_tokens=123, keep_signal="always",
                            embedder="bge-small")
    again = FollowUpRewriter.from_dict(step.to_dict())
    kept = (again.backend, again.history_tokens, again.keep_signal, again.embedder, again._handle.index_path)
    assert kept == ("llm", 123, "always", "bge-small", "/data/index")
    assert type(again.chat_generator) is MockChatGenerator and again.to_dict() == step.to_dict()
    rules = FollowUpRewriter.from_dict(FollowUpRewriter(backend="rules", index_path="/i").to_dict())
    assert rules.backend == "rules" and rules.chat_generator is None
    for bad in (dict(backend="gpt"), dict(backend="llm"), dict(backend="rules", keep_signal="bm25"), dict(backend="rules", history_tokens=0), dict(backend="rules", keep_margin=-0.1)):
        with pytest.raises(ValueError):
            FollowUpRewriter(index_path="/i", **bad)


def test_a_good_llm_rewrite_is_used():
    llm = Recording("What did Nikola Tesla study?")
    out = FollowUpRewriter(chat_generator=MockChatGenerator(response_fn=llm), index=fake_index(), keep_signal="always").run(query="and what did he study?",
                                                                                                                         history=TESLA)
    assert out["query"] == "What did Nikola Tesla study?" and out["rewrite"]["by"] == "llm" and out["rewrite"]["kept"] is True
    system, user = llm.prompts[0]
    assert system.text == REWRITE_SYSTEM and "User: Where was Nikola Tesla born?" in user.text and "Assistant: Smiljan" in user.text
    assert "[1]" not in user.text and "Last question: and what did he study?" in user.text


@pytest.mark.parametrize("reply, why", [
    ("What did Nikola Tesla study in Vienna?", "a word from neither the question nor the history"),
    ("Where was Nikola Tesla born?", "drops the question's own word 'study'"),
    ("and what did he study?", "the question as it was"),
    ("What did he study?", "the question as it was, without its 'and'"),
    ("", "an empty reply"),
])
def test_an_unusable_llm_rewrite_falls_back_to_the_rules_on_the_trace(reply, why):
    step = FollowUpRewriter(chat_generator=MockChatGenerator(responses=reply), index=fake_index(), keep_signal="always")
    out, trace_step = traced("follow_up", step, query="and what did he study?", history=TESLA)
    assert out["query"] == "What did Nikola Tesla study?", why
    assert out["rewrite"]["by"].startswith("rules") and out["rewrite"]["kept"] is True, why
    said = " ".join(trace_step.fallbacks) + str(trace_step.decision)
    assert "rules" in said, (why, trace_step.fallbacks, trace_step.decision)


def test_an_llm_that_raises_falls_back_to_the_rules():
    step = FollowUpRewriter(chat_generator=MockChatGenerator(response_fn=Recording(TimeoutError("server down"))), index=fake_index(), keep_signal="always")
    out, trace_step = traced("follow_up", step, query="What was his nationality?", history=TESLA)
    assert out["query"] == "What was Nikola Tesla's nationality?" and trace_step.fallbacks


def test_a_self_contained_question_passes_through_with_no_llm_call_and_no_retrieval():
    llm = Recording("Where was Thomas Edison born?")
    step = FollowUpRewriter(chat_generator=MockChatGenerator(response_fn=llm), index=fake_index())
    step._signal = lambda query: pytest.fail("a self-contained question must not be retrieved twice")
    for question in ("What did Marie Curie study in Paris?", "Where was Nikola Tesla born?"):
        out = step.run(query=question, history=TESLA)
        assert out["query"] == question and out["rewrite"]["needed"] is False and "rewritten" not in out["rewrite"]
    assert step.run(query="and what did he study?", history=[])["rewrite"] == {"needed": False, "reason": "no history"}
    assert llm.prompts == []


def test_the_rules_backend_reports_the_history_it_dropped():
    older = [ChatMessage.from_user("Who was Marie Curie and what did she discover in her laboratory in Paris?"),
             ChatMessage.from_assistant("Marie Curie discovered polonium and radium with Pierre Curie [1].")]
    step = FollowUpRewriter(backend="rules", index=fake_index(), history_tokens=12, keep_signal="always")
    out, trace_step = traced("follow_up", step, query="and what did he study?", history=older + TESLA)
    info = out["rewrite"]
    assert info["history_dropped"] == 2 and info["history_messages"] == 2 and info["history_tokens"] <= 12
    assert out["query"] == "What did Nikola Tesla study?"  # not Marie Curie: she was in the dropped turns
    assert "dropped 2 older" in trace_step.decision["history"]


def test_the_llm_sees_only_the_history_that_fits():
    older = [ChatMessage.from_user("Who was Marie Curie and what did she discover in her laboratory in Paris?"),
             ChatMessage.from_assistant("Marie Curie discovered polonium and radium [1].")]
    llm = Recording("What did Nikola Tesla study?")
    step = FollowUpRewriter(chat_generator=MockChatGenerator(response_fn=llm), index=fake_index(), history_tokens=12, keep_signal="always")
    out = step.run(query="and what did he study?", history=older + TESLA)
    assert out["query"] == "What did Nikola Tesla study?"
    prompt = llm.prompts[0][-1].text
    assert "Nikola Tesla" in prompt and "Curie" not in prompt


@pytest.mark.parametrize("raw, rewritten, margin, kept", [
    (0.62, 0.55, 0.0, False), (0.62, 0.55, 0.1, True), (0.70, 0.55, 0.1, False), (0.40, 0.71, 0.1, True), (0.50, 0.50, 0.0, True), (None, 0.3, 0.1, True),
])
def test_the_rewrite_is_kept_only_when_retrieval_is_at_least_as_sure(raw, rewritten, margin, kept):
    """Kept unless the rewrite's best dense cosine falls more than ``keep_margin`` below the raw question's."""
    step = FollowUpRewriter(backend="rules", index=fake_index(), keep_signal="dense_top", keep_margin=margin)
    signals = {"and what did he study?": raw, "What did Nikola Tesla study?": rewritten}
    asked = []
    step._signal = lambda query: asked.append(query) or signals[query]  # the retrieval's best dense score for the query
    out, trace_step = traced("follow_up", step, query="and what did he study?", history=TESLA)
    assert sorted(asked) == sorted(signals)
    info = out["rewrite"]
    assert info["kept"] is kept and (info["raw_signal"], info["rewritten_signal"]) == (raw, rewritten)
    assert info["rewritten"] == "What did Nikola Tesla study?"  # what it would have been, either way
    assert out["query"] == ("What did Nikola Tesla study?" if kept else "and what did he study?")
    assert trace_step.decision["verdict"].startswith("kept" if kept else "dropped")


def test_keep_signal_always_retrieves_nothing():
    step = FollowUpRewriter(backend="rules", index=fake_index(), keep_signal="always")
    step._signal = lambda query: pytest.fail("keep_signal='always' must not retrieve")
    assert step.run(query="What was his nationality?", history=TESLA)["query"] == "What was Nikola Tesla's nationality?"


# -- clarification: ambiguity from the evidence -------------------------------------------------------
def doc(title: str, text: str, score: float, source: str | None = None) -> Document:
    return Document(content=text, meta={"title": title, "source": source or title.replace(" ", "_") + ".md"}, score=score)


WASHINGTONS = [
    doc("Washington (state)", "Washington is a state in the Pacific Northwest. Its capital is Olympia.", 0.86),
    doc("George Washington", "George Washington was born at Popes Creek, Virginia, and was the first president.", 0.82),
    doc("George Washington", "Washington commanded the Continental Army.", 0.71),
    doc("Nikola Tesla", "Tesla was born in Smiljan.", 0.20),
]


def test_two_namesakes_are_ambiguous_with_options_worded_from_their_titles():
    found = find_ambiguity("Where is Washington?", WASHINGTONS)
    assert found.ambiguous and "washington" in found.reason
    assert [o.label for o in found.options] == ["Washington (state)", "George Washington"]  # best first; Tesla does not contend
    assert found.options[1].scope == {"source": ["George_Washington.md"]} and found.options[1].score == 0.82
    prompt = found.prompt("Where is Washington?")
    assert "1) Washington (state)" in prompt and "2) George Washington" in prompt
    as_dict = found.to_dict("Where is Washington?")
    assert as_dict["question"] == "Where is Washington?" and [o["label"] for o in as_dict["options"]] == ["Washington (state)", "George Washington"]


def test_at_most_four_options():
    many = [doc(t, f"{t} text about Washington.", 0.9 - i * 0.01) for i, t in
            enumerate(["Washington (state)", "George Washington", "Washington, D.C.", "Denzel Washington", "Washington University"])]
    found = find_ambiguity("Tell me about Washington.", many)
    assert found.ambiguous and len(found.options) == 4 and "Washington University" not in [o.label for o in found.options]
    assert len(find_ambiguity("Tell me about Washington.", many, max_options=2).options) == 2


@pytest.mark.parametrize("question, documents, why", [
    ("Where is Washington?", [doc("George Washington", "George Washington was born in Virginia.", 0.9),
                              doc("George Washington", "He was the first president.", 0.8)], "one subject"),
    ("Where was George Washington born?", WASHINGTONS, "names"),
    ("How big is the state of Washington?", WASHINGTONS, "names"),
    ("Where is Washington?", [doc("Washington (state)", "Washington is a state.", 0.95), doc("George Washington", "George Washington.", 0.25)], "leads"),
    ("What is the speed of light?", WASHINGTONS, "share no name"),
    ("Where is Washington?", [], "one subject"),
])
def test_clear_questions_are_not_asked_back(question, documents, why):
    found = find_ambiguity(question, documents)
    assert not found.ambiguous and found.options == [] and why in found.reason, found


def test_a_pronoun_or_generic_reference_over_two_subjects_is_ambiguous():
    rivers = [doc("Rhine", "The river Rhine flows to the North Sea.", 0.8), doc("Danube", "The river Danube flows to the Black Sea.", 0.78)]
    assert find_ambiguity("How long is the river?", rivers).ambiguous
    assert find_ambiguity("How long is it?", rivers).ambiguous
    assert not find_ambiguity("How long is the Rhine?", rivers).ambiguous


# -- clarification: the reply -------------------------------------------------------------------------
TWO = find_ambiguity("Where is Washington?", WASHINGTONS).options  # 1) Washington (state)  2) George Washington
THREE = [{"label": "Washington (state)", "scope": {}}, {"label": "George Washington", "scope": {}}, {"label": "Washington, D.C.", "scope": {}}]


@pytest.mark.parametrize("reply, options, expected", [
    ("yes", TWO, Choice(0, "yes")),
    ("no", TWO, Choice(1, "no")),
    ("no", THREE, Choice(None, "no_match")),  # "the other one" of three is not one
    ("the second", TWO, Choice(1, "ordinal")),
    ("The second one.", THREE, Choice(1, "ordinal")),
    ("2", TWO, Choice(1, "number")),
    ("option 3", THREE, Choice(2, "number")),
    ("5", TWO, Choice(None, "no_match")),
    ("last", THREE, Choice(2, "ordinal")),
    ("the last one", TWO, Choice(1, "ordinal")),
    ("the state", TWO, Choice(0, "words")),
    ("George", TWO, Choice(1, "words")),
    ("D.C. please", THREE, Choice(2, "words")),
    ("any", TWO, Choice(None, "any")),
    ("both", TWO, Choice(None, "any")),
    ("doesn't matter", THREE, Choice(None, "any")),
    ("Who painted the Mona Lisa in Florence?", TWO, Choice(None, "new_question")),
    ("qwxz vbnm", TWO, Choice(None, "no_match")),
    ("I like turtles", TWO, Choice(None, "no_match")),
])
def test_replies_are_read_by_rules(reply, options, expected):
    assert resolve_reply(reply, options) == expected


def test_a_generic_reference_may_be_used_elsewhere_in_a_contenders_document():
    """'the city' fits Fresno when Fresno's document says "city" somewhere, though the chunk retrieved does not."""
    documents = [doc("Warsaw", "Warsaw has many lakes; the city is on the Vistula.", 0.9, "Warsaw.md"),
                 doc("Fresno, California", "Fresno has two lakes in its parks.", 0.8, "Fresno.md")]
    texts = {"Warsaw.md": "warsaw has many lakes; the city is on the vistula.", "Fresno.md": "fresno is a city in california. fresno has two lakes."}
    assert not find_ambiguity("How many lakes are in the city?", documents).ambiguous
    found = find_ambiguity("How many lakes are in the city?", documents, source_text=texts.get)
    assert found.ambiguous and [o.label for o in found.options] == ["Warsaw", "Fresno, California"] and "the city" in found.reason


def test_ambiguity_check_reads_whole_documents_from_its_index(tmp_path):
    from ragkit.index.store import RagIndex

    index = RagIndex(embedder="all-MiniLM-L6-v2", dim=3)
    chunks = [Document(id=f"c{i}", content=text, embedding=[1.0, float(i), 0.0], meta={"source": source, "title": title})
              for i, (text, source, title) in enumerate([("Fresno is a city.", "Fresno.md", "Fresno"), ("Fresno has two lakes.", "Fresno.md", "Fresno"),
                                                           ("Warsaw's lakes: the city has many.", "Warsaw.md", "Warsaw")])]
    index.add(chunks)
    check = AmbiguityCheck(index=index)
    assert "fresno is a city." in check.source_text("Fresno.md") and check.source_text("missing.md") == ""
    retrieved = [doc("Warsaw", "Warsaw's lakes: the city has many.", 0.9, "Warsaw.md"), doc("Fresno", "Fresno has two lakes.", 0.8, "Fresno.md")]
    assert "clarification" in check.run(query="How many lakes are in the city?", documents=retrieved)
    assert "documents" in AmbiguityCheck().run(query="How many lakes are in the city?", documents=retrieved)
    index.save(tmp_path / "index")
    again = AmbiguityCheck.from_dict(AmbiguityCheck(index_path=str(tmp_path / "index")).to_dict())
    assert again.to_dict()["init_parameters"]["index_path"] == str(tmp_path / "index")
    assert "clarification" in again.run(query="How many lakes are in the city?", documents=retrieved)


# -- AmbiguityCheck -------------------------------------------------------------------------------------
def test_ambiguity_check_round_trips_and_checks_its_arguments():
    check = AmbiguityCheck(ratio=0.7, max_options=3)
    again = AmbiguityCheck.from_dict(check.to_dict())
    assert (again.ratio, again.max_options) == (0.7, 3)
    for bad in (dict(ratio=0), dict(ratio=1.2), dict(max_options=1), dict(max_options=10)):
        with pytest.raises(ValueError):
            AmbiguityCheck(**bad)


def test_ambiguity_check_asks_back_unless_a_scope_was_chosen():
    out, step = traced("clarify", AmbiguityCheck(), query="Where is Washington?", documents=WASHINGTONS)
    assert set(out) == {"clarification"}  # no documents: the graph ends here, no LLM reads them
    assert [o["label"] for o in out["clarification"]["options"]] == ["Washington (state)", "George Washington"]
    assert out["clarification"]["prompt"].startswith("“Where is Washington?”") and step.decision["clarify"] == "ask"
    scoped_out, step = traced("clarify", AmbiguityCheck(), query="Where is Washington?", documents=WASHINGTONS, scope={"source": ["George_Washington.md"]})
    assert scoped_out == {"documents": WASHINGTONS} and step.decision["clarify"].startswith("scope chosen")
    clear = AmbiguityCheck().run(query="Where was George Washington born?", documents=WASHINGTONS)
    assert clear == {"documents": WASHINGTONS}
    stricter = AmbiguityCheck(ratio=0.99).run(query="Where is Washington?", documents=WASHINGTONS)
    assert stricter == {"documents": WASHINGTONS}  # 0.82 / 0.86 does not contend at 0.99


# -- validation -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocabulary_index() -> RagIndex:
    """BM25's vocabulary is all validation reads of an index (no embedder involved)."""
    from conftest import make_chunks

    index = RagIndex(embedder="fake", dim=8)
    index.add(make_chunks("tesla.md", ["Nikola Tesla was born in Smiljan.", "Tesla studied engineering at Graz."]), source_hashes={"tesla.md": "x"})
    return index


@pytest.mark.parametrize("message, says", [
    ("", "empty"),
    ("   \n\t ", "empty"),
    ("?!?...", "only punctuation"),
    ("¿¡ — …", "only punctuation"),
    ("12345", "digits"),
    ("3.14 + 2", "digits"),
    ("asdf qwer", "noise"),
    ("Where was Tesla born?" * 5000, "characters long"),  # 100 KB
    ("Where was \udcff Tesla born?", "UTF-8"),
])
def test_messages_that_are_no_question_are_invalid_with_the_reason(vocabulary_index, message, says):
    checked = validate(message, vocabulary_index)
    assert not checked.valid and says in checked.reason, checked


@pytest.mark.parametrize("message", ["Where was Nikola Tesla born?", "Tesla Smiljan", "what is it", "Explain resonance"])
def test_questions_are_valid(vocabulary_index, message):
    assert validate(message, vocabulary_index).valid


def test_without_an_index_only_the_shape_is_checked():
    assert validate("asdf qwer").valid and not validate("???").valid


# -- features and the graph's conversation sockets ----------------------------------------------------------
def test_conversation_features_validate_and_round_trip():
    f = Features()
    assert (f.follow_ups, f.follow_up_backend, f.history_tokens, f.clarify, f.clarify_ratio) == (False, "rules", 400, False, 0.3)
    on = Features(follow_ups=True, follow_up_backend="rules", history_tokens=64, clarify=True, clarify_ratio=0.6, hyde=True).validate()
    again = Features.from_dict(on.to_dict())
    assert (again.follow_ups, again.follow_up_backend, again.history_tokens, again.clarify, again.clarify_ratio) == (True, "rules", 64, True, 0.6)
    for bad in (dict(follow_up_backend="gpt"), dict(clarify_ratio=0.0), dict(clarify_ratio=1.5), dict(history_tokens=0)):
        with pytest.raises(ValueError):
            Features(**bad).validate()
    from ragkit.conversation.session import chat_features

    chat = chat_features(Features(hyde=True, top_k=3))
    assert chat.follow_ups and chat.clarify and chat.hyde and chat.top_k == 3


def test_graph_inputs_fill_the_conversation_sockets_only_when_given():
    from ragkit.config import RagConfig
    from ragkit.pipeline.graph import build_pipeline
    from ragkit.pipeline.graph_io import graph_inputs

    llm = MockChatGenerator(responses="x")
    pipe = build_pipeline(Features(follow_ups=True, follow_up_backend="rules", clarify=True, answer_mode="free"), llm, index=fake_index(), config=RagConfig())
    history, scope, callback = list(TESLA), {"source": ["tesla.md"]}, lambda chunk: None
    data = graph_inputs(pipe, "and what did he study?", history=history, scope=scope, streaming_callback=callback)
    assert data["follow_up"] == {"query": "and what did he study?", "history": history}  # the question enters at the follow-up step only
    assert data["retrieve"]["scope"] == scope and data["clarify"]["scope"] == scope and data["answer"]["streaming_callback"] is callback
    assert not any("query" in sockets for name, sockets in data.items() if name != "follow_up")
    bare = graph_inputs(pipe, "q")
    assert "history" not in bare["follow_up"] and "scope" not in bare["retrieve"] and "clarify" not in bare and "streaming_callback" not in bare["answer"]
    plain = build_pipeline(Features(answer_mode="free"), llm, index=fake_index(), config=RagConfig())
    data = graph_inputs(plain, "q", history=history, scope=scope)
    assert "follow_up" not in data and data["retrieve"]["scope"] == scope  # no follow-up step: the history has nowhere to go


@pytest.mark.parametrize("filters, scope, expected, clash", [
    (None, None, None, False),
    ({}, {}, None, False),
    ({"collection": ["wiki"]}, None, {"collection": ["wiki"]}, False),
    (None, {"source": ["a.md"]}, {"source": ["a.md"]}, False),
    ({"collection": ["wiki"]}, {"source": ["a.md"]}, {"collection": ["wiki"], "source": ["a.md"]}, False),
    ({"source": ["a.md", "b.md"]}, {"source": ["b.md"]}, {"source": ["b.md"]}, False),
    ({"source": ["a.md"]}, {"source": ["b.md"]}, {"source": ["b.md"]}, True),  # they contradict: the person's choice wins
])
def test_scoped_ands_the_chosen_scope_with_the_filters(filters, scope, expected, clash):
    merged, note = scoped(filters, scope)
    assert merged == expected and (note is not None) is clash
    if clash:
        assert "contradicts" in note


# -- streaming --------------------------------------------------------------------------------------------
def chunk(text: str, **kw: Any) -> StreamingChunk:
    return StreamingChunk(content=text, **kw)


def test_step_stream_marks_the_first_chunk_of_each_call_and_names_the_step():
    got: list[StreamingChunk] = []
    first = StepStream(got.append, "answer")
    for piece in ("", "Smil", "jan", " [1]"):  # a role-only opening chunk is not the first token
        first(chunk(piece, meta={"model": "m"}))
    retry = StepStream(got.append, "answer", attempt=1)
    for piece in ("Graz", "."):
        retry(chunk(piece, finish_reason="stop" if piece == "." else None))
    assert [c.content for c in got] == ["Smil", "jan", " [1]", "Graz", "."]
    assert [c.start for c in got] == [True, False, False, True, False]
    assert all(c.component_info.name == "answer" and c.meta["ragkit_step"] == "answer" for c in got)
    assert [c.meta["attempt"] for c in got] == [0, 0, 0, 1, 1] and got[0].meta["model"] == "m" and got[-1].finish_reason == "stop"
    assert first.text == "Smiljan [1]" and retry.text == "Graz."
    cached: list[StreamingChunk] = []
    StepStream(cached.append, "answer", label="1/2: Where?").replay("Smiljan [1].")
    assert len(cached) == 1 and cached[0].start and cached[0].meta["cached"] and cached[0].meta["part"] == "1/2: Where?"


@component
class _TwoStreamedCalls:
    """Streams two calls of one step, the way a self-correction retry does."""

    @component.output_types(first_at=float)
    def run(self, callback: Any) -> dict[str, Any]:
        first, retry = StepStream(callback, "answer"), StepStream(callback, "answer", attempt=1)
        first(chunk("Smiljan"))
        time.sleep(0.01)
        retry(chunk("Graz"))
        return {"first_at": first.first_at}


def test_the_first_token_time_goes_on_the_trace():
    got: list[StreamingChunk] = []
    started = time.perf_counter()
    out, step = traced("streamer", _TwoStreamedCalls(), callback=got.append)
    assert started < step.first_token <= time.perf_counter()
    assert step.first_token == out["first_at"]  # the step's first token, not the retry's


def test_labelled_names_the_part_and_keeps_everything_else():
    assert labelled(None, "1/2: x") is None
    got: list[StreamingChunk] = []
    forward = labelled(got.append, "2/2: What did Tesla study?")
    info = ComponentInfo(type="GuardedGenerator", name="answer")
    forward(chunk("Graz", meta={"ragkit_step": "answer"}, component_info=info, start=True))
    forward(chunk(".", finish_reason="stop"))
    assert [c.meta.get("part") for c in got] == ["2/2: What did Tesla study?"] * 2
    assert got[0].meta["ragkit_step"] == "answer" and got[0].component_info is info and got[0].start and not got[1].start
    assert [c.content for c in got] == ["Graz", "."] and got[1].finish_reason == "stop"


def test_the_answer_step_streams_through_a_streaming_generator():
    from ragkit.components.guarded_generator import GuardedGenerator

    got: list[StreamingChunk] = []
    answer = GuardedGenerator(chat_generator=MockChatGenerator(responses="Tesla was born in Smiljan [1]."), answer_format=False)
    out, step = traced("answer", answer, messages=[ChatMessage.from_user("Where was Tesla born?")], streaming_callback=got.append)
    assert "".join(c.content for c in got) == "Tesla was born in Smiljan [1]." == out["replies"][0].text
    assert [c.start for c in got] == [True] + [False] * (len(got) - 1) and {c.meta["ragkit_step"] for c in got} == {"answer"}
    assert step.first_token is not None


# -- ChatSession, end to end with a scripted LLM --------------------------------------------------------------
DOCS = {
    "George_Washington.md": "# George Washington\n\nGeorge Washington was born on 22 February 1732 at Popes Creek in Westmoreland County, Virginia. "
                            "He was the first president of the United States and commanded the Continental Army in the war of independence.\n",
    "Washington_(state).md": "# Washington (state)\n\nWashington is a state in the Pacific Northwest of the United States. Its largest city is Seattle "
                             "and its capital is Olympia. The state was admitted to the Union in 1889.\n",
    "Nikola_Tesla.md": "# Nikola Tesla\n\nNikola Tesla was born in Smiljan in 1856. He studied engineering at the Polytechnic in Graz. "
                       "Tesla later moved to New York, where he worked for Thomas Edison.\n",
}
AMBIGUOUS = "How old is Washington?"  # both Washingtons contend for it in this index (checked in the test)


class ScriptedLLM:
    """Answers every call with ``answer`` (the follow-up rewrite with ``rewrite``) and counts the calls."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls: list[list[ChatMessage]] = []
        self.answer = "Nikola Tesla was born in Smiljan in 1856 [1]."
        self.rewrite = "What did Nikola Tesla study?"

    def __call__(self, messages: list[ChatMessage]) -> str:
        self.calls.append(messages)
        return self.rewrite if messages[0].text == REWRITE_SYSTEM else self.answer


@pytest.fixture(scope="module")
def session_index(tmp_path_factory, fast_config) -> RagIndex:
    from ragkit.index.indexer import build_index

    folder = tmp_path_factory.mktemp("conversation_docs")
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    path = tmp_path_factory.mktemp("conversation_index") / "index"
    build_index(folder, path, fast_config, progress=False)
    return RagIndex.load(path)


@pytest.fixture(scope="module")
def engine(session_index, fast_config):
    """One engine for the module (as ``ragkit chat`` keeps one): the scripted LLM is reset per test."""
    from ragkit.conversation.session import chat_features
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    llm = ScriptedLLM()  # the LLM rewrite (not the default rules) so the scripted model's part is exercised
    return AgenticRAG(chat_features(Features(follow_up_backend="llm")), config=fast_config, index=session_index, chat_generator=MockChatGenerator(response_fn=llm)), llm


@pytest.fixture
def chat(engine, tmp_path):
    from ragkit.conversation.session import ChatSession

    rag, llm = engine
    llm.reset()
    return ChatSession("test", rag=rag, path=tmp_path / "sessions.sqlite"), llm


def sources_of(reply) -> set[str]:
    return {d.meta["source"] for d in reply.result.sources}


@pytest.mark.integration
def test_an_invalid_message_runs_nothing_and_keeps_the_pending_question(chat):
    session, llm = chat
    session.store.set_pending(session.name, {"question": AMBIGUOUS, "options": [{"label": "George Washington", "scope": {"source": ["George_Washington.md"]}},
                                                                            {"label": "Washington (state)", "scope": {"source": ["Washington_(state).md"]}}]})
    for message in ("", "   ", "???", "12345", "asdf qwer", "x" * 100_000):
        reply = session.send(message)
        assert reply.kind == "invalid" and reply.text and reply.result is None, message
    assert llm.calls == [] and session.exchanges() == []
    assert session.pending is not None  # a typo does not throw away the question asked back


@pytest.mark.integration
def test_an_answer_streams_and_is_stored_complete(chat):
    session, llm = chat
    got: list[StreamingChunk] = []
    reply = session.send("Where was Nikola Tesla born?", on_token=got.append)
    assert reply.kind == "answer" and "Smiljan" in reply.text and reply.confidence is not None
    assert got and got[0].start and got[0].meta["ragkit_step"] == "answer"
    assert reply.result.first_token_s is not None and 0 < reply.result.first_token_s <= reply.result.seconds
    stored = session.exchanges()[-1]
    assert stored.complete and stored.reply == reply.text and stored.question == "Where was Nikola Tesla born?"
    assert "Nikola_Tesla.md" in {s["source"] for s in stored.sources}


@pytest.mark.integration
def test_a_follow_up_is_rewritten_with_the_stored_history(chat):
    session, llm = chat
    session.send("Where was Nikola Tesla born?")
    calls_before = len(llm.calls)
    reply = session.send("and what did he study?")
    rewrite_prompts = [m for m in llm.calls[calls_before:] if m[0].text == REWRITE_SYSTEM]
    assert len(rewrite_prompts) == 1 and "User: Where was Nikola Tesla born?" in rewrite_prompts[0][-1].text
    assert reply.asked_as == "What did Nikola Tesla study?" and session.exchanges()[-1].asked_as == "What did Nikola Tesla study?"
    assert "Nikola_Tesla.md" in sources_of(reply)


@pytest.mark.integration
def test_ctrl_c_while_streaming_keeps_the_partial_answer_marked_incomplete(chat):
    session, llm = chat
    llm.answer = "Tesla was born in the village of Smiljan [1]."
    seen: list[str] = []

    def interrupt_on_the_third_token(piece: StreamingChunk) -> None:
        seen.append(piece.content)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        session.send("Where was Nikola Tesla born?", on_token=interrupt_on_the_third_token)
    stored = session.exchanges()[-1]
    assert stored.status == "incomplete" and not stored.complete
    assert stored.reply == "".join(seen) == "Tesla was born " and stored.meta.get("interrupted") is True
    assert session.rag.tracer.listener is None
    assert [m.role.value for m in session.history()] == ["user"]  # the partial answer is not history
    again = session.send("Where was Nikola Tesla born?")  # the same engine answers the next question
    assert again.kind == "answer" and session.exchanges()[-1].complete


@pytest.mark.integration
def test_an_ambiguous_question_is_asked_back_without_an_llm_call(chat):
    session, llm = chat
    reply = session.send(AMBIGUOUS)
    assert reply.kind == "clarification" and llm.calls == []
    assert sorted(o["label"] for o in reply.options) == ["George Washington", "Washington (state)"]
    assert reply.result.exit_reason == "needs_clarification" and reply.confidence is None
    assert session.exchanges()[-1].status == "clarification" and session.pending["question"] == AMBIGUOUS


@pytest.mark.integration
@pytest.mark.parametrize("answer, pick", [
    ("2", 1), ("the second", 1), ("last", -1), ("yes", 0), ("the state", "Washington (state)"), ("George", "George Washington"),
])
def test_the_reply_to_a_clarification_answers_within_the_chosen_option(chat, answer, pick):
    session, llm = chat
    llm.answer = "It is old [1]."
    options = session.send(AMBIGUOUS).options
    chosen = options[[o["label"] for o in options].index(pick) if isinstance(pick, str) else pick]
    reply = session.send(answer)
    assert reply.kind == "answer", (answer, reply.text)
    assert reply.result.sources and sources_of(reply) <= set(chosen["scope"]["source"])
    assert chosen["label"] in reply.note and session.exchanges()[-1].asked_as == f"{AMBIGUOUS} ({chosen['label']})"
    assert session.pending is None and session.exchanges()[-1].complete
    assert llm.calls and all(m[0].text != REWRITE_SYSTEM for m in llm.calls)  # the chosen question is not read as a follow-up


@pytest.mark.integration
def test_any_answers_across_every_option(chat):
    session, llm = chat
    session.send(AMBIGUOUS)
    reply = session.send("any")
    assert reply.kind == "answer" and {"George_Washington.md", "Washington_(state).md"} <= sources_of(reply)
    assert "every option" in reply.note and session.pending is None


@pytest.mark.integration
def test_an_unmatched_reply_is_asked_once_more_then_answered_without_narrowing(chat):
    session, llm = chat
    session.send(AMBIGUOUS)
    again = session.send("I like turtles")
    assert again.kind == "clarification" and "could not tell" in again.text and llm.calls == []
    assert len(again.options) == 2 and session.pending["asked"] == 2
    answered = session.send("my cat is orange")
    assert answered.kind == "answer" and llm.calls
    assert "matched none of the options" in answered.note and "without narrowing" in answered.note
    assert {"George_Washington.md", "Washington_(state).md"} <= sources_of(answered)  # not narrowed to either
    assert answered.result.trace.step("clarify").decision["clarify"].startswith("scope chosen")  # and not asked back a third time
    assert session.pending is None
    statuses = [(e.question, e.status) for e in session.exchanges()]
    assert statuses == [(AMBIGUOUS, "clarification"), ("I like turtles", "clarification"), ("my cat is orange", "complete")]
    assert session.exchanges()[-1].asked_as == AMBIGUOUS


@pytest.mark.integration
def test_a_new_question_drops_the_pending_clarification(chat):
    session, llm = chat
    session.send(AMBIGUOUS)
    reply = session.send("Where was Nikola Tesla born in 1856?")
    assert reply.kind == "answer" and "Nikola_Tesla.md" in sources_of(reply) and session.pending is None


@pytest.mark.integration
def test_a_session_continues_in_a_new_process(engine, tmp_path):
    from ragkit.conversation.session import ChatSession

    rag, llm = engine
    llm.reset()
    first = ChatSession("tesla", rag=rag, path=tmp_path / "s.sqlite")
    first.send("Where was Nikola Tesla born?")
    first.store.close()
    restarted = ChatSession("tesla", rag=rag, path=tmp_path / "s.sqlite")  # a kernel restart
    assert [m.text for m in restarted.history()][0] == "Where was Nikola Tesla born?"
    assert restarted.send("and what did he study?").asked_as == "What did Nikola Tesla study?"
