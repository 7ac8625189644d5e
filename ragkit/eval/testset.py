"""Test sets: questions with what is known about them — gold answers, the chunks they came from, their kind.

One format for every source, one JSON object a line:

* generated from the user's own chunks (:mod:`ragkit.eval.generate`): ``kind`` is ``single``,
  ``paraphrase``, ``multi`` (two parts, two chunks) or ``unanswerable`` (the right behaviour is to
  decline); ``chunks`` holds the ids of the index chunks the question was written from, ``answers`` a
  span of them;
* the user's own labelled questions, JSONL or CSV (:func:`load_testset`): ``question``, optional
  ``answers`` (a list, or one string; ``|`` separates several in CSV), optional ``source`` (a file of the
  index) or ``chunks`` / ``chunk_id``;
* SQuAD v1.1 dev and SQuAD-Shifts new_wiki as shipped in ``data/squad/``, or any file in SQuAD v1.1's format (:func:`squad_testset`).

A bad line never costs the good ones: :func:`load_testset` keeps every item it can read and says, per
bad line, its number and what is wrong with it. An item's ``id`` is stable (a hash of its question and
kind unless given), so a run can be resumed and two runs compared question by question.

Usage::

    items, problems = load_testset("my_questions.csv")
    save_testset(items, "set.jsonl")
    testset_sha256("set.jsonl")          # recorded in every run that uses it
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GENERATED_KINDS = ("single", "paraphrase", "multi", "unanswerable")  # what ragkit.eval.generate writes
KINDS = GENERATED_KINDS + ("labelled", "squad")  # a user's own questions, SQuAD's


@dataclass
class EvalItem:
    question: str
    answers: list[str] = field(default_factory=list)
    kind: str = "labelled"
    chunks: list[str] = field(default_factory=list)  # ids of the index chunks that hold the answer
    source: str | None = None  # the file the question is about, when no chunk is named
    parts: list[dict[str, Any]] = field(default_factory=list)  # a multi item: each part's question, answers, chunks
    meta: dict[str, Any] = field(default_factory=dict)  # how it was made: model, judge score, the sentence
    id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError("question must be a non-empty string")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")
        if isinstance(self.answers, str):
            self.answers = [self.answers]
        if not isinstance(self.answers, list) or not all(isinstance(a, str) for a in self.answers):
            raise ValueError("answers must be a list of strings")
        self.answers = [a.strip() for a in self.answers if a.strip()]
        if isinstance(self.chunks, str):
            self.chunks = [self.chunks]
        self.question = self.question.strip()
        if not self.id:
            self.id = hashlib.sha256(f"{self.kind}\n{self.question}".encode("utf-8")).hexdigest()[:16]

    @property
    def answerable(self) -> bool:
        return self.kind != "unanswerable"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], {})}


def _item(data: Any) -> EvalItem:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    data = dict(data)
    if "chunk_id" in data:  # the CSV / single-chunk spelling
        data["chunks"] = [data.pop("chunk_id")] if data["chunk_id"] else []
    unknown = set(data) - {"question", "answers", "kind", "chunks", "source", "parts", "meta", "id"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    if "question" not in data:
        raise ValueError("no question")
    return EvalItem(**data)


def load_testset(path: str | Path) -> tuple[list[EvalItem], list[str]]:
    """The items of a JSONL or CSV file, and one line per bad line: ``"line 7: no question"``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the test set {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start}): a test set is JSONL or CSV") from None
    items: list[EvalItem] = []
    problems: list[str] = []
    seen: set[str] = set()
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        rows = [(reader.line_num, row) for row in reader]
        if not reader.fieldnames or "question" not in reader.fieldnames:
            raise ValueError(f"{path}: a CSV test set needs a 'question' column (has {reader.fieldnames})")
        parsed = []
        for number, row in rows:
            fields = {k: (v or "").strip() for k, v in row.items() if k}
            if "answers" in fields:
                fields["answers"] = [a for a in fields["answers"].split("|") if a.strip()]
            parsed.append((number, {k: v for k, v in fields.items() if v != "" or k == "question"}))
    else:
        parsed = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                parsed.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                problems.append(f"line {number}: not JSON ({exc.msg})")
    for number, data in parsed:
        try:
            item = _item(data)
        except (ValueError, TypeError) as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if item.id in seen:
            problems.append(f"line {number}: the same question as an earlier line (id {item.id}), skipped")
            continue
        seen.add(item.id)
        items.append(item)
    if not items:
        raise ValueError(f"{path}: no usable question" + (f" ({problems[0]}{' …' if len(problems) > 1 else ''})" if problems else ""))
    return items, problems


def save_testset(items: list[EvalItem], path: str | Path) -> Path:
    """Write ``items`` as JSONL, atomically (a crash never leaves half a test set)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item.to_dict(), ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def testset_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


SQUAD_FILES = {"squad_dev": "squaddev_v1.1.json.gz", "new_wiki": "new_wiki_v1.0.json.gz"}


def squad_file(spec: str | Path, data_dir: str | Path | None = None) -> Path:
    """A shipped SQuAD set's file (``squad_dev``, ``new_wiki``; in ``data_dir``, by default the repository's
    ``data/squad/``), or ``spec`` itself when it is a file in SQuAD v1.1's format (``.json`` or ``.json.gz``):
    a held-out set is read exactly as the shipped ones are."""
    if str(spec) in SQUAD_FILES:
        return (Path(data_dir) if data_dir else Path(__file__).resolve().parents[2] / "data" / "squad") / SQUAD_FILES[str(spec)]
    if Path(spec).is_file() and (str(spec).endswith(".json") or str(spec).endswith(".json.gz")):
        return Path(spec)
    raise ValueError(f"{spec}: neither a shipped SQuAD set ({', '.join(sorted(SQUAD_FILES))}) nor a SQuAD v1.1-format .json or .json.gz file")


def squad_set_name(spec: str | Path) -> str:
    """What a set's figures are filed under: a shipped set's name, or a file's name without ``.json``/``.json.gz``."""
    return str(spec) if str(spec) in SQUAD_FILES else Path(spec).name.removesuffix(".gz").removesuffix(".json")


def squad_testset(name: str | Path, paragraph_ids: set[str] | None = None, n: int | None = None, seed: int = 0,
                  data_dir: str | Path | None = None) -> list[EvalItem]:
    """Questions of a SQuAD set (:func:`squad_file`: a shipped one's name, or a SQuAD-format file) as items
    (``kind="squad"``, the paragraph's id as the chunk: ``ragkit.eval.experiment_sets.index_documents``
    indexes one chunk per paragraph under that id); ``paragraph_ids`` keeps those paragraphs' questions,
    ``n`` a seeded sample."""
    import random

    from ragkit.eval.experiment_sets import load_squad_corpus

    _, questions = load_squad_corpus(squad_file(name, data_dir))
    items = [EvalItem(question=q["question"], answers=q["answers"], kind="squad", chunks=[q["doc_id"]], meta={"title": q["title"]}, id=q["id"])
             for q in questions if paragraph_ids is None or q["doc_id"] in paragraph_ids]
    if n is not None and n < len(items):
        items = random.Random(seed).sample(items, n)
    return items
