"""A generated item's answer, picked from a chunk's sentence without the LLM: a year or date, a number or a proper name.

Step 1 of :mod:`ragkit.eval.generate`: the answer comes first, so it is a verbatim span of its chunk by
construction and the LLM only writes the question. Written by hand with patterns, not a tagger: they cost
nothing on 2 cores, and their faults can be listed and tested — a capital that only opens a sentence
("However"), a lone digit, a word that opens a clause before a name ("In Michigan", "Although the Mass of
Paul VI"), a possessive's "'s" ("Temujin's"), the word after a count ("66–34 Mya", "3,000 British"), a page number.
Each of those is dropped here; a name keeps its initials, its own number and its Roman numeral ("John F. Kennedy", not
"John"; "Super Bowl 50", not "Super Bowl" and "50"; "Charles V"), any Latin letters ("Ögedei"), and an era's year is a
time ("AD 14", "753 BC").

Usage::

    answer_spans("Tesla was born on 10 July 1856 in Smiljan.")   # [("10 July 1856", "time"), ("Smiljan", "name")]
    too_common = answer_in_most_chunks(index.chunks)           # True for "Python" in a Python tool's docs
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Mapping

from haystack import Document

from ragkit.eval.metrics import STOPWORDS, normalize_answer

# An answer in over a quarter of the chunks ("Python" in a Python tool's docs: 54%; SQuAD's generated answers: 12% at
# most) names no chunk, and its question comes out vague. Three chunks at least, so a tiny corpus keeps its names.
COMMON_ANSWER_SHARE, COMMON_ANSWER_MIN_CHUNKS = 0.25, 3

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December")
# A year, a month and year, a full date either way round ("February 7, 2016", "10 July 1856") or a month and day
# ("January 30"). Before, a month went with a year from 1000 to 1999 only and a date's day was left out, so "February 7,
# 2016" gave "2016" and a *name* "February", "10 July 1856" a *number* "10".
_MONTH = "|".join(MONTHS)
YEAR = re.compile(rf"\b(?:(?:\d{{1,2}} )?(?:{_MONTH}) (?:\d{{1,2}}, )?)?(?:1[0-9]{{3}}|20[0-9]{{2}})\b|\b(?:{_MONTH}) \d{{1,2}}\b(?!\d|,\s*\d)"
                  r"|\bAD \d{1,4}\b(?![–-]\d)|(?<![\d,.])(?:\d{1,2},\d{3}|\d{1,5}) (?:BCE?|AD|CE)\b")  # an era's year: "AD 14" and "500 BC" were numbers
# Lower-case words inside a name. Without "del", "della", "y" … a name was cut before them: "Ojos del Salado" gave
# "Ojos", a kept answer of the 1.5B's (bench/data/writer_item_labels.jsonl); "Paz y Miño", "Andrea della Robbia".
_NAME_JOINERS = {"of", "de", "von", "van", "the", "and", "del", "della", "di", "da", "du", "des", "der", "den", "y"}
_JOINER = "|".join(sorted(_NAME_JOINERS))
# Words a sentence opens with, capitalised only for that: before a name they are not part of it. Seen as kept
# answers of the committed generated sets: "In Michigan", "As Joseph", "Although the Mass of Paul VI",
# "Currently Rhine", "Most Platyctenida" (5 of 156 single and paraphrase answers); the rest are their kin.
OPENING_WORDS = STOPWORDS | frozenset(
    "after before during while since until although though despite following because unless unlike like upon among "
    "between within without through throughout across against along around beyond toward towards according "
    "most many some several both each every all any other another such only even once either neither nor "
    "more less fewer below above nearly approximately roughly "
    "currently recently originally previously formerly initially eventually finally later today now still yet "
    "however thus meanwhile moreover furthermore nevertheless nonetheless instead additionally similarly "
    "consequently subsequently historically traditionally generally usually typically".split()
)
# Initials are part of a name: without them a name was cut at one ("John F. Kennedy" gave "John", "George W. Bush and
# Dick Cheney" "Bush and Dick Cheney"). Not an initial: one before a sentence's opening word ("Super Bowl L. The"), a
# numeral's I, V or X inside a name ("Saturn V. Apollo"), or a lone one opening a name ("… types A through E.
# Specifically"): two at least there ("J. S. Bach"), else the name starts after it.
_INITIAL = rf"[A-Z]\. (?!(?:{'|'.join(sorted(w.capitalize() for w in OPENING_WORDS))})\b(?!\.))"
# Letters beyond ASCII too: with [A-Z][a-zA-Z]+ "Möngke Khan" gave "Khan", "Ögedei" nothing, "Kraków" "Krak".
_UPPER = "A-Z" + "".join(c for c in map(chr, range(0xC0, 0x250)) if c.isupper())
_WORD = rf"[{_UPPER}](?:[^\W\d_]|['\-])+"
_MID_SENTENCE = re.compile(rf"(?:[^\W_{_UPPER}]|[,'\)]) $")  # after a lower-case letter, a digit, a comma, "'" or ")"
# A one-letter Roman numeral inside or ending a name ("Charles V", "World War I", "Pope Leo X in 1520"): the name was cut
# before it. Not one a full stop follows ("Saturn V. Apollo": a sentence's end the splitter missed), nor an "I" before a
# lower-case word other than "of", "in" and "and" ("In Paris I met …" is the pronoun).
_NUMERAL = r"(?:[VX](?=[\s,;:)]|\.?$)|I(?=[,;:)]|\.?$|\s+(?:of|in|and)\b|\s+[\(A-Z]))"
_NUMBERED_WORD = rf"{_WORD}(?: {_NUMERAL})?"  # the numeral goes with its word: it does not count against a name's length
_INNER_WORD = rf"(?:(?![IVX]\.){_INITIAL}){{0,3}}{_NUMBERED_WORD}"
PROPER_NAME = re.compile(rf"\b(?:(?:{_INITIAL}){{2,3}})?{_NUMBERED_WORD}(?: (?:{_JOINER}) {_INNER_WORD}| {_INNER_WORD}){{0,3}}\b")
# A name that goes on past PROPER_NAME's four words was cut there: "Beth Israel Deaconess Medical" (Center), "Oxford
# University Ice Hockey" (Club) were kept answers of the 1.5B's, invalid. Such a name is no answer, nor is its tail.
_NAME_GOES_ON = re.compile(rf" (?:(?:{_JOINER}) )?{_INNER_WORD}\b")
# A name's own number is part of it ("Super Bowl 50", "Apollo 11", "Windows 8.1", "BWV 62"): without it the name was
# cut before it ("Super Bowl") and the number taken alone ("50"). Only where the number ends the name — at the sentence's
# end or a punctuation mark, before a function word or another name; before another word it is as often a count
# ("Norway 8.5 years", "Super Bowl XL 10 seasons"); a score ("24–10"), a ratio ("the French 20 to 1"), a thousands
# comma, a year or a possessive's number ("Yanagisawa's 902") never joins.
NAMED_NUMBER = re.compile(rf"{PROPER_NAME.pattern} \d+(?:\.\d+)*(?=[.,;:)]?(?:\s|$))")  # "4,760": a comma then a digit fails
_NAMED_NUMBER_ENDS = re.compile(rf"\s*$|[.,;:)]|\s+(?!(?:to|or|and|by|x|times|per)\s+\d)(?:\(|[{_UPPER}]|(?P<word>[a-z]+)\b)")
_AFTER_A_COUNT = re.compile(r"(?<![\d,.])(?!(?:1\d{3}|20\d{2})\s$)\d(?:[\d,.–-]*\d)?\s$")  # a number, not a year ("In 1882 Tesla")
PAGE_NUMBER = re.compile(r"(?:\bpages?|\bpp?\.)\s*(?:\d+\s*(?:of|/|-|–)\s*)?$", re.IGNORECASE)  # what comes before one
_POSSESSIVE = re.compile(r"['’]s$")
# A number's unit that names what is counted: the question asks for it ("How many years"), so it is not banned from
# the question as the answer's other words are (banned, "21,000 years" was asked as "What number of decades").
COUNTED_UNITS = ("percent", "km", "miles", "metres", "meters", "feet", "people", "years")
NUMBER = re.compile(rf"\b\d[\d,.]*(?: (?:{'|'.join(('million', 'billion', 'thousand', 'hundred') + COUNTED_UNITS)}))?\b")


def _name_span(sentence: str, start: int, end: int) -> tuple[int, int]:
    """The name inside a :data:`PROPER_NAME` match: opening words and the joiners after them dropped, a trailing
    possessive cut ("Temujin's" → "Temujin"). Returns sentence offsets; an empty span if nothing is left."""
    text = sentence[start:end]
    words = text.split(" ")
    while words and (words[0].lower() in OPENING_WORDS or words[0] in _NAME_JOINERS):
        start += len(words.pop(0)) + 1
    if not words:
        return start, start
    if possessive := _POSSESSIVE.search(words[-1]):
        end -= len(words[-1]) - possessive.start()
    return start, end


def _ends_a_name(rest: str) -> bool:
    """Whether a number followed by ``rest`` can end a name: at the end, a punctuation mark, a function word,
    an opening parenthesis or a capital ("Super Bowl 50 was", "Interstate 5, the", "Apollo 15 Lunar Module")."""
    follows = _NAMED_NUMBER_ENDS.match(rest)
    return follows is not None and (follows.group("word") is None or follows.group("word") in OPENING_WORDS)


def counted_unit(answer: str) -> str | None:
    """The unit a number answer counts in ("years" of "21,000 years"), or None (a bare number, "21 million")."""
    number, _, unit = answer.rpartition(" ")
    return unit if number[:1].isdigit() and unit in COUNTED_UNITS else None


def answer_spans(sentence: str) -> list[tuple[str, str]]:
    """Candidate answers in ``sentence``: ``(span, type)`` with type ``time``, ``number`` or ``name``;
    a one-word name counts only after a lower-case word (a capital letter after a full stop says nothing)."""
    found: list[tuple[str, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern, kind in ((YEAR, "time"), (NAMED_NUMBER, "name"), (NUMBER, "number"), (PROPER_NAME, "name")):
        for m in pattern.finditer(sentence):
            if any(m.start() < b and a < m.end() for a, b in taken):
                continue
            if pattern is PROPER_NAME and _NAME_GOES_ON.match(sentence, m.end()):
                end = m.end()
                while more := _NAME_GOES_ON.match(sentence, end):
                    end = more.end()
                taken.append((m.start(), end))
                continue  # a name longer than PROPER_NAME's four words: cut, it is not an answer
            if pattern is NAMED_NUMBER and not _ends_a_name(sentence[m.end():]):
                continue  # "Apollo 13 landing": a count or a name's number, the name and the number stay apart
            start, end = _name_span(sentence, m.start(), m.end()) if kind == "name" else (m.start(), m.end())
            span = sentence[start:end].strip(" ,.")
            if pattern is NAMED_NUMBER and (not re.search(r"[^\W\d_]", span) or re.search(r"['’]s\b", span)):
                continue  # "In 999, …" is a number after an opening word; "Yanagisawa's 902" what the name has, not its name
            if kind == "name" and all(word in MONTHS or word in _NAME_JOINERS for word in span.split()):
                continue  # "in February", "August and September": a time without its year, not a name
            if kind == "name" and " " not in span and _AFTER_A_COUNT.search(sentence[:start]):
                continue  # "66–34 Mya", "5 GHz", "3,000 British": what a number counts, or its unit, is not a name
            if kind == "name" and (span.lower() in STOPWORDS or len(span) < 3 or (" " not in span and not _MID_SENTENCE.search(sentence[:start]))):
                continue  # one capitalised word counts only mid-sentence: "However", "Otherwise" open clauses
            if kind == "number" and not re.search(r"\d{2,}|\d[,.]\d| ", span):
                continue  # a lone digit is rarely what a question asks for
            if kind == "number" and PAGE_NUMBER.search(sentence[:m.start()]):
                continue  # "— page 11 of 12", a PDF page's header: asked "What number of the document's pages …?"
            taken.append((m.start(), m.end()))
            found.append((span, kind))
    return found


def answer_in_most_chunks(chunks: Mapping[str, Document]) -> Callable[[str], bool]:
    """Whether an answer is too common to name a chunk: its rarest word is in over :data:`COMMON_ANSWER_SHARE`
    of ``chunks`` (and in :data:`COMMON_ANSWER_MIN_CHUNKS` at least). One pass, a server store's in pages."""
    chunk_words = Counter(word for chunk in chunks.values() for word in set(normalize_answer(chunk.content or "").split()))

    def too_common(answer: str) -> bool:
        holding = min((chunk_words[word] for word in normalize_answer(answer).split()), default=0)
        return holding >= COMMON_ANSWER_MIN_CHUNKS and holding > COMMON_ANSWER_SHARE * len(chunks)
    return too_common
