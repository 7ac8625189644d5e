"""Metadata filters for retrieval: their format, their checks, and how two of them combine.

ragkit's filter format is a dict from a chunk's metadata field to the values it may take::

    {"collection": ["wiki", "manuals"], "file_type": ["pdf"]}

AND across keys, OR within a key's list; a single value may be given bare (``{"file_type": "pdf"}``).
An empty dict (or None) means no filter. ``file_type`` values may be written as file suffixes
(``"md"``, ``".txt"``, ``"htm"``) and mean the kind the ingest records (``markdown``, ``text``,
``html``, ``pdf``). Values are compared with ``==`` (``{"page": [3]}`` matches the integer page 3).

Why this format rather than Haystack's filter syntax
(``{"operator": "AND", "conditions": [{"field": "meta.collection", "operator": "in", "value": [...]}]}``):
every filter ragkit's own components produce is of this shape; two of them combine by intersecting
each key's list (:func:`merge_filters`: the collection selector's choice AND the intent filter's file
type), which is one line here and a tree rewrite there; and it maps straight onto per-field
postings (value → chunk ids) in :class:`~ragkit.index.store.RagIndex`, so the set of matching chunks
is a few set unions, not ``document_matches_filter`` run over every chunk in Python (~5 µs a chunk:
half a second a question at 100k chunks). Haystack filters are still accepted — a dict with an
``"operator"`` key — and are evaluated with ``haystack.utils.filters.document_matches_filter``
over the chunk table (once per distinct filter; the result is cached until the index changes).

Collections are named by short slugs (:func:`check_collection_name`): the LLM selector has to be
able to emit the name under a grammar, and the CLI and the manifest show it as typed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragkit.index.ingest import SUPPORTED_SUFFIXES

DEFAULT_COLLECTION = "default"  # what a chunk indexed without --collection (or before collections existed) belongs to
MAX_DESCRIPTION_CHARS = 2000
_COLLECTION_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,47}")
_SCALARS = (str, int, float, bool)
# "md", ".md", "markdown" -> "markdown": the kind ingest.py records in meta["file_type"]
FILE_TYPE_ALIASES: dict[str, str] = {
    **{suffix.lstrip("."): kind for suffix, kind in SUPPORTED_SUFFIXES.items()},
    **{kind: kind for kind in SUPPORTED_SUFFIXES.values()},
    "txt": "text", "plain": "text",
}


class FilterError(ValueError):
    """A filter ragkit cannot apply: not a dict of field -> values, an empty list, an unknown field."""


def check_collection_name(name: Any) -> str:
    """``name`` if it is a valid collection name (a short lowercase slug), else a clear ValueError."""
    if not isinstance(name, str) or not _COLLECTION_NAME.fullmatch(name):
        raise ValueError(
            f"collection name {name!r} is not a short slug: use 1-48 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit (e.g. wiki, python-docs, notes_2024)"
        )
    return name


def check_description(text: Any) -> str:
    """A collection description, stripped; ValueError if it is not storable text or too long."""
    if not isinstance(text, str):
        raise ValueError(f"a collection description must be text, not {type(text).__name__}")
    text = " ".join(text.split())  # one line: it goes into prompts, the manifest and the CLI's listing
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the collection description is not valid UTF-8 text; re-type it or fix its encoding") from None
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise ValueError(f"the collection description is {len(text):,} characters; at most {MAX_DESCRIPTION_CHARS:,} are kept in the index")
    return text


def is_haystack_filter(filters: Any) -> bool:
    return isinstance(filters, dict) and "operator" in filters


def normalize_filters(filters: Any) -> dict[str, Any] | None:
    """The filter in canonical form (simple form: each key -> a list of distinct values, file types
    by their recorded kind), None for no filter; FilterError if it is malformed."""
    if filters is None or filters == {}:
        return None
    if not isinstance(filters, dict):
        raise FilterError(f"filters must be a dict like {{'collection': ['wiki'], 'file_type': ['pdf']}}, not {type(filters).__name__}")
    if is_haystack_filter(filters):
        _check_haystack(filters)
        return filters
    out: dict[str, list] = {}
    for key, values in filters.items():
        if not isinstance(key, str) or not key:
            raise FilterError(f"filter keys are metadata field names (text), not {key!r}")
        if isinstance(values, _SCALARS):
            values = [values]
        if not isinstance(values, (list, tuple, set, frozenset)):
            raise FilterError(f"filter {key!r}: give a value or a list of values, not {type(values).__name__}")
        if not values:
            raise FilterError(f"filter {key!r} has an empty list, which matches nothing; leave the key out for no restriction")
        clean: list = []
        for value in values:
            if not isinstance(value, _SCALARS):
                raise FilterError(f"filter {key!r}: values must be text or numbers, not {type(value).__name__}")
            if key == "file_type" and isinstance(value, str):
                value = FILE_TYPE_ALIASES.get(value.strip().lower().lstrip("."), value.strip().lower())
            if value not in clean:
                clean.append(value)
        out[key] = clean
    return out


def _check_haystack(filters: dict) -> None:
    from haystack.errors import FilterError as HaystackFilterError
    from haystack import Document
    from haystack.utils.filters import document_matches_filter

    try:  # a malformed Haystack filter raises on the first document it is applied to: find out now
        document_matches_filter(filters, Document(content="", meta={}))
    except HaystackFilterError as exc:
        raise FilterError(f"not a valid Haystack filter: {exc}") from None
    except (TypeError, KeyError, AttributeError) as exc:
        raise FilterError(f"not a valid Haystack filter ({type(exc).__name__}: {exc})") from None


def filter_key(filters: dict) -> str:
    """A canonical text for a normalized filter (the cache key of its matching chunks)."""
    if is_haystack_filter(filters):
        return "haystack:" + json.dumps(filters, sort_keys=True, default=str)
    return json.dumps({k: sorted(map(repr, v)) for k, v in sorted(filters.items())})


def to_haystack(filters: dict) -> dict:
    """A simple-form filter in Haystack's syntax (for merging with one)."""
    if is_haystack_filter(filters):
        return filters
    conditions = [{"field": f"meta.{k}", "operator": "in", "value": list(v)} for k, v in filters.items()]
    return {"operator": "AND", "conditions": conditions}


def merge_filters(first: dict | None, second: dict | None) -> dict | None:
    """Both filters at once (AND): a key in both keeps the values in both lists. Returns {} for
    no filter and None when they contradict (a shared key whose lists have no value in common)."""
    a, b = normalize_filters(first), normalize_filters(second)
    if not a or not b:
        return dict(a or b or {})
    if is_haystack_filter(a) or is_haystack_filter(b):
        return {"operator": "AND", "conditions": [to_haystack(a), to_haystack(b)]}
    merged = {k: list(v) for k, v in a.items()}
    for key, values in b.items():
        if key in merged:
            merged[key] = [v for v in merged[key] if v in values]
            if not merged[key]:
                return None
        else:
            merged[key] = list(values)
    return merged


def scoped(filters: dict | None, scope: dict | None) -> tuple[dict | None, str | None]:
    """``filters`` AND the ``scope`` a person chose (a clarification's answer), and a note when the two
    contradict: then the person's choice wins. The filter is None when nothing is filtered."""
    if not scope:
        return filters or None, None
    merged = merge_filters(filters, scope)
    if merged is None:
        return dict(scope), f"the chosen scope {scope} contradicts the filter {filters}: searched the chosen scope only"
    return merged or None, None


def whole_index_scope(index) -> dict:
    """A scope every chunk of ``index`` matches (each of its collections): a clarification answered
    "any of them" (or not answered) searches everything, and the question is not asked back again."""
    return {"collection": sorted(index.collection_counts()) or ["default"]}
