"""Shared pytest configuration for procmem's plain tests."""
import socket, sys
from pathlib import Path

import pytest

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: big stores or many processes (still run in CI; deselect with -m 'not slow')")


LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.fixture
def no_network(monkeypatch):
    "No network: only loopback connections; a dummy key; a stray default client points at a closed local port."
    from procmem.testing import DUMMY_API_KEY
    real_connect = socket.socket.connect
    def guarded_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise AssertionError(f"a test tried to reach the network: {address!r}")
        return real_connect(sock, address)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    for k in ("PROCMEM_MODEL", "PROCMEM_RECORD", "ANTHROPIC_AUTH_TOKEN"): monkeypatch.delenv(k, raising=False)


# --- PostgreSQL (issue 11) ---------------------------------------------------------------------
# A session-wide throwaway server (procmem.postgres.TempPostgres: initdb + pg_ctl in a temp dir, a
# free loopback port, fsync=off), or the server named by $PROCMEM_TEST_PG (a postgresql:// URL of a
# role that may CREATE DATABASE). Without server programs the PostgreSQL tests skip with the reason,
# unless PROCMEM_REQUIRE_PG=1 (CI) turns that into a failure. Each test gets a fresh database.
import os, uuid
from urllib.parse import urlsplit, urlunsplit

PG_MISSING = "PostgreSQL's server programs are not installed (apt-get install postgresql) and $PROCMEM_TEST_PG is not set"


class ExistingPostgres:
    "The server named by $PROCMEM_TEST_PG: databases are created there and dropped at the end."

    def __init__(self, url: str):
        self.url, self.made = url, []

    def dsn(self, dbname: str = "postgres", **options) -> str:
        u = urlsplit(self.url)
        q = "&".join([u.query] * bool(u.query) + [f"{k}={v}" for k, v in options.items()])
        return urlunsplit((u.scheme, u.netloc, f"/{dbname}", q, ""))

    def create_database(self, name=None) -> str:
        import psycopg
        name = name or f"bank_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f"CREATE DATABASE {name}")
        self.made.append(name)
        return self.dsn(name)

    def stop(self):
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as con:
            for name in self.made:
                con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def pg_server():
    "A running PostgreSQL server for the session (see above); skips (or fails in CI) without one."
    url = os.environ.get("PROCMEM_TEST_PG")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        if os.environ.get("PROCMEM_REQUIRE_PG") == "1":
            pytest.fail("PROCMEM_REQUIRE_PG=1 but psycopg is not installed: pip install -e '.[dev]'")
        pytest.skip("psycopg is not installed: pip install 'procmem[postgres]'")
    from procmem.postgres import TempPostgres, pg_bindir
    if url:
        server = ExistingPostgres(url)
    elif pg_bindir() is not None:
        server = TempPostgres().start()
    elif os.environ.get("PROCMEM_REQUIRE_PG") == "1":
        pytest.fail(f"PROCMEM_REQUIRE_PG=1: {PG_MISSING}")
    else:
        pytest.skip(PG_MISSING)
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(pg_server):
    "The URL of a fresh, empty database on the session's server."
    return pg_server.create_database()


@pytest.fixture(params=["sqlite", "postgres"])
def store_location(request, tmp_path):
    "Where a store lives, once per backend: a SQLite file path, then a fresh PostgreSQL database URL."
    if request.param == "sqlite":
        return tmp_path / "memories.db"
    return request.getfixturevalue("pg_dsn")
