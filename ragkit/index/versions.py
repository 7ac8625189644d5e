"""Versioned index folders and the write lock: a save that crashes anywhere, or a reader that
opens mid-save, sees the old index or the new one, whole.

Layout of an index directory::

    CURRENT               the name of the live version, replaced atomically (temp file, fsync, os.replace)
    versions/0000000007/  one complete index (see ragkit.index.store); manifest.json is written last
    write.lock            inter-process lock held by writers (ragkit.index.store.index_write_lock)
    sentence_vectors-*.npz  caches that other modules keep beside the index (left alone here)

A save writes a fresh numbered version folder, fsyncs every file and folder, renames its
manifest.json into place (a version without one is incomplete and never read), swaps CURRENT, and
only then removes older versions. A version folder is never modified after its manifest exists, so
a reader can only ever find one *missing* (removed under it) — it then re-reads CURRENT and tries
again. A crash between writing a complete version and swapping CURRENT leaves a complete version
newer than the one CURRENT names: readers take it (the save had finished its work), and the next
writer makes it official. Writers (under the lock) delete incomplete folders left by crashes.

An index saved by ragkit before this layout (manifest.json directly in the index folder) is read
as it is; the next save converts it. Why hand-written: the "one pointer file swapped atomically
over immutable version folders" scheme is what LevelDB / Lucene do for the same problem, and no
small library offers it for a folder of arbitrary files.

Writers serialise on :func:`index_write_lock` (``filelock``: an flock'ed ``write.lock`` in the index
folder, which is never itself replaced). The index's error types live here too, so that the lock
can raise one; :mod:`ragkit.index.store` re-exports them.

Tests inject crashes through :data:`_FAULT_HOOK`, called with a label at every write, fsync,
rename and delete point of a save.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

CURRENT = "CURRENT"
VERSIONS = "versions"
MANIFEST = "manifest.json"
# files of the flat layout written before versioned folders; removed once CURRENT names a version
LEGACY_ENTRIES = ("manifest.json", "chunks.jsonl", "parents.jsonl", "dense.faiss", "sparse")

# A second `ragkit index` on the same folder waits this long for the first to finish: long enough
# for a large folder's embedding run, short enough that a stuck run is reported rather than waited on forever.
DEFAULT_LOCK_TIMEOUT_S = 600.0
LOCK_FILE = "write.lock"

_FAULT_HOOK: Callable[[str], None] | None = None  # tests: called with a label at each crash point


class IndexError_(RuntimeError):
    """Base class for index problems (named with a trailing underscore: ``IndexError`` is a builtin)."""


class IndexNotFoundError(IndexError_):
    pass


class IndexCorruptedError(IndexError_):
    pass


class IndexVersionError(IndexError_):
    pass


class EmbedderMismatchError(IndexError_):
    pass


class IndexLockedError(IndexError_):
    """Another process (another ``ragkit index`` run) held the index's write lock past the timeout."""


class IndexWriteError(IndexError_):
    """The index folder cannot be written (full disk, no permission, read-only file system); the message
    says which and what to do. Raised before anything live changed: the index is as it was."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def not_writable(index_dir: Path, exc: OSError) -> IndexWriteError:
    return IndexWriteError(
        f"the index folder {index_dir} is not writable ({os.strerror(exc.errno)}: {exc.filename or index_dir}); "
        "asking works on it as it is; to index, use a folder you can write (--index-dir) or ask its owner"
    )


_LOCKS: dict[str, FileLock] = {}
_LOCKS_GUARD = threading.Lock()


@contextmanager
def index_write_lock(index_dir: str | Path, timeout: float | None = None) -> Iterator[Path]:
    """Hold the inter-process write lock of ``index_dir`` (created if missing) for a read-modify-write.

    The lock file lives inside the index folder, which a save never replaces (only its
    ``versions/`` change), so every process locks the same file. Re-entrant in one thread:
    :meth:`RagIndex.save` takes it too, inside a caller's hold. Raises :class:`IndexLockedError`
    after ``timeout`` seconds (default :data:`DEFAULT_LOCK_TIMEOUT_S`).
    """
    index_dir = Path(index_dir)
    try:
        index_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in NOT_WRITABLE:
            raise not_writable(index_dir, exc) from None
        raise
    lock_path = str((index_dir / LOCK_FILE).resolve())
    with _LOCKS_GUARD:
        # one FileLock object per file and process: flock locks conflict between two descriptors
        # of the same process, so a second object would deadlock against the first
        lock = _LOCKS.get(lock_path) or _LOCKS.setdefault(lock_path, FileLock(lock_path))
    wait = DEFAULT_LOCK_TIMEOUT_S if timeout is None else timeout
    try:
        lock.acquire(timeout=wait)
    except Timeout:
        raise IndexLockedError(
            f"Another ragkit index run holds the write lock on {index_dir} ({lock_path}); waited {wait:g} s. "
            "Let it finish and run again, or wait longer with --lock-timeout SECONDS."
        ) from None
    except OSError as exc:  # (after Timeout, an OSError too) filelock opens the lock file for writing
        if exc.errno in NOT_WRITABLE:
            raise not_writable(index_dir, exc) from None
        raise
    try:
        yield index_dir
    finally:
        lock.release()


def fault_point(label: str) -> None:
    if _FAULT_HOOK is not None:
        _FAULT_HOOK(label)


def _number(name: str) -> int | None:
    return int(name) if name.isdigit() else None


def numbered_versions(index_dir: Path) -> list[tuple[int, Path]]:
    """Every numbered version folder, complete or not, oldest first."""
    try:
        entries = list(os.scandir(index_dir / VERSIONS))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [(_number(e.name), Path(e.path)) for e in entries]
    return sorted((n, p) for n, p in found if n is not None)


def read_current(index_dir: Path) -> Path | None:
    """The version folder CURRENT names (it may already be gone), or None without a CURRENT."""
    try:
        name = (index_dir / CURRENT).read_text(encoding="ascii").strip()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    return index_dir / VERSIONS / name if name.isdigit() else None


def live_dir(index_dir: str | Path) -> Path | None:
    """The folder holding the live index files: the newest complete version at least as new as
    CURRENT's (recovering a save that crashed before its swap), else a flat pre-versioning index."""
    index_dir = Path(index_dir)
    current = read_current(index_dir)
    floor = _number(current.name) if current is not None else -1
    for number, folder in reversed(numbered_versions(index_dir)):
        if number > floor and (folder / MANIFEST).is_file():
            return folder
    if current is not None:
        return current
    if (index_dir / MANIFEST).is_file():
        return index_dir
    return None


def new_version_dir(index_dir: Path) -> Path:
    """Create the next numbered version folder (mkdir is the atomic claim; default umask mode)."""
    root = index_dir / VERSIONS
    root.mkdir(parents=True, exist_ok=True)
    existing = numbered_versions(index_dir)
    current = read_current(index_dir)
    number = max([n for n, _ in existing] + [_number(current.name) if current else 0]) + 1
    while True:
        folder = root / f"{number:010d}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            number += 1


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every file, then every folder bottom-up, so the names are durable too."""
    for dirpath, _dirnames, filenames in os.walk(folder, topdown=False):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def write_file_durably(path: Path, data: bytes, label: str) -> None:
    """Write ``data`` to a temp sibling, fsync it, rename it over ``path``, fsync the folder."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    # os.open with 0o666 honours the umask (tempfile.mkstemp would force 0600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fault_point(f"{label}: temp written")
            fh.flush()
            os.fsync(fh.fileno())
        fault_point(f"{label}: temp fsynced")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fault_point(f"{label}: renamed")
    fsync_path(path.parent)
    fault_point(f"{label}: folder fsynced")


def publish(index_dir: Path, version: Path) -> None:
    """Make ``version`` the live one: the single atomic step of a save."""
    write_file_durably(index_dir / CURRENT, f"{version.name}\n".encode("ascii"), "CURRENT")


def prune(index_dir: Path, keep: Path) -> None:
    """Remove every version but ``keep`` (incomplete ones from crashed writers included), flat-layout
    files and stray temp files. Callers hold the write lock, so no other writer's folder is here."""
    for _number_, folder in numbered_versions(index_dir):
        if folder != keep:
            # rename first: a reader finds the whole version gone at once, never half of it
            trash = folder.with_name(f"{folder.name}.trash-{uuid.uuid4().hex[:8]}")
            try:
                os.rename(folder, trash)
            except OSError:
                continue
            fault_point(f"old version {folder.name}: renamed to trash")
            shutil.rmtree(trash, ignore_errors=True)
            fault_point(f"old version {folder.name}: removed")
    for entry in list(os.scandir(index_dir / VERSIONS)):
        if _number(entry.name) is not None:
            continue
        if entry.is_dir():  # trash and anything else half-done by a crashed writer
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)
    if read_current(index_dir) == keep:
        for name in LEGACY_ENTRIES:  # manifest.json first: without it the rest is not an index
            target = index_dir / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists():
                target.unlink()
            else:
                continue
            fault_point(f"legacy {name}: removed")
    for stray in index_dir.glob(f".{CURRENT}.*.tmp"):
        stray.unlink(missing_ok=True)


class StoreUnavailableError(IndexError_):
    """The store's server cannot be reached or refused the login; the message names the URL (without its password)."""
