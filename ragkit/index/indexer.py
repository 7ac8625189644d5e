"""Index a file or folder into a :class:`~ragkit.index.store.RagIndex` on disk, incrementally.

A file whose bytes are unchanged since the last run is skipped; a changed file has its old chunks
replaced; ``remove_missing`` drops sources whose files are gone — only those inside the file or
folder indexed this time. Everything is converted, chunked, checked to be storable and embedded
*before* the index is touched, and the whole load → diff → embed → save runs under the index's
inter-process write lock, so two runs on one index queue instead of losing each other's files,
and a failure at any step leaves the previous index as it was.

Sources have one name per file whatever path is passed: the index records a root folder (the
first folder indexed, or the folder of the first file) and names every file by its path relative
to it, or by its absolute path when outside it. ``ragkit index docs`` then ``ragkit index
docs/wiki`` both call a file ``wiki/Rhine.md``. An index from before roots were recorded gets the
folder its sources are found under. ``dry_run`` reports what would change and changes nothing.

Collections: ``collection="wiki"`` puts every file indexed this time in that collection (its
chunks and parents get ``meta["collection"]``); a file already indexed, unchanged, in another
collection is moved there without re-embedding (``report.moved``). Without ``collection`` a new
file goes to ``"default"`` and a re-indexed one stays where it was, so runs that never name a
collection behave as before. ``description`` sets the collection's description (the collection
selector routes questions by it); a later run with another description replaces it.

On a server store (``index_dir`` a ``postgresql://`` or ``milvus://`` URL, :mod:`ragkit.index.stores`)
the same plan runs against the store's own list of sources, under the store's write lock, and each
file is written as soon as it is embedded in turn (:func:`_write_to_store`): a server that goes away
stops the run with how far it got, and the same command continues from there.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from haystack import Document

from ragkit.components.token_chunker import TokenChunker
from ragkit.config import RagConfig
from ragkit.index.filters import DEFAULT_COLLECTION, check_collection_name, check_description
from ragkit.index.ingest import IngestError, LoadReport, load_files
from ragkit.index.store import RagIndex, index_write_lock, unstorable
from ragkit.index.servers import redacted
from ragkit.index.stores import is_store_url, open_store, store_write_lock
from ragkit.index.versions import IndexNotFoundError, StoreUnavailableError
from ragkit.llm.generators import build_document_embedder
from ragkit.llm.models import quiet_weight_loading


@dataclass
class IndexReport:
    index_dir: str
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    other_types: dict[str, int] = field(default_factory=dict)  # files not read, their type not one ragkit reads: suffix -> count
    chunks_added: int = 0
    total_chunks: int = 0
    seconds: float = 0.0
    root: str = ""  # the folder source names are relative to
    dry_run: bool = False  # added / removed are what would happen; nothing was written
    collection: str | None = None  # the collection named for this run (None: files kept theirs, new ones went to "default")
    moved: list[str] = field(default_factory=list)  # unchanged files moved into `collection` without re-embedding
    description_changed: bool = False


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
    dry_run: bool = False,
    lock_timeout: float | None = None,
    on_plan: Callable[[IndexReport], None] | None = None,
    collection: str | None = None,
    description: str | None = None,
) -> IndexReport:
    """Bring ``index_dir`` (or the store ``config.store`` names, when set) up to date with ``path``; see the
    module docstring.

    ``collection``: a short slug (``wiki``, ``python-docs``) naming the collection the files of
    ``path`` belong to; ``description``: what that collection holds, in a sentence (without
    ``collection`` it describes ``"default"``).

    ``on_plan`` is called with the report's added / unchanged / removed lists filled before any
    embedding starts (the CLI prints what will be removed there). ``lock_timeout``: seconds to
    wait for another run holding the index (default ``DEFAULT_LOCK_TIMEOUT_S``), then
    :class:`~ragkit.index.store.IndexLockedError`.
    """
    config = config or RagConfig()
    index_dir = config.store or index_dir  # a config naming a store indexes into it, as the engine reads from it
    started = time.perf_counter()
    # checked before any file is read: a bad name must not cost a folder's conversion
    collection = check_collection_name(collection) if collection is not None else None
    description = check_description(description) if description is not None else None
    if not Path(path).exists():
        raise IngestError(f"{path} does not exist")
    on_store = is_store_url(index_dir)
    if on_store and config.index.hierarchical:
        raise ValueError("hierarchical (parent) chunks are not stored on a server store yet: index it with flat chunks")
    given = Path(os.path.realpath(path))
    # converting files needs no lock; the root it names them by is re-checked under the lock (a store
    # that cannot be reached fails here, before any file is read)
    root = _root_for(None if rebuild else _recorded(index_dir), given)
    loaded = load_files(path, root=root, progress=progress)
    if dry_run:
        index = None if rebuild else _existing(index_dir, config)
        report, _todo = _plan(index, loaded, given, root, remove_missing, index_dir, collection)
        report.dry_run, report.total_chunks = True, len(index) if index else 0
        report.description_changed = description is not None and (index.collections.get(collection or DEFAULT_COLLECTION) if index else None) != description
        report.seconds = time.perf_counter() - started
        return report
    with store_write_lock(index_dir, lock_timeout) if on_store else index_write_lock(index_dir, lock_timeout):
        existing = _existing(index_dir, config)
        index = None if rebuild else existing
        actual = _root_for((index.root, list(index.sources)) if index else None, given)
        if actual != root:  # another run changed the index between the peek and the lock
            root = actual
            loaded = load_files(path, root=root, progress=progress)
        report, todo = _plan(index, loaded, given, root, remove_missing, index_dir, collection)
        if on_plan is not None:
            on_plan(report)
        if on_store and rebuild and existing is not None:  # a store is rebuilt in place: every source goes
            index = existing
            report.removed = sorted(set(existing.sources) - {f.source for f in todo})
        _update(index, index_dir, todo, report, config, progress, root, description)
    report.seconds = time.perf_counter() - started
    return report


def _update(
    index: RagIndex | None, index_dir, todo, report: IndexReport, config: RagConfig, progress: bool, root: Path, description: str | None = None,
) -> None:
    embedder = None
    leaves: list[Document] = []
    parents: list[Document] = []
    for file in todo:  # set before chunking: every chunk and parent copies its document's meta
        previous = index.sources.get(file.source) if index else None
        file.document.meta["collection"] = report.collection or (previous.collection if previous else DEFAULT_COLLECTION)
    if todo:
        leaves, parents = chunk_documents([f.document for f in todo], config)
        # every record must be writable as UTF-8 JSON, checked before the expensive embedding
        bad = {d.meta.get("source"): problem for d in leaves + parents if (problem := unstorable(d))}
        if bad:
            report.skipped += [(s, f"cannot be stored in the index ({problem})") for s, problem in bad.items()]
            todo = [f for f in todo if f.source not in bad]
            leaves = [d for d in leaves if d.meta.get("source") not in bad]
            parents = [d for d in parents if d.meta.get("source") not in bad]
            report.added = [f.source for f in todo]
    if leaves:
        embedder = build_document_embedder(config.models, progress_bar=progress)
        with quiet_weight_loading():
            embedder.warm_up()
        leaves = embedder.run(documents=leaves)["documents"]
    on_store = is_store_url(index_dir)
    if index is None:
        if embedder is None:
            embedder = build_document_embedder(config.models, progress_bar=False)
            with quiet_weight_loading():
                embedder.warm_up()
        model = embedder.embedding_backend.model
        dim = (getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)()
        index = open_store(str(index_dir), embedder=config.models.embedder, dim=dim) if on_store else RagIndex(embedder=config.models.embedder, dim=dim)

    if on_store:
        _write_to_store(index, leaves, todo, report)
    else:
        for source in report.removed:
            index.delete_source(source)
        for file in todo:
            index.delete_source(file.source)
        report.chunks_added = index.add(leaves, parents, source_hashes={f.source: f.sha256 for f in todo})
    if report.moved:
        index.move_sources({source: report.collection for source in report.moved})
    target = report.collection or DEFAULT_COLLECTION
    if description is not None and index.collections.get(target) != description:
        index.set_description(target, description)
        report.description_changed = True
    index.prune_collections()
    if on_store:
        if index.root != str(root):
            index.set_root(str(root))
    elif todo or report.removed or report.moved or report.description_changed or index.root != str(root) or not RagIndex.exists(index_dir):
        index.root = str(root)
        index.save(index_dir)
    report.total_chunks = len(index)


def _write_to_store(store, leaves: list[Document], todo, report: IndexReport) -> None:
    """Removals, then one file at a time: its old chunks deleted, its new ones written. A server that goes
    away stops the run with how far it got; the files written are complete (each chunk records its
    file's chunk count), so the same command continues where it stopped without duplicates."""
    by_source: dict[str, list[Document]] = {}
    for doc in leaves:
        by_source.setdefault(doc.meta.get("source", ""), []).append(doc)
    done = 0
    try:
        for source in report.removed:
            store.delete_source(source)
        for file in todo:
            store.delete_source(file.source)
            report.chunks_added += store.add(by_source.get(file.source, []), source_hashes={file.source: file.sha256})
            done += 1
    except StoreUnavailableError as exc:
        raise StoreUnavailableError(
            f"{exc}. Stopped after {done} of {len(todo)} file(s) ({report.chunks_added} chunks written); "
            "run the same command again to continue (finished files are skipped, nothing is duplicated)"
        ) from None


def _plan(
    index: RagIndex | None, loaded: LoadReport, given: Path, root: Path, remove_missing: bool, index_dir, collection: str | None = None,
) -> tuple[IndexReport, list]:
    report = IndexReport(index_dir=redacted(str(index_dir)) if is_store_url(index_dir) else str(index_dir), root=str(root), skipped=list(loaded.skipped),
                         other_types=dict(loaded.other_types), collection=collection)
    todo = []
    for file in loaded.files:
        known = index.sources.get(file.source) if index else None
        if known and known.sha256 == file.sha256:
            report.unchanged.append(file.source)
            if collection is not None and known.collection != collection:
                report.moved.append(file.source)
        else:
            todo.append(file)
    if index and remove_missing:
        present = {f.source for f in loaded.files} | {s for s, _ in loaded.skipped}
        # a skipped file or unreadable folder keeps what was indexed from it ("." is the root itself)
        if "." in present:
            present = set(index.sources)
        under_skipped = tuple(s.rstrip(os.sep) + os.sep for s, _ in loaded.skipped)
        report.removed = sorted(
            s for s in index.sources if s not in present and not s.startswith(under_skipped) and _within(s, root, given)
        )
    report.added = [f.source for f in todo]
    return report, todo


def _within(source: str, root: Path, given: Path) -> bool:
    """Is the file a source names the path given this time, or inside it?"""
    where = Path(source) if os.path.isabs(source) else root / source
    return where == given or where.is_relative_to(given)


def _existing(index_dir, config: RagConfig):
    """The index to update, or None when there is none yet."""
    if is_store_url(index_dir):
        try:
            return open_store(str(index_dir), embedder=config.models.embedder)
        except IndexNotFoundError:
            return None
    return RagIndex.load(index_dir, expected_embedder=config.models.embedder) if RagIndex.exists(index_dir) else None


def _recorded(index_dir) -> tuple[str | None, list[str]] | None:
    """(root, sources) from the live manifest without loading the index; None if there is none
    readable (the load under the lock then reports what is wrong). For a store, from the store."""
    if is_store_url(index_dir):
        try:
            store = open_store(str(index_dir))
        except IndexNotFoundError:
            return None
        return store.root, list(store.sources)
    folder = RagIndex.live_dir(index_dir)
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8")) if folder else None
        return (manifest.get("root"), list(manifest.get("sources", {}))) if isinstance(manifest, dict) else None
    except (OSError, ValueError):
        return None


def _root_for(recorded: tuple[str | None, list[str]] | None, given: Path) -> Path:
    """The folder source names are relative to: the index's, else (a new index) the folder given
    or the folder of the file given. An index from before roots were recorded gets the nearest
    folder, from the given one upwards, under which its relative sources exist."""
    here = given if given.is_dir() else given.parent
    if recorded is None:
        return here
    root, sources = recorded
    if root:
        return Path(root)
    relative = [s for s in sources if not os.path.isabs(s)][:50]
    for candidate in (here, *here.parents):
        if relative and sum((candidate / s).exists() for s in relative) * 2 >= len(relative):
            return candidate
    return here
