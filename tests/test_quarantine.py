"""Foreign and damaged files are never touched: a path holding something other than a procmem store
raises `NotAStoreError`, a damaged procmem store raises `StoreDamagedError`, and in both cases the
file keeps its bytes and no file appears next to it (no rename, no -wal/-shm). Only `repair_store`
(CLI `procmem repair`) moves a damaged store aside, salvaging every readable row into a fresh store."""
import hashlib, os, random, sqlite3, warnings
from pathlib import Path

import pytest
from procmem import MemoryItem, MemoryStore
from procmem.store import NotAStoreError, StoreDamagedError, StoreError, repair_store, validate_store


def _real_store(path, n=2000) -> Path:
    "A healthy procmem store big enough that its middle holds memory rows (a few MB)."
    with MemoryStore(path) as s:
        s.add_many([MemoryItem(f"Procedure {i} for widget{i}", "desc " * 20, f"step {i} " * 30) for i in range(n)])
    assert not Path(str(path) + "-wal").exists() or Path(str(path) + "-wal").stat().st_size == 0
    return Path(path)


def _text_file(p):
    p.write_text("my precious notes\nline two\n")

def _binary_junk(p):
    p.write_bytes(random.Random(1).randbytes(5000))

def _other_sqlite(p):
    con = sqlite3.connect(p); con.execute("CREATE TABLE notes(x)"); con.execute("INSERT INTO notes VALUES ('keep me')"); con.commit(); con.close()

def _other_sqlite_with_meta(p):  # has tables named like ours but is not a procmem store
    con = sqlite3.connect(p)
    con.executescript("CREATE TABLE meta(key TEXT, value TEXT); CREATE TABLE memories(id TEXT);"
                      "INSERT INTO meta VALUES ('app', 'something-else');")
    con.commit(); con.close()

def _truncated_header(p):
    p.write_bytes(b"SQLite format 3\x00" + b"\x10\x00" + b"\xff" * 90)

def _store_truncated_half(p):
    _real_store(p); b = p.read_bytes(); p.write_bytes(b[: len(b) // 2])

def _store_truncated_small(p):
    _real_store(p); p.write_bytes(p.read_bytes()[:3000])

def _store_garbled_header_page(p):
    _real_store(p); b = bytearray(p.read_bytes()); b[100:600] = random.Random(2).randbytes(500); p.write_bytes(bytes(b))

def _store_garbled_middle(p):
    _real_store(p); b = bytearray(p.read_bytes()); m = len(b) // 2
    b[m : m + 8192] = random.Random(3).randbytes(8192); p.write_bytes(bytes(b))

def _store_zeroed_tail(p):
    _real_store(p); b = bytearray(p.read_bytes()); t = len(b) // 3
    b[t:] = bytes(len(b) - t); p.write_bytes(bytes(b))


def _other_sqlite_wal(p):  # another application's database in WAL mode, closed: opening it read-only
    con = sqlite3.connect(p)   # with mode=ro would leave -wal/-shm files behind
    con.execute("PRAGMA journal_mode=WAL"); con.execute("CREATE TABLE t(x)"); con.commit(); con.close()

def _sqlite_no_tables(p):
    con = sqlite3.connect(p); con.execute("PRAGMA user_version=3"); con.commit(); con.close()

def _empty_file(p):
    p.write_bytes(b"")

def _etc_file(p):
    src = next((Path(f) for f in ("/etc/passwd", "/etc/hosts", "/etc/os-release") if Path(f).is_file()), None)
    p.write_bytes(src.read_bytes() if src else b"root:x:0:0:root:/root:/bin/bash\n")


FOREIGN = [_text_file, _binary_junk, _other_sqlite, _other_sqlite_with_meta, _other_sqlite_wal, _sqlite_no_tables,
           _empty_file, _etc_file]
DAMAGED = [_truncated_header, _store_truncated_half, _store_truncated_small, _store_garbled_header_page,
           _store_garbled_middle, _store_zeroed_tail]
CASES = FOREIGN + DAMAGED


def _snapshot(d: Path) -> dict:
    "Every file in `d` with the hash of its bytes."
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "dir" for f in sorted(d.iterdir())}




@pytest.mark.parametrize("make", FOREIGN, ids=[f.__name__.strip("_") for f in FOREIGN])
@pytest.mark.parametrize("readonly", [False, True], ids=["write", "readonly"])
def test_foreign_file_is_refused_untouched(tmp_path, make, readonly):
    p = tmp_path / "memories.db"
    make(p)
    before = _snapshot(tmp_path)
    with pytest.raises(NotAStoreError, match=r"not a procmem store: .*memories\.db \("):
        MemoryStore(p, readonly=readonly)
    with pytest.raises(NotAStoreError):
        validate_store(p)
    with pytest.raises(NotAStoreError):
        repair_store(p)
    assert _snapshot(tmp_path) == before  # same bytes, no rename, no -wal/-shm, nothing created


@pytest.mark.parametrize("make", DAMAGED, ids=[f.__name__.strip("_") for f in DAMAGED])
def test_damaged_store_is_refused_untouched_and_validate_reports_it(tmp_path, make):
    p = tmp_path / "memories.db"
    make(p)
    before = _snapshot(tmp_path)
    for readonly in (False, True):
        with pytest.raises(StoreDamagedError, match="damaged procmem store: .*`procmem repair`"):
            MemoryStore(p, readonly=readonly)
    report = validate_store(p)
    assert report["ok"] is False and report["problems"], report
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("make", DAMAGED, ids=[f.__name__.strip("_") for f in DAMAGED])
def test_repair_moves_aside_and_salvages_or_refuses(tmp_path, make):
    p = tmp_path / "memories.db"
    make(p)
    original, before = p.read_bytes(), _snapshot(tmp_path)
    try:
        r = repair_store(p)
    except StoreDamagedError as e:  # too damaged to tell it is a procmem store: nothing changed
        assert "too damaged to tell whether it is a procmem store; nothing was changed" in str(e)
        assert _snapshot(tmp_path) == before
        return
    assert r["repaired"] and Path(r["moved_to"]).read_bytes() == original
    assert Path(r["moved_to"]).name.startswith("memories.db.damaged-")
    with MemoryStore(p) as s:  # a fresh, healthy store with every salvaged row
        assert len(s) == r["salvaged"] and s.check() == []
        assert s.events(kind="repair")[0]["detail"]["salvaged"] == r["salvaged"]
        if r["salvaged"]:
            m = next(iter(s))
            assert m.title.startswith("Procedure ") and s.get(m.id) == m


def test_repair_salvages_every_readable_row(tmp_path):
    p = _real_store(tmp_path / "m.db", n=2000)
    with MemoryStore(p) as s:
        s.record_outcome(["nope"], True)
        ids = [m.id for m in s]
        s.record_outcome(ids[:10], True)
    _store_garbled_middle(p)  # rebuilds the same 2000 items (new ids), then garbles the middle
    r = repair_store(p)
    assert r["repaired"] and 1900 <= r["salvaged"] < 2000, r  # the garbled pages' rows are lost, the rest kept
    with MemoryStore(p) as s:
        assert s.check() == [] and len(s) == r["salvaged"]
        assert len({m.fingerprint for m in s}) == r["salvaged"]
    assert validate_store(p)["ok"]
    assert repair_store(p)["repaired"] is False  # healthy now: left alone


def test_healthy_store_opens_quietly_and_creates_nothing_on_read(tmp_path):
    p = _real_store(tmp_path / "ok.db", n=50)
    before = _snapshot(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with MemoryStore(p, readonly=True) as s:
            assert len(s) == 50 and s.check() == [] and len(list(s)) == 50
    assert _snapshot(tmp_path) == before
    with MemoryStore(p) as s:
        assert len(s) == 50
    assert sorted(os.listdir(tmp_path)) == sorted(before)


def test_missing_path_readonly_creates_nothing(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        MemoryStore(tmp_path / "sub" / "m.db", readonly=True)
    assert os.listdir(tmp_path) == []


# The index's own damaged files: engineer B's tests/test_index_repair.py::test_damaged_index_file_is_rebuilt.


# Quarantined MEMORIES (issue 8) in damaged files: repair keeps every salvaged memory's status and reasons,
# so a damaged store never releases a quarantined memory; validate names a row whose status column and
# item disagree (such a row could be searched while its item says quarantined).

def test_repair_keeps_quarantined_memories_quarantined(tmp_path):
    p = tmp_path / "memories.db"
    with MemoryStore(p) as s:
        s.add_many([MemoryItem(f"Procedure {i} for widget{i}", "desc " * 20, f"step {i} " * 30) for i in range(2000)])
        held = [m.id for m in s][::20]
        s.quarantine(held, "scanner/override in content: test", by="test")
    b = bytearray(p.read_bytes()); m = len(b) // 2
    b[m : m + 8192] = random.Random(3).randbytes(8192); p.write_bytes(bytes(b))
    r = repair_store(p)
    assert r["repaired"] and 1900 <= r["salvaged"] < 2000, r
    with MemoryStore(p) as s:
        q = {m.id: m for m in s.items("quarantined")}
        assert 90 <= len(q) <= len(held) and set(q) <= set(held)
        assert all(m.status_reasons == ["scanner/override in content: test"] for m in q.values())
        assert s.count(None) == r["salvaged"] and len(s) == r["salvaged"] - len(q)
        for i in list(q)[:20]:
            assert i not in [h[0].id for h in s.search(s.get(i).title, k=20)]


def test_validate_names_a_status_column_that_disagrees_with_its_item(tmp_path):
    p = _real_store(tmp_path / "m.db", n=20)
    with MemoryStore(p) as s:
        mid = next(iter(s)).id
        s._con.execute("UPDATE memories SET data = json_set(data, '$.status', 'quarantined') WHERE id=?", (mid,))
    before = _snapshot(tmp_path)
    report = validate_store(p)
    assert not report["ok"] and any(f"memory {mid!r} is quarantined but its status column says 'active'" in x
                                    for x in report["problems"]), report
    assert _snapshot(tmp_path) == before
