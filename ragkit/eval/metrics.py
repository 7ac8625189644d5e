"""Answer-quality measures for a batch of questions: SQuAD exact match and token F1, lexical support.

Haystack's ``AnswerExactMatchEvaluator`` compares raw strings and its other answer evaluators need an
extra model (SAS) or an LLM judge; SQuAD's own normalisation (lower case, no punctuation, no
articles) and token-overlap F1 exist in no installed library, so they are written here — a dozen
lines, matching the official v1.1 evaluation script. Citations like ``[1]`` are stripped first.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Iterable

from haystack import Document

_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_WORD = re.compile(r"[a-z0-9]+")
_PUNCTUATION = set(string.punctuation)
STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been being it its this that these those as "
    "which who whom whose what when where why how not no do does did has have had than then there their they he she his "
    "her him them we you your our i me my so if into about over under also can could would should may might will shall".split()
)


def strip_citations(answer: str) -> str:
    return _CITATION.sub("", answer).strip()


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: Iterable[str]) -> float:
    pred = normalize_answer(strip_citations(prediction))
    return float(any(pred == normalize_answer(g) for g in gold))


def f1_score(prediction: str, gold: Iterable[str]) -> float:
    """SQuAD token F1 against the best-matching gold answer."""
    pred_tokens = normalize_answer(strip_citations(prediction)).split()
    best = 0.0
    for g in gold:
        gold_tokens = normalize_answer(g).split()
        same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
        if same and pred_tokens and gold_tokens:
            precision, recall = same / len(pred_tokens), same / len(gold_tokens)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def holds_gold_answer(prediction: str, gold: Iterable[str]) -> bool:
    """Whether a gold answer appears, as whole words, inside the prediction: a right answer given as a sentence,
    which token F1 against a short gold span counts wrong (a looser reading of "right", never the scored one)."""
    pred = f" {normalize_answer(strip_citations(prediction))} "
    return any((g := normalize_answer(answer)) and f" {g} " in pred for answer in gold)


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def lexical_support(answer: str, documents: list[Document]) -> float | None:
    """Share of the answer's content words that occur in the documents (None if it has none).

    A judge-free faithfulness proxy: it cannot see a contradiction built from the sources' own
    words, but it does not share the judge's blind spots either."""
    words = content_words(strip_citations(answer))
    if not words:
        return None
    context = set(content_words(" ".join(d.content or "" for d in documents)))
    return sum(w in context for w in words) / len(words)


def load_squad_questions(path, titles: Iterable[str] | None = None, n: int | None = None, seed: int = 0) -> list[dict]:
    """SQuAD v1.1 questions (``{"id", "question", "answers", "title", "context"}``) from a .json or
    .json.gz file, optionally only those of some articles (``titles``, underscores or spaces), a
    seeded sample of ``n``."""
    import gzip
    import json
    import random

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    wanted = {t.replace(" ", "_") for t in titles} if titles else None
    questions = [
        {"id": qa["id"], "question": qa["question"], "answers": [a["text"] for a in qa["answers"]], "title": article["title"], "context": para["context"]}
        for article in data["data"]
        if wanted is None or article["title"] in wanted
        for para in article["paragraphs"]
        for qa in para["qas"]
    ]
    if n is not None and n < len(questions):
        questions = random.Random(seed).sample(questions, n)
    return questions
