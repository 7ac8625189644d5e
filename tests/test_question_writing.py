"""The test-set question writer with the real 0.5B: what its grammar and its banned words let it write."""

from __future__ import annotations

import re

import pytest

from ragkit.eval.questions import write_question

pytestmark = [pytest.mark.integration, pytest.mark.llm]

SENTENCE = "The Amazon rainforest has covered the basin for many millennia, at least 21,000 years, through two ice ages."


@pytest.mark.parametrize("paraphrase", [False, True])
def test_a_number_counted_in_years_is_asked_for_in_years(local_llm, paraphrase):
    # before, "years" was banned with the answer's other words and the 0.5B asked "What number of decades has …?"
    question, why = write_question(local_llm, SENTENCE, "21,000 years", "number", paraphrase=paraphrase)
    assert why is None, why
    assert question.startswith(("How many years", "What number of years")) and question.endswith("?")
    assert "21,000" not in question and "21" not in question.split()
    if paraphrase:  # "rainforest" is banned; with only its first token " rain" banned, the 0.5B wrote "Amazon rainfallforest"
        assert all(word == "forest" or "forest" not in word for word in re.findall(r"[a-z]+", question.lower())), question


def test_a_name_question_never_holds_its_answer(local_llm):
    question, why = write_question(local_llm, SENTENCE, "Amazon", "name", paraphrase=False)
    assert why is None, why
    assert "amazon" not in question.lower() and question.endswith("?")


def test_a_date_is_asked_for_as_a_date(local_llm):
    # "In which year …?" is answered with a year, and a date's round trip failed on it
    question, why = write_question(local_llm, "Super Bowl 50 was played on February 7, 2016, at Levi's Stadium in Santa Clara.",
                                   "February 7, 2016", "time", paraphrase=False)
    assert why is None, why
    assert question.startswith(("When ", "On what date ")) and "2016" not in question and "February" not in question, question


def test_a_question_may_hold_the_sentences_letters_beyond_ascii_and_no_others(local_llm):
    # the 1.5B switched script mid-question ("… in men's and女子's sports?"); the grammar allows ASCII and the sentence's own
    # letters, written as \u escapes: llama.cpp must compile it and decode "ü" under it
    sentence = "In 1206 Temüjin was proclaimed Genghis Khan at a kurultai near the Onon River."
    question, why = write_question(local_llm, sentence, "1206", "time", paraphrase=False)
    assert why is None, why
    assert all(ord(c) < 128 or c in sentence for c in question), question
