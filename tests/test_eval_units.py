"""Evaluation on your own documents, the parts that need no model: test-set files, scores, statistics, strategies."""

from __future__ import annotations

import json
import math
import random
import re
from types import SimpleNamespace

import numpy as np
import pytest

from ragkit.eval.compare import compare, markdown_report, mcnemar_exact, paired_bootstrap, pareto_front
from ragkit.eval.answer_spans import answer_in_most_chunks, answer_spans, counted_unit
from ragkit.eval.generate import is_near_duplicate, join_parts, longest_copied_run, refers_to_its_text
from ragkit.eval.questions import (MAX_WORDS_AFTER_OPENING, BannedWords, answer_form, question_banned_words, question_fault, question_grammar, question_starts,
                                   write_question)
from ragkit.eval.scoring import aggregate, answer_scores, retrieval_scores
from ragkit.eval.testset import EvalItem, load_testset, save_testset, squad_testset


# -- test-set files -------------------------------------------------------------------------------
def test_bad_lines_are_named_and_the_good_ones_kept(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join([
        json.dumps({"question": "Where was Tesla born?", "answers": ["Smiljan"]}),
        "{not json",
        json.dumps({"answers": ["x"]}),
        json.dumps({"question": "What did he study?", "colour": "red"}),
        json.dumps({"question": "Where was Tesla born?", "answers": ["Smiljan"]}),
        json.dumps({"question": "  "}),
        json.dumps({"question": "Who won Super Bowl 50?", "answers": "Denver Broncos", "chunk_id": "c1"}),
    ]) + "\n", encoding="utf-8")
    items, problems = load_testset(path)
    assert [i.question for i in items] == ["Where was Tesla born?", "Who won Super Bowl 50?"]
    assert items[1].answers == ["Denver Broncos"] and items[1].chunks == ["c1"]
    assert [p.split(":")[0] for p in problems] == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert "not JSON" in problems[0] and "no question" in problems[1] and "colour" in problems[2] and "same question" in problems[3]


def test_a_csv_test_set_and_a_round_trip_through_jsonl(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("question,answers,source\nWhere was Tesla born?,Smiljan|Smiljan (Croatia),wikipedia/Nikola_Tesla.md\n,,\n", encoding="utf-8")
    items, problems = load_testset(path)
    assert items[0].answers == ["Smiljan", "Smiljan (Croatia)"] and items[0].source == "wikipedia/Nikola_Tesla.md"
    assert problems == ["line 3: question must be a non-empty string"]
    again, _ = load_testset(save_testset(items, tmp_path / "out.jsonl"))
    assert again == items


def test_unreadable_test_sets_are_clear_errors(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "binary.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    (tmp_path / "columns.csv").write_text("q,a\nx,y\n")
    with pytest.raises(ValueError, match="no usable question"):
        load_testset(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match="not UTF-8"):
        load_testset(tmp_path / "binary.jsonl")
    with pytest.raises(ValueError, match="'question' column"):
        load_testset(tmp_path / "columns.csv")
    with pytest.raises(ValueError, match="cannot read"):
        load_testset(tmp_path / "missing.jsonl")


def test_the_shipped_squad_sets_load_as_items_whose_chunk_is_their_paragraph():
    items = squad_testset("new_wiki", n=20, seed=3)
    assert len(items) == 20 and all(i.kind == "squad" and i.answers and len(i.chunks) == 1 for i in items)
    assert squad_testset("new_wiki", n=20, seed=3) == items  # seeded


# -- generation's rules that need no model ----------------------------------------------------------
def test_answer_spans_are_verbatim_typed_and_skip_a_sentence_opening_capital():
    sentence = "Tesla was born on 10 July 1856 in Smiljan, and moved to New York City in 1884 with 4 letters."
    spans = dict(answer_spans(sentence))
    assert spans["10 July 1856"] == "time" and spans["1884"] == "time" and spans["New York City"] == "name" and spans["Smiljan"] == "name"
    assert "Tesla" not in spans and "4" not in spans  # the opening word, a lone digit
    assert all(span in sentence for span in spans)


@pytest.mark.parametrize("sentence, name", [
    ("In Michigan, the lakes freeze over most winters.", "Michigan"),          # kept answers of the committed generated sets
    ("Although the Mass of Paul VI is said in the local language, Latin is kept.", "Mass of Paul VI"),
    ("Currently Rhine water is clean enough for salmon.", "Rhine"),
    ("He was the older half-brother of Temujin's rival.", "Temujin"),
    ("During the Yuan dynasty the family moved to Korea.", "Yuan"),
])
def test_a_name_span_drops_the_words_opening_its_clause_and_a_possessive(sentence, name):
    names = [span for span, kind in answer_spans(sentence) if kind == "name"]
    assert name in names and all(span in sentence for span in names)
    assert not any(span.split()[0].lower() in {"in", "although", "currently", "during"} or span.endswith("'s") for span in names)


def test_a_name_that_opens_its_sentence_is_kept_whole():
    assert ("New York City", "name") in answer_spans("New York City grew after 1850, and Brooklyn joined it.")
    assert ("Brooklyn", "name") in answer_spans("New York City grew after 1850, and Brooklyn joined it.")


@pytest.mark.parametrize("sentence, whole, not_a_name", [
    # sentences of SQuAD dev and new_wiki; before, the name was cut at its initial ("As Joseph" was a kept answer, then "Joseph")
    ("As Joseph E. Inikori argues, the region's economy grew.", "Joseph E. Inikori", "Joseph"),
    ("Apollo was dedicated to President John F. Kennedy's goal.", "President John F. Kennedy", "President John"),
    ("Economists such as J. A. Hobson identified this justification.", "J. A. Hobson", "A. Hobson"),
    ("The Republican ticket of George W. Bush and Dick Cheney won the state.", "George W. Bush and Dick Cheney", "Bush and Dick Cheney"),
    # a letter ending a sentence the splitter kept whole is no initial: not before an opening word, a numeral's V, a lone one
    ("It has five types labeled A through E. Specifically, the types are A to E.", None, "E. Specifically"),
    ("The LM and Saturn V. Apollo flew in 1969.", "LM and Saturn", "LM and Saturn V. Apollo"),
    ("The game was Super Bowl L. The Broncos won it in Santa Clara.", "Super Bowl", "Super Bowl L. The Broncos"),
    ("Many services for the homeless (Collins, 2009).New York Public Library offers them cards.", "New York Public Library", "York Public Library"),
])
def test_a_name_keeps_its_initials_and_a_letter_ending_a_sentence_is_no_initial(sentence, whole, not_a_name):
    names = [span for span, kind in answer_spans(sentence) if kind == "name"]
    assert (whole is None or whole in names) and not_a_name not in names, names
    assert all(span in sentence for span in names)


def test_a_date_is_one_time_answer_a_month_alone_no_name_and_its_question_asks_for_a_date():
    # SQuAD dev's first paragraph: before, "February 7, 2016" gave the year "2016" and a *name* "February"
    spans = answer_spans("Super Bowl 50 was played on February 7, 2016, at Levi's Stadium in Santa Clara.")
    assert ("February 7, 2016", "time") in spans and not any(span in ("February", "2016", "7") for span, _ in spans)
    spans = answer_spans("The soundtrack was released in November 2010, and the second on January 27 in Cardiff.")
    assert {("November 2010", "time"), ("January 27", "time")} <= set(spans) and ("November", "name") not in spans
    assert not any(kind == "name" for _, kind in answer_spans("Rainfall peaks between August and September in the south."))
    assert ("March 5", "time") in answer_spans("On March 5, the team flew to Denver for the final game.")  # a comma, no year
    assert answer_spans("Tesla was born on 10 July 1856 in Smiljan.")[0] == ("10 July 1856", "time")  # the day was a number "10"
    assert answer_form("time", "10 July 1856") == "date"
    assert answer_form("time", "February 7, 2016") == "date" and answer_form("time", "January 27") == "date"
    assert answer_form("time", "November 2010") == "month" and answer_form("time", "1856") is None
    assert question_grammar("time", "date").startswith('root ::= ("When" | "On what date")')
    assert question_starts("time", "month") == ["When", "In which month"] and question_starts("time") == ["When", "In what year", "In which year"]
    assert answer_form("number", "21,000 years") == "years" and answer_form("name", "May Day") is None


def test_copy_runs_duplicates_and_the_question_grammar():
    assert longest_copied_run("Where was the famous inventor Tesla born?", "The famous inventor Tesla was born in Smiljan.") == 3  # articles do not count
    assert is_near_duplicate("Where was Tesla born?", ["Where was Tesla born ?"]) and not is_near_duplicate("What did Tesla study?", ["Where was Tesla born?"])
    grammar = question_grammar("time")
    assert grammar.startswith('root ::= ("When" | "In what year" | "In which year")') and '"?"' in grammar


def test_a_number_counted_in_a_unit_is_asked_for_in_that_unit_and_no_opening_word_is_banned():
    assert counted_unit("21,000 years") == "years" and counted_unit("3.45 percent") == "percent"
    assert counted_unit("21 million") is None and counted_unit("1884") is None and counted_unit("Seven Years") is None
    assert question_grammar("number", "years").startswith('root ::= ("How many years" | "What number of years")')
    assert question_grammar("number", "percent").startswith('root ::= ("What percentage" | "What percent")')
    # "years" is the answer's word and "many" the sentence's: banned, no opening the grammar allows could be written
    sentence = "The rainforest has covered the basin for many millennia, at least 21,000 years."
    banned = question_banned_words(sentence, "21,000 years", True, question_starts("number", "years"))
    assert "years" not in banned and "many" not in banned and {"21", "000", "rainforest", "basin", "millennia"} <= set(banned)
    assert "years" in question_banned_words(sentence, "21,000 years", False, question_starts("number"))  # a bare number's opening


# Questions the 0.5B wrote, kept in the committed generated sets before these checks (bench/results/eval_agreement, calibration_sets)
CUT_OFF = ["What is the name of the largest flood in the Netherlands that led to the creation of the protection dam and the inclusion of "
           "the Dutch High Sea Dam in.NieuweMaas?",
           "Which of the following is the name of the country that was involved in the wholesale massacres of the civilian populations in the "
           "region of thekkwarezmian?"]
LOOPING = ["What number of years does it take for Xbox One to be the first to be the first to be the first?",
           "What was the name of the Canadian operation that was replaced by the Canadian operation of the Canadian Federal Reserve?",
           "What is the name of the ancient Pampean orogeny in the Andean orogeny in the Tiertiary?",
           "What was the name of the operating system released on February17,2,2,2,2,2,2,2?"]  # the 0.5B on "NT 4.0": one token looping


def test_a_question_cut_off_at_the_grammars_word_limit_or_looping_is_a_counted_reason_not_an_item():
    assert "{2,%d}" % (MAX_WORDS_AFTER_OPENING - 1) in question_grammar("name")  # the limit the check counts to
    for question in CUT_OFF:
        assert question_fault(question, question_starts("name")) == "too_long", question
    for question in LOOPING:
        assert question_fault(question, question_starts("name") + question_starts("number")) == "repeats_itself", question
    for question in ["What is the name of the first Drum and Bass station in London that has been used to develop Drum and Bass?",  # a name twice
                     "What number of km is the Staten Island Ferry's run between Manhattan and Staten Island?",
                     "Which of the following is the name of the country that was involved in the wholesale massacres of civilians?",
                     "How many of the 1, 2, 2, 3 sequence's terms are even?"]:  # a number three times running is no loop
        assert question_fault(question, question_starts("name") + question_starts("number", "km")) is None, question
    # through the writer, as generate_testset counts it (a mock LLM: no grammar to stop it, the check still does)
    from haystack.components.generators.chat import MockChatGenerator

    sentence = "Around 1150, large floods led to the construction of dikes, including Schielands Hoge Zeedijk along the Nieuwe Maas."
    for reply, why in [(CUT_OFF[0], "too_long"), (LOOPING[1], "repeats_itself"), ("Which dike was built after the floods of 1150?", None)]:
        question, reason = write_question(MockChatGenerator(responses=[reply]), sentence, "Schielands Hoge Zeedijk", "name", paraphrase=False)
        assert reason == why and (question is None) == (why is not None), (reply, reason)


def test_the_passage_writer_reads_the_whole_chunk_and_the_sentence_writer_its_sentence_alone():
    from haystack.components.generators.chat import MockChatGenerator

    from ragkit.eval.agreement import writer_label, writer_size
    from ragkit.eval.questions import question_messages

    passage = "Nikola Tesla was a Serbian-American inventor. He was born in 1856 in Smiljan."
    sentence = "He was born in 1856 in Smiljan."
    alone = question_messages(sentence, "1856", paraphrase=False)[1].text
    # the sentence writer's prompt is the one every committed set was written with, byte for byte (the LLM cache's key)
    assert alone == ("Sentence: He was born in 1856 in Smiljan.\nAnswer: 1856\nWrite one question that this sentence answers with exactly "
                     "this answer. The question must not contain the answer.")
    reading = question_messages(sentence, "1856", paraphrase=True, passage=passage)[1].text
    assert reading.startswith(f"Passage: {passage}\n") and f"Sentence of the passage: {sentence}" in reading and "(synonyms)" in reading
    # the passage's letters beyond ASCII are the question's to use: "Temüjin" is named in the passage, not the sentence
    named = "In 1206 Temüjin was proclaimed Genghis Khan. He ruled from 1206."
    question, why = write_question(MockChatGenerator(responses=["When did Temüjin begin to rule?"]), "He ruled from 1206.", "1206", "time",
                                   paraphrase=False, passage=named)
    assert (question, why) == ("When did Temüjin begin to rule?", None)
    assert write_question(MockChatGenerator(responses=["When did Temüjin begin to rule?"]), "He ruled from 1206.", "1206", "time",
                          paraphrase=False) == (None, "foreign_characters")
    assert writer_label("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b" and writer_size("qwen2.5-coder-1.5b") == "1.5B"
    assert writer_size(writer_label("qwen2.5-coder-1.5b", "passage")) == "1.5B reading whole passages"


def test_generation_takes_only_the_writer_contexts_it_has():
    from ragkit.eval.generate import generate_testset

    with pytest.raises(ValueError, match="question_context"):
        generate_testset(SimpleNamespace(chunks={}), chat_generator=None, n=2, question_context="document")


def test_a_question_holds_no_letter_of_a_script_its_sentence_does_not_use():
    # the 1.5B wrote "Which university has won the most NCAA championships in men's and女子's sports?" (new_wiki, kept)
    from haystack.components.generators.chat import MockChatGenerator

    sentence = "UConn has won the most NCAA championships in men's and women's basketball since 1995."
    plain = question_grammar("name", None, sentence)
    assert plain.endswith("word ::= [!->@-~]{1,24}") and "\\u" not in plain  # printable ASCII but " " and "?"
    assert "\\u00fc" in question_grammar("name", None, "Temüjin fought Toghrul.")  # the sentence's own letters stay writable
    switched = "Which university has won the most NCAA championships in men's and女子's sports?"
    assert question_fault(switched, question_starts("name"), sentence) == "foreign_characters"
    assert question_fault(switched, question_starts("name")) is None  # no sentence given: nothing to compare with
    assert question_fault("Who did Temüjin fight in 1203?", question_starts("name"), "In 1203 Temüjin fought Toghrul.") is None
    question, why = write_question(MockChatGenerator(responses=[switched]), sentence, "UConn", "name", paraphrase=False)
    assert (question, why) == (None, "foreign_characters")


class _Tokenizer:
    """Qwen2.5's pieces for three words: " rainforest" is " rain" + "forest", " Khwarezmian" " Kh" + "ware" + "zm" + "ian"."""
    PIECES = {"rainforest": ["rain", "forest"], "Rainforest": ["R", "ain", "forest"], "Khwarezmian": ["Kh", "ware", "zm", "ian"],
              "khwarezmian": ["kh", "ware", "zm", "ian"], "Canadian": ["Canad", "ian"], "canadian": ["canad", "ian"]}

    def __init__(self):
        pieces = {p for word in self.PIECES.values() for p in word} | {" " + word[0] for word in self.PIECES.values()}
        self.ids = {piece: i for i, piece in enumerate(sorted(pieces))}

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        word = text.decode().strip()
        pieces = list(self.PIECES[word])
        if text.startswith(b" "):
            pieces[0] = " " + pieces[0]
        return [self.ids[p] for p in pieces]

    def detokenize(self, ids: list[int]) -> bytes:
        names = {i: p for p, i in self.ids.items()}
        return "".join(names[i] for i in ids).encode()


def test_a_banned_word_cannot_be_finished_after_another_start():
    # banned as " rain" alone, "rainforest" came out " rainfall" + "forest" = "rainfallforest" (bench/question_faults.py)
    tokenizer = _Tokenizer()
    mask = BannedWords.for_model(tokenizer, ["rainforest", "Khwarezmian", "Canadian"])
    banned = {tokenizer.detokenize([int(i)]).decode() for i in mask.token_ids}
    assert {" rain", "rain", " R", "R", "forest", " Kh", "Kh", "ware", " Canad", "Canad", " canad", "canad"} <= banned
    assert not banned & {"ian", "ain", "zm"}  # a suffix-like piece, or one only after a non-space start, stays allowed
    scores = mask(np.zeros(1), np.zeros(len(tokenizer.ids)))
    assert all(np.isneginf(scores[i]) for i in mask.token_ids) and np.isfinite(scores).sum() == len(tokenizer.ids) - len(mask.token_ids)
    assert mask.cache_key() != {"banned_words": mask.words}  # a cached reply written under the old mask is not served


def test_an_answer_in_most_chunks_names_no_chunk():
    from haystack import Document

    docs = [Document(content=f"Install Python {v} with pyenv install {v}.") for v in ("3.10", "3.11", "3.12")]
    docs += [Document(content="Homebrew installs the build dependencies on macOS."), Document(content="Python 2.7 is gone.")]
    too_common = answer_in_most_chunks({str(i): doc for i, doc in enumerate(docs)})  # index.chunks: {id: Document}
    assert too_common("Python") and too_common("pyenv")  # in 4 and 3 of 5 chunks
    assert not too_common("Homebrew") and not too_common("3.12") and not too_common("")
    assert not answer_in_most_chunks({"a": docs[0], "b": docs[1]})("Python")  # two chunks: too few to call anything common


def test_a_question_that_points_at_its_source_text_is_not_standalone():
    # written by the embedded models from SQuAD paragraphs and from pyenv's README
    for question in ["What is the name of the city in the sentence?", "In what year did the largest of these earthquakes occur?",
                     "Which type of computer is mentioned in the given sentence?", "What is described in this paragraph?",
                     "Which programming language is not included in any of the specified versions?", "Which architect listed above won?",
                     # from Node.js's API pages and the AWS CLI's docs (both kept, then joined into two-part items)
                     "What is the name of the Python interpreter used in the given example?", "What operating system does the following error codes apply to?",
                     # a "his" whose owner only the source sentence names: sample_docs ("His father was Shi Bingzhi"), a committed new_wiki item
                     "Who was the name of his dad?", "What was the name of the company that was involved in the first and second years of his life?",
                     # "this" before a word, kept by the 1.5B in new_wiki's set and by the 0.5B in SQuAD dev's
                     "How many pages does this publication have?", "Who argued that this growing social complexity led to a second Urban Revolution?",
                     "In what year did the success of this exhibition lead to the planning of the Festival of Britain?"]:
        assert refers_to_its_text(question), question
    for question in ["The passage of what act gave Victoria its own government?", "Who wrote the text of the Declaration?",
                     "Where was Tesla born?", "What sentence did the court hand down in 1921?", "Who won the title the following year?",
                     "Which table did the treaty's signatories sit at?", "Who did Genghis Khan want to eliminate from his rule?",
                     "What do most platyctenida have on their aboral surface?", "When did Tesla say he had a vision of the motor?",
                     "Who directed This Is England?"]:
        assert not refers_to_its_text(question), question


def test_a_table_of_contents_line_gives_no_answer_its_number_is_a_page():
    # libtasn1's PDF manual: "What number of errors does ASN.1_strerror return?" -> "22", its page
    from haystack import Document

    from ragkit.eval.generate import TOC_ENTRY, _candidate

    toc = Document(content="5.12 asn1_strerror . . . . . . . . . . . . . . . . . . . . . . 22\nasn1_write_value . . . . . . . . . . . . . . . 11\n"
                           "Index of functions and data types ........................ 31")

    def never(*args, **kwargs):
        pytest.fail("the LLM was asked about a table of contents")

    llm = SimpleNamespace(run=never)
    assert _candidate(toc, "single", llm, never, random.Random(0), [], False, lambda answer: False) == (None, "no_answer_span")
    for sentence in ["Python 3.10.4 was released in March 2022 . . . and 3.11 followed.", "It returns 22 on success."]:
        assert not TOC_ENTRY.search(sentence), sentence


@pytest.mark.parametrize("sentence, not_a_name, name", [
    # sample_docs' Amazon page: "Mya" was a paraphrase item's answer; SQuAD dev and new_wiki sentences
    ("From 66–34 Mya, the rainforest extended as far south as 45°.", "Mya", None),
    ("The 802.11n standard runs at 5 GHz in most offices.", "GHz", None),
    ("In 1746, some 3,000 British troops landed near the port.", "British", None),
    ("In 1882 Tesla began work at the Continental Edison Company.", None, "Tesla"),  # after a year: a name
    ("On May 21, 2013, NFL owners voted in Boston.", None, "NFL"),  # after a date's comma
])
def test_the_word_after_a_count_is_what_it_counts_not_a_name(sentence, not_a_name, name):
    names = [span for span, kind in answer_spans(sentence) if kind == "name"]
    assert not_a_name not in names and (name is None or name in names), names


@pytest.mark.parametrize("sentence, whole, not_answers", [
    # SQuAD dev's first paragraph and its kin: a name's own number was cut off ("Super Bowl" and "50", asked apart)
    ("Super Bowl 50 was an American football game to determine the champion.", "Super Bowl 50", ["Super Bowl", "50"]),
    ("The crew of Apollo 11, the first to land, returned safely.", "Apollo 11", ["Apollo", "11"]),
    ("Microsoft later released Windows 8.1.", "Windows 8.1", ["Windows", "8.1"]),
    ("Bach wrote the cantata BWV 62 (Nun komm) for the first Sunday in Advent.", "BWV 62", ["BWV", "62"]),
    ("The program replaced Windows NT 3.1 Advanced Server in most offices.", "Windows NT 3.1", ["Windows NT", "3.1"]),
    # a count, a score, a ratio, an opening word or a possessive keeps the number apart
    ("The team had won Super Bowl XL 10 seasons earlier in Detroit.", None, ["Super Bowl XL 10"]),
    ("Denver beat the Carolina Panthers 24–10 to earn the title.", None, ["Carolina Panthers 24"]),
    ("British settlers outnumbered the French 20 to 1 in the colonies.", None, ["French 20"]),
    ("In 999, according to Amatus of Montecassino, pilgrims came to Salerno.", None, ["999"]),  # no *name* "999"
    ("The saxophone necks of Yanagisawa's 902 model are made of bronze.", None, ["Yanagisawa's 902"]),
])
def test_a_name_keeps_its_own_number(sentence, whole, not_answers):
    spans = answer_spans(sentence)
    names = [span for span, kind in spans if kind == "name"]
    assert (whole is None or whole in names) and not set(not_answers) & set(names), spans
    if whole is not None:  # and the number is not asked for on its own
        assert not set(not_answers) & {span for span, _ in spans}, spans


def test_a_name_may_have_letters_beyond_ascii():
    # seen in `ragkit testset generate sample_docs`: "Before Genghis Khan died, he assigned Ögedei Khan as his successor"
    # gave the answer "Khan", asked "Who was the first person to succeed King Mongol …?"; 618 of 19,104 sentences change
    names = [span for span, kind in answer_spans("Before Genghis Khan died, he assigned Ögedei Khan as his successor.") if kind == "name"]
    assert "Ögedei Khan" in names and "Khan" not in names, names
    names = [span for span, kind in answer_spans("After the death of Möngke Khan, Kublai fought Ariq Böke near Kraków, as São Paulo says.") if kind == "name"]
    assert {"Möngke Khan", "Ariq Böke", "Kraków", "São Paulo"} <= set(names), names
    # a one-word name still counts only mid-sentence: not after an upper-case letter, ASCII or not
    assert "Zürich" not in [span for span, _ in answer_spans("The meeting of the ÉCOLE Zürich group was held in spring.")]


def test_a_name_keeps_its_roman_numeral():
    # the name was cut before a one-letter numeral: "Charles" of "Charles V", "World War" of "World War I" (76 sentences)
    spans = answer_spans("King Francis I of France met Pope Leo X in Rome, then Charles V, Holy Roman Emperor, in 1520.")
    assert {"King Francis I of France", "Pope Leo X", "Charles V"} <= {span for span, kind in spans if kind == "name"}, spans
    assert ("Saturn V", "name") in answer_spans("The Saturn V launch vehicle was tested at the Cape in 1967.")
    assert ("NCAA Division I Ivy League", "name") in answer_spans("Harvard plays in the NCAA Division I Ivy League conference.")
    # the pronoun "I" is no numeral, nor a letter a full stop follows (a sentence's end the splitter missed)
    assert [span for span, _ in answer_spans("In Paris I met the painter who lived there.")] == ["Paris"]
    assert ("LM and Saturn", "name") in answer_spans("The LM and Saturn V. Apollo flew in 1969.")


def test_a_name_longer_than_four_words_is_no_answer_and_one_with_del_or_y_is_whole():
    # kept answers of the 1.5B's, labelled invalid (bench/data/writer_item_labels.jsonl): a name cut at four words
    # ("Beth Israel Deaconess Medical" of "… Medical Center", "Oxford University Ice Hockey" of "… Club") and one cut
    # before "del" ("Ojos" of "Ojos del Salado"); 485 of 18,450 sentences of SQuAD dev, new_wiki and sample_docs change
    names = [span for span, kind in answer_spans("In 1885 the Oxford University Ice Hockey Club was formed to play Cambridge.") if kind == "name"]
    assert names == ["Cambridge"], names  # neither the cut name nor its tail ("Club")
    names = [span for span, kind in answer_spans("A study by Harvard Medical School, Beth Israel Deaconess Medical Center, and others.") if kind == "name"]
    assert names == ["Harvard Medical School"], names
    assert [span for span, _ in answer_spans("The appeal was heard by Lord Chief Justice Peter Taylor.")] == []
    names = [span for span, kind in answer_spans("The highest is Ojos del Salado on the Chile-Argentina border, and Paz y Miño met Luca della Robbia.")]
    assert {"Ojos del Salado", "Paz y Miño", "Luca della Robbia"} <= set(names) and "Ojos" not in names, names
    assert ("Genghis Khan", "name") in answer_spans("He met Genghis Khan in the spring of 1206.")  # four words or fewer: as before


def test_an_era_year_is_a_time_answer():
    # "AD 14" was a number "14" ("What number …?"), "8,000 BC" the number "8,000"; asked "When" / "In what year" now
    assert ("AD 14", "time") in answer_spans("Augustus died in AD 14 at Nola in Campania.")
    assert ("753 BC", "time") in answer_spans("Rome was founded in 753 BC by Romulus, the story says.")
    assert ("10,000 BC", "time") in answer_spans("Farming began in the Levant from around 10,000 BC.")
    assert ("330 CE", "time") in answer_spans("The city was refounded as Constantinople in 330 CE by Constantine.")
    assert not any(span.startswith("AD 0") for span, _ in answer_spans("Geoglyphs were found dating between AD 0–1250 in Acre."))
    assert answer_form("time", "753 BC") is None and question_starts("time") == ["When", "In what year", "In which year"]


def test_a_page_number_is_no_answer():
    # sample_docs' functools PDF: each page's header "… — page 11 of 12" ran into its first sentence, and the 0.5B
    # asked "What number of the document's pages is the Python function `reduce` located on?" -> "11"
    header = "Python 3.11 documentation: functools — page 11 of 12\x0cpartial objects are like function objects, see p. 45 and pages 12-14."
    assert [span for span, kind in answer_spans(header) if kind == "number"] == ["3.11"]
    assert ("350", "number") in answer_spans("The book has 350 pages and sold 20,000 copies in 1999.")  # a count of pages is a number


def test_an_answer_a_kept_item_has_is_not_asked_for_again():
    # libtasn1's manual: 4 of 9 items were answered "DER", most of them vague ("the structure used to encode data")
    from haystack import Document

    from ragkit.eval.generate import _candidate

    def never(*args, **kwargs):
        pytest.fail("the LLM was asked for an answer a kept item already has")

    chunk = Document(content="The function fills the structure with the values of a DER encoding string.")
    kept = [EvalItem("What encoding does asn1_der_coding produce?", ["DER"], kind="single", chunks=["c0"])]
    assert _candidate(chunk, "single", SimpleNamespace(run=never), never, random.Random(0), kept, False, lambda answer: False) == (None, "answer_already_asked")


def test_the_notebooks_generation_table_gives_the_reasons_in_words_most_first():
    from ragkit.ui.eval_view import generation_html

    summary = {"accepted": 3, "candidates": 9, "questions_tried": 9, "requested": 3, "llm_calls": 12, "cache_hits": 0, "seconds": 40.0,
               "by_kind": {"single": {"in_set": 3, "candidates": 9, "accepted": 3, "acceptance": 0.333,
                                      "rejected": {"no_answer_span": 1, "refers_to_its_text": 3, "answer_in_most_chunks": 2}}}}
    assert "refers to its text 3, answer in most chunks 2, no answer span 1" in generation_html(summary)


def test_a_multi_item_joins_two_questions_about_different_chunks():
    a = EvalItem("Where was Tesla born?", ["Smiljan"], kind="single", chunks=["c1"])
    b = EvalItem("Who won Super Bowl 50?", ["Denver Broncos"], kind="single", chunks=["c2"])
    joined = join_parts(a, b)
    assert joined.question == "Where was Tesla born, and who won Super Bowl 50?" and joined.chunks == ["c1", "c2"]
    assert [p["answers"] for p in joined.parts] == [["Smiljan"], ["Denver Broncos"]]


# -- scores, never NaN -----------------------------------------------------------------------------
def test_a_labelled_items_file_is_found_by_its_path_or_a_name_one_file_ends_in():
    from ragkit.eval.scoring import gold_files, source_retrieval_scores

    chunk_files = {"c1": "docs/a.md", "c2": "docs/a.md", "c3": "docs/b.md", "c4": "old/b.md", "c5": "c.md"}
    assert gold_files("docs/a.md", chunk_files) == {"docs/a.md"} and gold_files("a.md", chunk_files) == {"docs/a.md"}
    assert gold_files("docs\\a.md", chunk_files) == {"docs/a.md"}  # a Windows path in the user's CSV
    assert gold_files("b.md", chunk_files) == set() and gold_files("z.md", chunk_files) == set()  # two files end in b.md: ambiguous
    # the file ranks among the distinct files the sources came from: c1, c2 (a.md), c5, c3 -> b.md is the third file
    scores = source_retrieval_scores(["c1", "c2", "c5", "c3"], {"docs/b.md"}, chunk_files, k=3)
    assert scores == pytest.approx({"recall@k": 0.0, "mrr": 1 / 3, "ndcg": 1 / math.log2(4)})
    assert source_retrieval_scores(["c1", "c2", "c5", "c3"], {"docs/a.md"}, chunk_files, k=1) == pytest.approx({"recall@k": 1.0, "mrr": 1.0, "ndcg": 1.0})


def test_retrieval_scores_against_the_source_chunks():
    assert retrieval_scores(["a", "b", "c"], ["b"], k=2) == pytest.approx({"recall@k": 1.0, "mrr": 0.5, "ndcg": 1 / math.log2(3)})
    assert retrieval_scores(["a", "b", "c"], ["c"], k=2)["recall@k"] == 0.0
    assert retrieval_scores(["a", "b"], ["a", "z"], k=2)["recall@k"] == 0.5  # one of two chunks of a multi item


def test_answer_scores_per_kind():
    single = EvalItem("Where was Tesla born?", ["Smiljan"], kind="single")
    assert answer_scores(single, "Smiljan [1]", False) == {"em": 1.0, "f1": 1.0, "correct": 1.0, "false_decline": 0.0}
    assert answer_scores(single, "The documents don't say.", True)["false_decline"] == 1.0
    nowhere = EvalItem("Where was Ada Lovelace born?", kind="unanswerable")
    assert answer_scores(nowhere, "The documents don't say.", True) == {"correct": 1.0, "correct_decline": 1.0}
    assert answer_scores(nowhere, "London [1]", False)["correct"] == 0.0
    multi = join_parts(EvalItem("Where was Tesla born?", ["Smiljan"], kind="single"), EvalItem("Who won?", ["Denver Broncos"], kind="single"))
    assert answer_scores(multi, "Where was Tesla born? Smiljan [1]\nWho won? Carolina [2]", False)["f1"] == pytest.approx(0.5)


def test_a_gold_answer_held_inside_a_longer_reply_as_whole_words():
    from ragkit.eval.metrics import f1_score, holds_gold_answer

    reply = "King Sigismund III Vasa moved his court from Kraków to Warsaw in 1596. [1]"
    assert holds_gold_answer(reply, ["King Sigismund III Vasa"]) and f1_score(reply, ["King Sigismund III Vasa"]) < 0.5
    assert holds_gold_answer("The Denver Broncos won.", ["Broncos"])
    assert not holds_gold_answer("10 had a talent for making tools", ["1"])  # whole words, not characters
    assert not holds_gold_answer("Tolui", ["Ögedei Khan"]) and not holds_gold_answer("anything", ["", "the"])  # an empty gold holds nothing


def test_aggregates_say_over_how_many_rows_and_never_hold_nan():
    rows = [
        {"id": "1", "kind": "single", "f1": 1.0, "correct": 1.0, "faithfulness": 0.9, "confidence": 0.8, "seconds": 1.0, "failures": []},
        {"id": "2", "kind": "single", "f1": 0.0, "correct": 0.0, "confidence": 0.3, "seconds": 2.0,
         "failures": [{"metric": "faithfulness", "reason": "judge: parse_failed"}]},
        {"id": "3", "kind": "unanswerable", "correct": 1.0, "correct_decline": 1.0, "seconds": 3.0, "failures": [{"metric": "answer", "reason": "the pipeline failed"}]},
    ]
    agg = aggregate(rows)
    assert agg["f1"] == {"mean": 0.5, "n": 2, "failed": 1} and agg["faithfulness"] == {"mean": 0.9, "n": 1, "failed": 2}
    assert agg["latency_s"]["p50"] == 2.0 and agg["ece"]["n"] == 2 and set(agg["by_kind"]) == {"single", "unanswerable"}
    def floats(value):
        if isinstance(value, dict):
            return [f for v in value.values() for f in floats(v)]
        return [value] if isinstance(value, float) else []

    assert floats(agg) and not any(math.isnan(f) for f in floats(agg))


# -- statistics -------------------------------------------------------------------------------------
def test_mcnemar_exact_and_the_paired_bootstrap():
    assert mcnemar_exact([False] * 10, [True] * 10) == {"a_only": 0, "b_only": 10, "p_value": pytest.approx(2 / 1024)}
    assert mcnemar_exact([True, False], [False, True])["p_value"] == 1.0
    diff, low, high = paired_bootstrap([0.0] * 30, [0.0] * 15 + [1.0] * 15)
    assert diff == 0.5 and 0.3 < low < 0.5 < high < 0.7
    same = paired_bootstrap([1.0, 0.0] * 20, [1.0, 0.0] * 20)
    assert same == (0.0, 0.0, 0.0)


def _run(name, correct, seconds):
    rows = [{"id": str(i), "kind": "single", "question": f"q{i}", "answer": "a", "gold": ["a"], "correct": float(c), "f1": float(c), "seconds": seconds,
             "failures": []} for i, c in enumerate(correct)]
    meta = {"strategy": {"name": name, "version": "builtin"}, "testset": {"path": "set.jsonl", "sha256": "0" * 64}, "model": "m"}
    return {"run": meta, "rows": rows, "aggregates": aggregate(rows)}


def test_a_comparison_says_no_significant_difference_in_words_and_lists_the_flips():
    a = _run("plain", [1, 0, 1, 0, 1, 0, 1, 0, 1, 0], 1.0)
    b = _run("grading", [1, 1, 1, 0, 1, 0, 1, 0, 1, 0], 2.0)
    result = compare(a, b)
    correct = result["measures"]["correct"]
    assert correct["difference"] == 0.1 and correct["verdict"] == "no significant difference" and correct["mcnemar"]["b_only"] == 1
    assert [f["id"] for f in result["flipped"]] == ["1"]
    better = compare(_run("plain", [1, 0] * 10, 1.0), _run("all", [1] * 20, 3.0))["measures"]["correct"]
    assert better["verdict"] == "B better" and better["mcnemar"] == {"a_only": 0, "b_only": 10, "p_value": 0.002}
    assert pareto_front([a, b, _run("all", [1] * 10, 3.0), _run("slow", [1, 0] * 5, 4.0)]) == ["plain", "grading", "all"]  # slow: beaten on both
    report = markdown_report([a, b])
    assert "| correct | 10 | 0.500 | 0.600 | +0.100 |" in report and "no significant difference" in report and "Pareto front" in report


def test_llm_calls_are_compared_by_what_a_strategy_asks_not_by_what_the_cache_held():
    """A run whose replies an earlier run left in the LLM cache makes no call; it asked as many (seen: `ragkit report`
    on the agreement runs called rerank "better" on LLM calls, 0.26 against 0.94 a question, the cache's doing)."""
    from ragkit.eval.compare import aggregate_rows

    cold, warm = _run("plain", [1, 0] * 10, 1.0), _run("rerank", [1, 0] * 10, 1.0)
    for row in cold["rows"]:
        row.update(llm_calls=1, cache_hits=0)
    for i, row in enumerate(warm["rows"]):
        row.update(llm_calls=int(i < 5), cache_hits=int(i >= 5))  # 15 of its 20 replies read from the cache
    cold["aggregates"], warm["aggregates"] = aggregate(cold["rows"]), aggregate(warm["rows"])
    calls = compare(cold, warm)["measures"]["llm_calls"]
    assert (calls["a"], calls["b"], calls["difference"], calls["verdict"]) == (1.0, 1.0, 0.0, "no significant difference")
    rows = {r["measure"]: r for r in aggregate_rows([cold, warm])}
    assert (rows["LLM calls/q"]["plain"], rows["LLM calls/q"]["rerank"]) == (1.0, 1.0)
    assert (rows["share from LLM cache"]["plain"], rows["share from LLM cache"]["rerank"]) == (0.0, 0.75)
    assert "| 1.000 | 0.750 |" in markdown_report([cold, warm])
    more = _run("hyde", [1, 0] * 10, 2.0)
    for row in more["rows"]:
        row.update(llm_calls=0, cache_hits=2)  # twice the calls, all from the cache: still twice the calls
    assert compare(cold, more)["measures"]["llm_calls"]["verdict"] == "B worse"
    assert "share from LLM cache" not in {r["measure"] for r in aggregate_rows([cold])}  # no cache, no row


def test_a_judged_measure_is_compared_only_between_runs_judged_alike():
    a, b = _run("plain", [1, 0] * 5, 1.0), _run("grading", [1, 0] * 5, 2.0)
    for run, task, value in ((a, "correct", 0.8), (b, "correct_x_likelihood", 0.3)):
        run["run"]["judge_model"] = f"m ({task} task)"
        for row in run["rows"]:
            row["faithfulness"] = value
    result = compare(a, b)
    assert "faithfulness" not in result["measures"] and result["judges_differ"] == ["m (correct task)", "m (correct_x_likelihood task)"]
    assert "faithfulness and context relevance not compared: judged by m (correct task) and by m (correct_x_likelihood task)." in markdown_report([a, b])
    from ragkit.ui.eval_view import comparison_html
    assert "not compared: judged by m (correct task) and by m (correct_x_likelihood task)" in comparison_html(result, ("plain", "grading"))
    b["run"]["judge_model"] = "m (correct task)"
    assert compare(a, b)["measures"]["faithfulness"]["difference"] == -0.5 and "judges_differ" not in compare(a, b)
    assert "not compared" not in comparison_html(compare(a, b), ("plain", "grading"))


def test_a_report_on_a_generated_set_says_it_favours_the_sentence_reranker_wherever_the_reranker_decides():
    from rich.console import Console

    from ragkit.eval.compare import GENERATED_SET_RERANK_NOTE, generated_set_note
    from ragkit.ui.eval_terminal import report_group
    from ragkit.ui.eval_view import aggregates_html

    plain, rerank = _run("plain", [1, 0] * 10, 1.0), _run("rerank", [1, 1, 0, 0] * 5, 1.2)
    plain["run"]["strategy"]["features"] = {"rerank": False}
    rerank["run"]["strategy"]["features"] = {"rerank": True, "rerank_backend": "bi-encoder"}
    assert generated_set_note([plain, rerank]) == GENERATED_SET_RERANK_NOTE
    assert GENERATED_SET_RERANK_NOTE in markdown_report([plain, rerank])
    console = Console(width=80, record=True, color_system=None)
    console.print(report_group([plain, rerank]))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines) and " ".join(GENERATED_SET_RERANK_NOTE.split()) in " ".join(" ".join(lines).split())
    assert "such sets favour the sentence-level reranker" in aggregates_html([plain, rerank])
    # not said where the reranker does not decide, nor where the questions are the user's own or SQuAD's, nor of a cross-encoder
    assert generated_set_note([plain, _run("grading", [1, 0] * 10, 2.0)]) is None
    assert generated_set_note([rerank, rerank]) is None
    for row in plain["rows"] + rerank["rows"]:
        row["kind"] = "labelled"
    assert generated_set_note([plain, rerank]) is None and GENERATED_SET_RERANK_NOTE not in markdown_report([plain, rerank])
    for row in plain["rows"] + rerank["rows"]:
        row["kind"] = "paraphrase"
    rerank["run"]["strategy"]["features"]["rerank_backend"] = "cross-encoder"
    assert generated_set_note([plain, rerank]) is None


def test_the_generated_set_note_says_what_the_committed_measurements_say():
    import json
    from pathlib import Path

    from ragkit.eval.compare import GENERATED_SET_RERANK_NOTE

    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    agreement = json.loads((results / "eval_agreement.json").read_text())["sets"]
    generated = [(name, e["per_strategy"]["generated"]) for name, e in agreement.items() if name in ("squad_dev", "new_wiki")]
    generated += [(name, other["per_strategy"]["generated"]) for name, e in agreement.items() if name in ("squad_dev", "new_wiki")
                  for by_size in e.get("by_writer", {}).values() for other in by_size.values()]
    above = sum(per["rerank"]["mrr"] > per["plain"]["mrr"] for _, per in generated)
    assert (len(generated), above) == (6, 4) and "four of six generated sets ranked rerank above plain" in GENERATED_SET_RERANK_NOTE
    people = json.loads((results / "rerank_questions.json").read_text())["sets"]
    for name in ("squad_dev", "new_wiki"):
        part = people[name]["agreement_paragraphs"]
        assert part["rerank"]["mrr@5"]["change"] < 0 and part["rerank"]["mrr@5"]["interval95"][1] < 0
        assert f"{part['rerank']['mrr@5']['change']:.3f}" in GENERATED_SET_RERANK_NOTE and f"{part['questions']:,}" in GENERATED_SET_RERANK_NOTE


def test_the_per_kind_reranker_figures_match_the_agreement_runs_they_were_read_from():
    """bench/rerank_by_kind.py reads the runs bench/eval_agreement.py summarised: each set's change over all its items
    must have the sign of that set's committed rerank-minus-plain MRR, and its kinds must add up to its items."""
    import json
    from pathlib import Path

    from ragkit.eval.compare import GENERATED_SET_RERANK_NOTE

    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    by_kind = json.loads((results / "rerank_by_kind.json").read_text())
    agreement = json.loads((results / "eval_agreement.json").read_text())["sets"]
    assert not by_kind["missing"]
    for name, entry in by_kind["sets"].items():
        committed = {"qwen2.5-coder-0.5b 120": agreement[name]["per_strategy"]["generated"],
                     "qwen2.5-coder-1.5b 120": agreement[name]["by_writer"]["qwen2.5-coder-1.5b"]["real240"]["per_strategy"]["generated"],
                     "qwen2.5-coder-1.5b 240": agreement[name]["by_writer"]["qwen2.5-coder-1.5b"]["real240-generated240"]["per_strategy"]["generated"]}
        real = agreement[name]["by_writer"]["qwen2.5-coder-1.5b"]["real240"]["per_strategy"]["real"]
        assert entry["people"]["items"] == 240 and abs(entry["people"]["change"] - (real["rerank"]["mrr"] - real["plain"]["mrr"])) < 1e-3
        for source, per in committed.items():
            figures = entry[source]
            assert (figures["all"]["change"] > 0) == (per["rerank"]["mrr"] > per["plain"]["mrr"]), (name, source)
            assert sum(figures[k]["items"] for k in ("single", "paraphrase", "multi")) == figures["all"]["items"]
            assert figures["paraphrase"]["change"] > 0  # docs/evaluation.md: paraphrases favour the reranker in every set
    assert sum(len(entry) - 1 for entry in by_kind["sets"].values()) == 6 and "all six did on their paraphrase items" in GENERATED_SET_RERANK_NOTE


def _rich_run(name, correct, seconds, judge="m (correct task)"):
    run = _run(name, correct, seconds)
    for i, row in enumerate(run["rows"]):
        row.update({"recall@k": 1.0, "mrr": 1 / (1 + i % 3), "ndcg": 0.5, "em": row["correct"], "semantic_similarity": 0.75,
                    "faithfulness": 0.6, "context_relevance": 0.9, "llm_calls": 2.0})
    run["run"]["judge_model"] = judge
    run["aggregates"] = aggregate(run["rows"])
    return run


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_report_fits_its_width_and_shows_the_markdowns_cells(width):
    from rich.console import Console

    from ragkit.eval.compare import comparison_rows
    from ragkit.ui.eval_terminal import report_group

    runs = [_rich_run("plain", [1, 0] * 10, 1.0), _rich_run("self_correction", [1, 1, 1, 0] * 5, 2.5),
            _rich_run("self_correction", [1] * 20, 3.0, judge="m (correct_x_likelihood task)")]
    console = Console(width=width, record=True, color_system=None)
    console.print(report_group(runs))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines)
    text = "\n".join(lines)
    markdown = markdown_report(runs)
    # every measure's row whole on one line: its name, n, both means, the difference and its interval
    for name, run in (("self_correction (2)", runs[1]), ("self_correction (3)", runs[2])):
        for row in comparison_rows(compare(runs[0], run), ("plain", name)):
            whole = "  ".join([row["measure"], row["n"], row["plain"], row[name], row["difference"], row["95% interval"]])
            assert any(" ".join(line.split()).startswith(" ".join(whole.split())) for line in lines), (whole, text)
            assert f"| {row['measure']} | {row['n']} | {row['plain']} | {row[name]} | {row['difference']} | {row['95% interval']} |" in markdown
    assert "self_correction (2) (B) vs plain (A): 20 questions in both" in " ".join(text.split())
    assert "no significant difference" in " ".join(text.split()) and "McNemar" in text
    assert "not compared: judged by m (correct task) and by m (correct_x_likelihood task)" in " ".join(text.split())
    # the aggregates: a measure a row, each mean with its n, the same strategy twice in two columns
    assert any(line.split()[:1] == ["semantic_similarity"] and line.count("(n=20)") == 3 for line in lines), text
    assert "Pareto front (correct vs p50 latency): plain" in " ".join(text.split())
    # judged means read as probabilities of being right (0.6 "wrong") unless the report says what they are
    assert "they rank answers (higher: more often right) but are not probabilities of being right" in " ".join(text.split())
    assert "they rank answers (higher: more often right) but are not probabilities of being right." in markdown
    unjudged = _run("plain", [1, 0] * 10, 1.0)
    assert "not probabilities" not in markdown_report([unjudged, unjudged])
    from ragkit.ui.eval_view import aggregates_html
    assert "are the judge&#x27;s scores: they rank answers" in aggregates_html(runs) and "not probabilities" not in aggregates_html([unjudged])
    same = comparison_rows(compare(runs[0], runs[0]), ("plain", "plain"))[0]
    assert len(same) == 7 and same["plain (A)"] == same["plain (B)"]  # one strategy twice: both means kept



LONG = "hyde+rerank+grading+routing+decompose+self_correction+retrieval_mode=sparse+top_k=3"


@pytest.mark.parametrize("width", [80, 120])
def test_what_ragkit_eval_and_tune_print_fits_the_terminal(width):
    """`ragkit eval`'s measures a row each; `ragkit tune`'s candidates, best first, with why one was chosen
    (chosen, Pareto front, over the budget), then the reporting half's comparison or why there is none."""
    from rich.console import Console

    from ragkit.ui.eval_terminal import run_summary, tune_group

    def printed(renderable) -> tuple[list[str], str]:
        console = Console(width=width, record=True, color_system=None)
        console.print(renderable)
        lines = console.export_text().splitlines()
        assert all(len(line) <= width for line in lines), "\n".join(lines)
        return lines, " ".join(" ".join(lines).split())

    run = _rich_run("grading", [1, 0, 1, 1] * 5, 2.0)
    lines, text = printed(run_summary(run, "runs/grading"))
    assert lines[0] == "runs/grading: 20 rows" and "not probabilities of being right" in text
    assert any(line.split() == ["correct", "0.750", "(n=20)"] for line in lines), lines
    assert any(line.split() == ["semantic_similarity", "0.750", "(n=20)"] for line in lines), lines

    base, chosen = _rich_run("plain", [1, 0] * 10, 1.0), _rich_run("sparse_only", [1, 1, 1, 0] * 5, 0.8)
    report = {"quality": "correct", "latency_budget_s": 3.0, "halves": {"tuning": 20, "reporting": 20}, "baseline": "plain",
              "search": {"method": "optuna TPE", "space_size": 576, "trials": 24, "seed": 0, "strategies_run": 3},
              "chosen": "sparse_only", "pareto_front": ["sparse_only"], "report_half": compare(base, chosen),
              "tuning_half": {"plain": {"correct": 0.5, "n": 20, "failed": 0, "p50_s": 1.0, "within_budget": True},
                              "grading": {"correct": 0.8, "n": 20, "failed": 1, "p50_s": 9.5, "within_budget": False},
                              "sparse_only": {"correct": 0.75, "n": 20, "failed": 0, "p50_s": 0.8, "within_budget": True},
                              LONG: {"correct": 0.1, "n": 20, "failed": 0, "p50_s": 14.25, "within_budget": False}}}
    lines, text = printed(tune_group(report))
    assert "Tuning half (20 questions): correct and p50 seconds, latency budget 3 s p50" in text
    assert "Searched: 24 trials of Optuna's TPE sampler over 576 combinations, 3 strategies run." in text
    candidates = lines[:lines.index(next(line for line in lines if line.startswith("On the reporting half")))]
    rows = [line.split() for line in candidates if line.split()[:1] in (["plain"], ["grading"], ["sparse_only"], ["hyde"])]
    assert [r[0] for r in rows] == ["grading", "sparse_only", "plain", "hyde"], lines  # best quality first
    # a searched strategy's long name folds between its parts: nothing cut, its numbers and marks on its first line
    first = next(i for i, line in enumerate(candidates) if line.startswith("hyde + "))
    folded = candidates[first:candidates.index("", first) if "" in candidates[first:] else len(candidates)]
    assert "…" not in text and " ".join(re.split(r"\s{2,}", line.strip())[0] for line in folded) == LONG.replace("+", " + "), lines
    assert folded[0].split()[-6:] == ["0.100", "(n=20)", "14.250", "over", "the", "budget"], lines
    assert rows[0][1:5] == ["0.800", "(n=20,", "1", "failed)"] and "over the budget" in " ".join(rows[0])
    assert " ".join(rows[1]) == "sparse_only 0.750 (n=20) 0.800 chosen · Pareto front"
    assert "On the reporting half (20 questions), the figures to believe: sparse_only (B) vs plain (A): 20 questions in both" in text
    assert any(line.split()[:2] == ["correct", "20"] and "[" in line for line in lines), lines
    report.update(chosen="plain", pareto_front=["plain"], report_half=compare(base, base),
                  search={"method": "exhaustive", "space_size": 3, "trials": 3, "seed": 0, "strategies_run": 3})
    _, text = printed(tune_group(report))
    assert "Searched: every one of 3 strategies run." in text
    assert "plain was chosen: it is the baseline, so there is nothing to compare on the reporting half (20 questions)." in text


# -- strategies -------------------------------------------------------------------------------------
def test_strategies_are_named_versioned_and_never_overwritten(tmp_path, monkeypatch):
    from ragkit.eval import strategies

    monkeypatch.setenv("RAGKIT_STRATEGIES", str(tmp_path / "strategies"))
    (tmp_path / "a.yaml").write_text("grading: true\n")
    (tmp_path / "b.yaml").write_text("grading: true\nhyde: true\n")
    assert strategies.add("mine", tmp_path / "a.yaml").label == "mine@1"
    assert strategies.add("mine", tmp_path / "b.yaml").label == "mine@2"
    assert strategies.resolve("mine").features.hyde and not strategies.resolve("mine@1").features.hyde
    assert strategies.resolve("grading").version == "builtin"
    with pytest.raises(ValueError, match="no strategy 'nope'"):
        strategies.resolve("nope")
    with pytest.raises(ValueError, match="built-in"):
        strategies.add("plain", tmp_path / "a.yaml")
    (tmp_path / "bad.yaml").write_text("gradin: true\n")
    with pytest.raises(ValueError):
        strategies.add("typo", tmp_path / "bad.yaml")


def test_the_judges_faithfulness_task_asks_about_the_answer_to_this_question():
    from haystack import Document
    from haystack.components.generators.chat import MockChatGenerator

    from ragkit.eval.judge import FAITHFULNESS_TASKS, LocalJudge
    from ragkit.ui.cli import build_parser
    from scripted_llm import scripted  # tests/scripted_llm.py

    sources = [Document(content="Tesla was born in Smiljan in 1856.")]
    for task, reply, expected in (("answers_question", "yes", 1.0), ("correct", "no", 0.0)):
        llm, seen = scripted(reply)
        judge = LocalJudge(llm, task=task, model_name="m")
        assert judge.faithfulness("Where was Tesla born?", "Smiljan [1]", sources) == (expected, None)
        asked = seen[-1][-1].text.split("Question:")[-1]
        assert "Where was Tesla born?" in asked and "Smiljan" in asked and "[1]" not in asked
        assert judge.label == f"m ({task} task)"  # a run records the task: resuming under another is refused
    value, reason = LocalJudge(MockChatGenerator(responses=["banana"]), task="answers_question").faithfulness("Q?", "A", sources)
    assert value is None and reason.startswith("judge:")  # a reply that does not parse is a counted failure
    with pytest.raises(ValueError, match="faithfulness task"):
        LocalJudge(MockChatGenerator(responses=["yes"]), task="vibes")
    judge_task = next(a for a in build_parser()._subparsers._group_actions[0].choices["eval"]._actions if a.dest == "judge_task")
    assert sorted(judge_task.choices) == sorted(FAITHFULNESS_TASKS)


def test_the_judges_default_task_reads_the_answers_likelihood_only_where_the_model_gives_logits():
    from haystack.components.generators.chat import MockChatGenerator
    from haystack_integrations.components.generators.llama_cpp import LlamaCppChatGenerator

    from ragkit.eval.judge import LocalJudge

    server_like = MockChatGenerator(responses=["yes"])
    assert LocalJudge(server_like).task == "correct"  # a reply alone: P(yes), no likelihood to read
    with pytest.raises(ValueError, match="llama.cpp judge"):
        LocalJudge(server_like, task="correct_x_likelihood")
    unloaded = LlamaCppChatGenerator(model="/nonexistent.gguf")  # cheap __init__: nothing is loaded to choose the task
    assert LocalJudge(unloaded, model_name="m").label == "m (correct_x_likelihood task)"


def test_an_unanswerable_item_needs_a_name_in_its_question_and_finds_an_absent_entity_in_any_corpus():
    import random

    from ragkit.eval.generate import ABSENT_ENTITIES, unanswerable_from

    class EveryRealName:  # a corpus that mentions a word of every listed entity: made-up people are left
        def term_weights(self, text):
            return {"x": 1.0} if any(text.replace("the ", "") in name for name in ABSENT_ENTITIES) else {}

    rng, used = random.Random(0), set()
    item = EvalItem("When did Genghis Khan invade Persia?", ["1219"], kind="single", id="q1")
    made = [unanswerable_from(item, EveryRealName(), rng, used) for _ in range(30)]
    assert all(outcome == "accepted" for _, outcome in made) and len(used) == 30  # never the same entity twice
    assert all("Genghis Khan" not in swapped.question and swapped.meta["replaced"][0] == "Genghis Khan" for swapped, _ in made)
    assert unanswerable_from(EvalItem("when was it built?", ["1900"], kind="single"), EveryRealName(), rng, used) == (None, "no_name_in_question")
    # a month is no entity to swap: "Which state was the terrorist attack in September 11, 2001?" (a committed new_wiki item)
    # became "… in Rabindranath Tagore 11, 2001?", and `ragkit testset generate sample_docs` wrote "… played on Svalbard 4, 2014?"
    dated = EvalItem("What is the name of the NFL game that will be played on June 4, 2014?", ["Super Bowl LI"], kind="single")
    swapped, outcome = unanswerable_from(dated, EveryRealName(), rng, used)
    assert outcome == "accepted" and swapped.meta["replaced"][0] == "NFL" and "June 4, 2014" in swapped.question
    assert unanswerable_from(EvalItem("Which state was attacked on September 11?", ["New York"], kind="single"), EveryRealName(), rng, used) \
        == (None, "no_name_in_question")
    # nor is code: `ragkit testset generate sample_docs` made "What is the shorthand for raising a `Srinivasa Ramanujan`?"
    coded = EvalItem("What is the shorthand for raising a `TypeError` in Python?", ["ValueError"], kind="single")
    swapped, outcome = unanswerable_from(coded, EveryRealName(), rng, used)
    assert outcome == "accepted" and swapped.meta["replaced"][0] == "Python" and "`TypeError`" in swapped.question
    assert unanswerable_from(EvalItem("What does `functools.reduce` return for `Foo`?", ["a value"], kind="single"), EveryRealName(), rng, used) \
        == (None, "no_name_in_question")


def test_a_second_model_reads_a_kept_item_again_and_drops_it_when_it_calls_the_answer_wrong():
    # a person labelled 112 of the 156 items the 0.5B wrote and its own round trip kept invalid ("What is the name of
    # the city where Westinghouse Electric is located?" -> "Niagara Falls"): bench/item_checks.py
    import random

    from haystack import Document
    from haystack.components.generators.chat import MockChatGenerator

    from ragkit.eval.generate import _candidate, second_reading
    from scripted_llm import scripted  # tests/scripted_llm.py

    chunk = Document(id="c1", content="The canal between the two coasts opened in 1822 after many years of hard work by local men.")
    writer = MockChatGenerator(responses=["When did the waterway begin carrying boats?"])
    answer_step = lambda question, document: "1822"  # noqa: E731  (the round trip gives the span back)
    too_common = lambda answer: False  # noqa: E731
    for reply, expected in (("yes", "accepted"), ("no", "judged_not_its_answer"), ("banana", "check_failed")):
        checker, seen = scripted(reply)
        check = lambda q, a, c: second_reading(checker, q, a, c, 0.74)  # noqa: E731,B023
        item, outcome = _candidate(chunk, "single", writer, answer_step, random.Random(0), [], False, too_common, check)
        assert outcome == expected, (reply, outcome)
        asked = seen[-1][-1].text
        assert "When did the waterway begin carrying boats?" in asked and "1822" in asked and "local men" in " ".join(m.text for m in seen[-1])
        assert (item is not None) == (expected == "accepted")
    assert item is None and outcome == "check_failed"  # an item nobody could check is not kept
    checker, _ = scripted("yes")
    item, _ = _candidate(chunk, "single", writer, answer_step, random.Random(0), [], False, too_common,
                         lambda q, a, c: second_reading(checker, q, a, c, 0.74))
    assert item.meta["check_p_correct"] == 1.0 and item.answers == ["1822"]


def test_a_checked_generation_tries_enough_candidates_to_keep_what_it_was_asked_for():
    # with the round trip's bound alone (4 a kept item), --check-llm kept 12 of 16 items asked of sample_docs
    from ragkit.eval.generate import CHECK_KEEPS, candidate_budget

    assert candidate_budget(18, checked=False) == 4 * 18 + 10  # unchanged without the check
    round_trip_keeps = 0.3  # of candidates (bench/results/eval_agreement/*.report.json: 0.30-0.37 a kind)
    assert candidate_budget(18, checked=True) * round_trip_keeps * CHECK_KEEPS >= 18
    assert candidate_budget(18, checked=False) * round_trip_keeps * CHECK_KEEPS < 18  # the bound it replaces fell short


def test_testset_generate_reads_items_again_only_when_given_a_check_model(capsys):
    from ragkit.eval.generate import CHECK_MODEL, CHECK_THRESHOLD
    from ragkit.ui.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["testset", "generate", "docs", "-o", "set.jsonl"]).check_llm is None  # off until its cost is measured
    assert parser.parse_args(["testset", "generate", "docs", "-o", "s.jsonl", "--check-llm", CHECK_MODEL]).check_llm == CHECK_MODEL
    assert CHECK_MODEL == "qwen2.5-coder-1.5b" and 0 < CHECK_THRESHOLD < 1
    with pytest.raises(SystemExit):
        parser.parse_args(["testset", "generate", "--help"])
    assert "--check-llm" in capsys.readouterr().out  # the help renders (a bare % in it would raise)


def test_testset_generate_writes_with_the_default_llm_unless_told_another(monkeypatch):
    # the 1.5B's items were valid 58 % of the time against the 0.5B's 35 % (bench/writer_model.py): the default stays the 1.5B
    from ragkit.config import DEFAULT_LLM
    from ragkit.ui.cli import build_parser
    from ragkit.ui.cli_common import config_from_args

    monkeypatch.delenv("RAGKIT_LLM", raising=False)
    parser = build_parser()
    assert config_from_args(parser.parse_args(["testset", "generate", "docs", "-o", "s.jsonl"])).models.llm == DEFAULT_LLM == "qwen2.5-coder-1.5b"
    faster = parser.parse_args(["testset", "generate", "docs", "-o", "s.jsonl", "--llm", "qwen2.5-coder-0.5b"])
    assert config_from_args(faster).models.llm == "qwen2.5-coder-0.5b"
