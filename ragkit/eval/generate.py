"""Generate a test set from the user's own chunks with the local LLM: every kept item answerable, and known.

Answer first, question second — the way a small model can be made to write usable items:

1. a chunk's sentence and a span of it are picked *without* the LLM: a year or date, a number, or a
   proper name (:func:`ragkit.eval.answer_spans.answer_spans`), a verbatim span of its chunk by construction; never from a line of a table
   of contents, never a page number, in over a quarter of the chunks (:func:`answer_in_most_chunks`) or a kept item's answer;
2. the LLM writes the question that sentence answers with that span (:func:`ragkit.eval.questions.write_question`),
   decoded under a GBNF grammar (an opening fitting the span's type and form, words of ASCII and the sentence's own
   letters, one "?") and a logits mask that bans the answer's words — for a **paraphrase** item the sentence's own
   content words too, so BM25 alone is not enough; a reply cut off at the grammar's word limit, looping, or (from a
   backend with no grammar) holding a letter its sentence does not have is rejected there;
3. a round-trip filter keeps it only if the question does not contain the answer, does not copy a
   long run of the chunk's words, stands alone (no "in the sentence", no "his" before any name:
   :func:`refers_to_its_text`), is not a near-duplicate of a kept question, and is **answerable from its chunk**:
   the grounded answer step, reading that chunk alone, gives the span back (F1 ≥ 0.5); the judge's P(the chunk
   answers the question) is recorded beside it; with a ``check_generator``, a second model must also call the
   answer correct for the question over the chunk (P(yes) ≥ :data:`CHECK_THRESHOLD`): the round trip runs on the
   model that wrote the question, and a person found 112 of the 156 items a 0.5B wrote and kept invalid; of 40 new_wiki
   items each model wrote and kept, 17 of the 1.5B's (``ragkit testset generate``'s default writer) and 26 of the
   0.5B's (``bench/writer_model.py``);
4. from kept items, without the LLM: **multi** items join two questions about different chunks
   (", and …"), **unanswerable** items put an entity the corpus never mentions in a kept question's place of one
   it does, never a month nor code in backticks (:data:`ABSENT_ENTITIES`, checked against the index's vocabulary).

The writer reads the answer's sentence. ``question_context="passage"`` has it read the sentence's whole chunk instead,
as a person asking about a paragraph does; on SQuAD dev paragraphs no scored run asks, its items drew on the paragraph
beyond their sentence no more often (25 % and 25 %), it kept 28 % of its candidates against 49 %, and a kept item
cost 2.4 times the seconds (``bench/writer_context.py``), so it is not the default.

Every reject is counted by kind and reason (:class:`GenerationReport`). LLM calls go through
:func:`ragkit.llm.structured.call_llm`, so an active LLM cache (:mod:`ragkit.llm.cache`) serves a rerun.

Usage::

    items, report = generate_testset(index, chat_generator=llm, n=40)
    report.summary()      # requested, accepted, acceptance per kind, rejected by reason
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from haystack import Document

from ragkit.eval.answer_spans import MONTHS, PROPER_NAME, answer_in_most_chunks, answer_spans
from ragkit.eval.metrics import STOPWORDS, f1_score, normalize_answer, strip_citations
from ragkit.eval.questions import write_question
from ragkit.eval.testset import EvalItem
from ragkit.index.sentences import sentence_spans
from ragkit.index.store import RagIndex
from ragkit.llm.prompts import context_messages, sufficiency_task
from ragkit.llm.judgments import yes_probability

QUESTION_CONTEXTS = ("sentence", "passage")
DEFAULT_MIX = {"single": 0.4, "paraphrase": 0.25, "multi": 0.15, "unanswerable": 0.2}
MAX_COPIED_WORDS = {"single": 6, "paraphrase": 4}  # a longer run of the chunk's words is a copy, not a question
ANSWERED_F1, DUPLICATE_OVERLAP = 0.5, 0.8
# The second reading's threshold, for the 1.5B's P(yes) to "is this answer correct?": chosen on SQuAD dev's labelled
# items (Youden's J), reported on new_wiki's: 52 % valid items kept against 22 % (bench/item_checks.py). Off unless a
# check_generator is given: it keeps about one round-tripped item in three (27 % of new_wiki's labelled items, 9 of 23
# in `ragkit testset generate sample_docs --n 16`), and a kept item costs several times the seconds (docs/evaluation.md).
CHECK_MODEL, CHECK_THRESHOLD = "qwen2.5-coder-1.5b", 0.74
CHECK_KEEPS = 0.27
# A question pointing at the text it was written from ("in the sentence", "these systems") cannot be asked of a corpus:
# no asker has that sentence in front of them. One question in 30 from Wikipedia paragraphs, one in three from READMEs.
SOURCE_REFERENCE = re.compile(
    r"\b(?:the|this|that|given|above|following)\s+(?:sentences?|passages?(?!\s+of\b)|paragraphs?|excerpts?|snippets?)\b"
    r"|\b(?:given|above|following|preceding|previous)\s+(?:text|context|document|statement|section|examples?|code|commands?|lists?|tables?|outputs?|error\s+codes?)\b"
    r"|\b(?:mentioned|described|stated|listed|shown)\s+(?:above|below|here)\b"
    r"|\bthe\s+(?:specified|aforementioned|chosen)\b|\bthese\b|\bin\s+the\s+example\b", re.IGNORECASE)
TOC_ENTRY = re.compile(r"(?:\.\s?){4,}\s*(?:\d+|[ivxlc]+)\b")  # "asn1_strerror . . . . 22": its number is a page, not a fact
# Entities no corpus of ordinary documents is likely to mention; each is checked against the index.
ABSENT_ENTITIES = [
    "Ada Lovelace", "Zanzibar", "the Atacama Desert", "Rabindranath Tagore", "Reykjavik", "the Okavango Delta", "Hedy Lamarr",
    "Ulaanbaatar", "the Mariana Trench", "Srinivasa Ramanujan", "Lake Titicaca", "Grace Hopper", "Timbuktu", "the Kármán line",
    "Frida Kahlo", "Svalbard", "Emmy Noether", "the Nazca Lines", "Tbilisi", "Chien-Shiung Wu",
]
# When a large corpus holds a word of every name above (or they are used up), made-up people: a question
# about someone who does not exist has no answer in any corpus, and each name is still checked against it.
INVENTED_GIVEN = ["Orsolya", "Tavita", "Ilkka", "Zdenka", "Mirela", "Teodoro", "Saoirse", "Anouk", "Radomir", "Ingrith", "Yevgenia", "Kwabena"]
INVENTED_FAMILY = ["Varkonyi", "Tuilagi", "Haapakoski", "Brzezinska", "Castellanza", "Quispehuaman", "Falkenrath", "Oyelaran", "Zubiaurre", "Mkhabela"]


@dataclass
class GenerationReport:
    requested: int = 0
    by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    llm_calls: int = 0
    cache_hits: int = 0
    in_set: dict[str, int] = field(default_factory=dict)  # items of each kind in the written set

    def count(self, kind: str, outcome: str) -> None:
        entry = self.by_kind.setdefault(kind, {"candidates": 0, "accepted": 0, "rejected": {}})
        entry["candidates"] += 1
        if outcome == "accepted":
            entry["accepted"] += 1
        else:
            entry["rejected"][outcome] = entry["rejected"].get(outcome, 0) + 1

    def summary(self) -> dict[str, Any]:
        rejected: dict[str, int] = {}
        for entry in self.by_kind.values():
            for reason, n in entry["rejected"].items():
                rejected[reason] = rejected.get(reason, 0) + n
        return {
            "requested": self.requested,
            "accepted": sum(self.in_set.values()),  # the items written (a single question that became a part is not one)
            "candidates": sum(e["candidates"] for e in self.by_kind.values()),
            "questions_tried": sum(self.by_kind.get(k, {}).get("candidates", 0) for k in ("single", "paraphrase")),  # written from a chunk: the bar's "tried"
            "by_kind": {k: {**e, "acceptance": round(e["accepted"] / e["candidates"], 3) if e["candidates"] else 0.0, "in_set": self.in_set.get(k, 0)}
                        for k, e in self.by_kind.items()},
            "rejected_by_reason": dict(sorted(rejected.items(), key=lambda kv: -kv[1])),
            "seconds": round(self.seconds, 1),
            "llm_calls": self.llm_calls,
            "cache_hits": self.cache_hits,
        }


# -- 3. the round trip -----------------------------------------------------------------------------
def longest_copied_run(question: str, text: str) -> int:
    """The longest run of consecutive words the question shares with ``text``."""
    q, t = normalize_answer(question).split(), " " + normalize_answer(text) + " "
    best = 0
    for i in range(len(q)):
        for j in range(i + best + 1, len(q) + 1):
            if " " + " ".join(q[i:j]) + " " in t:
                best = j - i
            else:
                break
    return best


# "he", "his", "her" … before any name: whose? The sentence it was written from says ("His father was Shi Bingzhi" was
# asked "Who was the name of his dad?"). None of the 475 SQuAD questions people wrote has one; "they"/"their" they do.
PERSONAL_PRONOUN = re.compile(r"\b(?:he|she|his|her|hers|him|himself|herself)\b")
# "this" before a word: which one? "What number of pages does this magazine have?", "Who argued that this growing social
# complexity led to …?" — all 4 such questions a person labelled point at their text; 8 kept in the committed sets.
# Lower case only: a title keeps its "This" ("What is This Is England about?").
DEMONSTRATIVE = re.compile(r"\bthis\s+[a-z]")


def refers_to_its_text(question: str) -> bool:
    """Whether the question speaks of its source ("the sentence", "these …", "this …", a "his" before any name) instead of standing alone."""
    if SOURCE_REFERENCE.search(question) or DEMONSTRATIVE.search(question):
        return True
    pronoun = PERSONAL_PRONOUN.search(question)
    return pronoun is not None and not any(word[:1].isupper() for word in question[:pronoun.start()].split()[1:])


def _words(text: str) -> set[str]:
    return set(normalize_answer(text).split()) - STOPWORDS


def is_near_duplicate(question: str, kept: list[str]) -> bool:
    mine = _words(question)
    return any(mine and len(mine & _words(k)) / len(mine | _words(k)) >= DUPLICATE_OVERLAP for k in kept)


def answered_from_chunk(answer_step: Callable[[str, Document], str], question: str, chunk: Document, answer: str) -> float:
    """F1 of what the grounded answer step gives back for ``question`` reading ``chunk`` alone."""
    return f1_score(strip_citations(answer_step(question, chunk)), [answer])


def second_reading(generator: Any, question: str, answer: str, chunk: Document, threshold: float) -> tuple[float | None, str | None]:
    """(P(yes), None) where ``generator`` calls ``answer`` correct for ``question`` over ``chunk`` at ``threshold`` or
    above; (P(yes), "judged_not_its_answer") below it; (None, "check_failed") on an unusable reply or a failed call —
    an item nobody could check is not kept."""
    from ragkit.eval.judge import correct_task

    try:
        p_yes = yes_probability(generator, context_messages([chunk], correct_task(question, answer)), step="testset_check")
    except RuntimeError:
        return None, "check_failed"
    return (round(p_yes, 3), None) if p_yes >= threshold else (round(p_yes, 3), "judged_not_its_answer")


def grounded_answer_step(generator: Any, embedder: str = "all-MiniLM-L6-v2") -> Callable[[str, Document], str]:
    """The engine's own span answer (evidence sentence + span-constrained decoding) over one chunk."""
    from ragkit.components.evidence_selector import EvidenceSelector
    from ragkit.components.guarded_generator import GuardedGenerator
    from ragkit.llm.prompts import evidence_messages

    selector, answer = EvidenceSelector(embedder=embedder), GuardedGenerator(chat_generator=generator, answer_mode="grounded", max_tokens=32)

    def run(question: str, chunk: Document) -> str:
        evidence = selector.run(query=question, documents=[chunk], mode="grounded")["evidence"]
        out = answer.run(messages=evidence_messages(evidence, question), documents=[chunk], mode="grounded", query=question, evidence=evidence)
        return out["replies"][0].text if out["ok"] else ""

    return run


# -- 4. multi and unanswerable items from kept ones, no LLM -------------------------------------------
def join_parts(first: EvalItem, second: EvalItem) -> EvalItem:
    q2 = second.question[0].lower() + second.question[1:] if not second.question.split()[0].isupper() else second.question
    parts = [{"question": it.question, "answers": it.answers, "chunks": it.chunks} for it in (first, second)]
    return EvalItem(question=f"{first.question.rstrip('?')}, and {q2}", answers=first.answers + second.answers, kind="multi",
                    chunks=first.chunks + second.chunks, parts=parts, meta={"from": [first.id, second.id]})


def absent_entity(index: RagIndex, rng: random.Random, used: set[str]) -> str | None:
    """An entity none of whose words the index has seen: from :data:`ABSENT_ENTITIES`, then a made-up person."""
    invented = [f"{given} {family}" for given in INVENTED_GIVEN for family in INVENTED_FAMILY]
    for name in rng.sample(ABSENT_ENTITIES, len(ABSENT_ENTITIES)) + rng.sample(invented, len(invented)):
        if name not in used and not index.term_weights(name.replace("the ", "")):
            return name
    return None


def unanswerable_from(item: EvalItem, index: RagIndex, rng: random.Random, used: set[str]) -> tuple[EvalItem | None, str]:
    """The item's question about another entity: its proper name (not the answer) replaced by one absent from the index."""
    # not a month ("the attack in September 11, 2001" became "in Rabindranath Tagore 11, 2001"), nor code: a name inside
    # `…` is an identifier ("What is the shorthand for raising a `TypeError`?" became "… a `Srinivasa Ramanujan`?")
    names = [m.group(0) for m in PROPER_NAME.finditer(item.question, 1) if m.group(0) not in " ".join(item.answers)
             and m.group(0) not in MONTHS and item.question[:m.start()].count("`") % 2 == 0]
    if not names:
        return None, "no_name_in_question"
    entity = absent_entity(index, rng, used)
    if entity is None:
        return None, "no_absent_entity_left"
    used.add(entity)
    original = max(names, key=len)
    if re.search(rf"\bthe {re.escape(original)}", item.question, re.I) and entity.startswith("the "):
        entity = entity[4:]  # "the Mongol force" -> "the Mariana Trench force", not "the the …"
    return EvalItem(question=item.question.replace(original, entity, 1), kind="unanswerable", meta={"from": item.id, "replaced": [original, entity]}), "accepted"


# -- the whole generation --------------------------------------------------------------------------
def generate_testset(
    index: RagIndex, chat_generator: Any, n: int = 40, mix: dict[str, float] | None = None, seed: int = 0,
    chunk_ids: list[str] | None = None, embedder: str | None = None, judge: bool = True, progress: Callable[[int, int], None] | None = None,
    check_generator: Any | None = None, check_threshold: float = CHECK_THRESHOLD, question_context: str = "sentence",
) -> tuple[list[EvalItem], GenerationReport]:
    """``n`` items from ``index``'s chunks (or ``chunk_ids``), in the proportions of ``mix``. The LLM calls
    are traced as one ``testset`` step, so the report's ``llm_calls`` are exact (cache hits are not calls). With
    ``check_generator``, a candidate the round trip keeps is kept only if that model's P(yes) to "is this answer
    correct?" over its chunk is at least ``check_threshold`` (measured for :data:`CHECK_MODEL`). ``question_context``:
    what the writer reads, its answer's ``"sentence"`` or the sentence's whole chunk, ``"passage"``."""
    from haystack import tracing

    from ragkit.pipeline.trace import RagkitTracer

    started = time.perf_counter()
    mix = mix or DEFAULT_MIX
    if set(mix) - set(DEFAULT_MIX) or any(v < 0 for v in mix.values()):
        raise ValueError(f"mix takes the kinds {sorted(DEFAULT_MIX)} with shares >= 0, not {mix}")
    if question_context not in QUESTION_CONTEXTS:
        raise ValueError(f"question_context is one of {QUESTION_CONTEXTS}, not {question_context!r}")
    report = GenerationReport(requested=n)
    rng = random.Random(seed)
    wanted = {kind: round(n * mix.get(kind, 0.0)) for kind in DEFAULT_MIX}
    wanted["single"] += n - sum(wanted.values())  # rounding goes to the plain kind
    # single questions also become the multi items' parts and the unanswerable items' originals
    need = {"single": wanted["single"] + 2 * wanted["multi"] + wanted["unanswerable"], "paraphrase": wanted["paraphrase"]}
    ids = list(chunk_ids) if chunk_ids is not None else list(index.chunks)
    rng.shuffle(ids)
    answer_step = grounded_answer_step(chat_generator, embedder or index.embedder)
    too_common = answer_in_most_chunks(index.chunks)  # over the whole index, not only chunk_ids
    kept: dict[str, list[EvalItem]] = {"single": [], "paraphrase": []}
    check = (lambda question, answer, chunk: second_reading(check_generator, question, answer, chunk, check_threshold)) if check_generator is not None else None
    with RagkitTracer().collect() as trace, tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": "testset", "haystack.component.type": "generate_testset"}):
        for i in range(candidate_budget(sum(need.values()), checked=check is not None)):
            open_kinds = [k for k in kept if len(kept[k]) < need[k]]
            if not open_kinds or not ids:
                break
            kind = min(open_kinds, key=lambda k: len(kept[k]) / need[k])  # the kind furthest behind
            kept_items = [item for items in kept.values() for item in items]
            item, outcome = _candidate(index.chunks[ids[i % len(ids)]], kind, chat_generator, answer_step, rng, kept_items, judge, too_common, check,
                                       question_context)
            report.count(kind, outcome)
            if item is not None:
                kept[kind].append(item)
            if progress:
                progress(sum(len(v) for v in kept.values()), sum(need.values()))
    report.llm_calls, report.cache_hits = trace.llm_calls, trace.cache_hits
    items, pool = kept["paraphrase"][: wanted["paraphrase"]], kept["single"]
    rng.shuffle(pool)
    plain = [pool.pop() for _ in range(min(wanted["single"], len(pool)))]
    items += plain
    joined = 0
    while joined < wanted["multi"] and len(pool) >= 2:
        first = pool.pop()
        partner = next((p for p in pool if set(p.chunks).isdisjoint(first.chunks)), None)
        report.count("multi", "accepted" if partner else "no_second_chunk")
        if partner is not None:
            pool.remove(partner)
            items.append(join_parts(first, partner))
            joined += 1
    used, swapped_n = set(), 0  # the absent entities put in so far, and the unanswerable items made
    for source in pool + plain:
        if swapped_n >= wanted["unanswerable"]:
            break
        swapped, outcome = unanswerable_from(source, index, rng, used)
        if swapped is not None and is_near_duplicate(swapped.question, [i.question for i in items]):
            swapped, outcome = None, "duplicate"
        report.count("unanswerable", outcome)
        if swapped is not None:
            items.append(swapped)
            swapped_n += 1
    report.seconds = time.perf_counter() - started
    report.in_set = {kind: sum(1 for it in items if it.kind == kind) for kind in DEFAULT_MIX}
    return items, report


def candidate_budget(needed: int, checked: bool) -> int:
    """The most candidates tried for ``needed`` kept items, so a corpus without spans ends and never loops: four a kept
    item (the round trip keeps about one in three), and as many again for each item the second reading drops — with
    the old bound alone ``--check-llm`` kept 12 of 16 items asked of sample_docs."""
    return math.ceil((4 / CHECK_KEEPS if checked else 4) * needed) + 10


def _candidate(chunk: Document, kind: str, generator: Any, answer_step, rng: random.Random, kept: list[EvalItem], judge: bool,
               too_common: Callable[[str], bool], check: Callable[[str, str, Document], tuple[float | None, str | None]] | None = None,
               question_context: str = "sentence") -> tuple[EvalItem | None, str]:
    text = chunk.content or ""
    sentences = [text[a:b] for a, b in sentence_spans(text, min_chars=40) if not (text[a:b].lstrip().startswith("#") or TOC_ENTRY.search(text[a:b]))]
    options = [(s, span, t) for s in sentences for span, t in answer_spans(s)]
    if not options:
        return None, "no_answer_span"
    options = [option for option in options if not too_common(option[1])]
    if not options:  # decided before the LLM is asked anything
        return None, "answer_in_most_chunks"
    asked = {normalize_answer(a) for item in kept for a in item.answers}  # an answer per item: 4 of 9 from a manual were "DER"
    if not (options := [option for option in options if normalize_answer(option[1]) not in asked]):
        return None, "answer_already_asked"
    sentence, answer, answer_kind = rng.choice(options)
    question, why = write_question(generator, sentence, answer, answer_kind, paraphrase=kind == "paraphrase",
                                   passage=text if question_context == "passage" else None)
    if question is None:
        return None, why
    if set(normalize_answer(answer).split()) <= set(normalize_answer(question).split()):
        return None, "answer_in_question"
    if longest_copied_run(question, text) > MAX_COPIED_WORDS[kind]:
        return None, "copies_the_chunk"
    if refers_to_its_text(question):
        return None, "refers_to_its_text"
    if is_near_duplicate(question, [item.question for item in kept]):
        return None, "duplicate"
    returned = answered_from_chunk(answer_step, question, chunk, answer)
    if returned < ANSWERED_F1:
        return None, "not_answerable_from_its_chunk"
    if check is not None:  # before the recorded judge: a rejected candidate costs no second pass
        p_correct, why = check(question, answer, chunk)
        if why is not None:
            return None, why
    meta: dict[str, Any] = {"sentence": sentence, "answer_type": answer_kind, "round_trip_f1": round(returned, 3)}
    if judge:
        try:
            meta["judge_p_answerable"] = round(yes_probability(generator, context_messages([chunk], sufficiency_task(question)), step="testset_judge"), 3)
        except RuntimeError as exc:  # an unusable judge reply is recorded, not fatal: the round trip decided
            meta["judge_error"] = str(exc)[:120]
    if check is not None:
        meta["check_p_correct"] = p_correct
    return EvalItem(question=question, answers=[answer], kind=kind, chunks=[chunk.id], source=chunk.meta.get("source"), meta=meta), "accepted"
