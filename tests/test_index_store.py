"""Issue 6 point 9 (bulk import builds the index; a reopened store answers its first query fast), the
indexing of `example_queries` (point 13's merged memories stay findable), and read-only stores that
search without writing any index file (point 4)."""
import json, os, subprocess, sys, textwrap, time
from pathlib import Path

import pytest
from procmem import MemoryItem, MemoryStore

FIRST_QUERY = textwrap.dedent("""
    import json, sys, time
    from procmem import MemoryStore
    t = time.perf_counter()
    s = MemoryStore(sys.argv[1])
    hits = s.search("gizmo procedure zq31337", k=1)
    print(json.dumps(dict(seconds=time.perf_counter() - t, top=hits[0][0].id if hits else None)))
""")


def _items(n):
    return [MemoryItem(f"Gizmo procedure {i} zq{i}", f"step by step w{i % 97} v{i % 13}", f"1. do {i}", id=f"id{i}")
            for i in range(n)]


@pytest.mark.slow
def test_bulk_import_leaves_a_built_index_and_reopen_answers_fast(tmp_path):
    db, n = tmp_path / "m.db", 40_000
    with MemoryStore(db) as s:
        t = time.perf_counter()
        s.add_many(_items(n))
        import_s = time.perf_counter() - t
    assert import_s < 30
    out = subprocess.run([sys.executable, "-c", FIRST_QUERY, str(db)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["top"] == "id31337"
    assert r["seconds"] <= 0.5, r  # no deferred indexing (was 1-2 s at 40k: the first query indexed everything)


def test_add_many_writes_the_index_file(tmp_path):
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(_items(500))
    with MemoryStore(db) as s:
        ix = s._index()  # opened from the file, before any search
        assert len(ix) == 500 and ix.pending == 0 and ix.meta.get("rev") == s.rev


def test_example_queries_are_indexed(tmp_path):
    s = MemoryStore(tmp_path / "m.db")
    m = MemoryItem("Reset the admin password", "Use the recovery console.", "1. Boot into recovery",
                   task_query="reset admin password",
                   example_queries=["my router refuses the login after a firmware upgrade"])
    s.add(m)
    s.add_many([MemoryItem(f"Filler {i}", "nothing related", "1. x") for i in range(5)])
    assert s.search("router firmware upgrade login", k=1)[0][0].id == m.id
    with MemoryStore(tmp_path / "m.db") as s2:  # the file index (bulk path) indexes them too
        s2.sync_index(flush=True)
        assert s2.search("router firmware upgrade login", k=1)[0][0].id == m.id
    s.modify(m.id, lambda it: it.add_example_query("the vpn gateway rejects my credentials"))
    assert s.search("vpn gateway credentials", k=1)[0][0].id == m.id


def test_old_rows_without_example_queries_are_indexed(tmp_path):
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add(MemoryItem("Calibrate the flux sensor", "before every run", "1. zero it", id="old1"))
    import sqlite3
    c = sqlite3.connect(db)  # an old row: its JSON has no example_queries key
    data = json.loads(c.execute("SELECT data FROM memories WHERE id='old1'").fetchone()[0])
    data.pop("example_queries", None)
    c.execute("UPDATE memories SET data=? WHERE id='old1'", (json.dumps(data),))
    c.commit()
    c.close()
    for f in tmp_path.glob("m.db-index*"):
        f.unlink()
    with MemoryStore(db) as s:
        assert s.search("flux sensor calibrate", k=1)[0][0].id == "old1"


def test_readonly_store_searches_without_writing_an_index(tmp_path):
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(_items(300))
    for f in tmp_path.glob("m.db-index*"):
        f.unlink()
    before = sorted(p.name for p in tmp_path.iterdir())
    with MemoryStore(db, readonly=True) as ro:
        assert ro.search("gizmo zq42", k=1)[0][0].id == "id42"
        assert len(ro._index()) == 300
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no index file, no lock file


def test_readonly_store_reads_an_existing_index_file(tmp_path):
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(_items(300))
    ixf = Path(str(db) + "-index.bm25")
    sig = (ixf.stat().st_mtime_ns, ixf.stat().st_size)
    with MemoryStore(db) as w:
        w.add(MemoryItem("Fresh procedure qq9", "added after the index was written", "1. x", id="fresh"))
    with MemoryStore(db, readonly=True) as ro:
        assert ro._index().meta.get("rev") == 300  # the file was read ...
        assert ro.search("qq9 fresh", k=1)[0][0].id == "fresh"  # ... and the newer row caught up in RAM
    assert (ixf.stat().st_mtime_ns, ixf.stat().st_size) == sig


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_store_in_a_readonly_directory_is_searchable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    with MemoryStore(d / "m.db") as s:
        s.add_many(_items(100))
    for f in d.glob("m.db-index*"):
        f.unlink()
    d.chmod(0o555)
    try:
        with MemoryStore(d / "m.db", readonly=True) as ro:
            assert ro.search("gizmo zq7", k=1)[0][0].id == "id7"
        assert not list(d.glob("m.db-index*"))
    finally:
        d.chmod(0o755)


def test_store_whose_directory_is_not_writable_keeps_its_index_in_ram(tmp_path, monkeypatch):
    "Like the test above, for every user (root included): the directory reports itself not writable."
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(_items(100))
    for f in tmp_path.glob("m.db-index*"):
        f.unlink()
    import procmem.index as index_module
    real_access = os.access

    def no_write(p, mode):
        return False if mode == os.W_OK else real_access(p, mode)

    with MemoryStore(db) as s:  # opened first: the store's own permission check is not the subject here
        monkeypatch.setattr(index_module.os, "access", no_write)
        assert s.search("gizmo zq7", k=1)[0][0].id == "id7"
        s.sync_index(flush=True)
    assert not list(tmp_path.glob("m.db-index*"))


def test_catch_up_queries_use_the_rev_index(tmp_path):
    "Catching up one change must read the rows after the index's revision through the rev index, never"
    "every active row (the (status, domain) index made it 28 ms at 100k memories)."
    import sqlite3
    from procmem.index import _INACTIVE_SQL, _ROWS_SQL
    s = MemoryStore(tmp_path / "m.db")
    s.add(MemoryItem("Check the cart", content="1. open the cart"))
    s.close()
    con = sqlite3.connect(tmp_path / "m.db")
    for sql in (_ROWS_SQL, _INACTIVE_SQL):
        plan = " ".join(r[-1] for r in con.execute("EXPLAIN QUERY PLAN " + sql.format(status="status", ns="namespace"), (0,)))
        assert "memories_rev" in plan and "memories_status" not in plan, plan
