"""What ``ragkit ask`` and ``ragkit chat`` print (ragkit.ui.terminal), rendered into fixed-width Rich
consoles: nothing wider than the terminal, step names whole, each part's answer once, the confidence
on screen. One result is built by hand (long names, long decisions, every kind of note); one comes from
a real decomposed run over a tiny index with a scripted MockChatGenerator (``integration``)."""

from __future__ import annotations

import io
import re

import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator
from rich.cells import cell_len
from rich.console import Console

from ragkit.pipeline.result import AgenticResult
from ragkit.pipeline.trace import Step, Trace
from ragkit.ui.terminal import answer_block, facts_line, sources_block, trace_caption, trace_table

WIDTHS = (80, 120)
PARTS = [
    {"question": "Where was Nikola Tesla born?", "answer": "Nikola Tesla was born in Smiljan, in the Austrian Empire [1].", "confidence": 0.81,
     "symbol": "●"},
    {"question": "What did Nikola Tesla study, and where?", "answer": "He studied electrical engineering at the Polytechnic in Graz [2].",
     "confidence": 0.62, "symbol": "◐"},
]
LONG_PATH = "wikipedia/people/inventors/serbian-american/Nikola_Tesla_early_life_and_education_at_the_polytechnic.md"


def hand_built() -> AgenticResult:
    ids = [("a1b2c3d4e5f6a7b8", 0.912), ("b1b2c3d4e5f6a7b8", 0.544), ("c1b2c3d4e5f6a7b8", None)]
    steps = [
        Step(name="follow_up", seconds=0.0002, decision={"follow_up": "opens with 'and'", "rewrite": "Where was Nikola Tesla born, and what did he study?",
                                                          "by": "rules", "verdict": "kept (0.612 vs 0.540)"}),
        Step(name="decompose", seconds=0.0011, decision={"kind": "multi", "parts": [p["question"] for p in PARTS]}),
        Step(name="retrieve", seconds=0.0423, docs_out=ids, decision={"mode": "hybrid", "source": LONG_PATH}),
        Step(name="clarify", seconds=0.00003, decision={"clarify": "clear", "why": "'Nikola Tesla' leads the evidence (0.41 of its score for the next)"}),
        Step(name="self_correction", seconds=3.2, llm_calls=2, cache_hits=1, prompt_tokens=1812, prompt_tokens_reused=1640, completion_tokens=41,
             docs_in=ids, docs_out=ids[:2], decision={"attempt": 2, "support": 0.8123456},
             fallbacks=["answer: parse_failed: the reply was not one of the sources' spans after 2 tries, so the first answer was kept as it was"]),
        Step(name="hallucination", seconds=1.05, llm_calls=1, prompt_tokens=700, warnings=["reply cut at max_tokens=256"]),
        Step(name="sentence_vectors", seconds=12.5),
        Step(name="per_part", seconds=4.4, decision={"part 1": PARTS[0]["question"], "part 2": PARTS[1]["question"], "parts answered": "2/2"}),
        Step(name="confidence", seconds=0.0001, error="ValueError: the calibrator file is missing its 'hallucination_check' curve; fell back to the raw score"),
    ]
    sources = [Document(id=i, content="text", meta={"source": LONG_PATH if n == 0 else f"doc{n}.md", "section": "Early life", "page": 3}, score=s)
               for n, (i, s) in enumerate(ids)]
    answer = "\n".join(f"{p['question']} {p['answer']}" for p in PARTS)  # what planned_result merges
    return AgenticResult(question="Where was Nikola Tesla born, and what did he study?", answer=answer, sources=sources, confidence=0.5022, symbol="◐",
                         exit_reason="supported", trace=Trace(steps=steps), details={"parts": PARTS}, seconds=21.2)


def rendered(width: int, *renderables) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, force_terminal=False)
    for item in renderables:
        console.print(item)
    return console.export_text()


def flat(text: str) -> str:
    return " ".join(text.split())


def assert_fits(text: str, width: int) -> None:
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not too_wide, too_wide
    assert "…" not in text and "..." not in text  # nothing cut short


@pytest.mark.parametrize("width", WIDTHS)
def test_the_trace_table_fits_and_names_every_step_in_full(width):
    result = hand_built()
    text = rendered(width, trace_table(result.trace), trace_caption(result.trace))
    assert_fits(text, width)
    first_words = [line.split()[0] for line in text.splitlines() if line.strip()]
    for step in result.trace.steps:
        assert first_words.count(step.name) == 1, (step.name, text)  # one row, its name whole on its first line
    body = flat(text)
    assert LONG_PATH in re.sub(r"\s", "", text)  # folded over lines, not dropped
    assert "ValueError" in body and "reply cut at max_tokens=256" in body and "parse_failed" in body
    assert "3,200" in body and "0→3" in body and "3→2" in body and "2+1c" in body  # time, documents in → out, LLM calls + cache hits
    assert "9 steps · 3 LLM calls" in body


def test_the_wide_trace_adds_the_token_columns_and_still_fits_120():
    result = hand_built()
    text = rendered(120, trace_table(result.trace, wide=True))
    assert_fits(text, 120)
    header = next(line for line in text.splitlines() if line.strip().startswith("step"))
    assert re.search(r"prompt\s+reused\s+output", header)
    row = next(line for line in text.splitlines() if line.strip().startswith("self_correction"))
    assert re.search(r"1812\s+1640\s+41", row)
    assert "reused" not in rendered(120, trace_table(result.trace))


@pytest.mark.parametrize("width", WIDTHS)
def test_each_part_is_answered_once_with_its_confidence(width):
    result = hand_built()
    text = rendered(width, answer_block(result), facts_line(result), sources_block(result))
    assert_fits(text, width)
    body = flat(text)
    for part in PARTS:
        assert body.count(flat(part["answer"])) == 1, (part["answer"], text)  # the merged answer is not printed again
        assert body.count(part["question"]) == 1
        assert f"{part['symbol']} {part['confidence']:.2f}" in body
    assert "2 parts" in body
    assert "◐ 0.50 chance the answer is right" in body and "21.20 s" in body and "3 LLM calls" in body
    assert "[1]" in body and "section Early life" in body and "0.91" in body


def test_a_single_answer_prints_once_and_a_decline_says_why():
    single = AgenticResult(question="Where was Tesla born?", answer="Smiljan [1]", sources=[], confidence=0.73, symbol="●", seconds=1.5)
    text = rendered(80, answer_block(single), facts_line(single, first_token_s=0.42))
    assert flat(text).count("Smiljan [1]") == 1 and "● 0.73 chance the answer is right" in text and "first token 0.42 s" in text
    declined = AgenticResult(question="q", answer="The documents don't say.", sources=[], confidence=0.1, symbol="○", declined=True, p_lacks_answer=0.9)
    assert "declined (sources lack the answer: 90% sure)" in rendered(80, facts_line(declined))


def test_control_characters_in_answers_and_step_names_are_shown_not_obeyed():
    result = AgenticResult(question="q", answer="Smiljan\x1b[2J [1]", sources=[], confidence=0.7, symbol="●",
                           trace=Trace(steps=[Step(name="custom\x07step", decision={"note": "bell\x07"})]))
    text = rendered(80, answer_block(result), trace_table(result.trace))
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[2J" in text and "custom\\x07step" in text


# -- a real decomposed run ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decomposed(tmp_path_factory, fast_config) -> AgenticResult:
    from ragkit.index.indexer import build_index
    from ragkit.index.store import RagIndex
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    folder = tmp_path_factory.mktemp("layout_docs")
    (folder / "tesla.md").write_text("# Nikola Tesla\n\nNikola Tesla was born in Smiljan in 1856. He studied engineering at the Polytechnic in Graz.\n")
    (folder / "rhine.md").write_text("# Rhine\n\nThe Rhine flows from the Swiss Alps to the North Sea.\n")
    path = tmp_path_factory.mktemp("layout_index") / "index"
    build_index(folder, path, fast_config, progress=False)

    def respond(messages):  # each part its own answer (the part's question closes the prompt)
        if "born" in messages[-1].text.split("Question")[-1]:
            return "Nikola Tesla was born in Smiljan in 1856 [1]."
        return "He studied engineering at the Polytechnic in Graz [1]."

    features = Features(decompose=True, decomposer_backend="rules", answer_mode="free", follow_ups=True, follow_up_backend="rules", clarify=True)
    rag = AgenticRAG(features, config=fast_config, index=RagIndex.load(path), chat_generator=MockChatGenerator(response_fn=respond))
    return rag.ask("Where was Nikola Tesla born, and what did he study?")


@pytest.mark.integration
@pytest.mark.parametrize("width", WIDTHS)
def test_a_real_decomposed_run_lays_out_within_the_width(decomposed, width):
    parts = decomposed.details["parts"]
    assert len(parts) == 2 and all(p["answer"] for p in parts), parts
    text = rendered(width, answer_block(decomposed), facts_line(decomposed), sources_block(decomposed), trace_table(decomposed.trace),
                    trace_caption(decomposed.trace))
    assert_fits(text, width)
    body = flat(text)
    for part in parts:
        assert body.count(flat(part["answer"])) == 1, (part["answer"], text)
        assert f"{part['symbol']} {part['confidence']:.2f}" in body
    assert f"{decomposed.symbol} {decomposed.confidence:.2f} chance the answer is right" in body
    first_words = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert {"follow_up", "decompose", "per_part", "retrieve", "answer"} <= {s.name for s in decomposed.trace.steps}
    for step in decomposed.trace.steps:
        assert step.name in first_words, (step.name, text)
