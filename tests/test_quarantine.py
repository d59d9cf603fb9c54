"""Foreign and corrupt files: a path holding something other than a healthy procmem store is moved
aside with its bytes intact, reported (the warning names the new path), never overwritten, and a
working empty store takes its place. A damaged index directory is rebuilt transparently."""
import random, shutil, sqlite3, warnings
from pathlib import Path

import pytest
from procmem import MemoryItem, MemoryStore, QuarantineWarning


def _open_recording(path):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s = MemoryStore(path)
    return s, [x for x in w if issubclass(x.category, QuarantineWarning)]


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


CASES = [_text_file, _binary_junk, _other_sqlite, _other_sqlite_with_meta, _truncated_header, _store_truncated_half,
         _store_truncated_small, _store_garbled_header_page, _store_garbled_middle, _store_zeroed_tail]


@pytest.mark.parametrize("make", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_foreign_or_corrupt_file_is_moved_aside(tmp_path, make):
    p = tmp_path / "memories.db"
    make(p)
    original = p.read_bytes()
    s, warned = _open_recording(p)
    assert s.quarantined_to is not None, f"{make.__name__}: the file was opened as a store instead of being moved aside"
    moved = Path(s.quarantined_to)
    assert moved.exists() and moved != p and moved.parent == p.parent and moved.name.startswith("memories.db.quarantined-")
    assert moved.read_bytes() == original  # never overwritten, not even touched
    assert len(warned) == 1 and str(moved) in str(warned[0].message)
    # the new store works
    assert len(s) == 0 and s.check() == []
    m = s.add(MemoryItem("Retry a timed-out page load", content="1. Wait\n2. Reload"))
    assert s.search("page load")[0][0].id == m.id
    s.close()
    # reopening the new store is quiet and keeps the item; the quarantined file is still intact
    s2, warned2 = _open_recording(p)
    assert warned2 == [] and s2.quarantined_to is None and len(s2) == 1
    assert moved.read_bytes() == original
    s2.close()


def test_healthy_and_empty_files_are_not_quarantined(tmp_path):
    p = _real_store(tmp_path / "ok.db", n=50)
    s, warned = _open_recording(p)
    assert warned == [] and s.quarantined_to is None and len(s) == 50 and s.check() == []
    s.close()
    e = tmp_path / "empty.db"; e.write_bytes(b"")
    s, warned = _open_recording(e)
    assert warned == [] and s.quarantined_to is None and len(s) == 0
    s.close()
    assert not list(tmp_path.glob("*.quarantined-*"))


def test_second_quarantine_keeps_the_first(tmp_path):
    p = tmp_path / "m.db"
    p.write_text("first"); s1, _ = _open_recording(p); s1.close()
    p.unlink(); p.write_text("second"); s2, _ = _open_recording(p); s2.close()
    assert s1.quarantined_to != s2.quarantined_to
    assert Path(s1.quarantined_to).read_text() == "first" and Path(s2.quarantined_to).read_text() == "second"


# ---------------------------------------------------------------- the index directory

def _indexed_store(tmp_path, n=1500) -> tuple[Path, Path]:
    p = tmp_path / "m.db"
    with MemoryStore(p) as s:
        s.add_many([MemoryItem(f"Procedure {i} for widget{i}", "desc", f"step {i}") for i in range(n)])
        s.sync_index(flush=True)
    ix = Path(str(p) + "-index")
    assert (ix / "procmem-index.json").exists() and any(ix.glob("*.term"))
    return p, ix


def _segment_files(ix, ext): return [f for f in ix.iterdir() if f.suffix == ext]


def _all_garbage(ix):
    shutil.rmtree(ix); ix.mkdir()
    (ix / "meta.json").write_bytes(random.Random(4).randbytes(300))
    (ix / "0123456789abcdef.term").write_bytes(random.Random(5).randbytes(1000))
    (ix / "procmem-index.json").write_text("{{{ not json")

def _garbage_tantivy_meta(ix): (ix / "meta.json").write_text("not json at all")
def _garbage_state(ix): (ix / "procmem-index.json").write_bytes(random.Random(6).randbytes(64))
def _state_of_another_store(ix): (ix / "procmem-index.json").write_text('{"store_id": "someone-else", "rev": 999999}')
def _missing_segment_file(ix): [f.unlink() for f in _segment_files(ix, ".term")]

def _segments_overwritten(ix):
    for f in ix.iterdir():
        if f.suffix in (".idx", ".term", ".store", ".fast", ".fieldnorm", ".pos"): f.write_bytes(random.Random(7).randbytes(f.stat().st_size))

def _segments_truncated(ix):
    for f in ix.iterdir():
        if f.suffix in (".idx", ".term", ".store", ".fast", ".fieldnorm"): f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])

def _doc_store_garbled_middle(ix):  # the footer is intact, so tantivy opens the segment; reading a hit's stored id fails
    for f in _segment_files(ix, ".store"):
        b = bytearray(f.read_bytes()); n = len(b)
        b[n // 4 : n // 2] = random.Random(8).randbytes(n // 2 - n // 4); f.write_bytes(bytes(b))


IX_CASES = [_all_garbage, _garbage_tantivy_meta, _garbage_state, _state_of_another_store, _missing_segment_file,
            _segments_overwritten, _segments_truncated, _doc_store_garbled_middle]


@pytest.mark.parametrize("damage", IX_CASES, ids=[f.__name__.strip("_") for f in IX_CASES])
def test_damaged_index_is_rebuilt(tmp_path, damage):
    p, ix = _indexed_store(tmp_path)
    damage(ix)
    with MemoryStore(p) as s:
        for i in (0, 7, 42, 777, 1499):
            hits = s.search(f"widget{i}", k=3)
            assert hits and hits[0][0].title == f"Procedure {i} for widget{i}", (i, hits)
        assert len(s._index()) == len(s) == 1500
        assert s.check() == []
        # it keeps working: new writes are found, and the rebuilt index survives a reopen
        m = s.add(MemoryItem("Fresh memory about gizmos", content="1. gizmo"))
        assert s.search("gizmos")[0][0].id == m.id
        s.sync_index(flush=True)
    with MemoryStore(p) as s:
        assert s.search("gizmos")[0][0].id == m.id and s.search("widget42")[0][0].title == "Procedure 42 for widget42"
        assert len(s._index()) == 1501
