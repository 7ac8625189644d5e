"""Files → Haystack Documents → chunks, with a reason for every file that was skipped.

Conversion uses Haystack's converters (``TextFileToDocument`` for .txt and .md — markdown is kept
as written so headings survive for section metadata — ``PyPDFToDocument``, and ``HTMLToDocument``
with trafilatura emitting markdown). What is written here is the checking around them: Haystack's
converters log and skip a bad file, while a user indexing a folder needs to be told which file was
skipped and why (empty, binary, not UTF-8, corrupted PDF, no extractable text, too large).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from haystack import Document

SUPPORTED_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".pdf": "pdf", ".html": "html", ".htm": "html"}
MAX_FILE_BYTES = 50 * 1024 * 1024


class IngestError(ValueError):
    """A path that cannot be ingested at all (missing, or a folder without supported files)."""


@dataclass
class LoadedFile:
    path: Path
    source: str  # the path as recorded in chunk meta
    sha256: str
    document: Document


@dataclass
class LoadReport:
    files: list[LoadedFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    @property
    def documents(self) -> list[Document]:
        return [f.document for f in self.files]


def discover(path: str | Path) -> list[Path]:
    """Supported files under ``path`` (or ``path`` itself), sorted, hidden folders skipped."""
    path = Path(path)
    if not path.exists():
        raise IngestError(f"{path} does not exist")
    if path.is_file():
        return [path]
    files = [
        p
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES and not any(part.startswith(".") for part in p.relative_to(path).parts)
    ]
    return files


def load_files(path: str | Path, root: str | Path | None = None) -> LoadReport:
    """Convert every supported file under ``path``. Never raises for a bad file: it is reported in ``skipped``."""
    files = discover(path)
    if not files:
        raise IngestError(f"{path} holds no supported files ({', '.join(sorted(SUPPORTED_SUFFIXES))})")
    base = Path(root) if root else (Path(path) if Path(path).is_dir() else Path(path).parent)
    report = LoadReport()
    for file in files:
        try:
            source = str(file.relative_to(base))
        except ValueError:
            source = str(file)
        try:
            loaded = _load_one(file, source)
        except _Skip as skip:
            report.skipped.append((source, str(skip)))
            continue
        report.files.append(loaded)
    return report


class _Skip(Exception):
    pass


def _load_one(file: Path, source: str) -> LoadedFile:
    kind = SUPPORTED_SUFFIXES.get(file.suffix.lower())
    if kind is None:
        raise _Skip(f"unsupported file type {file.suffix!r}")
    size = file.stat().st_size
    if size == 0:
        raise _Skip("empty file")
    if size > MAX_FILE_BYTES:
        raise _Skip(f"file is {size / 2**20:.0f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB limit")
    raw = file.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if kind == "pdf":
        if not raw.startswith(b"%PDF-"):
            raise _Skip("not a PDF (no %PDF- header)")
        text = _convert_pdf(file)
    else:
        if b"\x00" in raw[:8192]:
            raise _Skip("binary file (NUL bytes), not text")
        try:
            decoded = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise _Skip(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        text = _convert_html(decoded) if kind == "html" else decoded
    if not text or not text.strip():
        raise _Skip("no extractable text")
    meta = {"source": source, "file_type": kind, "title": _title(text, file)}
    return LoadedFile(path=file, source=source, sha256=digest, document=Document(content=text, meta=meta))


def _convert_pdf(file: Path) -> str:
    from haystack.components.converters import PyPDFToDocument

    # PyPDFToDocument logs and returns nothing for a broken PDF; silence its warning, we report it.
    logger = logging.getLogger("haystack.components.converters.pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        docs = PyPDFToDocument().run(sources=[file])["documents"]
    except Exception as exc:  # pypdf raises a zoo of errors on damaged files
        raise _Skip(f"corrupted PDF ({type(exc).__name__}: {exc})") from None
    finally:
        logger.setLevel(level)
    if not docs:
        raise _Skip("corrupted or unreadable PDF")
    return docs[0].content or ""


def _convert_html(html: str) -> str:
    from haystack.components.converters import HTMLToDocument
    from haystack.dataclasses import ByteStream

    converter = HTMLToDocument(extraction_kwargs={"output_format": "markdown", "include_tables": True, "favor_recall": True})
    docs = converter.run(sources=[ByteStream(data=html.encode("utf-8"), mime_type="text/html")])["documents"]
    # Sphinx pages end every heading with a "¶" permalink; it is noise in titles and chunks.
    return docs[0].content.replace("¶", "") if docs else ""


def _title(text: str, file: Path) -> str:
    for line in text.splitlines()[:40]:
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
        if stripped and len(stripped) < 100 and not stripped.endswith("."):
            return stripped
        if stripped:
            break
    return file.stem.replace("_", " ")
