"""A real PostgreSQL server for a test: Debian's `postgresql` binaries, a cluster in a temporary
folder, on 127.0.0.1 at a free port, stopped when the test ends.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user that
Debian's package creates (and runs as it). Trust authentication, for 127.0.0.1 only: the
server lives for one test and holds nothing.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

INSTALL = "apt-get install -y postgresql (make setup does it as root)"


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def needs_postgres() -> tuple[str, str]:
    """initdb and pg_ctl, or the test skips saying how to install them."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip(f"PostgreSQL is not installed: {INSTALL}")
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a `postgres` user to run the server as")
    return initdb, pg_ctl


@contextmanager
def postgres_server(folder: Path) -> Iterator[str]:
    """A running server with a database `seqc`; yields its SQLAlchemy URL."""
    initdb, pg_ctl = needs_postgres()
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "pgdata"
    port = _free_port()
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        folder.chmod(0o755)
        for parent in folder.parents:  # the postgres user must reach its folder
            if parent == Path("/"):
                break
            parent.chmod(parent.stat().st_mode | 0o011)
        prefix = ["runuser", "-u", "postgres", "--"]

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    run(pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "server.log"), "-w", "start")
    try:
        psql = _bin("createdb")
        assert psql is not None
        run(psql, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "seqc")
        yield f"postgresql://postgres@127.0.0.1:{port}/seqc"
    finally:
        stop = subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=120,
        )
        if stop.returncode != 0:
            _kill_postmaster(data)


def _kill_postmaster(data: Path) -> None:
    """The server's end when `pg_ctl stop` failed: a pytest started meanwhile resets the
    permissions of /tmp/pytest-of-USER, so the postgres user no longer reaches its folder and
    `pg_ctl` cannot stop it; the server would run on. Its pid is the first line of
    postmaster.pid (read here as the user that started it, root then)."""
    import signal

    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return  # no server left to stop
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
