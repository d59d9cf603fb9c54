"""The `procmem` command line and `procmem mcp` on a PostgreSQL bank (issue 11), run as real processes with
`PROCMEM_STORE=postgresql://…` (or `--store URL`): every command works on the bank; the DSN's password
never reaches stdout or stderr (the server trusts any password, so the DSN carries one); read-only commands
create no bank in an empty database; file-only commands (`repair`) refuse in one line; `validate` checks the
bank's rows; an unreachable server, a missing database and a missing psycopg are one line and exit 2; an MCP
client records on one process and recalls it through another."""
import asyncio, json, os, subprocess, sys
from pathlib import Path

import fastcore.test as ft
import pytest
from procmem.core import MemoryItem
from procmem.store import MemoryStore, read_memory_file

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "fixtures" / "seed_memories.json"
SECRET = "hunter2"
QUERY = "Which subclasses does the class Agent have?"  # a bootstrap pack task


def with_password(dsn: str) -> str:
    return dsn.replace("procmem@", f"procmem:{SECRET}@", 1)


INDEX_DIR = None  # set per test by the autouse fixture: the CLI's PostgreSQL index cache


@pytest.fixture(autouse=True)
def _index_dir(tmp_path, monkeypatch):
    "Keep the CLI's index files in the test's folder, never the user's cache."
    monkeypatch.setattr(sys.modules[__name__], "INDEX_DIR", tmp_path / "index-cache")


def procmem(*args, dsn=None, env=None, input=None):
    "Run the CLI in a subprocess with PROCMEM_STORE=dsn; the password is checked absent from its output."
    e = {k: v for k, v in os.environ.items() if not k.startswith("PROCMEM_")}
    e.update(PYTHONWARNINGS="", PROCMEM_INDEX_DIR=str(INDEX_DIR))
    e.update(**({"PROCMEM_STORE": dsn} if dsn else {}), **(env or {}))
    cmd = [sys.executable, "-m", "procmem.cli", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, input=input, timeout=300)
    assert SECRET not in r.stdout + r.stderr, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def one_line_error(r, contains: str):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("procmem: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert contains in r.stderr, r.stderr


def has_bank(dsn: str) -> bool:
    import psycopg
    with psycopg.connect(dsn) as con:
        return con.execute("SELECT to_regclass('procmem.meta') IS NOT NULL").fetchone()[0]


@pytest.fixture
def dsn(pg_dsn):
    return with_password(pg_dsn)


def test_read_only_commands_on_an_empty_database_create_nothing(dsn, pg_dsn, tmp_path):
    for args in (("stats",), ("list",), ("search", QUERY), ("events",), ("export", tmp_path / "x.json"),
                 ("prune", "--dry-run", "--max-items", "1")):
        r = procmem(*args, dsn=dsn)
        assert r.returncode == 0, (args, r.stderr)
    r = procmem("stats", "--json", dsn=dsn)
    j = json.loads(r.stdout)
    ft.test_eq((j["exists"], j["count"], j["store"].startswith("postgresql://procmem:***@")), (False, 0, True))
    assert not has_bank(pg_dsn)
    one_line_error(procmem("validate", dsn=dsn), "holds no procmem store")


def test_every_command_works_on_the_bank(dsn, pg_dsn, tmp_path):
    r = procmem("bootstrap", dsn=dsn)
    ft.test_eq((r.returncode, r.stdout), (0, "added 7 general strategies\n"))
    assert has_bank(pg_dsn)
    r = procmem("search", QUERY, "--json", dsn=dsn)
    hits = json.loads(r.stdout)
    assert r.returncode == 0 and hits["memories"], r.stdout
    top = hits["memories"][0]["id"]
    r = procmem("add", "--title", "Retry a timed-out page load", "--content",
                "1. Wait two seconds for the page\n2. Reload the page once\n3. Report the timeout if it fails again",
                "--source-type", "failure", "--domain", "web", "--tags", "web,retry", dsn=dsn)
    assert r.returncode == 0, r.stderr
    added = r.stdout.split()[-1]
    r = procmem("import", SEED, dsn=dsn)
    assert r.returncode == 0 and "added" in r.stdout, r.stderr
    r = procmem("show", top, dsn=dsn)
    ft.test_eq((r.returncode, json.loads(r.stdout)["id"]), (0, top))
    ft.test_eq(json.loads(r.stdout)["access_count"], 1)  # the search above was recorded in the bank
    r = procmem("quarantine", added, "--reason", "test: review", dsn=dsn)
    assert r.returncode == 0, r.stderr
    r = procmem("list", "--quarantined", dsn=dsn)
    assert added in r.stdout
    r = procmem("release", added, "--reason", "test: reviewed", dsn=dsn)
    assert r.returncode == 0, r.stderr
    r = procmem("history", added, dsn=dsn)
    assert r.returncode == 0 and "created" in r.stdout, r.stdout
    r = procmem("rm", added, "--reason", "test: gone", "--yes", dsn=dsn)
    assert r.returncode == 0, r.stderr
    r = procmem("restore", added, dsn=dsn)
    assert r.returncode == 0, r.stderr
    r = procmem("events", dsn=dsn)
    assert r.returncode == 0 and all(k in r.stdout for k in ("quarantine", "release", "restore")), r.stdout
    r = procmem("export", tmp_path / "bank.json", dsn=dsn)
    assert r.returncode == 0, r.stderr
    exported = json.loads((tmp_path / "bank.json").read_text())
    with MemoryStore(pg_dsn, readonly=True) as s:
        ft.test_eq(sorted(m["id"] for m in exported), sorted(m.id for m in s))
    r = procmem("stats", dsn=dsn)
    assert r.stdout.startswith("store: postgresql://procmem:***@127.0.0.1:") and "(not created" not in r.stdout
    r = procmem("validate", dsn=dsn)
    assert r.returncode == 0 and r.stdout.startswith("ok: postgresql://procmem:***@"), r.stdout
    assert f"{len(exported)} memories (default: active {len(exported)})" in r.stdout, r.stdout
    r = procmem("report", "--out", tmp_path / "report", dsn=dsn)
    assert r.returncode == 0 and (tmp_path / "report" / "report.md").exists(), r.stderr
    one_line_error(procmem("repair", dsn=dsn), "repair salvages a damaged SQLite file")


def test_index_cache_is_caught_up_across_commands(dsn, pg_dsn):
    "The index file in PROCMEM_INDEX_DIR outlives a command; the next one catches up with other writers."
    assert procmem("bootstrap", dsn=dsn).returncode == 0
    with MemoryStore(pg_dsn) as s:  # enough rows that the index is written to its file (small ones stay in RAM)
        s.add_many(MemoryItem(title=f"Rotate log file {i} of service s{i % 13}", description=f"disk case {i}",
                              content=f"1. find log {i}\n2. rotate it", source_type="success", domain="ops",
                              id=f"log-{i}") for i in range(300))
    r = procmem("search", QUERY, "--json", dsn=dsn)
    assert r.returncode == 0 and json.loads(r.stdout)["memories"]
    with MemoryStore(pg_dsn) as s:
        files = list(INDEX_DIR.glob(f"procmem-{s.store_id}-index.bm25"))
        assert len(files) == 1, list(INDEX_DIR.iterdir())
        s.add_many(read_memory_file(SEED))  # another writer, not through the CLI
        seed = next(m for m in s if m.title == "Find Subclasses Using the Subclass Map")
    r = procmem("search", "What are the subclasses of Activity?", "--json", dsn=dsn)
    assert seed.id in [m["id"] for m in json.loads(r.stdout)["memories"]], r.stdout
    with MemoryStore(pg_dsn) as s:  # rows deleted behind the cache's back are dropped from results
        s.delete(seed.id, reason="test")
    r = procmem("search", "What are the subclasses of Activity?", "--json", dsn=dsn)
    assert seed.id not in [m["id"] for m in json.loads(r.stdout)["memories"]], r.stdout


def test_store_option_and_namespaces(dsn, pg_dsn):
    "--store URL (a DSN must not become a file path) and --namespace keep tenants apart in one bank."
    r = procmem("--store", dsn, "--namespace", "team-a", "bootstrap")
    assert r.returncode == 0, r.stderr
    assert not Path("postgresql:").exists()  # no file named after a mangled URL
    r = procmem("--store", dsn, "--namespace", "team-b", "list")
    ft.test_eq((r.returncode, r.stdout), (0, "No memories.\n"))
    r = procmem("list", "--namespace", "team-a", dsn=dsn)
    ft.test_eq(len(r.stdout.splitlines()), 7)


def test_validate_reports_a_bad_row(dsn, pg_dsn):
    assert procmem("bootstrap", dsn=dsn).returncode == 0
    import psycopg
    with psycopg.connect(pg_dsn) as con:
        con.execute("UPDATE procmem.memories SET status = 'archived' WHERE rowid = (SELECT min(rowid) FROM procmem.memories)")
    r = procmem("validate", dsn=dsn)
    assert r.returncode == 1 and "its status column says 'archived'" in r.stdout, (r.stdout, r.stderr)
    assert "`procmem edit` or `rm`" in r.stderr and "repair" not in r.stderr


def test_unreachable_server_and_missing_database(pg_dsn):
    closed = with_password(pg_dsn).replace(pg_dsn.split("@")[1].split("/")[0], "127.0.0.1:1")
    for args in (("stats",), ("bootstrap",), ("search", QUERY), ("validate",), ("list",)):
        one_line_error(procmem(*args, dsn=closed), "cannot reach PostgreSQL store postgresql://procmem:***@127.0.0.1:1/")
    missing = with_password(pg_dsn).rsplit("/", 1)[0] + "/no_such_db"
    one_line_error(procmem("bootstrap", dsn=missing), 'database "no_such_db" does not exist')
    one_line_error(procmem("stats", dsn="postgresql:/procmem@127.0.0.1/x"), "postgresql:// (2 slashes)")


def test_without_psycopg_a_dsn_says_what_to_install(pg_dsn):
    code = ("import sys; sys.modules['psycopg'] = None; from procmem.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    for args in (["stats"], ["bootstrap"], ["search", QUERY]):
        e = {**os.environ, "PROCMEM_STORE": with_password(pg_dsn)}
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=e, timeout=120)
        one_line_error(r, "pip install 'procmem[postgres]'")
        assert SECRET not in r.stderr


def test_mcp_serves_a_pg_bank(dsn, pg_dsn):
    "Two MCP servers on one bank (separate processes): what one records, the other recalls."
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCMEM_")}
    env.update(PROCMEM_STORE=dsn, PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    params = StdioServerParameters(command=sys.executable, args=["-m", "procmem.mcp_server"], env=env, cwd=str(ROOT))
    unit = dict(title="Check the unit before converting a quantity",
                description="Use when a task gives a quantity to convert between units",
                content="1. Read the unit the source states.\n2. Convert only after checking it.\n"
                "3. Say which unit the answer is in.", tags=["units", "conversion"], domain="general")

    async def record():
        async with Client(params) as c:
            return await c.call_tool("record", unit)

    async def recall():
        async with Client(params) as c:
            return await c.call_tool("recall", dict(query="convert the quantity 5 miles into kilometres units", k=3))

    rec = asyncio.run(asyncio.wait_for(record(), 60))
    assert not rec.is_error, rec
    got = asyncio.run(asyncio.wait_for(recall(), 60))
    text = "\n".join(x.text for x in got.content)
    assert "Check the unit before converting a quantity" in text, text
    with MemoryStore(pg_dsn, readonly=True) as s:
        ft.test_eq([m.title for m in s], ["Check the unit before converting a quantity"])


def test_mcp_unreachable_is_one_line(pg_dsn):
    pytest.importorskip("mcp")
    closed = with_password(pg_dsn).replace(pg_dsn.split("@")[1].split("/")[0], "127.0.0.1:1")
    for cmd in ([sys.executable, "-m", "procmem.mcp_server"], [sys.executable, "-m", "procmem.cli", "mcp"]):
        e = {**os.environ, "PROCMEM_STORE": closed}
        r = subprocess.run(cmd, capture_output=True, text=True, env=e, input="", timeout=120)
        one_line_error(r, "cannot reach PostgreSQL store postgresql://procmem:***@127.0.0.1:1/")
        assert SECRET not in r.stderr
