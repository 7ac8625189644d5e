"""Agent mode under a grammar: every step one valid action, answers from the answer step, a confidence."""

import json

import pytest
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage
from haystack.tools import Tool

from scripted_llm import scripted  # tests/scripted_llm.py

from ragkit.components.grammar_tool_calls import (
    ALL_SEARCHED, UNCOVERED_PREFIX, GrammarToolCallGenerator, action_grammar, parse_action, phrase_words, query_words, read_conversation,
)
from ragkit.llm.prompts import NO_ANSWER
from ragkit.pipeline.agent_mode import EXIT_REASONS, AgentRAG
from ragkit.pipeline.result import AgenticResult

TWO_PART = "Who founded the Yuan dynasty, and where was Nikola Tesla born?"


def agent(sample_index, fast_config, llm, **kwargs):
    return AgentRAG(index=sample_index, config=fast_config, chat_generator=llm, tool_calls="validated", **kwargs)


def test_a_backend_that_cannot_take_the_grammar_is_refused_at_construction(sample_index, fast_config):
    with pytest.raises(ValueError, match="cannot constrain"):
        AgentRAG(index=sample_index, config=fast_config, chat_generator=MockChatGenerator(responses="x"))
    with pytest.raises(ValueError, match="tool_calls"):
        AgentRAG(index=sample_index, config=fast_config, chat_generator=MockChatGenerator(responses="x"), tool_calls="free")


def test_the_grammar_compiles_for_llama_cpp_and_offers_only_what_is_open():
    from ragkit.llm.structured import gbnf_grammar

    words = query_words("Where was Nikola Tesla born?", "Tesla was born in Smiljan (Lika).")
    assert "Smiljan" in words and "Tesla" in words and "the" in words and "(Lika)." not in words
    grammar = action_grammar(words, sql=True, question_words=query_words("How many cars?"))
    assert 'root ::= search | sql | answer' in grammar and '"answer()"' in grammar
    gbnf_grammar(grammar)  # llama.cpp parses it
    phrased = action_grammar([], phrases=[phrase_words("Where was Nikola Tesla born?")])
    assert '"Nikola Tesla born"' in phrased and '"Where was Nikola Tesla born"' in phrased and '"Where was"' not in phrased
    # only the opening function words may be dropped: a search for a part keeps every content word
    assert '"Tesla born"' not in phrased
    gbnf_grammar(phrased)
    spelling = action_grammar([], phrases=[phrase_words("What is the Mongolian spelling of Genghis Khan?")])
    assert '"Mongolian spelling of Genghis Khan"' in spelling and '"Genghis Khan"' not in spelling
    closed = action_grammar([], search=False)
    assert closed.splitlines()[0] == "root ::= answer" and "search ::=" not in closed
    gbnf_grammar(closed)


@pytest.mark.parametrize("text, allowed, expected", [
    ("search(Tesla born)", {"Tesla", "born"}, ("search", "Tesla born")),
    ("answer()", set(), ("answer", "")),
    ('{"action": "search", "query": "Tesla born"}', {"Tesla", "born"}, ("search", "Tesla born")),
    ('{"action": "answer", "query": ""}', {"x"}, ("answer", "")),
])
def test_actions_read(text, allowed, expected):
    assert parse_action(text, allowed) == expected


@pytest.mark.parametrize("text, allowed, reason", [
    ("search(Edison invented)", {"Tesla"}, "neither the question nor the sources"),
    ("search(Tesla)", set(), "not offered"),
    ("I will search for Tesla", {"Tesla"}, "not one of"),
    ('{"action": "fly", "query": "x"}', {"x"}, "unknown action"),
])
def test_actions_that_do_not_fit_are_refused_with_the_reason(text, allowed, reason):
    with pytest.raises(ValueError, match=reason):
        parse_action(text, allowed)


def test_two_parts_searched_one_at_a_time_then_each_part_answered_from_its_own_search(sample_index, fast_config):
    llm, seen = scripted("search(Who founded the Yuan dynasty)", "search(Where was Nikola Tesla born)", "Kublai Khan [1]", "Smiljan [1]")
    result = agent(sample_index, fast_config, llm).ask(TWO_PART)
    assert isinstance(result, AgenticResult) and result.exit_reason == "answered" and not result.failed
    assert [c["arguments"]["query"] for c in result.details["agent"]] == ["Who founded the Yuan dynasty", "Where was Nikola Tesla born"]
    # after both searches nothing is open: answer() is chosen without an LLM call, then one answer per part
    assert result.details["answer_chosen_by"] == "nothing_open"
    assert result.trace.llm_calls == 4 and len(seen) == 4
    parts = result.details["parts"]
    assert [p["question"] for p in parts] == ["Who founded the Yuan dynasty?", "Where was Nikola Tesla born?"]
    assert parts[0]["answer"].startswith("Kublai Khan") and parts[1]["answer"].startswith("Smiljan")
    # the second part's citation is renumbered into the result's sources (its search's chunks come after the first's)
    assert parts[1]["answer"] != "Smiljan [1]" and len(result.sources) == 10
    assert 0.0 < result.confidence < 1.0 and result.symbol in "●◐○" and result.details["confidence"]
    # the second step's prompt: sources first, the question's parts, what was done, what is still open
    prompt = seen[1][-1].text
    assert prompt.startswith("Sources:\n[1] (") and "Part 2: Where was Nikola Tesla born?" in prompt
    assert "Done: search(Who founded the Yuan dynasty) → [1]" in prompt and f"{UNCOVERED_PREFIX} part 2" in prompt
    names = [s.name for s in result.trace.steps]
    assert names.count("agent_llm") == 3 and names.count("search") == 2 and names.count("answer") == 2
    search = result.trace.step("search")
    assert search.decision["found"] == 5 and len(search.decision["coverage"]) == 2


def test_a_repeated_search_is_not_run_again_and_the_coverage_line_says_what_is_open(sample_index):
    from ragkit.pipeline.agent_tools import _RUN, _AgentRun, search_tool

    tool = search_tool(sample_index, top_k=2)
    run = _AgentRun(parts=["Who founded the Yuan dynasty?", "Where was Nikola Tesla born?"])
    token = _RUN.set(run)
    try:
        first = tool.invoke(query="Who founded the Yuan dynasty")
        again = tool.invoke(query="who founded  the Yuan dynasty")
    finally:
        _RUN.reset(token)
    assert first.startswith("[1] (") and first.splitlines()[-1] == f"{UNCOVERED_PREFIX} part 2 (Where was Nikola Tesla born)."
    assert again.startswith("Already searched") and len(run.sources) == 2 and run.queries == ["who founded the yuan dynasty"]


def test_a_part_searched_once_is_never_offered_again_even_while_the_coverage_calls_it_open():
    from haystack.dataclasses import ToolCall

    from ragkit.components.agent_search_words import searched_part

    assert searched_part("What field involves the study of the immune system?", ["study of the immune system"])
    assert searched_part("Where was Tesla born?", ["where was Tesla born"]) and not searched_part("Where was Tesla born?", ["Tesla"])
    # the 0.5B's loop on 200 two-part questions: a search for part 1 left "part 1, part 2" open (its
    # sources did not cover part 1), the grammar offered part 1 again, and it searched it until the
    # steps ran out. Now only part 2 is offered; once both were searched answer() needs no LLM call.
    question = "What field involves the study of the immune system, and who stripped the ball from Cam Newton?"
    first = ToolCall(tool_name="search", arguments={"query": "field involves the study of the immune system"}, id="c1")
    open_both = f"{UNCOVERED_PREFIX} part 1 (What field involves the study of the immune system), part 2 (who stripped the ball from Cam Newton)."
    messages = [ChatMessage.from_user(question), ChatMessage.from_assistant(tool_calls=[first]),
                ChatMessage.from_tool(tool_result=f"[1] (Immune system) The immune system is a system.\n{open_both}", origin=first)]
    llm, seen = scripted("search(Who stripped the ball from Cam Newton)")
    step = GrammarToolCallGenerator(llm, constraint="validate")
    search = Tool(name="search", description="s", parameters={"type": "object", "properties": {"query": {"type": "string"}}}, function=lambda query: "")
    reply = step.run(messages=messages, tools=[search])["replies"][0]
    assert reply.tool_calls[0].arguments == {"query": "Who stripped the ball from Cam Newton"}
    refused = GrammarToolCallGenerator(scripted("search(field involves the study of the immune system)")[0], constraint="validate")
    assert refused.run(messages=messages, tools=[search])["replies"][0].meta.get("tool_call_error")
    second = ToolCall(tool_name="search", arguments={"query": "Who stripped the ball from Cam Newton"}, id="c2")
    messages += [ChatMessage.from_assistant(tool_calls=[second]), ChatMessage.from_tool(tool_result=f"[2] (Panthers) Von Miller\n{open_both}", origin=second)]
    done = step.run(messages=messages, tools=[search])["replies"][0]
    assert done.text == "answer()" and done.meta["chosen_by"] == "nothing_open" and len(seen) == 1


def test_an_answer_before_any_search_is_a_decline_never_a_fact(sample_index, fast_config):
    llm, seen = scripted("answer()")
    result = agent(sample_index, fast_config, llm).ask("Where was Nikola Tesla born?")
    assert result.exit_reason == "no_tool_call" and result.declined and result.answer == NO_ANSWER
    assert result.confidence == 0.0 and result.trace.llm_calls == 1 and len(seen) == 1


def test_steps_that_run_out_answer_from_what_was_found(sample_index, fast_config):
    llm, _ = scripted("search(Who founded the Yuan dynasty)", "Kublai Khan [1]")
    rag = agent(sample_index, fast_config, llm, max_agent_steps=1)
    result = rag.ask(TWO_PART)
    assert result.exit_reason == "max_steps" and result.details["answer_chosen_by"] == "max_steps"
    assert len(result.details["parts"]) == 2 and len(result.sources) == 5
    assert result.trace.llm_calls == 3 <= rag.call_budget


def test_an_unreadable_reply_is_a_traced_failure_answered_from_the_sources_with_low_confidence(sample_index, fast_config):
    llm, _ = scripted("search(Nikola Tesla born)", "I think the answer is Smiljan.", "Smiljan [1]")
    result = agent(sample_index, fast_config, llm).ask("Where was Nikola Tesla born in Lika?")
    assert result.exit_reason == "unreadable" and result.error and "agent_step" in result.error
    assert result.details["agent_stats"]["unparsed_tool_calls"] == 1
    assert result.confidence < 0.5 and result.symbol == "○"


def test_a_tool_that_raises_is_traced_and_the_agent_answers_from_what_it_has(sample_index, fast_config, monkeypatch):
    from ragkit.components.index_retriever import IndexRetriever

    def boom(self, **kwargs):
        raise RuntimeError("index unavailable")

    monkeypatch.setattr(IndexRetriever, "run", boom)
    llm, _ = scripted("search(Nikola Tesla born)", "answer()")
    result = agent(sample_index, fast_config, llm).ask("Where was Nikola Tesla born?")
    assert result.exit_reason in EXIT_REASONS and not result.sources and result.declined
    assert result.details["agent"][0]["error"] and result.trace.step("search").error


def test_an_llm_that_raises_is_a_result_never_an_exception(sample_index, fast_config):
    def boom(messages):
        raise ConnectionError("server gone")

    result = agent(sample_index, fast_config, MockChatGenerator(response_fn=boom)).ask("Where was Nikola Tesla born?")
    assert isinstance(result, AgenticResult) and result.exit_reason == "unreadable" and result.confidence == 0.0


def test_the_conversation_is_read_back_from_the_agents_messages():
    from haystack.dataclasses import ToolCall

    origin = ToolCall(tool_name="search", arguments={"query": "Tesla born"}, id="c1")
    messages = [ChatMessage.from_system("S"), ChatMessage.from_user("Where was Tesla born?"), ChatMessage.from_assistant(tool_calls=[origin]),
                ChatMessage.from_tool(tool_result=f"[1] (Tesla) born in Smiljan\n[2] (Tesla) an engineer\n{ALL_SEARCHED}", origin=origin)]
    state = read_conversation(messages)
    assert state["question"] == "Where was Tesla born?" and sorted(state["sources"]) == [1, 2]
    assert state["done"] == ["search(Tesla born) → [1] [2]"] and state["uncovered"] == ALL_SEARCHED


def test_wrapper_round_trips_through_to_dict():
    wrapper = GrammarToolCallGenerator(MockChatGenerator(responses="answer()"), constraint="validate", max_tokens=64)
    again = GrammarToolCallGenerator.from_dict(json.loads(json.dumps(wrapper.to_dict())))
    assert again.constraint == "validate" and again.max_tokens == 64 and type(again.chat_generator) is MockChatGenerator


@pytest.mark.integration
@pytest.mark.llm
def test_the_real_small_model_under_the_grammar_searches_and_every_reply_reads(sample_index, fast_config, local_llm):
    rag = AgentRAG(index=sample_index, config=fast_config, chat_generator=local_llm, max_agent_steps=3)
    result = rag.ask("Who founded the Yuan dynasty, and where was Genghis Khan born?")
    assert result.exit_reason in ("answered", "max_steps") and result.details["agent_stats"]["unparsed_tool_calls"] == 0
    assert result.details["agent_stats"]["searched"] and result.trace.llm_calls <= rag.call_budget
    steps = [s for s in result.trace.steps if s.name == "agent_llm" and s.llm_calls]
    assert steps and all(s.prompt_tokens > 0 for s in steps)
    assert len(result.details["parts"]) == 2 and 0.0 <= result.confidence <= 1.0


def test_the_notebook_view_lists_every_step_and_draws_the_run(sample_index, fast_config):
    from ragkit.ui.agent_view import agent_run_markdown, agent_steps, agent_steps_html

    llm, _ = scripted("search(Who founded the Yuan dynasty)", "search(Where was Nikola Tesla born)", "Kublai Khan [1]", "Smiljan [1]")
    result = agent(sample_index, fast_config, llm).ask(TWO_PART + ' <script>alert("x")</script>')
    rows = agent_steps(result)
    assert [r["step"] for r in rows] == ["agent_llm", "search", "agent_llm", "search", "agent_llm", "answer", "answer"]
    assert rows[0]["what"] == "search(Who founded the Yuan dynasty)" and "prompt tokens" in rows[0]["detail"]
    assert rows[1]["what"] == "search: Who founded the Yuan dynasty" and "coverage by part" in rows[1]["detail"]
    assert rows[4]["what"].startswith("answer()") and rows[4]["detail"] == "no LLM call"
    page = agent_steps_html(result)
    assert "<script>" not in page and "exit reason: <b>answered</b>" in page
    drawing = agent_run_markdown(result)
    assert drawing.startswith("```mermaid\nflowchart TD") and drawing.count("-->") == len(rows) + 1
    assert "<script>" not in drawing and "classDef llm" in drawing and "classDef retrieve" in drawing


BRIDGE_QUESTION = "Where was the man whom Kublai Khan placed on the imperial records as the official founder of the Yuan dynasty probably born?"


def bridge_llm(bridge="Genghis Khan", follow=True):
    """Replies by what each call asks: the agent's steps (its first search in the question's words, then
    the follow-up the search tool offered, or answer()), the bridge span, the answer."""
    from ragkit.components.grammar_tool_calls import FOLLOW_UP_PREFIX

    seen = []

    def respond(messages):
        seen.append(list(messages))
        prompt = messages[-1].text or ""
        if "Reply with one action:" in prompt:
            offered = [line[len(FOLLOW_UP_PREFIX):].strip(" .") for line in prompt.splitlines() if line.startswith(FOLLOW_UP_PREFIX)]
            if "Done: nothing yet" in prompt:
                return f"search({BRIDGE_QUESTION.rstrip('?')})"
            return f"search({offered[0]})" if offered and follow else "answer()"
        if "Copy that name from the sources" in prompt:
            return bridge
        return "Delüün Boldog [1]"

    return MockChatGenerator(response_fn=respond), seen


def test_a_two_hop_question_follows_the_bridge_multi_hop_copies_and_is_answered_where_it_led(sample_index, fast_config):
    llm, seen = bridge_llm()
    rag = agent(sample_index, fast_config, llm)
    asked_evidence = []
    select = rag.finisher._evidence.run
    rag.finisher._evidence.run = lambda query, documents, **kw: asked_evidence.append((query, documents)) or select(query=query, documents=documents, **kw)
    result = rag.ask(BRIDGE_QUESTION)
    queries = [c["arguments"]["query"] for c in result.details["agent"]]
    # first the question in its own words; then multi-hop's follow-up: the bridge, then the words the evidence lacks
    assert queries[0] == BRIDGE_QUESTION.rstrip("?") and queries[1].startswith("Genghis Khan") and "born" in queries[1]
    assert any("Genghis_Khan" in (d.meta.get("source") or "") for d in result.sources)
    assert result.exit_reason == "answered" and not result.failed
    # the evidence sentence is chosen for the follow-up query, among every chunk, the follow-up's first
    (focus, candidates), = asked_evidence
    assert focus == queries[1]
    assert "Genghis_Khan" in (candidates[0].meta.get("source") or "") and len(candidates) == len(result.sources)
    assert len(seen) <= rag.call_budget
    bridge_steps = [s for s in result.trace.steps if s.name == "search" and (s.decision or {}).get("bridge")]
    assert bridge_steps and bridge_steps[0].decision["bridge"] == "Genghis Khan"
    from ragkit.ui.agent_view import agent_steps

    # the notebook's step table says which bridge the search tool copied
    assert "bridge copied from the evidence: 'Genghis Khan'" in agent_steps(result)[1]["detail"]


def test_hop_order_puts_the_follow_ups_chunks_first():
    from haystack import Document

    from ragkit.pipeline.agent_answer import hop_order

    first = [Document(id="a", content="x"), Document(id="b", content="y")]
    follow = [Document(id="c", content="z"), Document(id="a", content="x")]
    assert [d.id for d in hop_order([("q1", first), ("q2", follow)])] == ["c", "a", "b"]


def test_an_agent_that_declines_the_follow_up_answers_from_its_first_search(sample_index, fast_config):
    llm, seen = bridge_llm(follow=False)
    result = agent(sample_index, fast_config, llm).ask(BRIDGE_QUESTION)
    assert [c["arguments"]["query"] for c in result.details["agent"]] == [BRIDGE_QUESTION.rstrip("?")]
    assert result.details["answer_chosen_by"] == "model"


def test_no_bridge_found_means_no_follow_up_is_offered(sample_index, fast_config):
    llm, seen = bridge_llm(bridge="Napoleon")  # not a span of the evidence: the grounded step refuses it
    result = agent(sample_index, fast_config, llm).ask(BRIDGE_QUESTION)
    assert not any("follow-up search:" in (m[-1].text or "") for m in seen)
    assert not result.failed
