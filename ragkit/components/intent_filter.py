"""IntentFilter: narrow retrieval by metadata when the question or its route says where to look.

A question often names where its answer is: "according to the PDF", "in the markdown notes", "in
Rhine.md", "in the README", "under the 'Early life' section", "in the wiki collection". This
component turns such phrases into a metadata filter for
:class:`~ragkit.components.index_retriever.IndexRetriever` (format: :mod:`ragkit.index.filters`),
with rules that take microseconds and no LLM:

* **file type** — a kind of file named after a locating phrase ("in / from / according to / within
  the (my, these …) PDF, markdown notes, HTML pages, text files, code") or as what speaks ("what
  does the PDF say") → ``{"file_type": [...]}``, for the kinds the index holds ("how do I convert
  a PDF to text?" and "how are fonts stored in a PDF?" are not filtered);
* **file name** — a file name with its extension ("Rhine.md", "notes.txt"), or "README", that names
  indexed sources → ``{"source": [...]}``;
* **section** — "in / under the X section (chapter, heading)" → ``{"section": [...]}``, the indexed
  section titles equal to X (else those containing it), only when the index records sections (the
  token chunker records the markdown heading above each chunk's start, so a chunk in which the
  section begins part-way is not admitted; hierarchical indexes record none);
* **collection** — "in the X collection" → ``{"collection": ["x"]}``;
* **route policy** — ``route_filters`` maps a route (the query router's label, or any name a graph
  sends) to a filter applied when that route comes in, e.g. ``{"SUMMARY": {"file_type": ["markdown"]}}``.

Everything is combined with the incoming ``filters`` (the collection selector's, or the caller's) by
AND (:func:`ragkit.index.filters.merge_filters`), one step at a time; a step whose filter would
match no chunk of the index, or contradict what is already applied, is dropped and the reason says
so — the result never filters everything away. ``reasons`` lists every step applied or dropped.
Hand-written because it is a handful of regular expressions checked against what this index holds;
Haystack's ``ConditionalRouter`` routes whole inputs on Jinja conditions and builds no filters.

Usage::

    intent = IntentFilter(index_path=".ragkit/index", route_filters={"SUMMARY": {"file_type": ["markdown"]}})
    out = intent.run(query="What does the PDF say about functools.partial?", filters={"collection": ["python-docs"]})
    out["filters"]   # {"collection": ["python-docs"], "file_type": ["pdf"]}
    out["reasons"]   # ["incoming filter: collection ...", "the question names PDF files: file_type pdf"]
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional

from haystack import component, default_from_dict, default_to_dict

from ragkit.index.filters import merge_filters, normalize_filters
from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex
from ragkit.pipeline.trace import record

# the kinds ingest.py records in meta["file_type"] (plus "code", which it does not index yet: a
# question about code files then gets a reason instead of a filter)
_FILE_TYPES: list[tuple[str, str, re.Pattern]] = [
    ("pdf", "PDF", re.compile(r"\bpdfs?\b", re.I)),
    ("markdown", "markdown", re.compile(r"\bmarkdown\b|(?<!\w)\.md\b|\bmd\s+(?:files?|notes?|docs?|documents?)\b", re.I)),
    ("html", "HTML", re.compile(r"\bhtml?\b|(?<!\w)\.html?\b|\bweb\s?pages?\b", re.I)),
    ("text", "plain-text", re.compile(r"(?<!\w)\.txt\b|\btxt\b|\b(?:plain[- ]?)?text\s+files?\b|\bplain[- ]text\b", re.I)),
    ("code", "code", re.compile(r"\b(?:source\s+)?code\b|\b(?:python|source)\s+files?\b|(?<!\w)\.py\b", re.I)),
]
# a kind of file counts only as the place to look, with a definite or possessive article: "in / from /
# according to the (…) PDF", "in my notes' markdown files" — not "how are fonts embedded in a PDF?"
_LOCATING = re.compile(
    r"\b(?:in|from|within|inside|according\s+to|across|search|only)\s+(?:the|my|our|your|this|that|these|those)\b(?:\s+[\w'’-]+){0,3}\s*$", re.I,
)
# ... or as what speaks: "what does the PDF say", "the markdown notes mention"
_ARTICLE_BEFORE = re.compile(r"\b(?:the|my|our|your|this|that|these|those)\s+$", re.I)
_SAYS_AFTER = re.compile(r"\s*(?:files?|notes?|docs?|documents?|pages?)?\s*(?:says?|said|mentions?|states?|describes?|explains?|tells?)\b", re.I)
_FILE_NAME = re.compile(r"(?<![\w/.-])([\w][\w./-]{0,160}\.(?:md|markdown|txt|pdf|html?))\b", re.I)
_README = re.compile(r"\breadme\b", re.I)
_QUOTE = "\"'“”‘’`"
_SECTION = re.compile(
    rf"\b(?:in|under|from|within)\s+the\s+[{_QUOTE}]?(?P<name>[^{_QUOTE}?!.,;:]{{2,80}}?)[{_QUOTE}]?\s+(?:section|chapter|heading)\b"
    rf"|\b(?:section|chapter|heading)\s+[{_QUOTE}](?P<quoted>[^{_QUOTE}]{{2,80}})[{_QUOTE}]",
    re.I,
)
_COLLECTION = re.compile(
    rf"\b(?:in|from|within|inside|across|search)\s+(?:the\s+|my\s+|our\s+)?[{_QUOTE}]?(?P<name>[a-z0-9][a-z0-9_-]{{0,47}})[{_QUOTE}]?\s+collection\b"
    rf"|\bcollection\s+[{_QUOTE}]?(?P<after>[a-z0-9][a-z0-9_-]{{0,47}})\b",
    re.I,
)


@component
class IntentFilter:
    def __init__(
        self, index: RagIndex | None = None, index_path: str | None = None, route_filters: dict[str, dict] | None = None, rules: bool = True,
    ):
        route_filters = dict(route_filters or {})
        for route, policy in route_filters.items():
            if not isinstance(route, str):
                raise ValueError(f"route_filters keys are route names, not {route!r}")
            if not normalize_filters(policy):
                raise ValueError(f"route_filters[{route!r}] is empty; leave the route out instead")
        self._handle = IndexHandle(index, index_path)
        self.route_filters, self.rules = route_filters, rules

    def warm_up(self) -> None:
        self._handle.get()

    def to_dict(self) -> dict[str, Any]:
        if self._handle.index_path is None:
            raise ValueError("an in-memory index cannot be serialized; save it first (RagIndex.save)")
        return default_to_dict(self, index_path=self._handle.index_path, route_filters=self.route_filters, rules=self.rules)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IntentFilter":
        return default_from_dict(cls, data)

    @component.output_types(filters=dict, reasons=list[str])
    def run(self, query: str, route: Optional[str] = None, filters: Optional[dict] = None) -> dict[str, Any]:
        index = self._handle.get()
        reasons: list[str] = []
        current: dict = {}
        steps: list[tuple[str, dict]] = []
        if filters:
            steps.append(("incoming filter", filters))
        if route is not None and route in self.route_filters:
            steps.append((f"route {route} policy", self.route_filters[route]))
        if self.rules and isinstance(query, str):
            steps += self._from_question(query, index, reasons)
        for what, step in steps:
            current = self._apply(index, current, what, step, reasons)
        record(decision={"intent_filter": ", ".join(f"{k}={v}" for k, v in current.items()) if current else "none"})
        return {"filters": current, "reasons": reasons}

    def _apply(self, index: RagIndex, current: dict, what: str, step: dict, reasons: list[str]) -> dict:
        shown = _describe(step)
        merged = merge_filters(current, step)
        if merged is None:
            reasons.append(f"{what} ({shown}) dropped: it contradicts {_describe(current)}")
        elif len(index) and not index.filter_ids(merged):
            reasons.append(f"{what} ({shown}) dropped: it would match no chunk of the index" + (f" together with {_describe(current)}" if current else ""))
        else:
            reasons.append(f"{what}: {shown}")
            return merged
        return current

    def _from_question(self, query: str, index: RagIndex, reasons: list[str]) -> list[tuple[str, dict]]:
        steps: list[tuple[str, dict]] = []
        names = list(_FILE_NAME.finditer(query))
        rest = _FILE_NAME.sub(" ", query)  # "in Rhine.md" names a file, not every markdown file
        steps += self._file_types(rest, index, reasons)
        steps += self._sources([m.group(1).strip() for m in names], bool(_README.search(rest)), index, reasons)
        steps += self._sections(query, index, reasons)
        steps += self._collections(query, index, reasons)
        return steps

    def _file_types(self, text: str, index: RagIndex, reasons: list[str]) -> list[tuple[str, dict]]:
        named = [(kind, label) for kind, label, pattern in _FILE_TYPES if any(_names_a_place(text, m) for m in pattern.finditer(text))]
        if not named:
            return []
        held = index.meta_values("file_type")
        kinds = [kind for kind, _ in named if kind in held]
        labels = " or ".join(label for _, label in named)
        if not kinds:
            reasons.append(f"the question names {labels} files, but the index holds none (it holds: {', '.join(sorted(map(str, held))) or 'nothing'}): no file-type filter")
            return []
        return [(f"the question names {labels} files", {"file_type": kinds})]

    def _sources(self, mentioned: list[str], readme: bool, index: RagIndex, reasons: list[str]) -> list[tuple[str, dict]]:
        if not mentioned and not readme:
            return []
        by_name: dict[str, list[str]] = {}
        for source in index.sources:
            base = os.path.basename(source).lower()
            by_name.setdefault(base, []).append(source)
            if os.path.splitext(base)[0] == "readme":
                by_name.setdefault("readme", []).append(source)
        wanted = [name.lower() for name in mentioned] + (["readme"] if readme else [])
        found = sorted({s for name in wanted for s in by_name.get(os.path.basename(name), [])})
        if not found:
            reasons.append(f"the question names {', '.join(dict.fromkeys(mentioned + (['README'] if readme else [])))}, which no indexed file is called: no source filter")
            return []
        return [(f"the question names {', '.join(dict.fromkeys(mentioned + (['README'] if readme else [])))}", {"source": found})]

    def _sections(self, query: str, index: RagIndex, reasons: list[str]) -> list[tuple[str, dict]]:
        asked = [(m.group("name") or m.group("quoted") or "").strip() for m in _SECTION.finditer(query)]
        asked = [a for a in asked if a]
        if not asked:
            return []
        held = [s for s in index.meta_values("section") if isinstance(s, str)]
        if not held:
            reasons.append("the question names a section, but this index records no sections: no section filter")
            return []
        found: list[str] = []
        for name in asked:
            key = name.casefold()
            exact = [s for s in held if s.casefold() == key]
            found += exact or [s for s in held if key in s.casefold()]
        if not found:
            reasons.append(f"the question names section {', '.join(map(repr, asked))}, which no indexed section is called: no section filter")
            return []
        return [(f"the question names section {', '.join(map(repr, asked))}", {"section": sorted(set(found))})]

    def _collections(self, query: str, index: RagIndex, reasons: list[str]) -> list[tuple[str, dict]]:
        matches = list(_COLLECTION.finditer(query))
        held = index.collection_counts()
        # "in the X collection" names one; "collection X" only counts when X is one ("a collection of poems")
        asked = [m.group("name").lower() for m in matches if m.group("name")]
        asked += [m.group("after").lower() for m in matches if m.group("after") and m.group("after").lower() in held]
        if not asked:
            return []
        known = [name for name in dict.fromkeys(asked) if name in held]
        if not known:
            reasons.append(f"the question names collection {', '.join(map(repr, asked))}, which this index does not hold ({', '.join(sorted(held))}): no collection filter")
            return []
        return [(f"the question names collection {', '.join(known)}", {"collection": known})]


def _names_a_place(text: str, match: re.Match) -> bool:
    before = text[max(0, match.start() - 60):match.start()]
    return bool(_LOCATING.search(before) or (_ARTICLE_BEFORE.search(before) and _SAYS_AFTER.match(text, match.end())))


def _describe(filters: dict) -> str:
    normalized = normalize_filters(filters) or {}
    if "operator" in normalized:
        return "a Haystack filter"
    return "; ".join(f"{key} {' or '.join(map(str, values))}" for key, values in normalized.items()) or "no filter"
