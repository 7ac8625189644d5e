"""Index a file or folder into a :class:`~ragkit.index.store.RagIndex` on disk, incrementally.

A file whose bytes are unchanged since the last run is skipped; a changed file has its old chunks
replaced; ``remove_missing`` drops sources whose files are gone. Everything is converted, chunked
and embedded *before* the index is touched, and the index is saved atomically, so a failure at
any step leaves the previous index as it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from haystack import Document

from ragkit.components.token_chunker import TokenChunker
from ragkit.config import RagConfig
from ragkit.index.store import RagIndex
from ragkit.index.ingest import load_files
from ragkit.llm.generators import build_document_embedder


@dataclass
class IndexReport:
    index_dir: str
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    chunks_added: int = 0
    total_chunks: int = 0
    seconds: float = 0.0


def chunk_documents(documents: list[Document], config: RagConfig) -> tuple[list[Document], list[Document]]:
    """(leaf chunks to embed and search, parent blocks to answer from)."""
    if not config.index.hierarchical:
        chunker = TokenChunker(config.models.embedder, config.index.chunk_tokens, config.index.chunk_overlap_tokens)
        return chunker.run(documents=documents)["documents"], []
    from haystack.components.preprocessors import HierarchicalDocumentSplitter

    splitter = HierarchicalDocumentSplitter(
        block_sizes={config.index.parent_words, config.index.child_words}, split_overlap=0, split_by="word"
    )
    blocks = splitter.run(documents=documents)["documents"]
    leaves = [d for d in blocks if not d.meta.get("__children_ids")]
    parents = [d for d in blocks if d.meta.get("__children_ids")]
    return leaves, parents


def build_index(
    path: str | Path,
    index_dir: str | Path,
    config: RagConfig | None = None,
    rebuild: bool = False,
    remove_missing: bool = False,
    progress: bool = True,
) -> IndexReport:
    config = config or RagConfig()
    started = time.perf_counter()
    report = IndexReport(index_dir=str(index_dir))
    loaded = load_files(path)
    report.skipped = loaded.skipped

    index = None if rebuild or not RagIndex.exists(index_dir) else RagIndex.load(index_dir, expected_embedder=config.models.embedder)
    todo = []
    for file in loaded.files:
        known = index.sources.get(file.source) if index else None
        if known and known.sha256 == file.sha256:
            report.unchanged.append(file.source)
        else:
            todo.append(file)
    if index and remove_missing:
        present = {f.source for f in loaded.files} | {s for s, _ in loaded.skipped}
        report.removed = sorted(s for s in index.sources if s not in present)

    embedder = None
    leaves: list[Document] = []
    parents: list[Document] = []
    if todo:
        leaves, parents = chunk_documents([f.document for f in todo], config)
        embedder = build_document_embedder(config.models, progress_bar=progress)
        embedder.warm_up()
        leaves = embedder.run(documents=leaves)["documents"]
    if index is None:
        if embedder is None:
            embedder = build_document_embedder(config.models, progress_bar=False)
            embedder.warm_up()
        model = embedder.embedding_backend.model
        dim = (getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)()
        index = RagIndex(embedder=config.models.embedder, dim=dim)

    for source in report.removed:
        index.delete_source(source)
    for file in todo:
        index.delete_source(file.source)
    report.chunks_added = index.add(leaves, parents, source_hashes={f.source: f.sha256 for f in todo})
    report.added = [f.source for f in todo]
    if todo or report.removed or not RagIndex.exists(index_dir):
        index.save(index_dir)
    report.total_chunks = len(index)
    report.seconds = time.perf_counter() - started
    return report
