"""`procmem migrate` / `procmem.migrate.migrate_store` (issue 11) on real banks: the bootstrap pack, the seed
memories of tests/fixtures and what the offline judge learns from the real trajectories of
tests/fixtures/trajectories, in two namespaces, with quarantined, archived and deleted memories, counters
and events. SQLite -> PostgreSQL -> SQLite gives the same rows, items, events and search results (20 real
queries); SRC's file is byte-identical afterwards; a non-empty DST is refused untouched; a failure part-way
leaves DST empty; old store formats (tests/fixtures/stores) migrate; the CLI's line, JSON and errors."""
import hashlib, json, os, shutil, sqlite3, subprocess, sys, time
from pathlib import Path

import fastcore.test as ft
import pytest
from procmem.bootstrap import bootstrap_general_strategies
from procmem.core import MemoryItem
from procmem.ingest import read_trajectories
from procmem.loop import learn_from_trajectory
from procmem.migrate import MigrateError, bank_counts, migrate_store
from procmem.retrieval import retrieve_memories
from procmem.store import MemoryStore, StoreError, read_memory_file
from procmem.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[1]
TRAJ = ROOT / "tests" / "fixtures" / "trajectories"
SEED = ROOT / "tests" / "fixtures" / "seed_memories.json"
OLD = ROOT / "tests" / "fixtures" / "stores"
NOW = "2025-06-01T12:00:00+00:00"


def sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def cli(*args, env=None):
    e = {**os.environ, "PYTHONWARNINGS": "", **(env or {})}
    cmd = [sys.executable, "-m", "procmem.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)


@pytest.fixture(scope="module")
def real_bank(tmp_path_factory) -> Path:
    "A closed store file: bootstrap + learned from every fixture trajectory + seeds in a 2nd namespace, every status."
    db = tmp_path_factory.mktemp("real") / "memories.db"
    runs = [t for p in sorted(TRAJ.rglob("*")) if p.is_file() and p.suffix != ".md"
            for t in read_trajectories(p) if isinstance(t, Trajectory)]
    assert len(runs) >= 20, len(runs)
    with MemoryStore(db) as s:
        s.add_many(bootstrap_general_strategies())
        for t in runs:
            learn_from_trajectory(t, s, now=NOW)
        ids = [m.id for m in s]
        assert len(ids) >= 15, len(ids)
        s.record_access(ids[:5], when=NOW)
        s.record_outcome(ids[:3], success=True, when=NOW)
        s.quarantine(ids[5], "test: held for review", by="alice")
        s.archive([ids[6]], "test: superseded", by="alice")
        s.delete(ids[7], by="alice", reason="test: wrong")
        with s.in_namespace("team-b") as b:
            b.add_many(read_memory_file(SEED))
            b.archive([next(iter(b)).id], "test: old", by="bob")
    assert not Path(str(db) + "-wal").exists()
    return db


def all_items(loc) -> dict:
    "namespace -> [to_dict of every memory, any status], in the bank's order."
    out = {}
    with MemoryStore(loc, readonly=True) as s:
        with s._read() as c:
            nss = [r[0] for r in c.execute("SELECT DISTINCT namespace FROM memories ORDER BY 1").fetchall()]
        for ns in nss:
            with s.in_namespace(ns) as n:
                out[ns] = [m.to_dict() for m in n.items(None)]
    return out


def events(loc) -> list:
    with MemoryStore(loc, readonly=True) as s, s._read() as c:
        return [tuple(r) for r in c.execute("SELECT seq, at, kind, ids, detail, namespace FROM events ORDER BY seq")]


def queries(db: Path) -> list[str]:
    "20 real task texts: those of the bank's memories (bootstrap, fixture trajectories, seeds)."
    with MemoryStore(db, readonly=True) as s:
        qs = sorted({m.task_query for m in s.items(None) if m.task_query})
    assert len(qs) >= 20, len(qs)
    return qs[:20]


def searches(loc, qs, ns="default") -> list:
    with MemoryStore(loc, namespace=ns) as s:
        return [[m.id for m in retrieve_memories(s, q, k=5, record=False)] for q in qs]


def test_round_trip_sqlite_pg_sqlite(real_bank, pg_dsn, tmp_path):
    before = sha(real_bank)
    r = migrate_store(real_bank, pg_dsn)
    ft.test_eq(sha(real_bank), before)  # SRC never changed
    assert not Path(str(real_bank) + "-wal").exists()
    with MemoryStore(real_bank, readonly=True) as s, s._read() as c:
        src_counts = bank_counts(s, c)
    ft.test_eq({k: r[k] for k in src_counts}, src_counts)
    ft.test_eq(set(r["by_namespace"]), {"default", "team-b"})
    ft.test_eq(set(r["by_namespace"]["default"]), {"active", "quarantined", "archived"})
    assert r["tombstones"] == 1 and r["events"] > 10
    back = tmp_path / "back.db"
    migrate_store(pg_dsn, back)
    src_items = all_items(real_bank)
    ft.test_eq(all_items(pg_dsn), src_items)
    ft.test_eq(all_items(back), src_items)
    ft.test_eq(events(pg_dsn), events(real_bank))
    ft.test_eq(events(back), events(real_bank))
    counters = [m["access_count"] for m in src_items["default"]]
    assert max(counters) >= 1  # counters came along (not reset)
    qs = queries(real_bank)
    want = searches(real_bank, qs)
    assert sum(map(len, want)) >= 20  # the queries find things
    ft.test_eq(searches(pg_dsn, qs), want)  # PG's per-process index built from revision 0
    ft.test_eq(searches(back, qs), want)
    ft.test_eq(searches(pg_dsn, qs, "team-b"), searches(real_bank, qs, "team-b"))
    ft.test_eq(sha(real_bank), before)


def test_pg_to_pg_on_one_server(real_bank, pg_server, pg_dsn):
    "Bank to bank on one server (a new database): same rows; the SRC bank is read-only throughout."
    migrate_store(real_bank, pg_dsn)
    other = pg_server.create_database()
    before = (events(pg_dsn), all_items(pg_dsn))
    r = migrate_store(pg_dsn, other)
    ft.test_eq((events(pg_dsn), all_items(pg_dsn)), before)
    ft.test_eq((events(other), all_items(other)), before)
    ft.test_eq(r["dst"].split("/")[-1], other.split("/")[-1])


def test_pg_dst_continues_the_bank(real_bank, pg_dsn):
    "After a migration the PG bank is a normal bank: new writes take later revisions and event numbers."
    migrate_store(real_bank, pg_dsn)
    last_seq = events(real_bank)[-1][0]
    with MemoryStore(real_bank, readonly=True) as s:
        src_rev, src_id = s.rev, s.store_id
    with MemoryStore(pg_dsn) as p:
        ft.test_eq(p.rev, src_rev)
        assert p.store_id != src_id
        p.add(MemoryItem(title="Check the pager rota before paging", description="who is on call",
                         content="1. Open the rota\n2. Page the person on call", source_type="success",
                         domain="ops", id="ops-rota-1"))
        assert p.rev == src_rev + 1
        ft.test_eq(p.events()[-1]["seq"], last_seq + 1)
        assert [m.id for m in retrieve_memories(p, "who is on call pager rota", record=False)][0] == "ops-rota-1"


def test_non_empty_dst_refused_untouched(real_bank, pg_dsn, tmp_path):
    with MemoryStore(pg_dsn) as p:
        p.add_many(bootstrap_general_strategies())
        rev, n = p.rev, len(p)
    ft.test_fail(lambda: migrate_store(real_bank, pg_dsn), contains="is not empty (7 memories, 0 tombstones, 1 event)")
    with MemoryStore(pg_dsn) as p:
        ft.test_eq((p.rev, len(p), len(p.events())), (rev, n, 1))
    # a bank whose memories were all deleted still has tombstones and events: not empty either
    f = tmp_path / "emptied.db"
    with MemoryStore(f) as s:
        s.add_many(bootstrap_general_strategies())
        for m in list(s):
            s.delete(m.id, reason="test")
    before = sha(f)
    ft.test_fail(lambda: migrate_store(real_bank, f), contains="7 tombstones")
    ft.test_eq(sha(f), before)


def test_failure_leaves_pg_dst_empty(real_bank, pg_dsn, tmp_path):
    "A row DST's unique key refuses, planted in a copy of SRC: the one transaction rolls back, DST stays empty."
    twin = tmp_path / "twin.db"
    shutil.copy(real_bank, twin)
    with sqlite3.connect(twin) as con:
        con.execute("DROP INDEX memories_meaning_ns")
        con.execute("INSERT INTO memories(id, rev, fingerprint, source_type, domain, created_at, data, status, namespace) "
                    "SELECT 'x' || id, rev, fingerprint, source_type, domain, created_at, json_set(data, '$.id', 'x' || id), "
                    "status, namespace FROM memories WHERE status='active' LIMIT 1")
    with pytest.raises(StoreError, match="duplicate key|unique"):
        migrate_store(twin, pg_dsn, check=False)
    with MemoryStore(pg_dsn) as p, p._read() as c:
        ft.test_eq(bank_counts(p, c), dict(memories=0, by_namespace={}, tombstones=0, events=0, rev=0))
    migrate_store(real_bank, pg_dsn)  # and it can take the real one afterwards
    ft.test_eq(all_items(pg_dsn), all_items(real_bank))


def test_nul_in_a_memory_fails_cleanly_into_pg(real_bank, pg_dsn, tmp_path):
    "SQLite holds a NUL in a tag; PostgreSQL cannot: the migration names it and leaves DST empty."
    src = tmp_path / "nul.db"
    shutil.copy(real_bank, src)
    with MemoryStore(src, namespace="team-b") as s:
        s.add(MemoryItem(title="Strip NUL bytes from a C string", description="tags from a binary log",
                         content="1. Find the NUL\n2. Cut the string there", source_type="success",
                         domain="coding", tags=["nul\x00byte"], id="nul-1"))
    with pytest.raises(StoreError, match="NUL"):
        migrate_store(src, pg_dsn)
    with MemoryStore(pg_dsn) as p, p._read() as c:
        ft.test_eq(bank_counts(p, c)["memories"], 0)
    back = tmp_path / "back.db"
    migrate_store(src, back)  # file to file keeps it
    with MemoryStore(back, namespace="team-b", readonly=True) as b:
        ft.test_eq(b.get("nul-1").tags, ["nul\x00byte"])


def test_bad_src_row_refused(real_bank, tmp_path):
    bad = tmp_path / "bad.db"
    shutil.copy(real_bank, bad)
    with sqlite3.connect(bad) as con:
        con.execute("UPDATE memories SET data = '{not json' WHERE rowid = 2")
    ft.test_fail(lambda: migrate_store(bad, tmp_path / "out.db"), contains="bad rows")
    assert not (tmp_path / "out.db").exists()


@pytest.mark.parametrize("name", ["store_format1.db", "store_format2_schema1.db", "store_format4.db"])
def test_old_formats_to_pg(name, pg_dsn, tmp_path):
    "Stores written by older procmem (no status / namespace columns) migrate as they read: active, 'default'."
    src = tmp_path / name
    shutil.copy(OLD / name, src)
    before = sha(src)
    r = migrate_store(src, pg_dsn)
    ft.test_eq(sha(src), before)
    with MemoryStore(src, readonly=True) as s:
        want = [m.to_dict() for m in s.items(None)]
        assert r["memories"] == len(want) > 0
    with MemoryStore(pg_dsn, readonly=True) as p:
        ft.test_eq([m.to_dict() for m in p.items(None)], want)
        ft.test_eq(p.check(), [])


def test_cli_migrate_line_json_and_errors(real_bank, pg_dsn, tmp_path):
    secret = pg_dsn.replace("procmem@", "procmem:hunter2@")  # the test server trusts any password
    r = cli("migrate", real_bank, secret)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("migrated ") and "memories (active " in r.stdout and "; 2 namespaces)" in r.stdout
    assert f"from {real_bank} to postgresql://procmem:***@" in r.stdout
    assert "hunter2" not in r.stdout + r.stderr
    out = tmp_path / "out.db"
    r = cli("migrate", secret, out, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    with MemoryStore(real_bank, readonly=True) as s, s._read() as c:
        n = bank_counts(s, c)
    ft.test_eq({k: j[k] for k in n}, n)
    assert "hunter2" not in r.stdout
    for args, msg in [
        (("migrate", real_bank, secret), "is not empty"),
        (("migrate", tmp_path / "none.db", tmp_path / "x.db"), "no store at"),
        (("migrate", real_bank, real_bank), "the same bank"),
        (("--namespace", "a", "migrate", real_bank, tmp_path / "y.db"), "drop --namespace"),
        (("migrate", real_bank, "postgresql:/procmem@127.0.0.1/x"), "postgresql:// (2 slashes)"),
        (("migrate", real_bank, secret.rsplit("/", 1)[0] + "/nosuchdb"), "cannot reach PostgreSQL store"),
    ]:
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert "hunter2" not in r.stdout + r.stderr
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "y.db").exists()


def test_cli_migrate_without_psycopg(real_bank, tmp_path):
    "psycopg missing (simulated): a URL gives one line saying what to install, exit 2."
    code = ("import sys; sys.modules['psycopg'] = None; from procmem.cli import main; "
            f"sys.exit(main(['migrate', {str(real_bank)!r}, 'postgresql://u:hunter2@127.0.0.1:1/db']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install 'procmem[postgres]'" in r.stderr and r.stderr.count("\n") == 1
    assert "hunter2" not in r.stderr


@pytest.mark.slow
def test_10k_sqlite_to_pg_time(pg_dsn, tmp_path):
    "10,000 memories SQLite -> PostgreSQL: exact, and timed (printed for the README)."
    src = tmp_path / "10k.db"
    items = [MemoryItem(title=f"Procedure {i} for component c{i % 97}", description=f"handles case {i}",
                        content=f"1. open component c{i % 97}\n2. apply fix {i}\n3. verify case {i}",
                        source_type="success", domain=f"d{i % 20}", id=f"m{i:05d}") for i in range(10_000)]
    with MemoryStore(src) as s:
        s.add_many(items)
    t0 = time.perf_counter()
    r = migrate_store(src, pg_dsn)
    dt = time.perf_counter() - t0
    print(f"\nmigrate 10k SQLite -> PostgreSQL: {dt:.2f} s")
    ft.test_eq(r["memories"], 10_000)
    with MemoryStore(pg_dsn, readonly=True) as p:
        ft.test_eq(len(p), 10_000)
        ft.test_eq([m.id for m in retrieve_memories(p, "apply fix 4242", k=1, record=False)], ["m04242"])
    assert dt < 60
