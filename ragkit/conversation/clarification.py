"""Is a question ambiguous, decided from the evidence — and the person's reply, read without the LLM.

**Ambiguity** (:func:`find_ambiguity`): the retrieved chunks are grouped by what they are about (the
document's title: "George Washington", "Washington (state)"). The question is ambiguous when

1. two or more groups *contend* — each group's best chunk scores at least ``ratio`` × the best
   chunk's score — and
2. the question names none of them apart — it contains no title word that one contender has and
   the others lack ("George" settles it, "Washington" does not) — and
3. the question's reference is one the contenders share: a word of two or more contenders' titles
   (a namesake: "Where was Washington born?"), or a generic reference — "the city", "the war", "he"
   — whose noun two or more contenders use (in the chunks retrieved or, given the index, elsewhere in
   their document: "the city" for Warsaw's paragraph on its lakes), in a question that names nothing
   else (then the options are those contenders).

A question that names one contender, or several (a comparison), is clear; so is one whose evidence
has a clear leader. The options are the contenders (2–4), worded from their titles (with the source
when two titles are the same), each with the scope that answers it: a ``{"source": [...]}`` filter.

**Replies** (:func:`resolve_reply`): "2", "the second", "the last one", "yes" (the first option) and
"no" (the other one, when there are two), or an option's own words ("the state") — decided by rules.
"both", "any", "doesn't matter" answers without a scope. Anything else matches nothing: the session
asks once more, then answers without a scope and says so. A reply that is itself a new question is
taken as one.

Hand-written: deciding ambiguity from which documents the evidence comes from is specific to a
retrieval index; no Haystack component does it, and asking the LLM "is this ambiguous?" is the
model's guess, not the evidence.

Usage::

    found = find_ambiguity("Where was Washington born?", documents)
    found.ambiguous, found.reason, [o.label for o in found.options]
    resolve_reply("the second one", found.options)    # Choice(option=1, how="ordinal")
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any, Callable

from haystack import Document

from ragkit.conversation.follow_ups import PRONOUNS, detect, names_in
from ragkit.eval.metrics import STOPWORDS

DEFAULT_RATIO = 0.3  # chosen on squad_dev half A: best F1 of asking (bench/results/conversation.json)
MAX_OPTIONS = 4
_WORD = re.compile(r"[a-z0-9]+")
_GENERIC = re.compile(r"\b(?:the|this|that|these|those)\s+([a-z][a-z-]{2,})\b")
ORDINALS = {"first": 0, "1st": 0, "one": 0, "second": 1, "2nd": 1, "two": 1, "third": 2, "3rd": 2, "three": 2, "fourth": 3, "4th": 3, "four": 3}
_YES = re.compile(r"^\s*(?:yes|yeah|yep|yup|sure|correct|right|exactly|that one|y)\b[\s.!]*$", re.I)
_NO = re.compile(r"^\s*(?:no|nope|nah|not that one|the other(?: one)?|n)\b[\s.!]*$", re.I)
_ANY = re.compile(r"^\s*(?:both|all(?: of them)?|any(?: of them)?|either(?: one)?|(?:it )?doesn'?t matter|whichever|no preference|don'?t know|not sure)\b[\s.!]*$", re.I)
_LAST = re.compile(r"\b(?:last|latter)\b", re.I)


def title_of(doc: Document) -> str:
    """What a chunk is about: its document's title, else its file name without the extension."""
    title = (doc.meta or {}).get("title")
    if title:
        return str(title).strip()
    source = str((doc.meta or {}).get("source") or doc.id)
    return PurePosixPath(source.split(":", 1)[-1]).stem.replace("_", " ")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


@dataclass
class Option:
    label: str
    scope: dict[str, list[str]]
    score: float
    sources: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Ambiguity:
    ambiguous: bool
    reason: str
    options: list[Option] = field(default_factory=list)

    def prompt(self, question: str) -> str:
        """What the person is asked: "Which one do you mean? 1) … 2) …"."""
        listed = "  ".join(f"{i}) {o.label}" for i, o in enumerate(self.options, 1))
        return f"“{question}” could mean more than one thing in your documents. Which one do you mean? {listed}"

    def to_dict(self, question: str) -> dict[str, Any]:
        return {"question": question, "reason": self.reason, "options": [o.to_dict() for o in self.options], "prompt": self.prompt(question)}


def _groups(documents: list[Document]) -> list[tuple[str, list[Document], float]]:
    by_title: dict[str, list[Document]] = {}
    for doc in documents:
        by_title.setdefault(title_of(doc), []).append(doc)
    groups = [(title, docs, max(float(d.score or 0.0) for d in docs)) for title, docs in by_title.items()]
    return sorted(groups, key=lambda g: -g[2])


def find_ambiguity(
    query: str, documents: list[Document], ratio: float = DEFAULT_RATIO, max_options: int = MAX_OPTIONS, source_text: Callable[[str], str] | None = None,
) -> Ambiguity:
    """Whether ``query`` reads as several things in ``documents`` (retrieved, best first); see the module.
    ``source_text``: a source's whole text, lower-cased (a generic noun may be used elsewhere in its document)."""
    groups = _groups([d for d in documents if d.score is not None])
    if len(groups) < 2:
        return Ambiguity(False, "the evidence is about one subject")
    best = groups[0][2]
    if best <= 0:
        return Ambiguity(False, "no evidence scored above zero")
    contenders = [g for g in groups if g[2] >= ratio * best][:max_options]
    if len(contenders) < 2:
        return Ambiguity(False, f"{groups[0][0]!r} leads the evidence ({groups[1][2] / best:.2f} of its score for the next)")
    question = _words(query)
    titles = {title: _words(title) for title, _, _ in contenders}
    named = []
    for title, title_words in titles.items():
        others = set().union(*(w for t, w in titles.items() if t != title))
        if (title_words - others) & question:
            named.append(title)
    if named:
        return Ambiguity(False, f"the question names {', '.join(repr(n) for n in named)}")
    shared = {w for w in question if sum(w in t for t in titles.values()) >= 2}
    reference = None
    if shared:
        reference = f"{', '.join(sorted(shared))!r} names {len(contenders)} different subjects"
    elif not [n for n in names_in(query)]:
        follow = detect(query)
        lowered = query.lower()
        generic = [m.group(1) for m in _GENERIC.finditer(lowered) if m.group(1) not in STOPWORDS]
        # "the city" reads as any contender whose chunks use the noun: those are the options
        def uses(noun: str, docs: list[Document]) -> bool:
            pattern = re.compile(rf"\b{re.escape(noun)}")
            texts = [(d.content or "").lower() for d in docs]
            if source_text is not None:
                texts += [source_text(str(d.meta.get("source"))) for d in docs if d.meta.get("source")]
            return any(pattern.search(text) for text in texts)

        fits = {noun: [g for g in contenders if uses(noun, g[1])] for noun in generic}
        noun = max(generic, key=lambda n: len(fits[n]), default=None)
        if noun is not None and len(fits[noun]) >= 2:
            contenders = fits[noun]
            reference = f"'the {noun}' fits {len(contenders)} subjects"
        elif follow.needed and any(w in PRONOUNS for w in _WORD.findall(lowered)):
            reference = f"the question's pronoun could be any of {len(contenders)} subjects"
    if reference is None:
        return Ambiguity(False, "the contenders share no name or reference with the question")
    return Ambiguity(True, reference, options_for(contenders))


def options_for(contenders: list[tuple[str, list[Document], float]]) -> list[Option]:
    labels = [title for title, _, _ in contenders]
    options = []
    for title, docs, score in contenders:
        sources = sorted({str(d.meta.get("source") or d.id) for d in docs})
        label = title if labels.count(title) == 1 else f"{title} ({', '.join(sources)})"
        options.append(Option(label=label, scope={"source": sources}, score=round(score, 4), sources=sources))
    return options


# -- the reply -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    option: int | None  # the option's position, or None: no option (see ``how``)
    how: str  # "number", "ordinal", "yes", "no", "words", "any" (answer without a scope), "new_question", "no_match"


def resolve_reply(reply: str, options: list[Option] | list[dict]) -> Choice:
    """Which option ``reply`` picks (see the module); deterministic."""
    labels = [o["label"] if isinstance(o, dict) else o.label for o in options]
    text = reply.strip()
    low = text.lower()
    number = re.fullmatch(r"\s*(?:option\s*|number\s*|#\s*)?(\d{1,2})[\s.)]*", low)
    if number:
        k = int(number.group(1)) - 1
        return Choice(k, "number") if 0 <= k < len(labels) else Choice(None, "no_match")
    for word, k in ORDINALS.items():
        if re.fullmatch(rf"(?:the\s+)?{word}(?:\s+one)?(?:\s+option)?[\s.!]*", low) and k < len(labels):
            return Choice(k, "ordinal")
    if re.fullmatch(r"(?:the\s+)?(?:last|latter)(?:\s+one)?[\s.!]*", low):
        return Choice(len(labels) - 1, "ordinal")
    if _YES.match(text):
        return Choice(0, "yes")
    if _NO.match(text):
        return Choice(1, "no") if len(labels) == 2 else Choice(None, "no_match")
    if _ANY.match(text):
        return Choice(None, "any")
    said = _words(text)
    overlaps = []
    for k, label in enumerate(labels):
        own = _words(label) - set().union(*(_words(other) for j, other in enumerate(labels) if j != k))
        overlaps.append(len(own & said))
    if max(overlaps, default=0) > 0 and overlaps.count(max(overlaps)) == 1:
        return Choice(overlaps.index(max(overlaps)), "words")
    for k, label in enumerate(labels):  # the whole label, typed out
        if label.lower() in low:
            return Choice(k, "words")
    if text.endswith("?") and len(_WORD.findall(low)) > 3:
        return Choice(None, "new_question")
    return Choice(None, "no_match")


NO_MATCH_NOTE = "your reply matched none of the options, so this answers without narrowing the search"


def ask_again_text(options: list[Option] | list[dict]) -> str:
    """What a reply that matched no option gets once: the options, numbered."""
    labels = [o.label if isinstance(o, Option) else o["label"] for o in options]
    return "I could not tell which one you meant. Reply with a number, or words from one: " + "  ".join(f"{i}) {label}" for i, label in enumerate(labels, 1))
