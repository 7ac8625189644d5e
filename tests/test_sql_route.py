"""The SQL route: tables in read-only SQLite, the SqlAnswerer component, its grammar and its checks."""

from __future__ import annotations

import json
import re
import time

import pytest
from haystack import Pipeline
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.sql_answerer import SqlAnswerer, extract_sql, looks_numeric, sql_grammar, validate_select
from ragkit.index.tables import QueryError, TableDatabase, cars_rows, load_rows
from ragkit.pipeline.trace import RagkitTracer


def reply_with(text: str) -> MockChatGenerator:
    return MockChatGenerator(response_fn=lambda messages: text)


def ask(answerer: SqlAnswerer, question: str):
    """One run inside a pipeline, so the trace sees the step."""
    pipe = Pipeline()
    pipe.add_component("sql", answerer)
    with RagkitTracer().collect() as trace:
        out = pipe.run({"sql": {"query": question}})["sql"]
    return out, trace.step("sql")


@pytest.fixture(scope="module")
def cars_db() -> TableDatabase:
    return TableDatabase.from_tables({"cars": cars_rows()})


def test_the_cars_table_comes_from_vega_datasets_with_integer_years():
    rows = cars_rows()
    assert len(rows) == 406
    assert set(rows[0]) == {"Name", "Miles_per_Gallon", "Cylinders", "Displacement", "Horsepower", "Weight_in_lbs", "Acceleration", "Year", "Origin"}
    assert all(isinstance(r["Year"], int) and 1970 <= r["Year"] <= 1982 for r in rows)
    assert sum(r["Miles_per_Gallon"] is None for r in rows) == 8  # nulls are kept as NULL, not invented


def test_the_schema_text_gives_types_ranges_and_the_values_of_a_small_text_column(cars_db):
    schema = cars_db.schemas["cars"]
    types = {c.name: c.sql_type for c in schema.columns}
    assert types == {"Name": "TEXT", "Miles_per_Gallon": "REAL", "Cylinders": "INTEGER", "Displacement": "REAL", "Horsepower": "INTEGER",
                     "Weight_in_lbs": "INTEGER", "Acceleration": "REAL", "Year": "INTEGER", "Origin": "TEXT"}
    text = schema.text()
    assert text.startswith("CREATE TABLE cars (") and "406 rows" in text
    assert "Origin TEXT -- one of 'Europe', 'Japan', 'USA'" in text
    assert "Year INTEGER, -- 1970 to 1982" in text and "8 NULL" in text
    assert len(text) < 800  # it goes into every prompt


def test_the_correct_query_is_answered_with_a_citable_document():
    sql = "SELECT COUNT(*) FROM cars WHERE Origin = 'Japan'"
    out, step = ask(SqlAnswerer(chat_generator=reply_with(sql)), "How many cars from Japan are in the table?")
    assert out["ok"] and out["error"] is None
    assert out["sql"] == sql and out["rows"] == [[79]] and out["value"] == 79 and out["columns"] == ["COUNT(*)"]
    (doc,) = out["documents"]
    assert doc.content == f"SQL over table cars: {sql} → 79"
    assert doc.meta["source"] == "sql" and doc.meta["table"] == "cars" and doc.meta["sql"] == sql
    assert step.llm_calls == 1 and not step.fallbacks and "ok=True" in step.row()["decision"]


def test_a_fenced_reply_with_a_trailing_semicolon_is_accepted_and_several_rows_are_described():
    reply = "```sql\nSELECT Origin, COUNT(*) FROM cars GROUP BY Origin ORDER BY COUNT(*) DESC;\n```"
    out, _ = ask(SqlAnswerer(chat_generator=reply_with(reply)), "How many cars per origin?")
    assert out["ok"] and out["rows"] == [["USA", 254], ["Japan", 79], ["Europe", 73]] and out["value"] is None
    assert out["documents"][0].content.endswith("→ 3 rows: Origin = USA, COUNT(*) = 254; Origin = Japan, COUNT(*) = 79; Origin = Europe, COUNT(*) = 73")


@pytest.mark.parametrize("reply", ["I think there are about 80 Japanese cars.", "", "SELECT", "Sure! SELECT COUNT(*) FROM cars"])
def test_a_garbage_reply_is_a_traced_failure_not_an_exception(reply):
    out, step = ask(SqlAnswerer(chat_generator=reply_with(reply)), "How many cars from Japan are in the table?")
    assert out["ok"] is False and out["documents"] == [] and out["rows"] == [] and out["value"] is None
    assert out["error"].startswith("parse_failed: ")
    assert step.fallbacks and step.fallbacks[0].startswith("sql: parse_failed")


@pytest.mark.parametrize("sql,reason", [
    ("DROP TABLE cars", "not DROP"),
    ("UPDATE cars SET Horsepower = 0", "not UPDATE"),
    ("INSERT INTO cars (Name) VALUES ('x')", "not INSERT"),
    ("DELETE FROM cars", "not DELETE"),
    ("ATTACH DATABASE '/tmp/x.db' AS x", "not ATTACH"),
    ("PRAGMA query_only = OFF", "not PRAGMA"),
    ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r", "not WITH"),
    ("SELECT COUNT(*) FROM cars; DROP TABLE cars", "more than one statement"),
    ("SELECT 1; SELECT 2", "more than one statement"),
    ("SELECT AVG(Price) FROM cars", "unknown column or name 'Price'"),
    ("SELECT name FROM sqlite_master", "unknown column or name 'sqlite_master'"),
    ("SELECT COUNT(*) FROM cars -- comment", "comments are not allowed"),
    ("SELECT 79", "the query reads no table"),
    ("SELECT load_extension('evil') FROM cars", "the query contains LOAD_EXTENSION"),
    ("SELECT group_concat(Name) FROM cars", "function group_concat is not allowed"),
    ("SELECT Name FROM cars WHERE Origin = `Japan`", "unexpected character"),
])
def test_anything_but_one_select_over_known_columns_is_refused_with_a_clear_error(sql, reason):
    answerer = SqlAnswerer(chat_generator=reply_with(sql))
    out, step = ask(answerer, "How many cars are there?")
    assert out["ok"] is False and out["documents"] == []
    assert out["error"].startswith("parse_failed: ") and reason in out["error"], out["error"]
    assert out["sql"] == sql  # the refused query is shown, for the trace and the learner
    assert step.fallbacks
    assert answerer.database().run("SELECT COUNT(*) FROM cars").rows == [(406,)]  # nothing was changed


def test_an_unknown_column_error_lists_the_real_columns():
    with pytest.raises(ValueError, match=r"table cars has columns Name, Miles_per_Gallon, .*Origin"):
        validate_select("SELECT AVG(Price) FROM cars", TableDatabase.from_tables({"cars": cars_rows()}).schemas.values())


def test_strings_and_keywords_inside_literals_do_not_fool_the_check(cars_db):
    sql, table = validate_select("SELECT COUNT(*) FROM cars WHERE Name = 'x; DROP TABLE cars -- '", list(cars_db.schemas.values()))
    assert table == "cars" and cars_db.run(sql).rows == [(0,)]
    assert extract_sql("SQL: SELECT 1") == "SELECT 1"


@pytest.mark.parametrize("sql", [
    "DROP TABLE cars", "INSERT INTO cars (Name) VALUES ('x')", "UPDATE cars SET Cylinders = 1", "DELETE FROM cars",
    "ATTACH DATABASE ':memory:' AS other", "PRAGMA query_only = OFF", "CREATE TEMP TABLE t (x)", "SELECT * FROM sqlite_master",
    "SELECT load_extension('x')",
])
def test_the_database_itself_refuses_writes_when_the_python_check_is_bypassed(cars_db, sql):
    with pytest.raises(QueryError) as info:
        cars_db.run(sql)
    assert info.value.kind == "not_allowed", info.value
    assert cars_db.run("SELECT COUNT(*) FROM cars").rows == [(406,)]


def test_a_runaway_query_is_stopped_by_the_time_limit():
    cross_join = "SELECT COUNT(*) FROM cars AS a, cars AS b, cars AS c"  # 406³ = 67 million rows
    answerer = SqlAnswerer(chat_generator=reply_with(cross_join), timeout_s=0.3)
    t0 = time.perf_counter()
    out, step = ask(answerer, "How many combinations of three cars are there?")
    assert time.perf_counter() - t0 < 5
    assert out["ok"] is False and out["error"] == "timeout: the query was stopped after 0.3 s" and out["documents"] == []
    assert any("timeout" in f for f in step.fallbacks)


def test_a_recursive_cte_is_stopped_by_the_time_limit_in_the_database(cars_db):
    t0 = time.perf_counter()
    with pytest.raises(QueryError) as info:
        cars_db.run("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r", timeout_s=0.2)
    assert info.value.kind == "timeout" and time.perf_counter() - t0 < 3
    assert cars_db.run("SELECT COUNT(*) FROM cars").rows == [(406,)]  # the connection still works


def test_the_row_limit_keeps_the_first_rows_and_says_so():
    out, _ = ask(SqlAnswerer(chat_generator=reply_with("SELECT Name FROM cars"), max_rows=5), "List the cars.")
    assert out["ok"] and len(out["rows"]) == 5
    doc = out["documents"][0]
    assert doc.meta["truncated"] is True and "the first 5 rows (more matched)" in doc.content


def test_an_llm_that_raises_and_an_empty_question_are_failures_not_exceptions():
    def broken(messages):
        raise ConnectionError("server down")

    out, step = ask(SqlAnswerer(chat_generator=MockChatGenerator(response_fn=broken)), "How many cars?")
    assert out["ok"] is False and out["error"].startswith("llm_error") and step.fallbacks
    out, _ = ask(SqlAnswerer(chat_generator=reply_with("SELECT COUNT(*) FROM cars")), "   ")
    assert out["ok"] is False and out["error"].startswith("empty_question")


def test_the_prompt_is_the_schema_and_the_question_only():
    seen = []

    def capture(messages):
        seen.append(messages)
        return "SELECT COUNT(*) FROM cars"

    answerer = SqlAnswerer(chat_generator=MockChatGenerator(response_fn=capture))
    ask(answerer, "How many cars are in the table?")
    system, user = seen[0]
    assert "CREATE TABLE cars" in system.text and user.text == "How many cars are in the table?"
    assert len(system.text) < 1000


def test_the_grammar_names_only_the_tables_columns_and_parses():
    from llama_cpp import LlamaGrammar

    answerer = SqlAnswerer(chat_generator=reply_with("x"))
    grammar = answerer.grammar()
    columns = set(cars_rows()[0])
    (column_rule,) = [line for line in grammar.splitlines() if line.startswith("t0-col ::=")]
    assert set(re.findall(r'"(\w+)"', column_rule)) == columns
    (numeric_rule,) = [line for line in grammar.splitlines() if line.startswith("t0-num ::=")]
    assert set(re.findall(r'"(\w+)"', numeric_rule)) == columns - {"Name", "Origin"}  # AVG/SUM and comparisons with numbers
    identifiers = {w for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', grammar) for w in re.findall(r"[A-Za-z_]\w*", lit)}
    keywords = {"SELECT", "DISTINCT", "FROM", "WHERE", "AND", "OR", "IS", "NOT", "NULL", "BETWEEN", "LIKE", "GROUP", "BY", "HAVING", "ORDER",
                "ASC", "DESC", "NULLS", "LAST", "LIMIT", "COUNT", "SUM", "AVG", "MIN", "MAX", "cars", "Europe", "Japan", "USA"}
    assert identifiers <= columns | keywords, identifiers - columns - keywords
    assert "'Japan'" in grammar and "Price" not in grammar
    assert isinstance(LlamaGrammar.from_string(grammar, verbose=False), LlamaGrammar)


@pytest.mark.integration
def test_llama_cpp_parses_the_grammar_with_the_embedded_models_vocabulary():
    """llama-cpp-python's ``LlamaGrammar.from_string`` only stores the text; llama.cpp parses it when a
    sampler is made. Load only the 0.5B GGUF's vocabulary (no weights) and make that sampler."""
    import llama_cpp

    from ragkit.llm.models import resolve_gguf

    llm = llama_cpp.Llama(model_path=str(resolve_gguf("qwen2.5-coder-0.5b")), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)

    def parses(grammar: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
        return bool(sampler)

    assert not parses("root ::= undefined-rule")  # the check can fail
    assert parses(SqlAnswerer(chat_generator=reply_with("x")).grammar())


def test_a_table_from_a_file_gets_safe_names_types_and_its_own_grammar(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text("full name,order,age,city\nAnn O'Brien,1,31,Cork\nBo,2,,Oslo\nCy,3,40.5,Cork\n", encoding="utf-8")
    db = TableDatabase.from_sources({"people": str(path)})
    schema = db.schemas["people"]
    assert [(c.name, c.sql_type) for c in schema.columns] == [("full_name", "TEXT"), ("order_", "INTEGER"), ("age", "REAL"), ("city", "TEXT")]
    grammar = sql_grammar([schema])
    assert '"full_name"' in grammar and "\"'Ann O''Brien'\"" in grammar  # a listed value, SQL-quoted
    assert db.run("SELECT AVG(age) FROM people WHERE city = 'Cork'").rows == [(35.75,)]
    answerer = SqlAnswerer(chat_generator=reply_with("SELECT COUNT(*) FROM people WHERE age IS NULL"), tables={"people": str(path)})
    out, _ = ask(answerer, "How many people have no age?")
    assert out["ok"] and out["value"] == 1 and out["documents"][0].meta["table"] == "people"


def test_an_unreadable_table_is_a_clear_error_at_warm_up_and_a_failure_at_run(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="could not read table"):
        load_rows(bad)
    with pytest.raises(ValueError, match="neither vega_datasets:<name> nor an existing file"):
        load_rows(tmp_path / "missing.csv")
    answerer = SqlAnswerer(chat_generator=reply_with("SELECT 1"), tables={"t": str(bad)})
    with pytest.raises(ValueError, match="could not read table"):
        answerer.warm_up()  # a Pipeline warms its components up before running: it stops here, clearly
    out = answerer.run(query="How many rows?")  # run without warm_up: a failure, not an exception
    assert out["ok"] is False and out["error"].startswith("table_unavailable: could not read table") and out["documents"] == []


def test_to_dict_from_dict_round_trip(tmp_path):
    answerer = SqlAnswerer(chat_generator=MockChatGenerator(responses=["SELECT MAX(Horsepower) FROM cars"]), max_rows=7, timeout_s=1.5, max_tokens=80)
    data = answerer.to_dict()
    assert data["init_parameters"]["tables"] == {"cars": "vega_datasets:cars"}
    again = SqlAnswerer.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data
    assert (again.max_rows, again.timeout_s, again.max_tokens, again.tables) == (7, 1.5, 80, {"cars": "vega_datasets:cars"})
    out, _ = ask(again, "What is the highest horsepower?")
    assert out["ok"] and out["value"] == 230
    pipe = Pipeline()
    pipe.add_component("sql", answerer)
    assert Pipeline.loads(pipe.dumps(), allowed_modules=["ragkit.*"]).get_component("sql").to_dict() == data


@pytest.mark.parametrize("question,expected", [
    ("How many cars from Japan are in the table?", True),
    ("What is the average horsepower of 8-cylinder cars?", True),
    ("Which origin has the most cars?", True),
    ("Are there more 4-cylinder or 6-cylinder cars?", True),
    ("What is the total weight of all European cars?", True),
    ("Which vehicle has the best fuel economy?", True),  # subject words for the cars table
    ("Who was Nikola Tesla?", False),
    ("How many times did Genghis Khan marry?", False),  # a count, but not about the table
    ("What year did Tesla move to New York?", False),  # a column word, but no number asked
    ("Where does the Rhine flow into the sea?", False),
])
def test_looks_numeric(cars_db, question, expected):
    answerer = SqlAnswerer(chat_generator=reply_with("x"))
    assert looks_numeric(question, list(cars_db.schemas.values()), answerer.subject_words) is expected
    assert answerer.looks_numeric(question) is expected


@pytest.mark.integration
@pytest.mark.llm
@pytest.mark.parametrize("question,gold", [("How many cars are in the table?", 406), ("How many cars from Japan are in the table?", 79)])
def test_the_real_05b_answers_easy_questions(local_llm, question, gold):
    out, step = ask(SqlAnswerer(chat_generator=local_llm), question)
    assert out["ok"], out["error"]
    assert out["value"] == gold, out["sql"]
    assert step.llm_calls == 1


# -- the SQL route inside the engine ------------------------------------------------------------------
def test_the_engine_answers_a_counting_question_from_the_sql_result_and_skips_other_questions(sample_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    calls = []

    def respond(messages):
        if "CREATE TABLE" in messages[0].text:
            calls.append("sql")
            return "SELECT COUNT(*) FROM cars WHERE Origin = 'Japan'"
        calls.append("answer")
        return "79 [1]"

    rag = AgenticRAG(Features(sql_route=True), config=fast_config, index=sample_index, chat_generator=MockChatGenerator(response_fn=respond))
    result = rag.ask("How many cars from Japan are in the table?")
    assert calls == ["sql", "answer"] and result.details["sql"]["value"] == 79
    assert result.sources[0].meta["source"] == "sql" and "79" in result.answer
    calls.clear()
    other = rag.ask("Where was Nikola Tesla born?")
    assert calls == ["answer"] and "sql" not in other.details
    assert other.trace.step("sql").decision["asked"].startswith("no")


def test_a_refused_query_keeps_the_retrieved_sources_and_is_traced(sample_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    def respond(messages):
        return "DROP TABLE cars" if "CREATE TABLE" in messages[0].text else "I do not know"

    rag = AgenticRAG(Features(sql_route=True, answer_mode="free"), config=fast_config, index=sample_index, chat_generator=MockChatGenerator(response_fn=respond))
    result = rag.ask("How many cars have 8 cylinders?")
    assert result.details["sql"]["ok"] is False and result.sources and all(d.meta.get("source") != "sql" for d in result.sources)
    assert any("sql" in f for f in result.trace.fallbacks)
