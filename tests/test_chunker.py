import pytest
from haystack import Document

from conftest import SAMPLE_DOCS
from ragkit.components.token_chunker import TokenChunker
from ragkit.index.ingest import load_files


@pytest.fixture(scope="module")
def chunker():
    c = TokenChunker(chunk_tokens=64, overlap_tokens=16)
    c.warm_up()
    return c


def n_tokens(chunker, text):
    return len(chunker._tok(text, add_special_tokens=False)["input_ids"])


def test_chunks_respect_the_token_budget_and_overlap(chunker):
    text = " ".join(f"Sentence number {i} says something short about rivers." for i in range(60))
    chunks = chunker.run(documents=[Document(content=text, meta={"source": "s.txt"})])["documents"]
    assert len(chunks) > 5
    assert all(n_tokens(chunker, c.content) <= 64 for c in chunks)
    # consecutive chunks share their boundary sentences
    assert all(a.meta["char_end"] > b.meta["char_start"] for a, b in zip(chunks, chunks[1:]))
    assert [c.meta["chunk_index"] for c in chunks] == list(range(len(chunks)))
    assert all(c.meta["source"] == "s.txt" for c in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut_at_token_boundaries(chunker):
    text = "word " * 500
    chunks = chunker.run(documents=[Document(content=text)])["documents"]
    assert len(chunks) >= 8 and all(n_tokens(chunker, c.content) <= 64 for c in chunks)


def test_a_unit_over_the_embedders_window_raises_no_false_alarm(capfd, caplog):
    # a code block with no sentence end is one unit of 700 tokens: it is cut into windows, never embedded whole,
    # so transformers' "Running this sequence through the model will result in indexing errors" must not reach
    # the terminal (a fresh tokenizer: transformers says it once per tokenizer)
    fresh = TokenChunker(chunk_tokens=64, overlap_tokens=16)
    fresh.run(documents=[Document(content="word " * 700)])
    printed = capfd.readouterr().err + caplog.text
    assert "longer than the specified maximum sequence length" not in printed


def test_pages_and_sections_are_recorded(chunker):
    report = load_files(SAMPLE_DOCS / "python_docs" / "library_functools.pdf")
    chunks = chunker.run(documents=report.documents)["documents"]
    pages = [c.meta["page"] for c in chunks]
    assert pages[0] == 1 and max(pages) > 5 and pages == sorted(pages)
    md = Document(content="# Title\n\nIntro text.\n\n## Second part\n\nMore text here.", meta={})
    sections = [c.meta.get("section") for c in TokenChunker(chunk_tokens=8, overlap_tokens=0).run(documents=[md])["documents"]]
    assert sections[0] == "Title" and sections[-1] == "Second part"
    # a chunk that opens with headings is under the last of them, not under a banner heading above it
    page = Document(content="# Node.js v20 documentation\n\n## TTY\n\nThe tty module provides classes.\n\n### Class: ReadStream\n\nA readable stream.")
    sections = [c.meta.get("section") for c in TokenChunker(chunk_tokens=12, overlap_tokens=0).run(documents=[page])["documents"]]
    assert sections[0] == "TTY" and sections[-1] == "Class: ReadStream", sections


def test_empty_document_gives_no_chunks(chunker):
    assert chunker.run(documents=[Document(content="  \n ")])["documents"] == []


def test_serialization_round_trip():
    c = TokenChunker(chunk_tokens=100, overlap_tokens=10)
    again = TokenChunker.from_dict(c.to_dict())
    assert (again.tokenizer, again.chunk_tokens, again.overlap_tokens) == ("all-MiniLM-L6-v2", 100, 10)


def test_invalid_sizes_are_refused():
    with pytest.raises(ValueError):
        TokenChunker(chunk_tokens=50, overlap_tokens=50)
