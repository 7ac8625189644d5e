"""SqlAnswerer: answer a counting or comparing question by one read-only SQL query over a table.

"How many cars from Japan are in the table?" has one exact answer (79), which a retriever over text
chunks cannot count. This component asks the LLM for a single ``SELECT`` over the tables it was
given (``vega_datasets:cars`` by default), checks the query, runs it with a row limit and a time
limit (:class:`~ragkit.index.tables.TableDatabase`: read-only in-memory SQLite), and returns the SQL,
the rows, and a :class:`~haystack.dataclasses.Document` that states the query and its result in
words ("SQL over table cars: SELECT COUNT(*) FROM cars WHERE Origin = 'Japan' → 79"; meta
``{"source": "sql", "table": "cars", "sql": ...}``), so the answer step can cite it like any source.

A small model writes valid SQL only if it cannot write anything else. For llama.cpp the reply is
constrained by a GBNF grammar **built from the tables' own schema** (:func:`sql_grammar`): only the
known tables and columns; COUNT/SUM/AVG/MIN/MAX; comparisons of numeric columns with numbers and of
text columns with quoted strings (a text column with a few distinct values, like ``Origin``, may only
be compared with those values); AND/OR; GROUP BY (+ HAVING); ORDER BY; LIMIT. Every ORDER BY ends in
``NULLS LAST``, so "the car with the least horsepower" is not a car whose horsepower is missing.
Other backends (an OpenAI-compatible server, a mock) get no grammar, and any backend can be wrong,
so the query is checked again in Python (:func:`validate_select`): one statement, a SELECT that reads
a known table, only known identifiers and a fixed set of functions, no comments. The database then
refuses anything but reading (authorizer + ``PRAGMA query_only``) whatever got through.

A reply that is not SQL, a query that is refused or fails, or one stopped at the time limit becomes
``ok=False`` with an ``error`` and no documents, recorded on the trace as a fallback — never an
exception. :func:`looks_numeric` is a rules check (microseconds, no LLM) that a router can use to
send a question here.

The prompt is the schema text (a system message: the same for every question, so llama.cpp's
prompt cache reuses it) and the question; no few-shot examples.

Usage::

    answerer = SqlAnswerer(chat_generator=build_chat_generator(ModelConfig(llm="qwen2.5-coder-0.5b")))
    answerer.warm_up()
    out = answerer.run(query="How many cars from Japan are in the table?")
    out["sql"], out["value"], out["documents"][0].content
    # "SELECT COUNT(*) FROM cars WHERE Origin = 'Japan'", 79, "SQL over table cars: ... → 79"
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Optional, Sequence

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.index.tables import SUBJECT_WORDS, VEGA_PREFIX, QueryError, TableDatabase, TableSchema, format_value, schemas_text
from ragkit.llm.structured import backend_of, call_llm, gbnf_grammar, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

DEFAULT_TABLES = {"cars": VEGA_PREFIX + "cars"}
AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX")
# functions the Python check lets through: the grammar's aggregates and a few harmless scalar ones a
# server-side model tends to write (ROUND(AVG(x), 1))
ALLOWED_FUNCTIONS = {*AGGREGATES, "TOTAL", "ROUND", "ABS", "LOWER", "UPPER", "LENGTH", "COALESCE", "IFNULL"}
SQL_KEYWORDS = {
    "SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "GROUP", "BY", "ORDER", "ASC", "DESC", "LIMIT", "OFFSET", "AS",
    "DISTINCT", "ALL", "HAVING", "IS", "NULL", "LIKE", "IN", "BETWEEN", "NULLS", "FIRST", "LAST", "CASE", "WHEN",
    "THEN", "ELSE", "END", "ESCAPE",
}
# named in the error when they appear, so a refused query says why
WRITE_KEYWORDS = {
    "INSERT", "UPDATE", "DELETE", "DROP", "CREATE", "ALTER", "ATTACH", "DETACH", "PRAGMA", "REPLACE", "VACUUM",
    "REINDEX", "ANALYZE", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "TRIGGER", "INTO", "WITH", "RECURSIVE",
    "UPSERT", "CONFLICT", "RETURNING", "LOAD_EXTENSION",
}

SQL_SYSTEM = "You write one SQLite SELECT query that answers the question from this table. Reply with the query only.\n\n{schema}"


# -- the grammar --------------------------------------------------------------------------------------


def _lit(text: str) -> str:
    return json.dumps(text)  # GBNF string literals use JSON escaping


def _alternatives(values: Iterable[str]) -> str:
    return " | ".join(_lit(v) for v in values)


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def sql_grammar(schemas: Sequence[TableSchema]) -> str:
    """GBNF for the SELECTs this component may run over ``schemas``: one table per query, its own columns only."""
    rules = ["root ::= " + " | ".join(f"t{i}-query" for i in range(len(schemas)))]
    for i, schema in enumerate(schemas):
        t = f"t{i}"
        numeric = [c for c in schema.columns if c.numeric]
        text = [c for c in schema.columns if not c.numeric]
        aggregate = ['"COUNT(*)"', f'"COUNT(DISTINCT " {t}-col ")"', f'("MIN" | "MAX" | "COUNT") "(" {t}-col ")"']
        conditions = [f'{t}-col " IS " ("NOT ")? "NULL"']
        if numeric:
            aggregate.append(f'("AVG" | "SUM") "(" {t}-num ")"')
            conditions += [f'{t}-num " " cmp " " {t}-value', f'{t}-num " BETWEEN " number " AND " number']
            rules += [
                f"{t}-num ::= " + _alternatives(c.name for c in numeric),
                f'{t}-value ::= number | "(SELECT " ("AVG" | "MIN" | "MAX") "(" {t}-num ") FROM {schema.name})"',
            ]
        for c in text:
            if c.listed:  # compared only with its own values
                conditions.append(f'{_lit(c.name)} (" = " | " != ") ({_alternatives(_sql_string(v) for v in c.examples)})')
            else:
                conditions.append(f'{_lit(c.name)} (" = " | " != " | " LIKE ") string')
        rules += [
            f'{t}-query ::= "SELECT " ("DISTINCT ")? {t}-sel (", " {t}-sel){{0,2}} " FROM {schema.name}" {t}-where? {t}-group? {t}-order? limit?',
            f"{t}-sel ::= {t}-agg | {t}-col",
            f"{t}-agg ::= " + " | ".join(aggregate),
            f"{t}-col ::= " + _alternatives(schema.column_names),
            f'{t}-where ::= " WHERE " {t}-cond ((" AND " | " OR ") {t}-cond){{0,3}}',
            f"{t}-cond ::= " + " | ".join(conditions),
            f'{t}-group ::= " GROUP BY " {t}-col (" HAVING " {t}-agg " " cmp " " number)?',
            f'{t}-order ::= " ORDER BY " {t}-sel (" ASC" | " DESC") " NULLS LAST"',
        ]
    rules += [
        'limit ::= " LIMIT " [1-9] [0-9]?',
        'cmp ::= "=" | "!=" | "<" | "<=" | ">" | ">="',
        'number ::= "-"? [0-9]{1,9} ("." [0-9]{1,4})?',
        "string ::= \"'\" [^'\\n]{1,60} \"'\"",
    ]
    return "\n".join(rules)


# -- the Python check ---------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<string>'(?:[^']|'')*')|(?P<number>\d+(?:\.\d*)?|\.\d+)|(?P<quoted>"[^"]*")"""
    r"""|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<comment>--|/\*)|(?P<op><=|>=|<>|!=|==|\|\||[=<>(),*+\-/%.;])"""
)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.S)


def _tokens(sql: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if m is None:
            raise ValueError(f"unexpected character {sql[pos]!r} in the query")
        kind = m.lastgroup
        if kind == "comment":
            raise ValueError("comments are not allowed in the query")
        if kind == "quoted":
            kind, value = "word", m.group()[1:-1]
        else:
            value = m.group()
        if kind != "space":
            tokens.append((kind, value))
        pos = m.end()
    return tokens


def validate_select(sql: str, schemas: Sequence[TableSchema]) -> tuple[str, str]:
    """(the query without a trailing ";", the first table it reads), or ValueError saying what is wrong:
    not one statement, not a SELECT, a write keyword, a comment, an unknown table, column or function,
    or no table read at all (``SELECT 79`` answers nothing from the data)."""
    sql = sql.strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    if not sql:
        raise ValueError("empty query")
    tokens = _tokens(sql)
    if any(v == ";" for _, v in tokens):
        raise ValueError("more than one statement: one SELECT only")
    words = [v.upper() for k, v in tokens if k == "word"]
    first = tokens[0][1].upper()
    if first != "SELECT":
        raise ValueError(f"only a read-only SELECT may run, not {first}")
    writes = [w for w in words if w in WRITE_KEYWORDS]
    if writes:
        raise ValueError(f"only a read-only SELECT may run: the query contains {writes[0]}")
    tables = {s.name.lower(): s for s in schemas}
    columns = {c.name.lower() for s in schemas for c in s.columns}
    aliases = {v.lower() for (k0, v0), (k, v) in zip(tokens, tokens[1:]) if v0.upper() == "AS" and k == "word"}
    read: list[str] = []
    for i, (kind, value) in enumerate(tokens):
        if kind != "word":
            continue
        upper, lower = value.upper(), value.lower()
        after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if after == "(" and upper not in SQL_KEYWORDS:
            if upper not in ALLOWED_FUNCTIONS:
                raise ValueError(f"function {value} is not allowed (allowed: {', '.join(sorted(ALLOWED_FUNCTIONS))})")
            continue
        if upper in SQL_KEYWORDS or lower in columns or lower in aliases:
            continue
        if lower in tables:
            if i > 0 and tokens[i - 1][1].upper() in ("FROM", ",", "JOIN"):
                read.append(tables[lower].name)
            continue
        known = "; ".join(f"table {s.name} has columns {', '.join(s.column_names)}" for s in schemas)
        raise ValueError(f"unknown column or name {value!r} ({known})")
    if not read:
        raise ValueError(f"the query reads no table (known: {', '.join(s.name for s in schemas)})")
    return sql, read[0]


def extract_sql(text: str) -> str:
    """The query in a reply: code fences and a leading "SQL:" label removed; nothing else is guessed."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    return re.sub(r"^(?:sql|query)\s*:\s*", "", text, flags=re.I)


# -- the route check ----------------------------------------------------------------------------------

_NUMERIC_CUE = re.compile(
    r"\b(how\s+many|how\s+much|number\s+of|count|total|sum|average|avg|mean|median|most|least|fewest|fewer|more|"
    r"highest|lowest|largest|smallest|biggest|maximum|minimum|max|min|greatest|heaviest|lightest|fastest|slowest|"
    r"best|worst|at\s+least|at\s+most|compare|compared|percentage|percent|proportion|share|ratio|top\s+\d+|rank)\b",
    re.I,
)


def looks_numeric(question: str, tables: TableSchema | Sequence[TableSchema], extra_words: Iterable[str] = ()) -> bool:
    """Whether ``question`` asks to count, total, average, rank or compare numbers (a cue word) about one of
    ``tables`` (a table or column word, or one of ``extra_words``). A pure function: no I/O, no model."""
    if not _NUMERIC_CUE.search(question):
        return False
    schemas = [tables] if isinstance(tables, TableSchema) else list(tables)
    vocabulary = {w.lower() for w in extra_words}.union(*(s.words() for s in schemas)) if schemas else {w.lower() for w in extra_words}
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", question)}
    return bool(words & vocabulary or {w[:-1] for w in words if w.endswith("s")} & vocabulary)


# -- the component ------------------------------------------------------------------------------------


def result_text(table: str, sql: str, columns: list[str], rows: list[tuple], truncated: bool) -> str:
    """The query and its result in words, for the answer step to read and cite."""
    head = f"SQL over table {table}: {sql} → "
    if not rows:
        return head + "no rows"
    if len(rows) == 1 and len(columns) == 1:
        return head + format_value(rows[0][0])
    described = "; ".join(", ".join(f"{c} = {format_value(v)}" for c, v in zip(columns, row)) for row in rows)
    count = f"the first {len(rows)} rows (more matched)" if truncated else ("1 row" if len(rows) == 1 else f"{len(rows)} rows")
    return head + f"{count}: {described}"


@component
class SqlAnswerer:
    def __init__(
        self,
        chat_generator: Any,
        tables: dict[str, str] | None = None,
        max_rows: int = 20,
        timeout_s: float = 2.0,
        max_tokens: int = 96,
        subject_words: list[str] | None = None,
        prompt: str | None = None,
        only_numeric: bool = False,
    ):
        """``tables``: table name -> source (``vega_datasets:<name>`` or a ``.json`` / ``.jsonl`` / ``.csv``
        file), loaded in ``warm_up``; default the vega_datasets ``cars`` table. ``max_rows`` and
        ``timeout_s`` bound what a query returns and how long it may run. ``subject_words``: extra
        words that mean the tables' subject for :meth:`looks_numeric` (default: known ones for vega
        tables). ``prompt``: a custom system prompt with ``{schema}``, replacing :data:`SQL_SYSTEM`.
        ``only_numeric``: ask the LLM only when :meth:`looks_numeric` says the question counts or
        compares numbers of these tables (how the engine's SQL route uses it); other questions pass
        their ``documents`` through with no call."""
        if chat_generator is None:
            raise ValueError("SqlAnswerer needs a chat generator")
        if max_rows < 1 or timeout_s <= 0 or max_tokens < 16:
            raise ValueError("max_rows must be >= 1, timeout_s > 0 and max_tokens >= 16")
        if prompt is not None and "{schema}" not in prompt:
            raise ValueError("a custom SQL prompt needs a {schema} placeholder")
        self.chat_generator, self.tables = chat_generator, dict(tables or DEFAULT_TABLES)
        self.max_rows, self.timeout_s, self.max_tokens, self.prompt = max_rows, timeout_s, max_tokens, prompt
        self.only_numeric = only_numeric
        if subject_words is None:
            subject_words = [w for source in self.tables.values() for w in SUBJECT_WORDS.get(source, ())]
        self.subject_words = list(subject_words)
        self._database: TableDatabase | None = None
        self._grammar_text: str | None = None
        self._grammar: Any = None

    def warm_up(self) -> None:
        """Load the tables (ValueError naming a source that cannot be read) and the chat_generator."""
        self.database()
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator), tables=self.tables, max_rows=self.max_rows, timeout_s=self.timeout_s,
            max_tokens=self.max_tokens, subject_words=self.subject_words, prompt=self.prompt,
            only_numeric=self.only_numeric,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SqlAnswerer":
        return default_from_dict(cls, generator_from_dict(data))

    def database(self) -> TableDatabase:
        if self._database is None:
            self._database = TableDatabase.from_sources(self.tables)
        return self._database

    @property
    def schemas(self) -> list[TableSchema]:
        return list(self.database().schemas.values())

    def grammar(self) -> str:
        """The GBNF text that constrains a llama.cpp reply to this component's tables."""
        if self._grammar_text is None:
            self._grammar_text = sql_grammar(self.schemas)
        return self._grammar_text

    def looks_numeric(self, question: str) -> bool:
        return looks_numeric(question, self.schemas, self.subject_words)

    def _constraint(self) -> dict[str, Any]:
        if backend_of(self.chat_generator) != "llama.cpp":
            return {}
        if self._grammar is None:
            self._grammar = gbnf_grammar(self.grammar())
        return {"grammar": self._grammar}

    def messages(self, question: str) -> list[ChatMessage]:
        system = (self.prompt or SQL_SYSTEM).format(schema=schemas_text(self.schemas))
        return [ChatMessage.from_system(system), ChatMessage.from_user(question.strip())]

    @staticmethod
    def _failure(error: str, sql: str | None = None, documents: Optional[list[Document]] = None) -> dict[str, Any]:
        record(decision={"ok": False})
        return {"documents": list(documents or []), "sql": sql, "columns": [], "rows": [], "value": None, "ok": False, "error": error}

    @component.output_types(documents=list[Document], sql=Optional[str], columns=list[str], rows=list[list], value=Any, ok=bool, error=Optional[str])
    def run(self, query: str, documents: Optional[list[Document]] = None) -> dict[str, Any]:
        """``documents`` (input, optional): retrieved chunks to pass on after the SQL result (the engine
        joins them this way, so the result is source [1]). ``documents`` (output): the Document stating
        the query and its result, then the input documents (only those on failure); ``sql``: the
        query the LLM wrote (also when refused); ``columns`` / ``rows``: the result (at most ``max_rows``);
        ``value``: the single cell of a one-row, one-column result, else None; ``ok`` / ``error``."""
        try:
            schemas = self.schemas
        except ValueError as exc:  # a table source that cannot be read: reported, the pipeline goes on
            record(fallback=f"sql: table_unavailable: {exc}")
            return self._failure(f"table_unavailable: {exc}", documents=documents)
        if not query or not query.strip():
            return self._failure("empty_question: there is nothing to answer", documents=documents)
        if self.only_numeric and not self.looks_numeric(query):
            record(decision={"asked": "no: not a question about counts or sums of the tables"})
            return {"documents": list(documents or []), "sql": None, "columns": [], "rows": [], "value": None, "ok": True, "error": None}
        kwargs = {**self._constraint(), "max_tokens": self.max_tokens, "temperature": 0.0}
        reply = call_llm(self.chat_generator, self.messages(query), lambda text: validate_select(extract_sql(text), schemas), kwargs, step="sql")
        if not reply.ok:
            return self._failure(reply.error or "llm_error", extract_sql(reply.text) if reply.text else None, documents)
        sql, table = reply.value
        try:
            result = self.database().run(sql, max_rows=self.max_rows, timeout_s=self.timeout_s)
        except QueryError as exc:
            record(fallback=f"sql: {exc}")
            return self._failure(str(exc), sql, documents)
        rows = [list(r) for r in result.rows]
        value = rows[0][0] if len(rows) == 1 and len(result.columns) == 1 else None
        content = result_text(table, sql, result.columns, result.rows, result.truncated)
        document = Document(content=content, meta={"source": "sql", "table": table, "sql": sql, "rows": len(rows), "truncated": result.truncated})
        record(decision={"ok": True, "rows": len(rows), "sql_ms": round(result.seconds * 1000, 2)})
        return {"documents": [document, *(documents or [])], "sql": sql, "columns": result.columns, "rows": rows, "value": value, "ok": True, "error": None}
