"""Files → Haystack Documents → chunks, with a reason for every file that was skipped.

Conversion uses Haystack's converters (``TextFileToDocument`` for .txt, .rst and .md — markdown is kept
as written so headings survive for section metadata — ``PyPDFToDocument``, and ``HTMLToDocument``
with trafilatura emitting markdown). What is written here is the checking around them: Haystack's
converters log and skip a bad file, while a user indexing a folder needs to be told which file was
skipped and why (empty, binary, not UTF-8, corrupted PDF, no extractable text, too large,
permission denied — for a file or a whole folder), and one bad file must never abort the run. Two
things documentation sites need that the converter does not do: a heading's permalink mark ("¶", "#")
is taken out of the HTML before conversion, and a page whose first heading is the site's banner is
titled by its own name from ``<title>`` (:func:`_page_title`). One a PDF needs: words its layout broke
across lines are joined again (:func:`join_broken_words`).

A markdown file may open with YAML front matter (``---`` lines around ``key: value`` pairs, as static
site generators write it): its scalar values become the document's metadata (``attribution``,
``license``, ``url``, …; ragkit's own keys such as ``source`` or ``collection`` are never overwritten) and it is not
indexed as text — an attribution line in the body was the "sentence" that best matched every
question naming the article. Parsed with ``yaml.safe_load``; front matter that is not a mapping of
scalars stays text.

Text files are decoded by their byte-order mark (UTF-8, UTF-16 and UTF-32, either byte order), else
as UTF-8. A file name that is not valid UTF-8 (possible on Linux) is recorded with its odd bytes
written as ``\\xNN`` (:func:`source_identity`), so it can be stored in the index's UTF-8 JSON.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from haystack import Document

# reStructuredText is read as plain text: its markup (underlined titles, ``::``) is few characters and no noise
# to an embedder, and Python projects' documentation is written in it
SUPPORTED_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".rst": "text", ".pdf": "pdf", ".html": "html", ".htm": "html"}
MAX_FILE_BYTES = 50 * 1024 * 1024
# longest first: the UTF-32 LE mark begins with the UTF-16 LE one
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
_SURROGATE = re.compile("[\ud800-\udfff]")


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
    other_types: dict[str, int] = field(default_factory=dict)  # files of a type ragkit does not read: suffix -> count

    @property
    def documents(self) -> list[Document]:
        return [f.document for f in self.files]


def source_identity(file: Path, root: Path) -> str:
    """How ``file`` is named in the index: its path relative to ``root`` when inside it, else its
    absolute path. Bytes that are not UTF-8 (a Linux file name may hold any) become ``\\xNN``, so
    the name is storable as UTF-8 JSON and the same file always gets the same name."""
    try:
        name = str(file.relative_to(root))
    except ValueError:
        name = str(file)
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def discover(path: str | Path, problems: list[tuple[Path, str]] | None = None, other_types: dict[str, int] | None = None) -> list[Path]:
    """Supported files under ``path`` (or ``path`` itself), sorted, hidden folders skipped.

    A folder that cannot be listed is appended to ``problems`` with its reason instead of
    stopping the walk (``Path.rglob`` would skip it silently or raise). Files of other types are
    counted by suffix in ``other_types``, so a user is told what was not read (hidden files are not).
    """
    path = Path(path)
    if not path.exists():
        raise IngestError(f"{path} does not exist")
    if not path.is_dir():
        return [path]

    def unreadable(exc: OSError) -> None:
        if problems is not None:
            problems.append((Path(exc.filename or path), _os_reason(exc, folder=True)))

    files = []
    for folder, dirnames, filenames in os.walk(path, onerror=unreadable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            candidate = Path(folder) / name
            if name.startswith("."):
                continue
            if candidate.suffix.lower() in SUPPORTED_SUFFIXES and candidate.is_file():
                files.append(candidate)
            elif other_types is not None:
                suffix = candidate.suffix.lower() or "(no suffix)"
                other_types[suffix] = other_types.get(suffix, 0) + 1
    return sorted(files)


def load_files(path: str | Path, root: str | Path | None = None, progress: bool = False) -> LoadReport:
    """Convert every supported file under ``path``. Never raises for a bad file: it is reported in ``skipped``.

    Sources are named by :func:`source_identity` against ``root`` (default: ``path`` itself if a
    folder, else its folder). ``progress`` shows a bar over the files (conversion of thousands of
    files takes minutes).
    """
    if not Path(path).exists():
        raise IngestError(f"{path} does not exist")
    given = Path(os.path.realpath(path))  # one canonical spelling, so names never depend on "./" or symlinks
    problems: list[tuple[Path, str]] = []
    other_types: dict[str, int] = {}
    files = discover(given, problems, other_types)
    if not files and not problems:
        raise IngestError(f"{path} holds no supported files ({', '.join(sorted(SUPPORTED_SUFFIXES))})")
    base = Path(os.path.realpath(root)) if root else (given if given.is_dir() else given.parent)
    report = LoadReport(other_types=dict(sorted(other_types.items(), key=lambda kv: (-kv[1], kv[0]))))
    report.skipped = [(source_identity(p, base), reason) for p, reason in problems]
    seen: dict[str, Path] = {}
    if progress:
        from tqdm.auto import tqdm

        files = tqdm(files, desc="converting", unit="file")
    for file in files:
        source = source_identity(file, base)
        if source in seen:  # two odd-byte names that escape to the same text
            report.skipped.append((source, f"its name, with non-UTF-8 bytes written as \\xNN, is that of another file ({seen[source].name!a})"))
            continue
        seen[source] = file
        try:
            loaded = _load_one(file, source)
        except _Skip as skip:
            report.skipped.append((source, str(skip)))
            continue
        report.files.append(loaded)
    return report


def _os_reason(exc: OSError, folder: bool = False) -> str:
    what = "folder " if folder else ""
    if isinstance(exc, PermissionError):
        return f"permission denied ({what}not readable)"
    return f"{what}could not be read ({exc.strerror or type(exc).__name__})"


class _Skip(Exception):
    pass


def _load_one(file: Path, source: str) -> LoadedFile:
    kind = SUPPORTED_SUFFIXES.get(file.suffix.lower())
    if kind is None:
        raise _Skip(f"unsupported file type {file.suffix!r}")
    try:
        size = file.stat().st_size
        if size == 0:
            raise _Skip("empty file")
        if size > MAX_FILE_BYTES:
            raise _Skip(f"file is {size / 2**20:.0f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB limit")
        raw = file.read_bytes()
    except OSError as exc:
        raise _Skip(_os_reason(exc)) from None
    digest = hashlib.sha256(raw).hexdigest()
    if kind == "pdf":
        if not raw.startswith(b"%PDF-"):
            raise _Skip("not a PDF (no %PDF- header)")
        text = _convert_pdf(file)
    else:
        decoded = _decode_text(raw)
        text = _convert_html(decoded) if kind == "html" else decoded
    if not text or not text.strip():
        raise _Skip("no extractable text")
    # a converter can hand back lone surrogates, which UTF-8 JSON cannot store: better one U+FFFD
    # than a save that fails after the whole folder was embedded
    text = _SURROGATE.sub("\ufffd", text)
    front: dict[str, str] = {}
    if kind == "markdown":
        front, text = split_front_matter(text)
        if not text.strip():
            raise _Skip("no extractable text (front matter only)")
    title = _title(text)
    if kind == "html":
        title = _page_title(decoded, title)
    meta = {**front, "source": source, "file_type": kind, "title": title or Path(source).stem.replace("_", " ")}
    return LoadedFile(path=file, source=source, sha256=digest, document=Document(content=text, meta=meta))


_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)
RESERVED_META = {"source", "file_type", "title", "chunk_index", "char_start", "char_end", "page", "section", "source_id", "collection"}


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """(metadata, body) of a markdown text that opens with YAML front matter; ({}, text) otherwise."""
    import yaml

    m = _FRONT_MATTER.match(text)
    if not m or len(m.group(1)) > 8192:
        return {}, text
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return {}, text
    if not isinstance(data, dict) or not all(isinstance(v, (str, int, float, bool)) or v is None for v in data.values()):
        return {}, text
    meta = {str(k): str(v) for k, v in data.items() if v is not None and str(k) not in RESERVED_META}
    return meta, text[m.end():].lstrip("\r\n")


def _decode_text(raw: bytes) -> str:
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise _Skip(f"not {encoding.upper()} text despite its byte-order mark ({exc.reason} at byte {exc.start})") from None
    if b"\x00" in raw[:8192]:
        raise _Skip("binary file (NUL bytes), not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Skip(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _convert_pdf(file: Path) -> str:
    from haystack.components.converters import PyPDFToDocument

    # PyPDFToDocument logs and returns nothing for a broken PDF, and pypdf logs its own findings
    # ("EOF marker not found") straight to stderr; both go into the skip reason instead.
    with _captured_logs("pypdf", "haystack.components.converters.pypdf") as messages:
        try:
            docs = PyPDFToDocument().run(sources=[file])["documents"]
        except Exception as exc:  # pypdf raises a zoo of errors on damaged files
            raise _Skip(f"corrupted PDF ({type(exc).__name__}: {exc})") from None
    if not docs:
        details = list(dict.fromkeys(m.split("skipping. ", 1)[-1] for m in messages))
        raise _Skip("corrupted or unreadable PDF" + (f" ({'; '.join(details)})" if details else ""))
    return join_broken_words(docs[0].content or "")


_LINE_END_HYPHEN = re.compile(r"(\w+)-\n(\w+)")


def join_broken_words(text: str) -> str:
    """Words a justified PDF layout broke across lines ("manip-\\nulation"), joined again: pypdf gives each
    printed line as a line, and a broken word is two words to BM25, the embedder and an answer span. Only
    a lower-case letter on both sides counts ("RFC-\\n5280" stays); a word the same text also writes
    with its hyphen keeps it ("well-\\nknown" → "well-known" where "well-known" occurs elsewhere)."""
    hyphenated = set(re.findall(r"\w+-\w+", text))

    def join(m: re.Match) -> str:
        left, right = m.group(1), m.group(2)
        if not (left[-1].isalpha() and left[-1].islower() and right[0].isalpha() and right[0].islower()):
            return m.group(0)
        return f"{left}-{right}" if f"{left}-{right}" in hyphenated else left + right
    return _LINE_END_HYPHEN.sub(join, text)


@contextmanager
def _captured_logs(*names: str) -> Iterator[list[str]]:
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(logging.WARNING)
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg.propagate, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
        lg.setLevel(logging.WARNING)
    try:
        yield messages
    finally:
        for lg, (propagate, level) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.propagate, lg.level = propagate, level


# A heading's permalink: a link to its own anchor whose text is one symbol (Sphinx and MkDocs write "¶",
# Node.js's docs "#", others "§" or "🔗"). Left in, it ends every heading line of the chunks ("## TTY#");
# it is removed from the HTML, so a "¶" or "#" in the text itself stays.
_PERMALINK = re.compile(
    r"""<a\b[^>]*\bhref\s*=\s*["']#[^"']*["'][^>]*>\s*(?:#|¶|§|🔗|&para;|&#0*182;|&#x0*b6;|&sect;|&#0*167;)\s*</a>""", re.I
)
_HTML_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title>", re.I | re.S)
_TITLE_SEPARATOR = re.compile(r"\s+(?:[|·•—–-]|::|»)\s+")


def _convert_html(html: str) -> str:
    from haystack.components.converters import HTMLToDocument
    from haystack.dataclasses import ByteStream

    converter = HTMLToDocument(extraction_kwargs={"output_format": "markdown", "include_tables": True, "favor_recall": True})
    html = _PERMALINK.sub("", html)
    docs = converter.run(sources=[ByteStream(data=html.encode("utf-8"), mime_type="text/html")])["documents"]
    return docs[0].content if docs else ""


def _page_title(html: str, heading: str | None) -> str | None:
    """The page's own name from its ``<title>`` when the page has no heading or its first is the site's name.

    Documentation sites print the site's name as a banner heading on every page ("Node.js v20
    documentation") and the page's name before it in ``<title>`` ("TTY | Node.js v20 documentation"):
    titled by the heading, every page of the folder would carry one title, in the LLM's source tags
    and in a clarifying question's choices alike. A page whose heading is its own name keeps it."""
    from html import unescape

    match = _HTML_TITLE.search(html)
    if not match:
        return heading
    parts = _TITLE_SEPARATOR.split(" ".join(unescape(match.group(1)).split()))
    if parts[0] and (heading is None or any(part.casefold() == heading.casefold() for part in parts[1:])):
        return parts[0]
    return heading


def _title(text: str) -> str | None:
    """The first heading, or a short first line that is not a sentence; None when the text opens with neither."""
    for line in text.splitlines()[:40]:
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
        if stripped and len(stripped) < 100 and not stripped.endswith("."):
            return stripped
        if stripped:
            break
    return None
