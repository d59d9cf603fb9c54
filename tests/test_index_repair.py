"""Issue 6 point 7: safe index self-repair. Processes search and add while others damage the index files
(garble, truncate, delete) and rebuild the index: no exception anywhere, every process finds what it
just added, and at the end every query answers exactly as a fresh index built from the store.
Also: the lock file lives outside what a rebuild replaces, and nothing is deleted."""
import math, random, subprocess, sys, textwrap, time
from pathlib import Path

import pytest
from procmem import BM25Index, MemoryItem, MemoryStore, memory_text

WORKER = textwrap.dedent("""
    import random, sys, time
    from procmem import MemoryItem, MemoryStore
    db, tag, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    s, rng, end, i = MemoryStore(db), random.Random(tag), time.time() + seconds, 0
    while time.time() < end:
        word = f"{tag}q{i}z"
        s.add(MemoryItem(f"Procedure {word} for sprockets", "added under fire", "1. go", id=f"{tag}-{i}"))
        hits = s.search(f"{word} sprockets", k=3)
        assert hits and hits[0][0].id == f"{tag}-{i}", (word, hits)
        s.search(rng.choice(["widget procedure", "sprockets", "gear train alignment", "w17 w3"]), k=5)
        i += 1
    print("OK", i, flush=True)
""")

REBUILDER = textwrap.dedent("""
    import sys, time
    from procmem import MemoryStore
    db, seconds = sys.argv[1], float(sys.argv[2])
    s, end, n = MemoryStore(db), time.time() + seconds, 0
    while time.time() < end:
        s._rebuild_index() if n % 2 == 0 else s.sync_index(flush=True)
        n += 1
        time.sleep(0.02)
    print("OK", n, flush=True)
""")


def _index_files(db: Path) -> list[Path]:
    """Every index file of the store (today's single file, or the old tantivy directory); not the lock, and
    not a writer's private temporary file (`.new-`), which is not the index until it is renamed."""
    out = []
    for p in db.parent.glob(db.name + "-index*"):
        out += [f for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file() and "lock" not in f.name
                and ".new-" not in f.name]
    return out


def _damage(db: Path, rng: random.Random) -> str:
    files = _index_files(db)
    if not files:
        return "none"
    f, how = rng.choice(files), rng.choice(["garble", "truncate", "delete", "garbage"])
    try:
        if how == "delete":
            f.unlink()
        elif how == "truncate":
            with open(f, "r+b") as fh:
                fh.truncate(max(0, f.stat().st_size // 3))
        elif how == "garbage":
            f.write_bytes(b"not an index at all")
        else:
            with open(f, "r+b") as fh:
                size = f.stat().st_size
                fh.seek(rng.randrange(max(1, size)))
                fh.write(bytes(rng.randrange(256) for _ in range(64)))
    except FileNotFoundError:
        return "gone"
    return how


def _spawn(code, *args):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _rank_key(pair):
    return (-round(pair[1], 9), pair[0])


def _fresh_answers(store: MemoryStore, queries: list[str], k: int = 5) -> list:
    "Answers of a brand-new in-RAM index built from every memory of the store."
    ix = BM25Index(keywords=("domain", "source_type"))
    ix.add_many((m.id, memory_text(m)) for m in store)
    return [ix.search(q, k) for q in queries]


@pytest.mark.slow
def test_search_and_add_while_others_damage_and_rebuild(tmp_path):
    db, seconds = tmp_path / "m.db", 12
    with MemoryStore(db) as s:
        s.add_many([MemoryItem(f"Widget procedure {i} w{i % 40} gear", f"train {i % 7} alignment w{i % 13}",
                               f"1. do {i}", id=f"seed{i}") for i in range(3000)])
    procs = [_spawn(WORKER, db, f"a{n}", seconds) for n in range(2)] + [_spawn(REBUILDER, db, seconds)]
    rng, kinds, end = random.Random(5), [], time.time() + seconds
    while time.time() < end:
        time.sleep(rng.uniform(0.01, 0.12))
        kinds.append(_damage(db, rng))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("OK"), f"a process failed:\n{out}\n{err[-3000:]}"
        assert "Traceback" not in err, err[-3000:]
    assert {"garble", "truncate", "delete", "garbage"} <= set(kinds)
    added = sum(int(out.split()[1]) for out, _ in outs[:2])
    assert added > 20
    # the end state: the store answers exactly like a fresh index over its memories
    queries = ["widget procedure", "sprockets", "gear train alignment", "w17 w3", "a0q3z", "a1q5z sprockets"]
    with MemoryStore(db) as s:
        assert len(s) == 3000 + added
        got = [[(m.id, sc) for m, sc in s.search(q, 5)] for q in queries]
        want = _fresh_answers(s, queries)
        assert len(s._index()) == len(s)
    for q, g, w in zip(queries, got, want):
        assert [i for i, _ in g] == [i for i, _ in w], q
        assert all(math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(g, w)), q


def test_lock_file_is_beside_the_index_and_repair_deletes_nothing(tmp_path):
    db = tmp_path / "m.db"
    s = MemoryStore(db)
    s.add_many([MemoryItem(f"Gadget {i} procedure", "x", "1. y", id=f"g{i}") for i in range(200)])
    ixf = Path(str(db) + "-index.bm25")
    lock = Path(str(ixf) + ".lock")
    assert ixf.is_file() and lock.is_file()
    ixf.write_bytes(b"damaged")
    other = MemoryStore(db)  # a new opener meets the damage: nothing is deleted on open
    assert ixf.read_bytes() == b"damaged"
    assert other.search("gadget 7", k=1)[0][0].id == "g7"  # the search repairs it
    assert ixf.read_bytes()[:12] == b"procmem-bm25" and lock.exists()
    lock_inode = lock.stat().st_ino
    s.search("gadget 9", k=1)
    s._rebuild_index()
    assert lock.stat().st_ino == lock_inode  # the rebuild swapped the index file, never the lock
    assert sorted(p.name for p in tmp_path.iterdir() if "index" in p.name) == [ixf.name, lock.name]


# ---------------------------------------------------------------- every kind of damage to the one index file

def _garbage(f, db):
    f.write_bytes(random.Random(4).randbytes(300))


def _empty(f, db):
    f.write_bytes(b"")


def _truncated(f, db):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _garbled_middle(f, db):  # header intact: only the checksum can tell
    b = bytearray(f.read_bytes())
    n = len(b)
    b[n // 2 : n // 2 + 64] = random.Random(8).randbytes(64)
    f.write_bytes(bytes(b))


def _header_not_json(f, db):
    b = f.read_bytes()
    f.write_bytes(b[:23] + b"{{{ not json" + b[35:])


def _missing(f, db):
    f.unlink()


def _another_stores_index(f, db):  # a valid index file, of another store
    other = db.parent / "other.db"
    with MemoryStore(other) as o:
        o.add_many([MemoryItem(f"Unrelated {i} thing", "x", "1. y") for i in range(50)])
        o.sync_index(flush=True)
    f.write_bytes(Path(str(other) + "-index.bm25").read_bytes())


DAMAGE = [_garbage, _empty, _truncated, _garbled_middle, _header_not_json, _missing, _another_stores_index]


@pytest.mark.parametrize("damage", DAMAGE, ids=[f.__name__.strip("_") for f in DAMAGE])
def test_damaged_index_file_is_rebuilt(tmp_path, damage):
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many([MemoryItem(f"Procedure {i} for widget{i}", "desc", f"step {i}") for i in range(1500)])
    f = Path(str(db) + "-index.bm25")
    damage(f, db)
    with MemoryStore(db) as s:
        for i in (0, 7, 42, 777, 1499):
            hits = s.search(f"widget{i}", k=3)
            assert hits and hits[0][0].title == f"Procedure {i} for widget{i}", (i, hits)
        assert len(s._index()) == len(s) == 1500
        m = s.add(MemoryItem("Fresh memory about gizmos", content="1. gizmo"))
        assert s.search("gizmos")[0][0].id == m.id
        s.sync_index(flush=True)
    with MemoryStore(db) as s:  # the rebuilt file is reused as it is
        ix = s._index()
        assert ix.damaged is None and len(ix) == 1501 and ix.meta["rev"] == s.rev
        assert s.search("widget42")[0][0].title == "Procedure 42 for widget42"


def test_a_directory_in_place_of_the_index_file_is_left_alone(tmp_path):
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many([MemoryItem(f"Procedure {i} for widget{i}", "desc", f"step {i}") for i in range(100)])
    f = Path(str(db) + "-index.bm25")
    f.unlink()
    f.mkdir()
    (f / "precious.txt").write_text("not procmem's")
    with MemoryStore(db) as s:
        assert s.search("widget42")[0][0].title == "Procedure 42 for widget42"
        s.sync_index(flush=True)
        assert "is not a file" in s._index().damaged
    assert (f / "precious.txt").read_text() == "not procmem's" and f.is_dir()
