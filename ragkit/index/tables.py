"""Tables for the structured-data route: rows in, a read-only in-memory SQLite database out.

A question like "How many cars from Japan are in the table?" has an exact answer that retrieval over
text cannot count. The SQL route (:class:`~ragkit.components.sql_answerer.SqlAnswerer`) asks the LLM for
one ``SELECT`` and runs it here. This module:

- loads rows (a list of dicts: a JSON list of records, JSON lines, a CSV file, or the ``cars`` table of
  the ``vega_datasets`` package, read from the installed distribution without importing it, since
  its ``__init__`` imports pandas) and infers each column's SQL type (INTEGER, REAL, TEXT);
- describes each table as a :class:`TableSchema`, which renders a compact ``CREATE TABLE`` text with
  a few example values per column for prompts. Coder models have seen this format in
  text-to-SQL data, and the examples tell them how values are spelled ("'Japan'", not "'JP'");
- makes writes impossible: ``PRAGMA query_only=ON``, plus a ``sqlite3`` authorizer that lets a
  statement only SELECT, READ known tables, and call functions (``load_extension`` excluded);
- runs a query with a row limit (``fetchmany``) and a time limit (a progress handler that stops
  the statement after ``timeout_s``), so a runaway cross join costs two seconds and nothing else.

Python's ``sqlite3`` already does all of this. What no library does is the glue: typing loose rows,
writing the schema text and putting the limits together, so that is the part written here.

Usage::

    db = TableDatabase.from_tables({"cars": cars_rows()})
    db.schemas["cars"].text()          # CREATE TABLE cars (Name TEXT, -- e.g. 'ford pinto' ...
    db.run("SELECT COUNT(*) FROM cars WHERE Origin = 'Japan'").rows   # [(79,)]
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

VEGA_PREFIX = "vega_datasets:"
# distinct text values up to this many are all listed in the schema (and the SQL grammar): the model
# must spell 'Europe' exactly, and these few values are how it learns to
MAX_LISTED_VALUES = 12
MAX_LOADED_ROWS = 1_000_000
# words people use for a known table's subject that its column names do not say (for ``looks_numeric``)
SUBJECT_WORDS = {
    VEGA_PREFIX + "cars": ("vehicle", "automobile", "model", "make", "mpg", "fuel", "engine", "economy", "heavy", "light", "powerful"),
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# words a table or column may not be called without quoting; renamed with a trailing "_" instead
_RESERVED = {
    "select", "from", "where", "group", "order", "by", "limit", "having", "and", "or", "not", "as", "is", "null", "in",
    "like", "between", "distinct", "asc", "desc", "table", "index", "join", "on", "case", "when", "then", "else", "end",
    "union", "all", "offset", "values", "insert", "update", "delete", "drop", "create", "with", "nulls", "first", "last",
}
# SQLite authorizer action codes a read-only query needs: SELECT, READ (a column), FUNCTION, RECURSIVE
# (a recursive CTE only reads; the time limit bounds it)
_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


class QueryError(ValueError):
    """A query that did not run: ``kind`` is "timeout", "not_allowed" or "sql_error"."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass
class Column:
    name: str
    sql_type: str  # INTEGER, REAL or TEXT
    examples: list[Any] = field(default_factory=list)  # a few distinct values, or all of them when ``listed``
    listed: bool = False  # ``examples`` are all the distinct values (a TEXT column with few of them)
    low: Any = None  # numeric range
    high: Any = None
    nulls: int = 0
    source_name: str | None = None  # the key in the input rows, when it had to be renamed

    @property
    def numeric(self) -> bool:
        return self.sql_type in ("INTEGER", "REAL")


@dataclass
class TableSchema:
    """A table's name, its columns with SQL types and example values, and its size."""

    name: str
    columns: list[Column]
    row_count: int = 0

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name.lower() == name.lower()), None)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def text(self) -> str:
        """A compact ``CREATE TABLE`` with one comment per column: its range, its values or examples."""
        lines = []
        for i, c in enumerate(self.columns):
            comma = "," if i < len(self.columns) - 1 else ""
            lines.append(f"  {c.name} {c.sql_type}{comma} -- {_describe(c)}")
        return f"CREATE TABLE {self.name} ( -- {self.row_count} rows\n" + "\n".join(lines) + "\n);"

    def words(self) -> set[str]:
        """Lower-case words that name this table's subject or columns ("cars", "car", "horsepower", "miles", ...)."""
        words = {self.name.lower(), _singular(self.name.lower())}
        for c in self.columns:
            for part in re.split(r"_+|(?<=[a-z])(?=[A-Z])", c.name):
                if len(part) > 2 and part.lower() not in {"per", "in", "lbs", "the", "of"}:
                    words |= {part.lower(), _singular(part.lower())}
        return words


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


def _sql_literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return format_value(value)


def _describe(c: Column) -> str:
    nulls = f"; {c.nulls} NULL" if c.nulls else ""
    if c.listed:
        return "one of " + ", ".join(_sql_literal(v) for v in c.examples) + nulls
    if c.numeric and c.low is not None:
        return f"{format_value(c.low)} to {format_value(c.high)}{nulls}"
    return "e.g. " + ", ".join(_sql_literal(v) for v in c.examples[:2]) + nulls


def format_value(value: Any) -> str:
    """A cell as text: integers plain, floats to at most 3 decimals, NULL as "NULL"."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{round(value, 3):g}" if abs(value) < 1e6 else f"{value:.1f}"
    return str(value)


# -- loading rows -------------------------------------------------------------------------------------


def cars_rows() -> list[dict[str, Any]]:
    """The 406 rows of the ``cars`` table from the installed ``vega_datasets`` distribution (MIT), with
    ``Year`` (stored there as a '1970-01-01' date string) turned into the integer year."""
    return vega_rows("cars")


def vega_rows(name: str) -> list[dict[str, Any]]:
    """A JSON table shipped in the ``vega_datasets`` wheel (``vega_datasets/_data/<name>.json``), read
    as a file: ``import vega_datasets`` would import pandas for nothing."""
    from importlib import metadata

    if not re.fullmatch(r"[a-z0-9_-]+", name):
        raise ValueError(f"not a vega_datasets table name: {name!r}")
    try:
        dist = metadata.distribution("vega_datasets")
    except metadata.PackageNotFoundError:
        raise ValueError("the vega_datasets package is not installed: pip install 'vega_datasets>=0.9'") from None
    path = Path(str(dist.locate_file(f"vega_datasets/_data/{name}.json")))
    if not path.is_file():
        raise ValueError(f"vega_datasets has no local table {name!r} (looked for {path})")
    rows = json.loads(path.read_text(encoding="utf-8"))
    if name == "cars":
        for row in rows:
            if isinstance(row.get("Year"), str) and re.match(r"^\d{4}-", row["Year"]):
                row["Year"] = int(row["Year"][:4])
    return rows


def load_rows(source: str | Path) -> list[dict[str, Any]]:
    """Rows from ``vega_datasets:<name>``, a ``.json`` list of objects, a ``.jsonl`` file or a ``.csv`` file
    (CSV cells that read as numbers become numbers). ValueError, naming the source, for anything else."""
    text = str(source)
    if text.startswith(VEGA_PREFIX):
        return vega_rows(text[len(VEGA_PREFIX):])
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"table source {text!r} is neither {VEGA_PREFIX}<name> nor an existing file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                rows = [{k: _csv_cell(v) for k, v in row.items()} for row in csv.DictReader(f)]
        elif suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif suffix == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
        else:
            raise ValueError(f"unsupported table file type {suffix!r} (use .json, .jsonl or .csv)")
    except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise ValueError(f"could not read table {path}: {exc}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"table {path} must hold a list of objects (one per row)")
    return rows


def _csv_cell(value: str | None) -> Any:
    if value is None or value.strip() == "":
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


# -- schema inference ---------------------------------------------------------------------------------


def safe_identifier(name: str, taken: set[str]) -> str:
    """``name`` as a bare SQL identifier: other characters become "_", a leading digit or a reserved
    word gets a prefix / suffix, and a clash with ``taken`` (lower-cased) a number."""
    ident = re.sub(r"\W+", "_", str(name).strip()).strip("_") or "column"
    if ident[0].isdigit():
        ident = "c_" + ident
    if ident.lower() in _RESERVED:
        ident += "_"
    base, n = ident, 2
    while ident.lower() in taken:
        ident, n = f"{base}_{n}", n + 1
    return ident


def _sql_type(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, (bool, int)) for v in present):
        return "INTEGER"
    if present and all(isinstance(v, (bool, int, float)) for v in present):
        return "REAL"
    return "TEXT"


def _cell(value: Any, sql_type: str) -> Any:
    if value is None:
        return None
    if sql_type == "INTEGER":
        return int(value)
    if sql_type == "REAL":
        return float(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def infer_schema(name: str, rows: Sequence[Mapping[str, Any]], examples: int = 3) -> TableSchema:
    """Column names (made safe), SQL types, ranges and example values of ``rows``."""
    if not rows:
        raise ValueError(f"table {name!r} has no rows")
    keys: list[str] = list(dict.fromkeys(k for row in rows for k in row))
    taken: set[str] = set()
    columns = []
    for key in keys:
        values = [row.get(key) for row in rows]
        sql_type = _sql_type(values)
        ident = safe_identifier(key, taken)
        taken.add(ident.lower())
        cells = [_cell(v, sql_type) for v in values]
        present = [v for v in cells if v is not None]
        distinct = list(dict.fromkeys(present))
        column = Column(ident, sql_type, nulls=len(cells) - len(present), source_name=None if ident == key else key)
        if sql_type != "TEXT" and present:
            column.low, column.high = min(present), max(present)
            column.examples = distinct[:examples]
        elif len(distinct) <= MAX_LISTED_VALUES and all(len(v) <= 40 for v in distinct):
            column.examples, column.listed = sorted(distinct), True
        else:
            column.examples = distinct[:examples]
        columns.append(column)
    return TableSchema(name=name, columns=columns, row_count=len(rows))


# -- the database -------------------------------------------------------------------------------------


@dataclass
class QueryResult:
    sql: str
    columns: list[str]
    rows: list[tuple]
    truncated: bool  # more rows than ``max_rows`` matched; only the first ``max_rows`` are here
    seconds: float


class TableDatabase:
    """Tables in an in-memory SQLite database that only ever reads.

    Build it with :meth:`from_tables` (name -> rows) or :meth:`from_sources` (name -> a source for
    :func:`load_rows`); then :meth:`run` queries with a row and a time limit.
    """

    def __init__(self, connection: sqlite3.Connection, schemas: dict[str, TableSchema]):
        self._connection = connection
        self.schemas = schemas
        self._lock = threading.Lock()

    @classmethod
    def from_sources(cls, sources: Mapping[str, str]) -> "TableDatabase":
        return cls.from_tables({name: load_rows(source) for name, source in sources.items()})

    @classmethod
    def from_tables(cls, tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> "TableDatabase":
        if not tables:
            raise ValueError("no tables given")
        connection = sqlite3.connect(":memory:", check_same_thread=False)  # one lock serializes use across threads
        schemas: dict[str, TableSchema] = {}
        taken: set[str] = set()
        for raw_name, rows in tables.items():
            if len(rows) > MAX_LOADED_ROWS:
                raise ValueError(f"table {raw_name!r} has {len(rows):,} rows; at most {MAX_LOADED_ROWS:,} are loaded into memory")
            name = safe_identifier(raw_name, taken)
            taken.add(name.lower())
            schema = infer_schema(name, rows)
            keys = [c.source_name or c.name for c in schema.columns]
            connection.execute(f"CREATE TABLE {name} (" + ", ".join(f"{c.name} {c.sql_type}" for c in schema.columns) + ")")
            connection.executemany(
                f"INSERT INTO {name} VALUES (" + ", ".join("?" * len(keys)) + ")",
                ([_cell(row.get(k), c.sql_type) for k, c in zip(keys, schema.columns)] for row in rows),
            )
            schemas[name] = schema
        connection.commit()
        connection.execute("PRAGMA query_only=ON")
        readable = {n.lower() for n in schemas}

        def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
            if action not in _ALLOWED_ACTIONS:
                return sqlite3.SQLITE_DENY
            if action == sqlite3.SQLITE_READ and (arg1 or "").lower() not in readable and arg1 is not None and db == "main":
                return sqlite3.SQLITE_DENY  # sqlite_master and friends: the schema text says all there is
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK

        connection.set_authorizer(authorize)
        return cls(connection, schemas)

    def run(self, sql: str, max_rows: int = 20, timeout_s: float = 2.0) -> QueryResult:
        """Run one read-only statement: at most ``max_rows`` rows (``truncated`` says if there were more),
        stopped after ``timeout_s`` seconds. QueryError ("timeout", "not_allowed", "sql_error") otherwise."""
        if max_rows < 1:
            raise ValueError("max_rows must be >= 1")
        with self._lock:
            t0 = time.perf_counter()
            deadline = t0 + timeout_s
            # called every 1,000 SQLite VM instructions (~tens of µs): a non-zero return interrupts the statement
            self._connection.set_progress_handler(lambda: int(time.perf_counter() > deadline), 1000)
            cursor = self._connection.cursor()
            try:
                cursor.execute(sql)
                rows = cursor.fetchmany(max_rows + 1)
                columns = [d[0] for d in cursor.description or []]
            except (sqlite3.DatabaseError, sqlite3.Warning) as exc:  # Warning: "one statement at a time" before Python 3.11
                message = str(exc)
                if time.perf_counter() > deadline and "interrupt" in message.lower():
                    raise QueryError("timeout", f"the query was stopped after {timeout_s:g} s") from None
                lowered = message.lower()
                if "one statement at a time" in lowered:
                    raise QueryError("not_allowed", "more than one statement (one SELECT only)") from None
                if any(w in lowered for w in ("not authorized", "prohibited", "readonly", "read-only")):
                    raise QueryError("not_allowed", f"{message} (the tables are read-only: SELECT only)") from None
                raise QueryError("sql_error", message) from None
            finally:
                cursor.close()
                self._connection.set_progress_handler(None, 1000)
            return QueryResult(sql=sql, columns=columns, rows=rows[:max_rows], truncated=len(rows) > max_rows, seconds=time.perf_counter() - t0)

    def close(self) -> None:
        self._connection.close()


def schemas_text(schemas: Iterable[TableSchema]) -> str:
    return "\n".join(s.text() for s in schemas)
