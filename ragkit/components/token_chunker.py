"""TokenChunker: split Documents into chunks of at most N tokens of the *embedder's* tokenizer.

Why not Haystack's ``DocumentSplitter(split_by="token")``: it counts tiktoken tokens, and tiktoken
downloads its encoding files at run time (no network here), and an OpenAI token count says nothing
about the 256-word-piece window of all-MiniLM-L6-v2, past which the embedder silently truncates.
This splitter counts with the embedding model's own tokenizer (local files), packs whole sentences
up to ``chunk_tokens``, carries ``overlap_tokens`` worth of trailing sentences into the next chunk,
and cuts a sentence longer than a chunk at token boundaries.

Each chunk's meta gets ``chunk_index``, ``char_start``/``char_end`` in the source text, ``page``
(from form feeds, as PDF converters emit them) and ``section`` (the last markdown heading above it).

Usage::

    chunker = TokenChunker(tokenizer="all-MiniLM-L6-v2", chunk_tokens=200, overlap_tokens=40)
    chunker.warm_up()
    chunks = chunker.run(documents=[Document(content=long_text, meta={"source": "a.md"})])["documents"]
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n|\n(?=#)|\f")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@component
class TokenChunker:
    def __init__(self, tokenizer: str = "all-MiniLM-L6-v2", chunk_tokens: int = 200, overlap_tokens: int = 40):
        if chunk_tokens < 8:
            raise ValueError("chunk_tokens must be at least 8")
        if not 0 <= overlap_tokens < chunk_tokens:
            raise ValueError("overlap_tokens must be >= 0 and smaller than chunk_tokens")
        self.tokenizer = tokenizer
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens
        self._tok = None

    def warm_up(self) -> None:
        if self._tok is None:
            from transformers import AutoTokenizer

            from ragkit.llm.models import resolve_embedder

            self._tok = AutoTokenizer.from_pretrained(resolve_embedder(self.tokenizer))

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, tokenizer=self.tokenizer, chunk_tokens=self.chunk_tokens, overlap_tokens=self.overlap_tokens)

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
    def _units(self, text: str) -> list[tuple[int, int]]:
        """Sentence-ish spans (start, end) covering the non-blank text."""
        spans, start = [], 0
        for match in _SENTENCE_END.finditer(text):
            spans.append((start, match.start()))
            start = match.end()
        spans.append((start, len(text)))
        return [(s, e) for s, e in spans if text[s:e].strip()]

    def _split(self, doc: Document) -> list[Document]:
        text = doc.content or ""
        units = self._units(text)
        if not units:
            return []
        encodings = self._tok([text[s:e] for s, e in units], add_special_tokens=False, return_offsets_mapping=True)
        pieces: list[tuple[int, int, int]] = []  # (start, end, n_tokens), every piece <= chunk_tokens
        for (s, _e), offsets in zip(units, encodings["offset_mapping"]):
            for i in range(0, max(len(offsets), 1), self.chunk_tokens):
                window = offsets[i : i + self.chunk_tokens]
                if not window:
                    continue
                pieces.append((s + window[0][0], s + window[-1][1], len(window)))

        chunks: list[tuple[int, int]] = []
        current: list[tuple[int, int, int]] = []
        size = 0
        for piece in pieces:
            if current and size + piece[2] > self.chunk_tokens:
                chunks.append((current[0][0], current[-1][1]))
                # carry trailing pieces up to overlap_tokens into the next chunk
                carried, carried_size = [], 0
                for prev in reversed(current):
                    if carried_size + prev[2] > self.overlap_tokens or carried_size + prev[2] + piece[2] > self.chunk_tokens:
                        break
                    carried.insert(0, prev)
                    carried_size += prev[2]
                current, size = carried, carried_size
            current.append(piece)
            size += piece[2]
        if current:
            chunks.append((current[0][0], current[-1][1]))

        page_breaks = [m.start() for m in re.finditer("\f", text)]
        headings = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(text)]
        heading_starts = [h[0] for h in headings]
        out = []
        for i, (start, end) in enumerate(chunks):
            meta = dict(doc.meta)
            meta.update(chunk_index=i, char_start=start, char_end=end, source_id=doc.id)
            if page_breaks or meta.get("file_type") == "pdf":
                meta["page"] = bisect.bisect_right(page_breaks, start) + 1
            h = bisect.bisect_right(heading_starts, start) - 1
            if h >= 0:
                meta["section"] = headings[h][1]
            out.append(Document(content=text[start:end].replace("\f", "\n"), meta=meta))
        return out
