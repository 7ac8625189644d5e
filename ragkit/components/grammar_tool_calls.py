"""GrammarToolCallGenerator: a chat generator for Haystack's ``Agent`` whose every reply is one valid action.

Left to write tool calls as text, the 0.5B model answered 1 of 400 question parts in agent mode: it
ran out of steps, answered without searching, echoed the tool schema or wrote calls that could not be
read (``bench/results/planning.json`` before this step existed). Here each agent step is decoded
under a grammar built for that step, so the reply can only be one of

* ``search(words)`` — while a part of a multi-part question is open and not yet searched, that
  part's own wording (its opening function words may be dropped, nothing else); for a one-part
  question first its own wording, then — searched once and still open — the follow-up the search
  tool built as multi-hop does (the name the question only describes, copied from the evidence, and
  the words still missing), or without one a name or figure the sources gave that the question does
  not have, then the missing words (each list a character trie in GBNF, so a long list stays cheap
  per token): a query cannot drift to an invented entity, nor repeat itself;
* ``sql(question)`` — when the agent has the SQL tool, in the question's words;
* ``answer()`` — stop searching. The answer itself is written by ragkit's answer step, one grounded
  span per part of the question (:mod:`ragkit.pipeline.agent_answer`): asked to write
  ``answer(1. … [n] 2. … [n])`` itself under a grammar, the 0.5B copied the example's "…" into the
  slots or wrote a sentence of the wrong source on 9 of 12 development questions.

*Open* is what the search tool's last line says (:func:`ragkit.pipeline.agent_mode.uncovered_line`:
parts that no search has looked for and no source covers, or for a one-part question its words no
source holds). ``search`` is offered only while something is open: offered search, the 0.5B searched
the same words again until its steps ran out on every one of 6 development questions. When nothing is
open, ``answer()`` is the only action left, and no LLM call is spent to choose it.

Backends: llama.cpp takes the GBNF grammar; an OpenAI-compatible server gets the actions as a JSON
schema ``response_format`` (the word list cannot be said in a schema: it is checked here); any other
generator raises at construction unless ``constraint="validate"`` (replies checked in Python only: for
tests with ``MockChatGenerator`` and for backends you trust). A reply that still does not read — a
failed call, a reply cut at ``max_tokens`` — comes back as a plain-text reply with
``meta["tool_call_error"]`` and a fallback on the trace: the Agent stops and the caller answers from
what it has.

The prompt is rebuilt from the Agent's messages each step, sources first: the numbered sources the
tools returned (deduplicated by number, in the order found), then the question and its parts, the
actions taken, what is still open, and the actions offered. The sources only grow at their end, so
llama.cpp reuses the system prompt and every source it has already read (traced as
``prompt_tokens_reused``).

The words a search may use (a part's wording, a name from the sources, the words still missing) are
built in :mod:`ragkit.components.agent_search_words`.

Hand-written because Haystack's chat generators hand tools to the backend's own tool calling (none for
a GGUF model through llama-cpp-python unless one tool is forced, which removes the choice) and nothing
in Haystack builds a grammar from a tool list. The Agent remains the engine: this is its
``chat_generator``.

Usage::

    llm = GrammarToolCallGenerator(chat_generator=build_chat_generator(ModelConfig()))
    agent = Agent(chat_generator=llm, tools=[search_tool(index)], max_agent_steps=4)
    agent.run(messages=[ChatMessage.from_user("Where was Tesla born, and what did Edison invent?")])
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict, tracing
from haystack.dataclasses import ChatMessage, ChatRole, ToolCall
from haystack.tools import flatten_tools_or_toolsets

from ragkit.components.agent_search_words import (
    FUNCTION_WORDS, MAX_QUERY_WORDS, phrase_rules, phrase_words, query_words, searched_part, source_names, trie_gbnf,
)
from ragkit.components.query_decomposer import split_by_rules
from ragkit.llm.structured import backend_of, call_llm, gbnf_grammar, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

CONSTRAINTS = ("auto", "validate")
SOURCE_LINE = re.compile(r"^\[(\d+)\] ")
UNCOVERED_PREFIX = "Not found in the sources yet:"
ALL_SEARCHED = "Every part of the question has been searched."
WORDS_COVERED = "The sources cover the question's words."
FOLLOW_UP_PREFIX = "Not found yet, the name the question describes; follow-up search:"
STATUS_LINES = (UNCOVERED_PREFIX, ALL_SEARCHED, WORDS_COVERED, FOLLOW_UP_PREFIX)  # what the search tool says is open, last line
_ACTION = re.compile(r"^\s*(search|sql|answer)\((.*)\)\s*$", re.DOTALL)
_OPEN_PART = re.compile(r"\bpart (\d+)")

# The worked example is the one place the small model learns the loop: search one part at a time with
# the part's own words, then answer every part. It sits in the system prompt, a prefix llama.cpp reuses.
AGENT_INSTRUCTIONS = """You answer questions about the user's documents. You know nothing about them except the sources you find with search.
Search for one part of the question at a time, using the words of that part. When every part has a source, answer.

Example.
Question: Where was Nikola Tesla born, and what did Thomas Edison invent?
Part 1: Where was Nikola Tesla born?
Part 2: What did Thomas Edison invent?
Reply: search(Where was Nikola Tesla born)
(the search finds sources [1] [2] [3]; part 2 is not found yet)
Reply: search(What did Thomas Edison invent)
(the search finds sources [4] [5] [6]; every part has a source)
Reply: answer()"""


def action_grammar(words: list[str], sql: bool = False, question_words: Optional[list[str]] = None,
                   phrases: Optional[list[list[str]]] = None, search: bool = True, lead: Optional[list[str]] = None) -> str:
    """GBNF for one agent step: ``search(…)``, ``sql(question)`` if ``sql``, or ``answer()``. The search
    is the end of one of ``phrases`` when given (the parts still open, :func:`phrase_rules`), else up to
    :data:`MAX_QUERY_WORDS` of ``words`` (opening with one of ``lead`` when given); without ``search``
    (nothing is left open) it is not offered."""
    phrase = phrase_rules([p for p in phrases or [] if len(p) >= 2])
    rules = ["root ::= " + " | ".join((["search"] if search else []) + (["sql"] if sql else []) + ["answer"])]
    if not search:
        pass
    elif phrase:
        rules += ['search ::= "search(" phrase ")"', *phrase]
    elif lead:
        rules += [f'search ::= "search(" lw (" " qw){{0,{MAX_QUERY_WORDS - 1}}} ")"', f"lw ::= {trie_gbnf(lead)}", f"qw ::= {trie_gbnf(words)}"]
    else:
        rules += [f'search ::= "search(" qw (" " qw){{0,{MAX_QUERY_WORDS - 1}}} ")"', f"qw ::= {trie_gbnf(words)}"]
    if sql:
        rules.append(f'sql ::= "sql(" sw (" " sw){{0,{2 * MAX_QUERY_WORDS}}} ")"')
        rules.append(f"sw ::= {trie_gbnf(question_words or words)}")
    rules.append('answer ::= "answer()"')
    return "\n".join(rules)


def action_schema(sql: bool = False, search: bool = True) -> dict[str, Any]:
    """The same actions as a JSON schema, for OpenAI-compatible servers (``query`` is empty for answer)."""
    actions = (["search"] if search else []) + (["sql"] if sql else []) + ["answer"]
    schema = {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": actions}, "query": {"type": "string"}},
        "required": ["action", "query"],
        "additionalProperties": False,
    }
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "agent_action", "strict": True, "schema": schema}}}


def parse_action(text: str, allowed: set[str]) -> tuple[str, str]:
    """``("search", query)``, ``("sql", question)`` or ``("answer", "")`` from a reply in the grammar's
    form (or the schema's JSON); ValueError with the reason for anything else. Checked here too, so a
    backend that ignored the constraint cannot slip past it. ``allowed``: the words a search may use
    (empty: search is not offered at this step)."""
    text = (text or "").strip()
    if text.startswith("{"):
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError(f"not an action object: {text[:80]!r}")
        action, body = loaded.get("action"), str(loaded.get("query") or "")
    else:
        match = _ACTION.match(text)
        if not match:
            raise ValueError(f"not one of search(…), sql(…), answer(): {text[:80]!r}")
        action, body = match.group(1), match.group(2).strip()
    if action == "answer":
        return "answer", ""
    if action == "search" and not allowed:
        raise ValueError("search is not offered at this step: nothing is left open")
    return _checked_query(action, body, allowed)


def _checked_query(action: Any, query: str, allowed: set[str]) -> tuple[str, str]:
    if action not in ("search", "sql"):
        raise ValueError(f"unknown action {action!r}")
    words = query.split()
    if not words:
        raise ValueError(f"{action}() needs words")
    strange = [w for w in words if w not in allowed]
    if action == "search" and strange:
        raise ValueError(f"the search uses words from neither the question nor the sources: {', '.join(strange[:3])}")
    return action, " ".join(words)


def read_conversation(messages: list[ChatMessage]) -> dict[str, Any]:
    """What an Agent's message list holds, for the next step's prompt: the instructions (system),
    the question (first user message), the numbered source lines (deduplicated, in order), the actions
    taken with what each found, and the last "still uncovered" line a tool sent."""
    state: dict[str, Any] = {"system": None, "question": "", "sources": {}, "done": [], "uncovered": None, "queries": []}
    calls: dict[str, str] = {}
    for message in messages:
        if message.is_from(ChatRole.SYSTEM) and state["system"] is None:
            state["system"] = message.text
        elif message.is_from(ChatRole.USER) and not state["question"]:
            state["question"] = (message.text or "").strip()
        elif message.is_from(ChatRole.ASSISTANT):
            for call in message.tool_calls:
                argument = next(iter(call.arguments.values()), "") if call.arguments else ""
                calls[call.id or ""] = f"{call.tool_name}({argument})"
                if call.tool_name == "search":
                    state["queries"].append(str(argument))
        elif message.is_from(ChatRole.TOOL):
            for result in message.tool_call_results:
                found, other = [], []
                for line in str(result.result).splitlines():
                    m = SOURCE_LINE.match(line)
                    if m:
                        state["sources"].setdefault(int(m.group(1)), line)
                        found.append(f"[{m.group(1)}]")
                    elif line.startswith(STATUS_LINES):
                        state["uncovered"] = line
                    elif line.strip():
                        other.append(line.strip())
                what = " ".join(found) if found else ("failed: " if result.error else "") + " ".join(other)[:120]
                state["done"].append(f"{calls.get(result.origin.id or '', result.origin.tool_name)} → {what or 'nothing'}")
    return state


def step_messages(state: dict[str, Any], parts: list[str], tool_names: set[str]) -> list[ChatMessage]:
    """The step's prompt: instructions, then sources (a prefix that only grows), then the question and
    where the search stands, then the actions."""
    sources = "\n".join(state["sources"][n] for n in sorted(state["sources"])) or "(none yet: search first)"
    actions = ["search(words) — look words up in the documents"] if "search" in tool_names else []
    if "sql" in tool_names:
        actions.append("sql(question) — count or compute over the table")
    actions.append("answer() — stop searching; each part is answered from the sources")
    lines = [f"Sources:\n{sources}", "", f"Question: {state['question']}"]
    if len(parts) > 1:
        lines += [f"Part {i}: {p}" for i, p in enumerate(parts, 1)]
    lines.append("Done: " + ("; ".join(state["done"]) if state["done"] else "nothing yet"))
    if state["uncovered"]:
        lines.append(state["uncovered"])
    lines += ["Reply with one action:", *actions]
    system = (state["system"] or AGENT_INSTRUCTIONS).strip()
    return [ChatMessage.from_system(system), ChatMessage.from_user("\n".join(lines))]


@component
class GrammarToolCallGenerator:
    def __init__(self, chat_generator: Any, constraint: str = "auto", max_tokens: int = 160, step_name: Optional[str] = "agent_llm"):
        """``chat_generator``: llama.cpp (a GBNF grammar) or an OpenAI-compatible server (a JSON schema);
        any other raises here unless ``constraint="validate"``. ``max_tokens`` bounds one action
        (the longest search, a whole question part, fits well inside 160). ``step_name``: every call
        is its own traced step of that name (an Agent calls its generator outside any Pipeline)."""
        if chat_generator is None:
            raise ValueError("GrammarToolCallGenerator needs a chat generator")
        if constraint not in CONSTRAINTS:
            raise ValueError(f"constraint must be one of {CONSTRAINTS}, not {constraint!r}")
        if constraint == "auto" and backend_of(chat_generator) not in ("llama.cpp", "openai"):
            raise ValueError(
                f"cannot constrain the replies of {type(chat_generator).__name__}: agent steps need a llama.cpp model "
                "(GBNF grammar) or an OpenAI-compatible server (JSON schema); pass constraint='validate' to check replies in Python only"
            )
        if max_tokens < 32:
            raise ValueError("max_tokens must be >= 32")
        self.chat_generator, self.constraint, self.max_tokens, self.step_name = chat_generator, constraint, max_tokens, step_name

    def warm_up(self) -> None:
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=generator_to_dict(self.chat_generator), constraint=self.constraint,
                               max_tokens=self.max_tokens, step_name=self.step_name)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GrammarToolCallGenerator":
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], generation_kwargs: Optional[dict[str, Any]] = None, *, tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        """One action from the conversation so far (``streaming_callback`` is not used: an action is
        read whole)."""
        if self.step_name is None:
            return {"replies": [self._step(messages, tools)]}
        tags = {"haystack.component.name": self.step_name, "haystack.component.type": type(self.chat_generator).__name__}
        with tracing.tracer.trace("haystack.component.run", tags=tags):
            return {"replies": [self._step(messages, tools)]}

    def _step(self, messages: list[ChatMessage], tools: Any) -> ChatMessage:
        names = {t.name: t for t in flatten_tools_or_toolsets(tools)} if tools else {}
        sql_tool = next((n for n in names if n not in ("search",)), None)
        kinds = {"search"} if "search" in names else set()
        if sql_tool:
            kinds.add("sql")
        state = read_conversation(messages)
        parts = split_by_rules(state["question"])[0] if state["question"] else [""]
        numbers = sorted(state["sources"])
        open_parts = [int(i) for i in _OPEN_PART.findall(state["uncovered"] or "") if 0 < int(i) <= len(parts)]
        if len(parts) > 1 and not state["done"]:
            open_parts = list(range(1, len(parts) + 1))
        open_parts = [i for i in open_parts if not searched_part(parts[i - 1], state["queries"])]
        phrases = [phrase_words(parts[i - 1]) for i in open_parts] if len(parts) > 1 else []
        source_texts = [state["sources"][n].split(") ", 1)[-1] for n in numbers]
        lead: list[str] = []
        status = state["uncovered"] or ""
        if len(parts) == 1 and not state["done"]:
            # a one-part question's first search is the question in its own words, as the fixed
            # workflow's first retrieval: left up to 12 free words, the 0.5B cut bridge questions
            # mid-clause ("… the state whose university's researchers")
            phrases = [phrase_words(parts[0])] if len(phrase_words(parts[0])) >= 2 else []
        elif len(parts) == 1 and status.startswith(FOLLOW_UP_PREFIX):
            # the search tool found the name the question only describes the way multi-hop does (a span
            # copied from the evidence sentences) and built the follow-up from it: the model chooses only
            # whether to follow it. Left to pick a name from the sources, the 0.5B opened follow-ups with
            # "Mandate of Heaven", "31-0", "1870" on the development bridge questions.
            phrases = [phrase_words(status[len(FOLLOW_UP_PREFIX):].strip(" ."))]
        elif len(parts) == 1 and state["done"]:
            # no follow-up was found (or the tool has no LLM to find one): the next search opens with a
            # name the sources give that the question does not have, then the words still missing.
            # Offered the question's words again, the 0.5B repeated its first search on 6 of 12
            # development bridge questions.
            lead = source_names(source_texts, exclude=state["question"])
        missing = (state["uncovered"] or "")[len(UNCOVERED_PREFIX):].strip(" .").split() if lead else []
        allowed = ([w for p in phrases for w in p] or (lead + missing + FUNCTION_WORDS if lead else [])
                   or query_words(state["question"], *source_texts))
        # search is offered while something is open: no search yet, or the search tool's coverage
        # line names a part or words no source holds. The small model, offered search, searches again
        # (the same words, measured on dev questions), so once nothing is open the choice is answer.
        can_search = "search" in kinds and (not state["done"] or status.startswith((UNCOVERED_PREFIX, FOLLOW_UP_PREFIX)))
        if len(parts) > 1 and not phrases:  # every open part was searched for already
            can_search = False
        if not can_search:
            kinds.discard("search")
            allowed = []
        if not kinds:  # nothing left to search and no SQL tool: answer() is the only action, no call needed
            record(decision={"action": "answer", "chosen_by": "nothing left open (no LLM call)"})
            return ChatMessage.from_assistant(text="answer()", meta={"agent_action": "answer", "chosen_by": "nothing_open", "question_parts": parts})
        prompt = step_messages(state, parts, kinds)
        kwargs: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": 0.0}
        backend = backend_of(self.chat_generator)
        if self.constraint == "auto" and backend == "llama.cpp":
            grammar = action_grammar(allowed, sql=bool(sql_tool), question_words=query_words(state["question"]), phrases=phrases, search=can_search, lead=lead)
            kwargs["grammar"] = gbnf_grammar(grammar)
        elif self.constraint == "auto" and backend == "openai":
            kwargs.update(action_schema(sql=bool(sql_tool), search=can_search))
        allowed_set = set(allowed)
        reply = call_llm(self.chat_generator, prompt, lambda text: parse_action(text, allowed_set), kwargs, step="agent_step")
        if not reply.ok:
            record(decision={"action": "unreadable"})
            # never empty: an Agent goes on after an empty reply, and this one must end the run
            return ChatMessage.from_assistant(text=reply.text or f"({reply.error})", meta={"tool_call_error": reply.error, "agent_action": "unreadable", "question_parts": parts})
        action, value = reply.value
        meta = {"agent_action": action, "tool_call_format": "grammar" if "grammar" in kwargs else ("json_schema" if "response_format" in kwargs else "validated")}
        if action == "answer":
            record(decision={"action": "answer", "chosen_by": "model"})
            return ChatMessage.from_assistant(text="answer()", meta={**meta, "chosen_by": "model", "question_parts": parts})
        tool = "search" if action == "search" else sql_tool
        argument = "query" if action == "search" else "question"
        record(decision={"action": action, "query": value[:80]})
        return ChatMessage.from_assistant(tool_calls=[ToolCall(tool_name=tool, arguments={argument: value}, id=f"call_{len(messages)}")], meta=meta)
