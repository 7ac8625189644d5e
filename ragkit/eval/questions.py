"""Step 2 of a generated test-set item: the local LLM writes the question a sentence answers with a given span.

The answer was picked first (:mod:`ragkit.eval.answer_spans`); here the LLM writes the question, decoded under a
GBNF grammar (:func:`question_grammar`: an opening fitting the answer's type and form — "How many years", "On what
date" — at most :data:`MAX_WORDS_AFTER_OPENING` more words, one "?") and a logits mask (:class:`BannedWords`) that
keeps the answer's own words out of the question — for a **paraphrase**, the sentence's lower-case content words
too, so BM25 alone is not enough. Written by hand: the mask is a llama-cpp-python logits processor, and what a small
model does against a grammar and a mask is this task's own. Three things the 0.5B did against them, each seen in
questions it wrote:

* it glued a banned word back together: the mask bans a word's first token, and "rainforest" (" rain" + "forest")
  came out " rainfall" + "forest" = "rainfallforest". The mask now bans a banned word's second piece too when it is
  word-like (four letters or more, no leading space), so the word cannot be finished after another start;
* it ran out of words: a reply that uses every word the grammar allows was cut off, and its last word holds what the
  model still meant to say ("… in.NieuweMaas?", "… ofpi?", "… thekkwarezmian?"). Counted as ``too_long``, not kept;
* it looped: a run of three words, one of them a content word, twice ("… to be the first to be the first …",
  "the Canadian operation … the Canadian operation"). Counted as ``repeats_itself``, not kept.

And one thing both models did: they switched script mid-question (the 1.5B "… in men's and女子's sports?", the 0.5B
"… the Second世界 Wars?" and "… the electric car by特斯拉?"; 3 of ~600 kept questions of the committed sets). The grammar's words now hold printable
ASCII and only the letters beyond it that the sentence has ("Temüjin", "1976–77"); a question another backend wrote
with a letter its sentence does not have is ``foreign_characters``, not kept.

Usage::

    question, why_not = write_question(llm, "Tesla was born in 1856 in Smiljan.", "1856", "time", paraphrase=False)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from haystack.dataclasses import ChatMessage

from ragkit.eval.answer_spans import MONTHS, counted_unit
from ragkit.eval.metrics import STOPWORDS
from ragkit.llm.structured import backend_of, call_llm, gbnf_grammar, gbnf_literal

QUESTION_WORDS = {"time": ["When", "In what year", "In which year"], "number": ["How many", "How much", "What number of"],
                  "name": ["Who", "What", "Which", "Where", "What is the name of"]}
QG_SYSTEM = "You write one short quiz question. Reply with the question only."
MAX_WORDS_AFTER_OPENING = 25  # the grammar's limit: a reply that reaches it was cut off, not finished
GLUED_PIECE_MIN_CHARS = 4  # a banned word's second piece this long is word-like ("forest"), not a suffix ("ian", "s")


def answer_form(kind: str, answer: str) -> str | None:
    """What the question must ask for beyond the answer's type: a counted number's unit ("years" of "21,000 years"),
    a time's ``date`` ("February 7, 2016", "January 27") or ``month`` ("November 2010"); None for a bare year or number."""
    if kind == "number":
        return counted_unit(answer)
    if kind == "time" and any(word.strip(",") in MONTHS for word in answer.split()):
        return "date" if re.search(r"\b\d{1,2}\b", answer) else "month"
    return None


def question_starts(kind: str, form: str | None = None) -> list[str]:
    """How the question may open: a question word fitting the answer's type, or its form's ("How many years",
    "On what date": a date asked "In which year" is answered with a year, and fails its round trip)."""
    if form is None:
        return QUESTION_WORDS[kind]
    if kind == "time":
        return ["When", "On what date"] if form == "date" else ["When", "In which month"]
    return ["What percentage", "What percent"] if form == "percent" else [f"How many {form}", f"What number of {form}"]


def question_grammar(kind: str, form: str | None = None, sentence: str = "") -> str:
    """The question's GBNF: an opening of :func:`question_starts`, words of printable ASCII (no space, no "?") and
    of the characters beyond ASCII that ``sentence`` has, one "?" at the end."""
    starts = " | ".join(gbnf_literal(w) for w in question_starts(kind, form))
    beyond = "".join(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in sorted(set(sentence)) if ord(c) > 127 and not c.isspace())
    return f'root ::= ({starts}) " " word (" " word){{2,{MAX_WORDS_AFTER_OPENING - 1}}} "?"\nword ::= [!->@-~{beyond}]{{1,24}}'


class BannedWords:
    """A llama-cpp-python logits processor that never lets a word of ``words`` start (any case), nor be finished
    after another start: a banned word's word-like second piece is banned as well ("forest" of "rainforest").
    ``second_pieces=False`` is the mask before that, kept for ``bench/question_faults.py``'s comparison."""

    def __init__(self, token_ids: list[int], words: list[str], second_pieces: bool = True):
        self.token_ids, self.words = np.asarray(sorted(set(token_ids)), dtype=np.intc), sorted(words)
        self.second_pieces = second_pieces

    @classmethod
    def for_model(cls, llm: Any, words: list[str], second_pieces: bool = True) -> "BannedWords":
        ids: list[int] = []
        for word in words:
            for form in {word, word.lower(), word.capitalize()}:
                for text in (form, " " + form):
                    pieces = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
                    ids += pieces[:1]
                    if second_pieces and text[0] == " " and len(pieces) > 1:  # a word mid-sentence: " rain" + "forest"
                        second = llm.detokenize(pieces[1:2]).decode("utf-8", errors="ignore")
                        if second.isalpha() and len(second) >= GLUED_PIECE_MIN_CHARS:
                            ids.append(pieces[1])
        return cls(ids, words, second_pieces)

    def cache_key(self) -> dict[str, Any]:  # the two masks write different questions: a cached reply is not shared
        return {"banned_words": self.words, "pieces": "first and word-like second" if self.second_pieces else "first"}

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        scores[self.token_ids] = -np.inf
        return scores


def question_kwargs(generator: Any, kind: str, banned: list[str], form: str | None = None, sentence: str = "") -> dict[str, Any]:
    kwargs: dict[str, Any] = {"max_tokens": 48, "temperature": 0.0}
    if backend_of(generator) == "llama.cpp":
        kwargs["grammar"] = gbnf_grammar(question_grammar(kind, form, sentence))
        if banned:
            from llama_cpp import LogitsProcessorList

            if getattr(generator, "_model", None) is None:
                generator.warm_up()
            kwargs["logits_processor"] = LogitsProcessorList([BannedWords.for_model(generator._model, banned)])
    return kwargs


def parse_question(text: str) -> str:
    question = " ".join(text.strip().split())
    if not question.endswith("?") or len(question.split()) < 3:
        raise ValueError(f"not a question: {text[:80]!r}")
    return question


def question_fault(question: str, starts: list[str], sentence: str | None = None) -> str | None:
    """Why a question the grammar allowed is still unusable — ``too_long``, ``repeats_itself`` or, given its
    ``sentence``, ``foreign_characters`` (only a backend without the grammar can write one) — or None."""
    if sentence is not None and any(c.isalpha() and ord(c) > 127 and c not in sentence for c in question):
        return "foreign_characters"  # "… men's and女子's sports?": a letter of a script its sentence does not use
    opening = max((s for s in starts if question.startswith(s + " ")), key=len, default="")
    if len(question.split()) - len(opening.split()) >= MAX_WORDS_AFTER_OPENING:
        return "too_long"
    words = re.findall(r"[\w'-]+", question)
    runs = [tuple(w.lower() for w in words[i:i + 3]) for i in range(len(words) - 2)]
    # a run of ordinary words, twice, is a loop; a name may come twice ("Staten Island Ferry … Staten Island")
    ordinary = {w for w in words if w.islower() and w not in STOPWORDS}
    if any(runs.count(run) > 1 and ordinary & set(run) for run in runs):
        return "repeats_itself"
    if any(len({w.lower() for w in words[i:i + 4]}) == 1 for i in range(len(words) - 3)):
        return "repeats_itself"  # one word or number four times running: "released on February17,2,2,2,2,2,2,2?"
    return None


def question_banned_words(sentence: str, answer: str, paraphrase: bool, starts: list[str]) -> list[str]:
    """Words the question may not use: the answer's own, and for a paraphrase the sentence's lower-case content words
    too — never a word of the openings its grammar allows (a banned "many" or "years" would leave it none)."""
    banned = {w for w in re.findall(r"[A-Za-z0-9]+", answer) if w.lower() not in STOPWORDS}
    if paraphrase:
        banned |= {w for w in re.findall(r"[A-Za-z]{4,}", sentence) if w.lower() not in STOPWORDS and w[0].islower()}
    opening = {w.lower() for start in starts for w in start.split()}
    return sorted(w for w in banned if w.lower() not in opening)


def question_messages(sentence: str, answer: str, paraphrase: bool, passage: str | None = None) -> list[ChatMessage]:
    """The writer's prompt. With ``passage`` (the chunk the sentence is from) the writer reads the whole of it and is
    asked the question a reader of the passage would ask — naming what the sentence is about as the passage does."""
    avoid = " The question must not contain the answer" + (", and must use other words than the sentence (synonyms)." if paraphrase else ".")
    if passage is None:
        instruction = f"Sentence: {sentence}\nAnswer: {answer}\nWrite one question that this sentence answers with exactly this answer." + avoid
    else:
        instruction = (f"Passage: {passage}\n\nSentence of the passage: {sentence}\nAnswer: {answer}\n"
                       "Write one question that someone who read the whole passage would ask, which this sentence answers with "
                       "exactly this answer. Name who or what it is about as the passage does." + avoid)
    return [ChatMessage.from_system(QG_SYSTEM), ChatMessage.from_user(instruction)]


def write_question(generator: Any, sentence: str, answer: str, kind: str, paraphrase: bool,
                   passage: str | None = None) -> tuple[str | None, str | None]:
    """(question, None) or (None, why not). The answer's own words may not appear (a small model, told
    not to, copies them anyway); a paraphrase may not use the sentence's lower-case content words either. With
    ``passage``, the writer reads the sentence's whole chunk (:func:`question_messages`)."""
    form = answer_form(kind, answer)
    starts = question_starts(kind, form)
    banned = question_banned_words(sentence, answer, paraphrase, starts)
    letters_from = sentence if passage is None else passage  # a name the passage spells with "ü" may be asked by it
    reply = call_llm(generator, question_messages(sentence, answer, paraphrase, passage), parse_question,
                     question_kwargs(generator, kind, banned, form, letters_from), step="testset_question")
    if not reply.ok:
        return None, "unusable_reply"
    fault = question_fault(reply.value, starts, letters_from)
    return (None, fault) if fault else (reply.value, None)
