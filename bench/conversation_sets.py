"""Build the conversation sets bench/conversation.py measures: follow-up pairs and a clarification set,
from SQuAD v1.1 dev and SQuAD-Shifts new_wiki (data/squad/, CC BY-SA 4.0; the sets are written to
data/conversations/ under the same license).

**Follow-up pairs** (one JSON object a line: ``history``, ``question``, ``original``, ``chunks``, ``kind``).
For an article whose title names its subject (Nikola Tesla, Warsaw, the Normans …), a question ``q2``
that mentions the subject ("When did Tesla move to New York?") becomes a follow-up by replacing the
mention with a pronoun — "he"/"him"/"his" for a person, "she"/"her" likewise, "they"/"them"/"their"
for a plural title, "it"/"its" otherwise (a person is an article whose text uses "he"/"his" (or
"she"/"her") at least once per 100 words) — and every third pair also drops into "and …" ("And when
did he move to New York?"). The turn before it is another question ``q1`` of the same article that
names the subject, from another paragraph, with its gold answer as the assistant's reply (and the
titles of the sources retrieved for ``q1``, as a chat session records them). ``original`` is ``q2``
as SQuAD wrote it: the ceiling. ``chunks`` holds ``q2``'s paragraph id.

**Clarification set** (``question``, ``label`` "ambiguous"/"clear", ``entity``, ``chunks``, ``kind``,
``others``). Over the whole set's index, articles of one *kind* with two or more members (cities:
Warsaw, Fresno, Newcastle, Jacksonville; universities; people; …, listed in ``KINDS``) make a
question about one of them ambiguous once its name is replaced by the kind ("What is the city's
population?", "When was he born?"): every member is a city with a population, and the question does
not say which. The same question with the name is the clear counterpart. Labels come from the
construction, not from any retrieval. Thresholds are chosen on the articles of one half (``half``,
a seeded split by article) and reported on the other and on the other set.

Run: ``python bench/conversation_sets.py`` (seconds; deterministic).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import sys

sys.path.insert(0, str(Path(__file__).resolve().parent))
from squad_common import ROOT, load_squad  # noqa: E402

OUT = ROOT / "data" / "conversations"
SETS = {"squad_dev": ROOT / "data" / "squad" / "squaddev_v1.1.json.gz", "new_wiki": ROOT / "data" / "squad" / "new_wiki_v1.0.json.gz"}
SEED = 0
PAIRS_PER_SET = 400
PER_TITLE = 40  # clarification questions per article: no one article (Tesla has hundreds) outweighs the rest
# Articles by kind, for the clarification set: the kind's noun replaces the name ("the city").
# A person's name becomes a pronoun. Only kinds with two or more members in a set make ambiguity.
KINDS = {
    "squad_dev": {
        "city": ["Warsaw", "Fresno, California", "Newcastle upon Tyne", "Jacksonville, Florida"],
        "university": ["Harvard University", "University of Chicago"],
        "person": ["Nikola Tesla", "Martin Luther", "Genghis Khan"],
        "broadcaster": ["American Broadcasting Company", "Sky (United Kingdom)"],
        "state": ["Victoria (Australia)", "Southern California"],
    },
    "new_wiki": {
        "city": ["Istanbul", "Rotterdam", "Oxford", "Manhattan"],
        "state": ["Connecticut", "Manipur"],
        "mountain range": ["Andes", "Sierra Nevada (U.S.)"],
    },
}
# How a question may name the article's subject, besides its full title (longest first)
ALIASES = {
    "Nikola Tesla": ["Nikola Tesla", "Tesla"], "Martin Luther": ["Martin Luther", "Luther"], "Genghis Khan": ["Genghis Khan", "Genghis", "Temüjin"],
    "Fresno, California": ["Fresno"], "Newcastle upon Tyne": ["Newcastle upon Tyne", "Newcastle"], "Jacksonville, Florida": ["Jacksonville"],
    "Harvard University": ["Harvard University", "Harvard"], "University of Chicago": ["University of Chicago", "UChicago"],
    "American Broadcasting Company": ["American Broadcasting Company", "ABC"], "Sky (United Kingdom)": ["British Sky Broadcasting", "BSkyB", "Sky UK", "Sky"],
    "Victoria (Australia)": ["Victoria"], "Southern California": ["Southern California"], "Sierra Nevada (U.S.)": ["Sierra Nevada", "Sierra"],
    "Super Bowl 50": ["Super Bowl 50"], "Normans": ["Normans", "Norman"], "Huguenot": ["Huguenots", "Huguenot"],
}
_PREPOSITIONS = {"of", "to", "for", "with", "by", "about", "from", "at", "on", "in", "against", "under", "over", "than", "into", "did", "does"}


def aliases(title: str) -> list[str]:
    if title in ALIASES:
        return ALIASES[title]
    base = re.sub(r"\s*\(.*\)$", "", title).split(",")[0].strip()
    return list(dict.fromkeys([title, base]))


# what may follow a name used as the subject or object of a question (not as a modifier: "the ABC arts channel")
_AFTER_NAME = re.compile(
    r"^(?:$|[?,.;:!)]|'s\b|’s\b|(?:is|was|were|are|has|have|had|do|did|does|will|would|can|could|become|became|and|or|in|on|at|to|for|with|by|from|of|"
    r"during|after|before|since|as|that|than|when|where|while|known|called|located|founded|built|named|considered|\w+ed)\b)")


def mention(question: str, title: str) -> re.Match | None:
    """Where ``question`` names the article's subject as a subject or object (with a leading "the", which
    the pronoun replaces too); None when it does not, or only as a modifier ("the ABC arts channel")."""
    for alias in aliases(title):
        m = re.search(rf"(?:(?<![\w-])[Tt]he\s+)?(?<![\w-]){re.escape(alias)}(?:'s|’s)?(?![\w-])", question)
        if m:
            return m if _AFTER_NAME.match(question[m.end():].lstrip()) else None
    return None


def other_names(question: str, m: re.Match) -> list[str]:
    """Names in the question besides the subject's (they would identify it without the name)."""
    from ragkit.conversation.follow_ups import names_in

    return names_in(question[:m.start()] + " something " + question[m.end():])


def person_pronouns(text: str) -> tuple[str, str, str] | None:
    words = re.findall(r"[a-z]+", text.lower())
    per100 = lambda *ws: 100 * sum(words.count(w) for w in ws) / max(len(words), 1)  # noqa: E731
    if per100("he", "his", "him") >= 1.0:
        return "he", "him", "his"
    if per100("she", "her") >= 1.0:
        return "she", "her", "her"
    return None


def pronoun_for(question: str, m: re.Match, forms: tuple[str, str, str]) -> str:
    subject, obj, possessive = forms
    if m.group(0).endswith(("'s", "’s")):
        return possessive
    before = question[:m.start()].split()
    return obj if before and before[-1].lower() in _PREPOSITIONS else subject


def forms_for(title: str, article_text: str) -> tuple[str, str, str]:
    if title.endswith("s") and not title.endswith(("ss", "us", "is")):
        return "they", "them", "their"
    person = person_pronouns(article_text)
    if person:
        return person
    return "it", "it", "its"


def replaced(question: str, m: re.Match, word: str) -> str:
    text = question[:m.start()] + word + question[m.end():]
    if m.start() == 0:
        text = text[:1].upper() + text[1:]
    return text


def follow_up_pairs(name: str, rng: random.Random) -> list[dict]:
    docs, questions = load_squad(SETS[name])
    by_title: dict[str, list[dict]] = {}
    for q in questions:
        by_title.setdefault(q["title"], []).append(q)
    text_of = {t: " ".join(d.content for d in docs if d.meta["title"] == t) for t in by_title}
    candidates = []
    for title, qs in by_title.items():
        forms = forms_for(title, text_of[title])
        naming = [q for q in qs if mention(q["question"], title)]
        for q2 in naming:
            previous = [q for q in naming if q["doc_id"] != q2["doc_id"]]
            if not previous:
                continue
            candidates.append((title, forms, q2, previous))
    rng.shuffle(candidates)
    pairs = []
    per_title: dict[str, int] = {}
    for title, forms, q2, previous in candidates:
        if per_title.get(title, 0) >= 30:  # many articles, not a few long ones
            continue
        q1 = rng.choice(previous)
        m = mention(q2["question"], title)
        follow = replaced(q2["question"], m, pronoun_for(q2["question"], m, forms))
        kind = "pronoun"
        if len(pairs) % 3 == 2:
            follow, kind = "And " + follow[:1].lower() + follow[1:], "and_pronoun"
        pairs.append({
            "id": f"{name}-fu-{len(pairs)}", "history": [{"role": "user", "text": q1["question"]}, {"role": "assistant", "text": q1["answers"][0]}],
            "question": follow, "original": q2["question"], "chunks": [q2["doc_id"]], "kind": kind, "title": title,
            "previous_chunks": [q1["doc_id"]], "answers": q2["answers"],
        })
        per_title[title] = per_title.get(title, 0) + 1
        if len(pairs) >= PAIRS_PER_SET:
            break
    return pairs


def kind_noun(kind: str, m: re.Match, question: str, forms: tuple[str, str, str] | None) -> str:
    if kind == "person" and forms:
        return pronoun_for(question, m, forms)
    possessive = m.group(0).endswith(("'s", "’s"))
    return f"the {kind}'s" if possessive else f"the {kind}"


def clarification_items(name: str, half_of: dict[str, str]) -> list[dict]:
    docs, questions = load_squad(SETS[name])
    kinds = KINDS[name]
    items = []
    per_title: dict[str, int] = {}
    for kind, titles in kinds.items():
        for title in titles:
            text = " ".join(d.content for d in docs if d.meta["title"] == title)
            if not text:
                raise SystemExit(f"{title!r} is not an article of {name}")
            forms = person_pronouns(text) if kind == "person" else None
            for q in questions:
                if q["title"] != title:
                    continue
                m = mention(q["question"], title)
                if m is None or other_names(q["question"], m) or per_title.get(title, 0) >= PER_TITLE:
                    continue  # only questions whose one name is the subject's: without it, nothing says which
                per_title[title] = per_title.get(title, 0) + 1
                others = [t for t in titles if t != title]
                ambiguous = replaced(q["question"], m, kind_noun(kind, m, q["question"], forms))
                if re.search(r"\b(?:the|this)\s+" + re.escape(kind) + r"\b", q["question"], re.I):
                    continue  # already says "the city" somewhere: the pair would not differ by the name alone
                common = {"entity": title, "chunks": [q["doc_id"]], "kind": kind, "others": others, "half": half_of[title], "answers": q["answers"]}
                items.append({"id": f"{name}-cl-{len(items)}", "question": ambiguous, "label": "ambiguous", **common})
                items.append({"id": f"{name}-cl-{len(items)}", "question": q["question"], "label": "clear", **common})
    return items


def halves(name: str) -> dict[str, str]:
    """A seeded split of the set's articles into halves "A" and "B" (thresholds chosen on A)."""
    _, questions = load_squad(SETS[name])
    titles = sorted({q["title"] for q in questions})
    random.Random(SEED).shuffle(titles)
    return {t: ("A" if i % 2 == 0 else "B") for i, t in enumerate(titles)}


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main() -> None:
    for name in SETS:
        half_of = halves(name)
        pairs = follow_up_pairs(name, random.Random(SEED))
        for p in pairs:
            p["half"] = half_of[p["title"]]
        items = clarification_items(name, half_of)
        write_jsonl(pairs, OUT / f"{name}.follow_ups.jsonl")
        write_jsonl(items, OUT / f"{name}.clarify.jsonl")
        print(f"{name}: {len(pairs)} follow-up pairs from {len({p['title'] for p in pairs})} articles; "
              f"{sum(i['label'] == 'ambiguous' for i in items)} ambiguous + {sum(i['label'] == 'clear' for i in items)} clear questions")


if __name__ == "__main__":
    main()
