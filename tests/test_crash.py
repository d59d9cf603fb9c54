"""Crash safety: a writer SIGKILLed at a random moment (between adds, inside a big `add_many`, in the
middle of an index flush: before the new index file is renamed over the old one) leaves a store that opens cleanly, passes `check()`, holds every write it
acknowledged, keeps a batch all-or-nothing, and searches correctly (the index is recovered or rebuilt)."""
import os, random, signal, subprocess, sys, textwrap, threading, time, warnings
from pathlib import Path

import pytest
from procmem import MemoryItem, MemoryStore, QuarantineWarning

# The writer prints each id only after `add` has returned, so every printed id is acknowledged.
WRITER = textwrap.dedent("""
    import sys
    from procmem import MemoryItem, MemoryStore
    db, tag, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = MemoryStore(db)
    i = 0
    while True:
        m = s.add(MemoryItem(f"Crash item {tag} n{i} sprocket", "Written before a crash.", f"1. step {i}", id=f"{tag}-{i}"))
        print(m.id, flush=True)
        if i % 40 == 39: s.search(f"sprocket n{i}", k=3)  # keeps the on-disk index busy too (flushes when the backlog is large)
        if batch and i == 30:
            print("BATCH START", flush=True)
            s.add_many([MemoryItem(f"Batch item {tag} {j} cog", "part of a batch", f"step {j} " * 60, id=f"{tag}-b{j}") for j in range(batch)])
            print("BATCH DONE", flush=True)
        i += 1
""")

SYNC = textwrap.dedent("""
    import sys
    from procmem import MemoryStore
    s = MemoryStore(sys.argv[1])
    print("START", flush=True)
    s.sync_index(flush=True)
    print("DONE", flush=True)
""")


def _spawn(code, *args):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class _Lines:
    "Read a child's stdout on a thread, so the parent can wait for output without blocking forever."
    def __init__(self, proc):
        self.lines, self.eof, self._cv = [], False, threading.Condition()
        self._t = threading.Thread(target=self._pump, args=(proc,), daemon=True); self._t.start()
    def _pump(self, proc):
        for line in proc.stdout:
            with self._cv: self.lines.append(line.rstrip("\n")); self._cv.notify_all()
        with self._cv: self.eof = True; self._cv.notify_all()
    def wait_until(self, pred, timeout=120):
        "Wait until `pred(lines so far)` holds; fail if the child ends or the time runs out first."
        with self._cv:
            self._cv.wait_for(lambda: self.eof or pred(self.lines), timeout)
            assert pred(self.lines), f"child ended or timed out before the expected output; last lines {self.lines[-5:]}"
    def finish(self) -> list[str]:
        self._t.join(30); assert not self._t.is_alive()
        return list(self.lines)


def _kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def _open_cleanly(db) -> MemoryStore:
    with warnings.catch_warnings():
        warnings.simplefilter("error", QuarantineWarning)  # a crash must never make the store look foreign
        s = MemoryStore(db)
    assert s.check() == []
    return s


def _assert_recovered(db, acked: list[str]):
    s = _open_cleanly(db)
    got = {m.id for m in s.get_many(acked)}
    missing = [i for i in acked if i not in got]
    assert not missing, f"{len(missing)} acknowledged ids lost, e.g. {missing[:5]}"
    for doc_id in [acked[-1], acked[0], acked[len(acked) // 2]]:  # the last acknowledged write, and older ones
        m = s.get(doc_id)
        hits = s.search(m.title, k=3)
        assert hits and hits[0][0].id == doc_id, (doc_id, hits)
    assert len(s._index()) == len(s)
    return s


def _acked(lines, tag): return [l for l in lines if l.startswith(f"{tag}-")]


@pytest.mark.slow
def test_sigkill_between_adds_loses_nothing_acknowledged(tmp_path):
    db, rng, acked = tmp_path / "m.db", random.Random(1234), []
    for round_, (min_lines, max_extra_delay) in enumerate([(20, 0.01), (120, 0.05), (300, 0.2)]):
        tag = f"r{round_}"
        proc = _spawn(WRITER, db, tag, 0)
        out = _Lines(proc)
        n = rng.randint(min_lines, min_lines + 60)
        out.wait_until(lambda ls, n=n, tag=tag: len(_acked(ls, tag)) >= n)
        time.sleep(rng.uniform(0, max_extra_delay))  # a random moment: between, inside or after an add
        _kill(proc)
        lines = out.finish()
        mine = _acked(lines, tag)
        assert len(mine) >= n and mine == [f"{tag}-{i}" for i in range(len(mine))]
        acked += mine
        s = _assert_recovered(db, acked)
        stored = sorted((m.id for m in s if m.id.startswith(f"{tag}-")), key=lambda x: int(x.split("-")[1]))
        assert stored in (mine, mine + [f"{tag}-{len(mine)}"])  # at most the one write committed but not yet acknowledged
        s.close()


@pytest.mark.slow
def test_sigkill_inside_add_many_is_all_or_nothing(tmp_path):
    db, batch = tmp_path / "m.db", 20_000
    wal = Path(str(db) + "-wal")
    proc = _spawn(WRITER, db, "big", batch)
    out = _Lines(proc)
    out.wait_until(lambda ls: "BATCH START" in ls)
    base = wal.stat().st_size if wal.exists() else 0
    deadline = time.time() + 120
    while (wal.stat().st_size if wal.exists() else 0) < base + 4_000_000 and time.time() < deadline:
        time.sleep(0.002)  # the batch's transaction has written megabytes to the WAL but not committed yet
    _kill(proc)
    lines = out.finish()
    assert "BATCH DONE" not in lines, "the batch finished before the kill; the test did not hit a running add_many"
    acked = _acked(lines, "big")
    assert len(acked) == 31
    s = _assert_recovered(db, acked)
    n_batch = sum(1 for m in s if m.id.startswith("big-b"))
    assert n_batch in (0, batch), f"a partial batch survived: {n_batch} of {batch}"
    assert n_batch == 0  # it was killed before the commit
    assert len(s) == 31 and not s.events(kind="add_many")
    # the store accepts the same batch afterwards
    s.add_many([MemoryItem(f"Batch item again {j} cog", "part of a batch", f"step {j}", id=f"again-{j}") for j in range(500)])
    assert len(s) == 531 and s.search("again 250 cog", k=1)[0][0].id == "again-250"
    s.close()


def _bulk_store(db, n, prefix="Widget", content="1. do it", keep_index=False):
    with MemoryStore(db) as s:
        s.add_many([MemoryItem(f"{prefix} procedure {i} zq{i}", "bulk", f"{content} {i}", id=f"id{i}") for i in range(n)])
    if not keep_index:  # add_many built the index: remove it, so that the next sync builds it from scratch
        _index_file(db).unlink()


def _index_file(db) -> Path:
    return Path(str(db) + "-index.bm25")


def _temp_index_files(db) -> set[str]:
    "A flush's private new index files (`<index>.new-<uuid>`), present while it writes them."
    return {p.name for p in Path(db).parent.glob(_index_file(db).name + ".new-*")}


def _kill_during_sync(db, when):
    """Start a process doing sync_index(flush=True) on a big backlog and SIGKILL it: 'random_delay' at a random
    moment soon after it starts, 'first_segment' as soon as its new index file appears (mid-write)."""
    proc = _spawn(SYNC, db)
    out = _Lines(proc)
    out.wait_until(lambda ls: "START" in ls)
    if when == "random_delay":
        time.sleep(random.Random(7).uniform(0.02, 0.15))
    else:
        deadline = time.time() + 120
        while time.time() < deadline and not _temp_index_files(db): time.sleep(0.0005)
    _kill(proc)
    lines = out.finish()
    assert "DONE" not in lines, f"the flush finished before the kill ({when}); the test did not hit it"


@pytest.mark.slow
@pytest.mark.parametrize("when", ["random_delay", "first_segment"])
def test_sigkill_during_first_index_flush(tmp_path, when):
    db, n = tmp_path / "m.db", 20_000
    _bulk_store(db, n)
    _kill_during_sync(db, when)
    s = _open_cleanly(db)  # a new process: opens, searches, and the index is complete
    for i in (0, 1, 4321, 19_999):
        hits = s.search(f"zq{i}", k=2)
        assert hits and hits[0][0].id == f"id{i}", (i, hits)
    assert len(s._index()) == len(s) == n
    s.sync_index(flush=True)
    assert not _temp_index_files(db)  # the killed writer's half-written file was cleared, under the lock
    s.close()
    with MemoryStore(db) as s2:  # and the repaired index is reused as is
        assert s2.search("zq777", k=1)[0][0].id == "id777" and len(s2._index()) == n


@pytest.mark.slow
def test_sigkill_during_incremental_flush_leaves_no_duplicates(tmp_path):
    db, n = tmp_path / "m.db", 10_000
    _bulk_store(db, n, keep_index=True)
    with MemoryStore(db) as s:
        s.add_many([MemoryItem(f"New procedure {i} nw{i}", "bulk", f"new {i}", id=f"new{i}") for i in range(5_000)])
        for i in range(0, n, 2):  # a big backlog of replacements (every other title changes) and of new memories
            m = s.get(f"id{i}"); m.title = f"Gizmo procedure {i} qk{i}"; s.update(m)
        for i in range(1, 200, 2): s.delete(f"id{i}")
    _kill_during_sync(db, "first_segment")
    s = _open_cleanly(db)
    assert s.search("qk10", k=1)[0][0].id == "id10"
    assert "id10" not in [m.id for m, _ in s.search("zq10", k=5)]  # the old text is gone
    assert s.search("zq11", k=5) == [] and s.search("zq201", k=1)[0][0].id == "id201"
    assert s.search("nw4999", k=1)[0][0].id == "new4999"
    assert len(s._index()) == len(s) == n + 5_000 - 100  # replaced documents are not counted twice
    s.close()
