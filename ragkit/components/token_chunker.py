"""TokenChunker: split Documents into chunks of at most N tokens of the *embedder's* tokenizer.

Why not Haystack's ``DocumentSplitter(split_by="token")``: it counts tiktoken tokens, and tiktoken
downloads its encoding files at run time (no network here), and an OpenAI token count says nothing
about the 256-word-piece window of all-MiniLM-L6-v2, past which the embedder silently truncates.
This splitter counts with the embedding model's own tokenizer (local files), packs whole sentences
up to ``chunk_tokens`` (a period after an abbreviation — "[O.S. 28 June]", "U.S. Army" — ends no
sentence, by the rule of :mod:`ragkit.index.sentences`: a chunk that starts mid-sentence loses the
words that say what its first sentence is about), carries ``overlap_tokens`` worth of trailing sentences into the next chunk,
and cuts a sentence longer than a chunk at token boundaries. Besides the token bound every chunk
has a character bound (``max_chunk_chars``): one unknown-word token can span megabytes (a 5 MB
"word" is a single ``[UNK]``), and such a piece is cut at the bound.

Memory stays bounded on huge files: sentences go to the tokenizer in batches of about
:data:`_BATCH_CHARS` characters and chunks are packed as the pieces stream out, instead of one
tokenizer call holding every token's offsets of the whole text (a 50 MB file took 3.7 GB that way).

Each chunk's meta gets ``chunk_index``, ``char_start``/``char_end`` in the source text, ``page``
(from form feeds, as PDF converters emit them) and ``section`` (the last markdown heading above it,
or the last of the headings it opens with).

Usage::

    chunker = TokenChunker(tokenizer="all-MiniLM-L6-v2", chunk_tokens=200, overlap_tokens=40)
    chunker.warm_up()
    chunks = chunker.run(documents=[Document(content=long_text, meta={"source": "a.md"})])["documents"]
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Iterable, Iterator

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.index.sentences import ends_abbreviation

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n|\n(?=#)|\f")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
# Default character bound per token of the budget. English prose runs ~4.5 characters per
# word-piece (sample_docs' densest 200-token chunk: 5.9), so 12 never cuts ordinary text, yet it
# bounds a chunk to 2,400 characters at 200 tokens when unknown-word tokens swallow whole runs of
# text. Proportional, so it scales with chunk_tokens.
CHARS_PER_TOKEN_BOUND = 12
_UNIT_CHARS = 20_000  # a "sentence" longer than this is cut at whitespace before tokenizing
_BATCH_CHARS = 200_000  # characters per tokenizer call: bounds the memory of the offset lists
_Piece = tuple[int, int, int]  # (start, end, n_tokens)


@component
class TokenChunker:
    def __init__(
        self, tokenizer: str = "all-MiniLM-L6-v2", chunk_tokens: int = 200, overlap_tokens: int = 40, max_chunk_chars: int | None = None
    ):
        if chunk_tokens < 8:
            raise ValueError("chunk_tokens must be at least 8")
        if not 0 <= overlap_tokens < chunk_tokens:
            raise ValueError("overlap_tokens must be >= 0 and smaller than chunk_tokens")
        if max_chunk_chars is not None and max_chunk_chars < 1:
            raise ValueError("max_chunk_chars must be at least 1")
        self.tokenizer = tokenizer
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens
        self.max_chunk_chars = max_chunk_chars
        self.char_bound = max_chunk_chars or chunk_tokens * CHARS_PER_TOKEN_BOUND
        self._tok = None

    def warm_up(self) -> None:
        if self._tok is None:
            from transformers import AutoTokenizer

            from ragkit.llm.models import resolve_embedder

            self._tok = AutoTokenizer.from_pretrained(resolve_embedder(self.tokenizer))

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, tokenizer=self.tokenizer, chunk_tokens=self.chunk_tokens, overlap_tokens=self.overlap_tokens, max_chunk_chars=self.max_chunk_chars
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TokenChunker":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        self.warm_up()
        out: list[Document] = []
        for doc in documents:
            out.extend(self._split(doc))
        return {"documents": out}

    # -- internals ----------------------------------------------------------------------------
    def _units(self, text: str) -> Iterator[tuple[int, int]]:
        """Sentence-ish spans (start, end) covering the non-blank text, none longer than _UNIT_CHARS."""
        start = 0
        for match in _SENTENCE_END.finditer(text):
            if text[match.start() - 1] == "." and ends_abbreviation(text, match.start()):
                continue  # "[O.S. 28 June] 1856": a chunk must not start inside a sentence
            yield from _cut_long(text, start, match.start())
            start = match.end()
        yield from _cut_long(text, start, len(text))

    def _pieces(self, text: str) -> Iterator[_Piece]:
        """Token windows of at most chunk_tokens tokens and char_bound characters, in text order."""
        batch: list[tuple[int, int]] = []
        chars = 0
        for unit in self._units(text):
            batch.append(unit)
            chars += unit[1] - unit[0]
            if chars >= _BATCH_CHARS:
                yield from self._tokenize(text, batch)
                batch, chars = [], 0
        if batch:
            yield from self._tokenize(text, batch)

    def _tokenize(self, text: str, units: list[tuple[int, int]]) -> Iterator[_Piece]:
        # a unit over the model's 512 tokens is cut into windows below, never fed to the model whole, so
        # transformers' "longer than the specified maximum sequence length" warning would be a false alarm
        encodings = self._tok([text[s:e] for s, e in units], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        for (s, _e), offsets in zip(units, encodings["offset_mapping"]):
            for i in range(0, len(offsets), self.chunk_tokens):
                yield from self._within_char_bound(s, offsets[i : i + self.chunk_tokens])

    def _within_char_bound(self, base: int, window: list[tuple[int, int]]) -> Iterator[_Piece]:
        bound = self.char_bound
        if window[-1][1] - window[0][0] <= bound:
            yield base + window[0][0], base + window[-1][1], len(window)
            return
        group: list[tuple[int, int]] = []
        for tok_start, tok_end in window:
            if group and tok_end - group[0][0] > bound:
                yield base + group[0][0], base + group[-1][1], len(group)
                group = []
            if tok_end - tok_start > bound:
                # one token longer than the bound is an unknown-word token; its slices are counted
                # as a full chunk each so that each stands alone
                for cut in range(tok_start, tok_end, bound):
                    yield base + cut, base + min(cut + bound, tok_end), self.chunk_tokens
                continue
            group.append((tok_start, tok_end))
        if group:
            yield base + group[0][0], base + group[-1][1], len(group)

    def _pack(self, pieces: Iterable[_Piece]) -> Iterator[tuple[int, int]]:
        """Greedy packing of pieces into (start, end) chunks within both bounds, with overlap."""
        current: list[_Piece] = []
        size = 0
        for piece in pieces:
            if current and (size + piece[2] > self.chunk_tokens or piece[1] - current[0][0] > self.char_bound):
                yield current[0][0], current[-1][1]
                # carry trailing pieces up to overlap_tokens into the next chunk
                carried: list[_Piece] = []
                carried_size = 0
                for prev in reversed(current):
                    if (
                        carried_size + prev[2] > self.overlap_tokens
                        or carried_size + prev[2] + piece[2] > self.chunk_tokens
                        or piece[1] - prev[0] > self.char_bound
                    ):
                        break
                    carried.insert(0, prev)
                    carried_size += prev[2]
                current, size = carried, carried_size
            current.append(piece)
            size += piece[2]
        if current:
            yield current[0][0], current[-1][1]

    def _split(self, doc: Document) -> list[Document]:
        text = doc.content or ""
        chunks = list(self._pack(self._pieces(text)))
        if not chunks:
            return []

        page_breaks = [m.start() for m in re.finditer("\f", text)]
        headings = [(m.start(), m.end(), m.group(1).strip()) for m in _HEADING.finditer(text)]
        heading_starts = [h[0] for h in headings]
        out = []
        for i, (start, end) in enumerate(chunks):
            meta = dict(doc.meta)
            meta.update(chunk_index=i, char_start=start, char_end=end, source_id=doc.id)
            if page_breaks or meta.get("file_type") == "pdf":
                meta["page"] = bisect.bisect_right(page_breaks, start) + 1
            h = bisect.bisect_right(heading_starts, start) - 1
            # a chunk that opens with headings belongs to the last of them: a page's first chunk is under
            # "## TTY", not under the site's "# Node.js documentation" banner above it
            while h + 1 < len(headings) and headings[h + 1][0] < end:
                body_from = max(start, headings[h][1]) if h >= 0 else start
                if text[body_from:headings[h + 1][0]].strip():
                    break
                h += 1
            if h >= 0:
                meta["section"] = headings[h][2]
            out.append(Document(content=text[start:end].replace("\f", "\n"), meta=meta))
        return out


def _cut_long(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """(start, end) if it holds non-blank text, cut at whitespace into spans of <= _UNIT_CHARS."""
    while end - start > _UNIT_CHARS:
        limit = start + _UNIT_CHARS
        cut = max(text.rfind(" ", start + _UNIT_CHARS // 2, limit), text.rfind("\n", start + _UNIT_CHARS // 2, limit))
        cut = cut if cut > start else limit
        if not text[start:cut].isspace():
            yield start, cut
        start = cut
    if start < end and not text[start:end].isspace():
        yield start, end
