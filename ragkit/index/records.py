"""How an index version's files are written and read: chunks and parents as UTF-8 JSON lines,
every file checksummed with sha256 (checked before FAISS or bm25s reads a byte)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from haystack import Document


def unstorable(doc: Document) -> str | None:
    """Why ``doc`` cannot be written to the index's UTF-8 JSON lines (a lone surrogate from a
    non-UTF-8 file name, a meta value JSON cannot hold), or None if it can."""
    try:
        json.dumps(doc_record(doc), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        return str(exc)
    return None


def doc_record(doc: Document) -> dict:
    return {"id": doc.id, "content": doc.content, "meta": doc.meta}


def write_jsonl(path: Path, records) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_jsonl(path: Path):
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
