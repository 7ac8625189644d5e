"""Follow-up questions without the LLM: does a question lean on the conversation, what does it lean
on, and a rewrite that names it.

"Where was Nikola Tesla born?" then "and what did he study?": the second question's "he" has no
antecedent in it, so it retrieves chunks about anyone who studied. :func:`detect` decides, with
rules that take microseconds, whether a question depends on the history:

* an elliptical opener — "and …", "what about …", "how about …", "also …";
* a pronoun (he, she, it, they, his, its, their, …) or a demonstrative used as one ("when did that
  happen?", "this city") with no name before it in the question itself ("When did Tesla say he
  left?" names its "he");
* a very short question ("Why?", "And Edison?").

A self-contained question passes through untouched. :func:`antecedents` lists what the history
talks about — names (runs of capitalised words) from the latest user turn first, then from the
answer, then older turns — and :func:`rules_rewrite` puts the first one in the pronoun's place
("what did he study?" → "What did Nikola Tesla study?", "what about Edison?" → the previous question
about Edison). The LLM's rewrite (:class:`~ragkit.components.follow_up_rewriter.FollowUpRewriter`)
uses :func:`allowed_words` for its grammar: the question's words and the history's, nothing new.

Hand-written because Haystack's ``QueryExpander``/rewriters call an LLM for every question; a chat
asks many self-contained questions, and deciding that one is self-contained must cost nothing.

Usage::

    detect("and what did he study?")                 # FollowUp(needed=True, reason="opens with 'and'")
    history = [ChatMessage.from_user("Where was Nikola Tesla born?"), ChatMessage.from_assistant("Smiljan [1]")]
    rules_rewrite("and what did he study?", history)   # "What did Nikola Tesla study?"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from haystack.dataclasses import ChatMessage

_CITATION = re.compile(r"\s*\[\d+\]")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’.-]*[A-Za-z0-9]|[A-Za-z0-9]")
# the longer openers first: a regex alternation takes the first that matches, and "and" alone would hide "and what about"
OPENERS = re.compile(r"^\s*(?:and\s+what\s+about|and\s+how\s+about|what\s+about|how\s+about|what\s+else|and|also|plus|but|so|then|or)\b[\s,]*", re.I)
SUBJECT = {"he", "she", "they", "it"}
POSSESSIVE = {"his", "its", "their", "her"}
OBJECT = {"him", "them", "it", "her"}
PRONOUNS = SUBJECT | POSSESSIVE | OBJECT | {"himself", "herself", "itself", "themselves", "theirs", "hers"}
# a demonstrative used as a pronoun or with a noun the history supplies: "when did that happen?", "is
# this city …" — but not a relative "that" after a noun ("the river that flows …")
_DEMONSTRATIVE = re.compile(
    r"(?:^|\b(?:in|of|at|on|to|from|for|with|by|about|after|before|during|since|through|into|near|across|within|under|over|around|inside|outside|"
    r"between|among|against|like|did|does|do|was|is|were|are|has|have|had)\s+)"
    r"(this|that|these|those)\b", re.I)
# words a question starts with that are capitalised only because they start it
_QUESTION_WORDS = {"what", "who", "whom", "whose", "when", "where", "which", "why", "how", "is", "are", "was", "were", "do", "does", "did", "can",
                   "could", "would", "should", "will", "has", "have", "had", "in", "on", "at", "and", "also", "but", "so", "the", "a", "an",
                   "name", "list", "give", "tell", "according", "during", "after", "before", "for", "from", "to", "of", "by", "with", "as", "if", "or"}
_NAME_JOINERS = {"of", "the", "de", "da", "del", "von", "van", "der", "and", "la", "le", "du", "upon", "on"}
# "there" as a place ("how many people live there?"), not the existential "is there", "there were"
_THERE = re.compile(r"(?<!\bis )(?<!\bare )(?<!\bwas )(?<!\bwere )(?<!\bbe )\bthere\b(?!\s+(?:is|are|was|were|be|been|has|have|had|exist|exists|existed|remain|remains|seem|seems|appear|appears)\b)", re.I)
SHORT_WORDS = 3  # "Why?", "And Edison?", "In what year?": too short to stand alone after an exchange


@dataclass(frozen=True)
class FollowUp:
    needed: bool
    reason: str


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def strip_citations(text: str) -> str:
    return _CITATION.sub("", text or "").strip()


def names_in(text: str) -> list[str]:
    """Runs of capitalised words ("Nikola Tesla", "Victoria and Albert Museum", "Smiljan"), longest
    first; a question's first word counts only when it is not a question or function word."""
    tokens = re.findall(r"[A-Za-z0-9][A-Za-z0-9'’&.-]*", strip_citations(text))
    found: list[str] = []
    run: list[str] = []

    def close() -> None:
        while run and run[-1].lower() in _NAME_JOINERS:
            run.pop()
        if run:
            name = " ".join(run)
            if name not in found:
                found.append(name)
        run.clear()

    for i, token in enumerate(tokens):
        bare = token.rstrip(".").removesuffix("'s").removesuffix("’s")
        capital = bare[:1].isupper() or (bare[:1].isdigit() and run)
        if capital and not (i == 0 and bare.lower() in _QUESTION_WORDS) and bare.lower() not in PRONOUNS and bare not in ("I",):
            run.append(bare)
            if bare != token.rstrip("."):  # a possessive ends the name
                close()
        elif run and token.lower() in _NAME_JOINERS and i + 1 < len(tokens) and tokens[i + 1][:1].isupper():
            run.append(token)
        else:
            close()
    close()
    return sorted(found, key=lambda n: -len(n.split()))


def _has_antecedent_before(tokens: list[str], position: int) -> bool:
    """A name (not the question word opening the question) or a number before ``position``."""
    for i, token in enumerate(tokens[:position]):
        bare = token.strip("'’")
        if bare[:1].isupper() and not (i == 0 and bare.lower() in _QUESTION_WORDS) and bare.lower() not in PRONOUNS:
            return True
    return False


def detect(question: str) -> FollowUp:
    """Whether ``question`` needs the conversation to be understood (rules, no LLM)."""
    text = question.strip()
    opener = OPENERS.match(text)
    if opener and opener.group(0).strip():
        return FollowUp(True, f"opens with {opener.group(0).strip(' ,').lower()!r}")
    tokens = re.findall(r"[A-Za-z0-9'’-]+", text)
    if len(tokens) <= SHORT_WORDS:
        return FollowUp(True, f"{len(tokens)} word{'s' if len(tokens) != 1 else ''}: too short to stand alone")
    for i, token in enumerate(tokens):
        low = token.lower()
        if low in PRONOUNS and not _has_antecedent_before(tokens, i):
            if low == "it" and _expletive_it(tokens, i):
                continue
            return FollowUp(True, f"{low!r} with no name before it")
    there = _THERE.search(text)
    if there and not _has_antecedent_before(tokens, len(re.findall(r"[A-Za-z0-9'’-]+", text[:there.start()]))):
        return FollowUp(True, "'there' with no place named before it")
    demonstrative = _DEMONSTRATIVE.search(text)
    if demonstrative:
        position = len(re.findall(r"[A-Za-z0-9'’-]+", text[:demonstrative.start(1)]))
        if not _has_antecedent_before(tokens, position):
            return FollowUp(True, f"{demonstrative.group(1).lower()!r} with no name before it")
    return FollowUp(False, "self-contained")


def _expletive_it(tokens: list[str], i: int) -> bool:
    """"What is it called when …", "how long does it take to …", "is it true that …": an "it" that refers to nothing."""
    after = " ".join(t.lower() for t in tokens[i + 1:i + 3])
    return bool(re.match(r"(?:called|take|takes|took|mean|means|true|possible|likely|necessary|important|cost|costs)\b", after))


def bounded(history: list[ChatMessage], max_tokens: int, count=lambda text: max(1, round(len(text.split()) * 1.3))) -> tuple[list[ChatMessage], int, int]:
    """The most recent messages within ``max_tokens`` (whole turns, newest kept first): (kept,
    tokens kept, messages dropped)."""
    kept: list[ChatMessage] = []
    used = 0
    for message in reversed(history):
        cost = count(message.text or "")
        if kept and used + cost > max_tokens:
            break
        kept.insert(0, message)
        used += cost
    return kept, used, len(history) - len(kept)


def _turn_texts(history: list[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role.value, strip_citations(m.text or "")) for m in history if m.text]


def antecedents(history: list[ChatMessage]) -> list[str]:
    """What the conversation is about, most likely referent first, latest turn first: within a turn,
    a name that is one of its sources' titles (else those titles), then its other names."""
    turns: list[list[ChatMessage]] = []
    for message in history:  # a turn: a user message and the replies after it
        if message.role.value == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    found: list[str] = []
    for turn in reversed(turns):
        names = [n for m in turn if m.text for n in names_in(m.text)]
        titles = [t for m in turn if m.role.value == "assistant" for t in (m.meta or {}).get("titles", []) if t]
        # what the turn's sources were about comes first: a name of the turn that is one of their
        # titles ("Jacksonville" for "Jacksonville, Florida"), else the titles, then the turn's other names
        on_topic = [n for n in names if any(_names_title(n, t) for t in titles)]
        for name in [*on_topic, *([] if on_topic else titles), *names, *titles]:
            if name not in found:
                found.append(name)
    return found


def _names_title(name: str, title: str) -> bool:
    """Whether ``name`` refers to the article ``title``: its words are the title's leading words, or its initials."""
    title_words = [w for w in re.findall(r"[A-Za-z0-9]+", re.sub(r"\s*\(.*\)$", "", title.split(",")[0]))]
    name_words = re.findall(r"[A-Za-z0-9]+", name)
    if not name_words or not title_words:
        return False
    lowered = [w.lower() for w in title_words]
    if all(w.lower() in lowered for w in name_words):
        return True
    return len(name_words) == 1 and name_words[0].isupper() and name_words[0] == "".join(w[0] for w in title_words if w[0].isupper())


def previous_question(history: list[ChatMessage]) -> str | None:
    for message in reversed(history):
        if message.role.value == "user" and message.text:
            return strip_citations(message.text)
    return None


def _possessive(name: str) -> str:
    return name + ("'" if name.endswith("s") else "'s")


def rules_rewrite(question: str, history: list[ChatMessage]) -> str | None:
    """The question with its first pronoun replaced by the history's first antecedent; "what about X?"
    as the previous question about X; None when the history names nothing to put in."""
    names = antecedents(history)
    text = question.strip()
    opener = OPENERS.match(text)
    rest = text[opener.end():] if opener else text
    if opener and re.match(r"\s*(?:and\s+)?(?:what|how)\s+about", opener.group(0), re.I):
        previous = previous_question(history)
        subject = rest.strip().rstrip("?").strip()
        if previous and subject:
            old = next((n for n in names_in(previous)), None)
            subject = _replace_pronoun(subject, names[0]) if names and any(w.lower() in PRONOUNS for w in words(subject)) else subject
            if old and old in previous:
                return _sentence(previous.replace(old, subject, 1))
            return _sentence(f"{previous.rstrip('?')} — {subject}?")
    if not names:
        return None
    replaced = _replace_pronoun(rest, names[0])
    if replaced != rest:
        return _sentence(replaced)
    there = _THERE.search(rest)
    if there:
        return _sentence(rest[:there.start()] + f"in {names[0]}" + rest[there.end():])
    demonstrative = _DEMONSTRATIVE.search(rest)
    if demonstrative:  # "when did that happen?" → "… that happen (Nikola Tesla)?": the name, where retrieval sees it
        return _sentence(f"{rest.rstrip(' ?')} ({names[0]})?")
    return _sentence(f"{rest.rstrip(' ?')} ({names[0]})?") if rest.strip() else None


def _replace_pronoun(text: str, name: str) -> str:
    tokens = list(re.finditer(r"[A-Za-z'’-]+", text))
    for n, m in enumerate(tokens):
        low = m.group(0).lower()
        if low not in PRONOUNS or (low == "it" and _expletive_it([t.group(0) for t in tokens], n)):
            continue
        following = tokens[n + 1].group(0).lower() if n + 1 < len(tokens) else ""
        possessive = low in ("his", "its", "their", "theirs", "hers") or (low == "her" and following and following not in _NOT_A_NOUN)
        replacement = _possessive(name) if possessive else name
        return text[:m.start()] + replacement + text[m.end():]
    return text


_NOT_A_NOUN = {"in", "on", "at", "to", "from", "for", "with", "by", "about", "after", "before", "and", "or", "as", "when", "if", "than", "that", "the", "a", "an"}


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    text = text[:1].upper() + text[1:]
    return text if text.endswith("?") else text.rstrip(".!") + "?"


def allowed_words(question: str, history: Iterable[ChatMessage]) -> list[str]:
    """Every word the rewrite may use: the question's and the history's (citations dropped), each once."""
    seen: dict[str, None] = {}
    for text in [question, *(strip_citations(m.text or "") for m in history)]:
        for word in words(text):
            seen.setdefault(word, None)
            seen.setdefault(word.lower(), None)
            seen.setdefault(word[:1].upper() + word[1:], None)
    return list(seen)


def uses_only(rewrite: str, allowed: Iterable[str]) -> bool:
    """Whether every word of ``rewrite`` is one of ``allowed`` (case-insensitive): no new facts."""
    vocabulary = {w.lower() for w in allowed}
    return all(w.lower() in vocabulary for w in words(rewrite))
