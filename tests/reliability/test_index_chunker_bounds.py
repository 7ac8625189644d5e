"""TokenChunker on hostile sizes: a chunk is bounded in characters as well as tokens, and a huge
text never reaches the tokenizer in one call (memory grows with the batch, not the file)."""

import pytest
from haystack import Document

from ragkit.components.token_chunker import TokenChunker

pytestmark = pytest.mark.fault("clear_error")  # huge input is chunked within bounds, not into one giant chunk


@pytest.fixture(scope="module")
def chunker():
    c = TokenChunker(chunk_tokens=64, overlap_tokens=16)
    c.warm_up()
    return c


def covered(chunks, length: int) -> list[tuple[int, int]]:
    """Gaps of [0, length) that no chunk covers."""
    gaps, reach = [], 0
    for start, end in sorted((c.meta["char_start"], c.meta["char_end"]) for c in chunks):
        if start > reach:
            gaps.append((reach, start))
        reach = max(reach, end)
    if reach < length:
        gaps.append((reach, length))
    return gaps


def test_a_one_megabyte_word_is_cut_at_the_character_bound_and_fully_covered(chunker):
    word = "a" * 1_000_000  # one [UNK] token to the word-piece tokenizer
    chunks = chunker.run(documents=[Document(content=word, meta={"source": "w.txt"})])["documents"]
    assert chunks and max(len(c.content) for c in chunks) <= 64 * 12  # the default bound: 12 characters a token
    assert covered(chunks, len(word)) == []
    assert all(c.content == word[c.meta["char_start"] : c.meta["char_end"]] for c in chunks[:5])


def test_a_long_word_inside_prose_keeps_both_bounds_and_the_prose(chunker):
    text = "The Rhine flows north. " * 20 + "x" * 50_000 + " Basel lies on the Rhine. " * 20
    chunks = chunker.run(documents=[Document(content=text)])["documents"]
    n_tokens = [len(chunker._tok(c.content, add_special_tokens=False)["input_ids"]) for c in chunks]
    assert max(len(c.content) for c in chunks) <= 64 * 12
    assert max(n_tokens) <= 64
    assert [gap for gap in covered(chunks, len(text)) if text[gap[0] : gap[1]].strip()] == []
    assert "Basel lies on the Rhine." in chunks[-1].content


def test_an_explicit_character_bound_is_kept_and_round_trips():
    c = TokenChunker(chunk_tokens=100, overlap_tokens=10, max_chunk_chars=50)
    chunks = c.run(documents=[Document(content="Short words only here. " * 40)])["documents"]
    assert chunks and max(len(d.content) for d in chunks) <= 50
    again = TokenChunker.from_dict(c.to_dict())
    assert (again.max_chunk_chars, again.char_bound) == (50, 50)
    assert TokenChunker.from_dict(TokenChunker(chunk_tokens=100).to_dict()).char_bound == 1200
    with pytest.raises(ValueError):
        TokenChunker(max_chunk_chars=0)


def test_a_large_text_reaches_the_tokenizer_in_bounded_batches(chunker, monkeypatch):
    text = "".join(f"Sentence {i} tells of the river and the city beside it. " for i in range(30_000))  # ~1.8 MB
    calls: list[int] = []
    real = chunker._tok

    def spy(texts, **kwargs):
        calls.append(sum(len(t) for t in texts))
        return real(texts, **kwargs)

    monkeypatch.setattr(chunker, "_tok", spy)
    chunks = chunker.run(documents=[Document(content=text)])["documents"]
    # one call with the whole text held every token's offsets of it at once (3.5 GB at 50 MB)
    assert len(calls) > 1 and max(calls) <= 250_000
    assert covered(chunks, len(text)) == [] or all(not text[a:b].strip() for a, b in covered(chunks, len(text)))
    assert [c.meta["chunk_index"] for c in chunks] == list(range(len(chunks)))
