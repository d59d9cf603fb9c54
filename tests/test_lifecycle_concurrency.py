"""Lifecycle under concurrency and crashes (issue 9, reliability): several processes on one store file
while others archive, prune, merge and restore.

- counters: record_outcome / record_injection / record_access / record_retrieval from N processes while
  another archives, prunes and restores -> every acknowledged call is in the counters and the event log;
- merge racing counters: the kept item holds its own increments plus the other's up to the merge (read off
  the event log's order), the merged-away item exactly those after it: none lost, none counted twice;
- search catch-up: an item archived by one process is never in another long-lived process's search,
  retrieval or memory block afterwards; restored items come back;
- restore_all racing archive: every item ends in the status its last archive/restore event says;
- prune racing a purge; merge_candidates when a duplicate arrives during its scan; an edit while the agent
  uses the memory (both land) and while someone merges it (refused);
- the loop in 4 processes demotes a failing memory exactly once; a soak (3 agent processes + one pruning,
  restoring and merging) keeps every counter total equal to what the loop's events record;
- one process, two handles: a second touch of the file (MemoryStore, validate_store, to_df, store_copies, the
  CLI's main) must not drop the first handle's POSIX locks (another process then deletes its WAL);
- crash safety: SIGKILL in a merge loop, a prune loop, or inside import_file(update=True) -> the store opens,
  validate_store is clean, each operation all-or-nothing, every acknowledged one there.
Patterns from tests/test_concurrency.py and tests/test_crash.py (spawned processes, barriers, SIGKILL)."""
import json, multiprocessing as mp, os, random, signal, subprocess, sys, textwrap, threading, time, warnings
from collections import Counter
from pathlib import Path

import fastcore.test as ft
import pytest
import procmem.lifecycle, procmem.store_status  # noqa: F401  (see test_lifecycle_methods_exist_after_a_plain_import)
from procmem import MemoryItem, MemoryStore
from procmem.store import QuarantineWarning, StoreConflictError, StoreError, validate_store

CTX = mp.get_context("spawn")
COUNTERS = ("access_count", "injected_count", "use_count", "success_count", "failure_count")


def test_lifecycle_methods_exist_after_a_plain_import():
    "A user script (or a spawned worker) that only does `from procmem import MemoryStore` can archive, prune, merge."
    code = ("from procmem import MemoryStore\ns = MemoryStore()\n"
            "print([m for m in ('record_injection', 'archive', 'restore', 'restore_all', 'prune', 'merge', 'history')"
            " if not callable(getattr(s, m, None))])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr[-1000:])


def _store(path) -> MemoryStore:
    "Open the store in a worker (the lifecycle methods loaded even before a plain import brings them)."
    import procmem.store_status, procmem.lifecycle  # noqa: F401
    return MemoryStore(path)


def _item(i: int, word: str = "lever") -> MemoryItem:
    return MemoryItem(f"Calibrate the {word} gauge zk{i}", f"When gauge zk{i} drifts on the {word} rig.",
                      f"1. Zero gauge zk{i} with the {word} clamp\n2. Record reading qv{i}",
                      id=f"L{i:03d}", tags=["gauge", word])


def _pair(i: int) -> tuple[MemoryItem, MemoryItem]:
    "Two near-duplicates (a merge's input): same procedure, one extra bullet each."
    a = MemoryItem(f"Restart the stuck worker queue pq{i}", f"When queue pq{i} stops draining.",
                   f"1. Drain queue pq{i}\n2. Restart the worker pool\n3. Check the backlog of pq{i}",
                   id=f"A{i:03d}", tags=["queue"])
    b = MemoryItem(f"Restart a stuck worker queue pq{i}", f"Queue pq{i} stopped draining.",
                   f"1. Drain queue pq{i}\n2. Restart the worker pool\n3. Alert the on-call owner of pq{i}",
                   id=f"B{i:03d}", tags=["queue", "ops"])
    return a, b


def _run(procs, timeout=900):
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    for p in procs:
        p.join(max(1, deadline - time.time()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, f"{len(alive)} processes still running after {timeout}s"
    assert [p.exitcode for p in procs] == [0] * len(procs), [p.exitcode for p in procs]


def _counts(m: MemoryItem) -> dict:
    return {k: getattr(m, k) for k in COUNTERS}


def _all_statuses(s: MemoryStore) -> Counter:
    return Counter(m.status for m in s.items(status=None))


# ------------------------------------------------------------------ counters while archiving/pruning

N_CALLS = 90


def _recorder(path, w, ids, barrier, out):
    "Record outcomes, injections, accesses and retrievals of random items; write what was acknowledged, per id."
    s = _store(path)
    rng = random.Random(100 + w)
    barrier.wait(timeout=600)
    acked = {i: dict.fromkeys(COUNTERS, 0) for i in ids}
    calls = Counter()
    for n in range(N_CALLS):
        got = rng.sample(ids, 2)
        kind = n % 4
        if kind == 0:
            ok = rng.random() < 0.6
            s.record_outcome(got, ok)  # returns after its commit: acknowledged
            for i in got:
                acked[i]["use_count"] += 1
                acked[i]["success_count" if ok else "failure_count"] += 1
            calls["outcome"] += 1
        elif kind == 1:
            s.record_injection(got)
            for i in got:
                acked[i]["injected_count"] += 1
            calls["inject"] += 1
        elif kind == 2:
            s.record_access(got)
            for i in got:
                acked[i]["access_count"] += 1
            calls["retrieve"] += 1
        else:  # what the loop calls: both retrieved, the first injected, one transaction
            s.record_retrieval(got, got[:1])
            for i in got:
                acked[i]["access_count"] += 1
            acked[got[0]]["injected_count"] += 1
            calls["retrieve"] += 1
            calls["inject"] += 1
    s.close()
    Path(out).write_text(json.dumps({"acked": acked, "calls": calls}))


def _lifecycler(path, ids, barrier, out):
    "Archive, prune and restore the same items the recorders count, as fast as it can."
    s = _store(path)
    rng = random.Random(7)
    barrier.wait(timeout=600)
    done = Counter()
    for r in range(12):
        active = [m.id for m in s.items() if m.id in ids]
        s.archive(rng.sample(active, 3), "reliability: archived while counted", by="reliability")
        done["archive"] += 1
        rep = s.prune(dry_run=False, max_items=len(ids) - 6, by="reliability")
        done["pruned"] += len(rep.archived)
        if r % 2:
            s.restore(rep.archived or [m.id for m in s.items(status="archived")][:1], by="reliability")
            done["restore"] += 1
        s.restore_all(by="reliability")
        done["restore_all"] += 1
    s.close()
    Path(out).write_text(json.dumps(done))


def test_no_counter_increment_is_lost_while_items_are_archived_pruned_and_restored(tmp_path):
    db, n_rec = tmp_path / "m.db", 3
    ids = [f"L{i:03d}" for i in range(24)]
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(24)])
    barrier = CTX.Barrier(n_rec + 1)
    outs = [tmp_path / f"r{w}.json" for w in range(n_rec)]
    procs = [CTX.Process(target=_recorder, args=(str(db), w, ids, barrier, str(outs[w]))) for w in range(n_rec)]
    procs.append(CTX.Process(target=_lifecycler, args=(str(db), ids, barrier, str(tmp_path / "l.json"))))
    _run(procs)
    done = json.loads((tmp_path / "l.json").read_text())
    assert done["archive"] == 12 and done["pruned"] > 0  # the lifecycle process really changed statuses
    results = [json.loads(o.read_text()) for o in outs]
    with MemoryStore(db) as s:
        assert s.check() == [] and _all_statuses(s) == Counter(active=24)  # restore_all brought all back
        for i in ids:
            want = {k: sum(r["acked"][i][k] for r in results) for k in COUNTERS}
            ft.test_eq(_counts(s.get(i)), want)
        calls = sum((Counter(r["calls"]) for r in results), Counter())
        for kind in ("outcome", "inject", "retrieve"):
            assert len(s.events(kind=kind)) == calls[kind], kind
        assert not s.events(kind="delete")  # prune never deletes
        assert {m.id for m, _ in s.search("calibrate gauge", k=100)} == set(ids)  # all searchable again


# ------------------------------------------------------------------ merge racing counters

N_PAIRS = 8


def _pair_recorder(path, w, barrier, out):
    s = _store(path)
    rng = random.Random(300 + w)
    barrier.wait(timeout=600)
    n = Counter()
    for k in range(150):
        i = rng.randrange(N_PAIRS)
        ids = rng.choice([[f"A{i:03d}"], [f"B{i:03d}"], [f"A{i:03d}", f"B{i:03d}"]])
        if k % 2:
            s.record_outcome(ids, rng.random() < 0.5)
            n["outcome"] += 1
        else:
            s.record_injection(ids)
            n["inject"] += 1
    s.close()
    Path(out).write_text(json.dumps(n))


def _merger(path, barrier, out):
    s = _store(path)
    barrier.wait(timeout=600)
    kept = []
    for i in range(N_PAIRS):
        time.sleep(0.02)  # let counters land on both items first
        kept.append(s.merge([f"A{i:03d}", f"B{i:03d}"], by="reliability").id)
    s.close()
    Path(out).write_text(json.dumps(kept))


def _from_log(s: MemoryStore, id: str, before: int | None = None) -> dict:
    "The counters `id` gained from the outcome/inject events (those with seq < `before`, if given)."
    got = dict.fromkeys(("injected_count", "use_count", "success_count", "failure_count"), 0)
    for e in s.events():
        if id not in e["ids"] or (before is not None and e["seq"] >= before):
            continue
        if e["kind"] == "inject":
            got["injected_count"] += 1
        elif e["kind"] == "outcome":
            got["use_count"] += 1
            got["success_count" if e["detail"]["success"] else "failure_count"] += 1
    return got


def test_merge_concurrent_with_counters_keeps_every_increment(tmp_path):
    db, n_rec = tmp_path / "m.db", 3
    with MemoryStore(db) as s:
        s.add_many([m for i in range(N_PAIRS) for m in _pair(i)])
    barrier = CTX.Barrier(n_rec + 1)
    outs = [tmp_path / f"r{w}.json" for w in range(n_rec)]
    procs = [CTX.Process(target=_pair_recorder, args=(str(db), w, barrier, str(outs[w]))) for w in range(n_rec)]
    procs.append(CTX.Process(target=_merger, args=(str(db), barrier, str(tmp_path / "m.json"))))
    _run(procs)
    assert json.loads((tmp_path / "m.json").read_text()) == [f"A{i:03d}" for i in range(N_PAIRS)]
    calls = sum((Counter(json.loads(o.read_text())) for o in outs), Counter())
    with MemoryStore(db) as s:
        assert s.check() == []
        assert len(s.events(kind="outcome")) == calls["outcome"]  # every acknowledged call is logged
        assert len(s.events(kind="inject")) == calls["inject"]
        merges = {e["ids"][0]: e for e in s.events(kind="merge")}
        assert sorted(merges) == [f"A{i:03d}" for i in range(N_PAIRS)]
        for i in range(N_PAIRS):
            a, b = s.get(f"A{i:03d}"), s.get(f"B{i:03d}")
            seq = merges[a.id]["seq"]
            want = {k: v + _from_log(s, b.id, before=seq)[k] for k, v in _from_log(s, a.id).items()}
            got = {k: getattr(a, k) for k in want}
            assert got == want, f"pair {i}: kept item's counters {got} != own + merged increments {want}"
            after = {k: _from_log(s, b.id)[k] - _from_log(s, b.id, before=seq)[k] for k in want}
            assert {k: getattr(b, k) for k in want} == after, (i, after)  # moved, not copied: counted once
            assert a.status == "active" and b.status == "archived"
            assert any(a.id in r for r in b.status_reasons), b.status_reasons
        assert s.count() == N_PAIRS and s.count(status="archived") == N_PAIRS


# ------------------------------------------------------------------ search catch-up

def _archiver(path, ids, barrier, out):
    s = _store(path)
    barrier.wait(timeout=600)
    for i in ids:
        s.archive([i], "reliability: no longer used", by="reliability")
    s.close()
    Path(out).write_text("done")


def _searcher_loop(path, barrier, stop_file, out):
    "Search continuously while another process archives; no error, and count what came back."
    from procmem.retrieval import retrieve_memories
    s = _store(path)
    barrier.wait(timeout=600)
    n = 0
    rng = random.Random(5)
    while not os.path.exists(stop_file):
        i = rng.randrange(40)
        s.search(f"gauge zk{i}", k=5)
        retrieve_memories(s, f"Calibrate the lever gauge zk{i} that drifts", k=3, record=False)
        n += 1
    s.close()
    Path(out).write_text(json.dumps({"searches": n}))


def test_archived_items_leave_every_other_process_search(tmp_path):
    from procmem.inject import format_memories_for_injection
    from procmem.retrieval import retrieve_memories
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(40)])
    gone = [f"L{i:03d}" for i in range(0, 40, 2)]
    viewer = MemoryStore(db)  # a long-lived process's view, index built before the archive
    assert viewer.search("gauge zk2", k=1)[0][0].id == "L002"
    barrier, stop = CTX.Barrier(2), tmp_path / "stop"
    arch = CTX.Process(target=_archiver, args=(str(db), gone, barrier, str(tmp_path / "a")))
    srch = CTX.Process(target=_searcher_loop, args=(str(db), barrier, str(stop), str(tmp_path / "s.json")))
    arch.start()
    srch.start()
    arch.join(300)
    stop.write_text("")
    srch.join(300)
    assert (arch.exitcode, srch.exitcode) == (0, 0)
    assert json.loads((tmp_path / "s.json").read_text())["searches"] > 0
    for i in range(40):
        doc = f"L{i:03d}"
        hits = [m.id for m, _ in viewer.search(f"gauge zk{i}", k=40)]
        got = [m.id for m in retrieve_memories(viewer, f"Calibrate the lever gauge zk{i} that drifts", k=40,
                                               record=False, min_relevance=0)]
        if doc in gone:
            assert doc not in hits and doc not in got, (doc, hits, got)
        else:
            assert hits[0] == doc, (doc, hits)
    block = format_memories_for_injection(retrieve_memories(viewer, "Calibrate the lever gauge", k=40, min_relevance=0),
                                          budget_chars=100_000)
    assert not [d for d in gone if f"zk{int(d[1:])} " in block or f"zk{int(d[1:])}\n" in block]
    assert len(viewer) == 20 and len(viewer._index()) == 20
    with MemoryStore(db) as other:  # restored by another process -> back in the long-lived view
        other.restore(gone[:5], by="reliability")
    for doc in gone[:5]:
        assert viewer.search(f"gauge zk{int(doc[1:])}", k=1)[0][0].id == doc
    assert len(viewer) == 25 and viewer.check() == []
    viewer.close()


# ------------------------------------------------------------------ restore_all racing archive

def _archive_rounds(path, ids, barrier, out):
    s = _store(path)
    barrier.wait(timeout=600)
    n = Counter()
    for _ in range(3):
        for i in ids:
            try:
                s.archive([i], "reliability: racing restore_all", by="reliability")
                n["archived"] += 1
            except StoreConflictError:  # already archived (not yet restored): a clean refusal
                n["conflict"] += 1
    s.close()
    Path(out).write_text(json.dumps(n))


def _restore_all_loop(path, barrier, stop_file, out):
    s = _store(path)
    barrier.wait(timeout=600)
    n = restored = 0
    while not os.path.exists(stop_file):
        restored += len(s.restore_all(by="reliability"))
        n += 1
    s.close()
    Path(out).write_text(json.dumps({"calls": n, "restored": restored}))


def test_restore_all_racing_archive_ends_consistent(tmp_path):
    db = tmp_path / "m.db"
    ids = [f"L{i:03d}" for i in range(30)]
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(30)])
    viewer = MemoryStore(db)
    viewer.search("gauge", k=3)
    barrier, stop = CTX.Barrier(2), tmp_path / "stop"
    a = CTX.Process(target=_archive_rounds, args=(str(db), ids, barrier, str(tmp_path / "a.json")))
    r = CTX.Process(target=_restore_all_loop, args=(str(db), barrier, str(stop), str(tmp_path / "r.json")))
    a.start()
    r.start()
    a.join(300)
    stop.write_text("")
    r.join(300)
    assert (a.exitcode, r.exitcode) == (0, 0)
    arch, rest = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "r.json").read_text())
    assert arch["archived"] >= 30 and rest["restored"] > 0  # both really ran against each other
    with MemoryStore(db) as s:
        assert s.check() == [] and s.count(status=None) == 30 and not s.events(kind="delete")
        last = {}
        for e in s.events():
            if e["kind"] in ("archive", "restore"):
                for i in e["ids"]:
                    last[i] = "archived" if e["kind"] == "archive" else "active"
        assert len(s.events(kind="archive")) == arch["archived"]  # one event per acknowledged archive
        for i in ids:
            assert s.get(i).status == last[i], (i, s.get(i).status, last[i])
        active = {m.id for m in s}
        assert active == {i for i in ids if last[i] == "active"}
        for v in (s, viewer):  # a fresh view and the long-lived one agree with the statuses
            found = {m.id for m, _ in v.search("gauge", k=100)}
            assert found == active, (sorted(found ^ active))
            assert len(v) == len(active)
    viewer.close()


# ------------------------------------------------------------------ prune racing other writers

def _purger(path, ids, barrier, out):
    "Delete (purge) memories one by one, lowest ids first: the ones a max_items prune picks among equals."
    s = _store(path)
    barrier.wait(timeout=600)
    n = 0
    for i in ids:
        s.delete(i)
        n += 1
    s.close()
    Path(out).write_text(json.dumps({"deleted": n}))


def _pruner(path, n, step, barrier, out):
    s = _store(path)
    barrier.wait(timeout=600)
    errors, archived = [], 0
    for k in range(1, 20):
        try:
            archived += len(s.prune(dry_run=False, max_items=n - k * step, by="reliability").archived)
        except StoreError as e:
            errors.append(f"{type(e).__name__}: {e}")
    s.close()
    Path(out).write_text(json.dumps({"errors": errors, "archived": archived}))


def test_prune_racing_a_purge_neither_fails_nor_resurrects(tmp_path):
    """prune decides and archives in one step: an item purged by another process between prune's read and
    its write is simply not there any more (prune must not fail with MemoryNotFoundError, nor bring it back)."""
    db, n, step = tmp_path / "m.db", 1500, 30
    ids = [f"L{i:03d}" for i in range(n)]
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(n)])
    barrier = CTX.Barrier(2)
    _run([CTX.Process(target=_purger, args=(str(db), ids[:400], barrier, str(tmp_path / "d.json"))),
          CTX.Process(target=_pruner, args=(str(db), n, step, barrier, str(tmp_path / "p.json")))])
    got = json.loads((tmp_path / "p.json").read_text())
    assert got["errors"] == [], got["errors"][:3]
    with MemoryStore(db) as s:
        assert s.count(status=None) == n - 400 and not set(ids[:400]) & {m.id for m in s.items(status=None)}
        assert s.check() == [] and s.count() <= n - 19 * step


# ------------------------------------------------------------------ two handles in one process

OTHER_WRITER = textwrap.dedent("""
    import sys
    from procmem import MemoryStore
    with MemoryStore(sys.argv[1]) as s:
        for i in range(1, 300, 3):  # longer texts: rows move between pages
            m = s.get(f"L{i:03d}")
            m.content = m.content + "\\n3. Edited by process " + sys.argv[2] + " at step " + "x" * 300
            s.update(m)
        s.record_outcome(["L001"], True)
""")


def _second_access(db, how: str, readonly: bool, tmp_path):
    "Touch the store file a second time from this process, the ways a notebook does."
    if how == "store":
        with MemoryStore(db, readonly=readonly) as second:
            second.get("L002")
    elif how == "validate":
        assert validate_store(db)["ok"]
    elif how == "to_df":
        import procmem.analysis  # noqa: F401
        with MemoryStore(db, readonly=True) as second:
            assert len(second.to_df()) == 300
    elif how == "store_copies":
        from procmem.eval import store_copies
        copy = store_copies(db, workdir=tmp_path / "copies")()
        copy.close()
    else:  # the CLI's main() called in-process (a notebook cell)
        import contextlib, io
        from procmem.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["--store", str(db), "list", "--sort", "utility"]) == 0


@pytest.mark.parametrize("how", ["store", "validate", "to_df", "store_copies", "cli_main"])
@pytest.mark.parametrize("readonly", [True, False])
def test_a_second_handle_opened_and_closed_in_one_process_leaves_the_first_working(tmp_path, readonly, how):
    """A notebook keeps a store open, touches the same file again (another MemoryStore, validate_store, to_df,
    eval's store_copies, the CLI's main) and lets go; another process (the CLI, an agent) then writes twice:
    the first handle must go on reading the store. (Closing any file descriptor of the database drops every
    POSIX lock this process holds on it: a plain open()/close() of the file while a connection is live lets
    the other process delete the WAL under that connection -> 'database disk image is malformed'.)"""
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(300)])
    first = MemoryStore(db, readonly=readonly)
    assert len(list(first)) == 300 and first.get("L001").use_count == 0
    _second_access(db, how, readonly, tmp_path)
    for k in range(2):
        r = subprocess.run([sys.executable, "-c", OTHER_WRITER, str(db), str(k)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    m = first.get("L001")  # raised sqlite3.DatabaseError: database disk image is malformed (store fixed)
    assert m.use_count == 2 and "Edited by process 1" in m.content and len(list(first)) == 300
    with MemoryStore(db, readonly=True) as again:
        assert again.get("L001").use_count == 2 and again.check() == []
    first.close()
    assert validate_store(db)["ok"]


# ------------------------------------------------------------------ the loop in several processes

LOOP_TASK = "Calibrate the lever gauge zk1 that drifts on the lever rig"


def _failing_run(task, block):
    "An agent run that fails by ground truth (the memory it was shown did not help)."
    return {"task": task, "steps": [{"action": "zero gauge zk1", "observation": "still drifting"}],
            "answer": "could not calibrate", "outcome": {"success": False}}


def _loop_worker(path, n, barrier, out):
    "run_with_memory n times with a failing agent and the ground-truth judge; demotion on."
    from procmem.loop import run_with_memory
    from procmem.simulation import null_extractor, truth_judge
    s = _store(path)
    barrier.wait(timeout=600)
    injected = demoted = 0
    for _ in range(n):
        r = run_with_memory(LOOP_TASK, _failing_run, s, judge=truth_judge, extractor=null_extractor, k=1)
        injected += "L001" in [m.id for m in r.injected]
        demoted += "L001" in [getattr(m, "id", m) for m in r.demoted]
    s.close()
    Path(out).write_text(json.dumps({"injected": injected, "demoted": demoted}))


def test_loop_in_four_processes_demotes_a_failing_memory_once_and_counts_every_use(tmp_path):
    "Four agents failing with the same memory at once: it is demoted exactly once, and no count is lost."
    from procmem.lifecycle import HARMFUL_MIN_USES
    db, n_w, n = tmp_path / "m.db", 4, 6
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(5)])
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"w{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_loop_worker, args=(str(db), n, barrier, str(outs[w]))) for w in range(n_w)])
    got = [json.loads(o.read_text()) for o in outs]
    with MemoryStore(db) as s:
        m = s.get("L001")
        assert m.status == "quarantined" and any("harmful" in r for r in m.status_reasons), m.status_reasons
        demotions = [e for e in s.events(kind="quarantine") if "L001" in e["ids"]]
        assert len(demotions) == 1 and sum(g["demoted"] for g in got) == 1, demotions
        shown = sum(g["injected"] for g in got)
        assert HARMFUL_MIN_USES <= shown < n_w * n  # demoted part-way, then no longer injected
        assert m.injected_count == shown == len([e for e in s.events(kind="inject") if "L001" in e["ids"]])
        outcomes = [e for e in s.events(kind="loop.outcome") if e["detail"]["attributed"] and "L001" in e["ids"]]
        assert m.use_count == m.failure_count == len(outcomes) == shown and m.success_count == 0
        assert s.check() == []


# ------------------------------------------------------------------ a soak: agents learning while the bank is tended

def _real_runs(w: int, n_w: int) -> list:
    "Every n_w-th real fixture run, from the w-th: each agent process gets its own share."
    from procmem.ingest import read_trajectories
    from procmem.trajectory import Trajectory
    root = Path(__file__).resolve().parent / "fixtures" / "trajectories"
    runs = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix != ".md":
            runs += [t for t in read_trajectories(p) if isinstance(t, Trajectory)]
    return runs[w::n_w]


def _agent_proc(path, w, n_w, barrier, out):
    """Replay real runs through the loop (retrieve, inject, judge, attribute, demote), twice; nothing new is
    learned (the gates' replace restarts a memory's record by design, which would hide a lost increment)."""
    from procmem.loop import run_with_memory
    from procmem.simulation import null_extractor
    s = _store(path)
    barrier.wait(timeout=600)
    n = 0
    for _ in range(2):
        for t in _real_runs(w, n_w):
            run_with_memory(t.task, lambda task, block, t=t: t, s, extractor=null_extractor)
            n += 1
    s.close()
    Path(out).write_text(json.dumps({"runs": n}))


def _tender(path, barrier, stop_file, out):
    "Prune, undo the prune, merge suggested near-duplicates: over and over while the agents run."
    from procmem.editing import MergeRefusedError, merge_candidates
    s = _store(path)
    barrier.wait(timeout=600)
    done = Counter()
    while not os.path.exists(stop_file):
        done["pruned"] += len(s.prune(dry_run=False, min_utility=0.45, by="tender").archived)
        done["restored"] += len(s.restore_all(by="tender"))
        for g in merge_candidates(s, threshold=0.6)[:2]:
            try:
                s.merge(g["ids"], by="tender")
                done["merged"] += 1
            except (MergeRefusedError, StoreError):  # changed meanwhile by an agent: a clean refusal
                done["refused"] += 1
        time.sleep(0.05)
    s.close()
    Path(out).write_text(json.dumps(done))


@pytest.mark.slow
def test_agents_learning_while_the_bank_is_pruned_restored_and_merged(tmp_path):
    """Three agent processes run the loop on the real fixture runs (over a bank learned from them) while a
    fourth prunes, restores and merges: nothing lost (every counter, summed over the bank, grows by exactly
    what the loop's events record: merges move counters, prunes do not touch them), every archive has its
    event, the store validates."""
    from procmem.bootstrap import bootstrap_general_strategies
    from procmem.loop import run_with_memory
    db, n_w = tmp_path / "m.db", 3
    with MemoryStore(db) as s:  # a bank learned from the same real runs, by one process, first
        s.add_many(bootstrap_general_strategies())
        for t in _real_runs(0, 1):
            run_with_memory(t.task, lambda task, block, t=t: t, s)
        learned = len(s.events())
    barrier, stop = CTX.Barrier(n_w + 1), tmp_path / "stop"
    agents = [CTX.Process(target=_agent_proc, args=(str(db), w, n_w, barrier, str(tmp_path / f"a{w}.json")))
              for w in range(n_w)]
    tender = CTX.Process(target=_tender, args=(str(db), barrier, str(stop), str(tmp_path / "t.json")))
    for p in agents + [tender]:
        p.start()
    for p in agents:
        p.join(900)
    stop.write_text("")
    tender.join(300)
    assert [p.exitcode for p in agents + [tender]] == [0] * (n_w + 1)
    runs = sum(json.loads((tmp_path / f"a{w}.json").read_text())["runs"] for w in range(n_w))
    done = json.loads((tmp_path / "t.json").read_text())
    assert done.get("pruned", 0) > 0 and done.get("restored", 0) > 0 and done.get("merged", 0) > 0, done
    with MemoryStore(db) as s:
        assert s.check() == [] and validate_store(db)["ok"] and not s.events(kind="delete")
        ev = s.events(since=s.events()[learned - 1]["seq"])  # the soak's own events
        assert sum(1 for e in ev if e["kind"] == "loop.done") == runs
        before = Counter()  # what the learning pass left in the bank
        for e in s.events()[:learned]:
            d = e["detail"]
            if e["kind"] in ("retrieve", "inject"):
                before["access_count" if e["kind"] == "retrieve" else "injected_count"] += len(e["ids"])
            elif e["kind"] == "outcome":
                before["use_count"] += len(e["ids"])
                before["success_count" if d["success"] else "failure_count"] += len(e["ids"])
        loop = Counter()
        for e in ev:
            d = e["detail"]
            if e["kind"] == "loop.retrieve" and d.get("memory"):
                loop["access_count"] += len(d["retrieved"])
                loop["injected_count"] += len(e["ids"])
            elif e["kind"] == "loop.outcome" and d.get("attributed"):
                loop["use_count"] += len(e["ids"])
                loop["success_count" if d["success"] else "failure_count"] += len(e["ids"])
        bank = Counter({k: sum(getattr(m, k) for m in s.items(status=None)) for k in COUNTERS})
        assert loop["injected_count"] > 0 and loop["use_count"] > 0
        assert {k: bank[k] - before[k] for k in COUNTERS} == {k: loop[k] for k in COUNTERS}, (bank, before, loop)
        archived = {m.id for m in s.items(status="archived")}
        logged = set().union(*[set(e["ids"]) for e in ev if e["kind"] in ("archive", "merge")] or [set()])
        assert archived <= logged


def test_merge_candidates_groups_hold_two_ids_when_a_duplicate_arrives_during_the_scan(tmp_path):
    """merge_candidates reads the active memories, then searches for each one's duplicates; a duplicate another
    process adds in between is found by the search but is not in the first read: the group must still be
    mergeable (>= 2 ids, all present), never a one-id group that makes `store.merge(g["ids"])` raise ValueError."""
    from procmem.editing import merge_candidates
    db = tmp_path / "m.db"
    a, b = _pair(1)
    with MemoryStore(db) as s:
        s.add(a)
    s = _store(db)
    scanned = list(s.items())  # what merge_candidates' first read sees ...
    with MemoryStore(db) as other:  # ... before another process adds the near-duplicate
        other.add(b)
    s.items = lambda status="active": iter(scanned)  # the scan's snapshot, as in a real race
    groups = merge_candidates(s, threshold=0.6)
    del s.items
    for g in groups:
        assert len(set(g["ids"])) >= 2, g
        s.merge(g["ids"], by="reliability")
    s.close()


# ------------------------------------------------------------------ an edit while the agent keeps running

BUSY_EDITOR = textwrap.dedent("""
    import json, sys
    import procmem.store_status
    from procmem import MemoryStore
    db, mid, path = sys.argv[1], sys.argv[2], sys.argv[3]
    with MemoryStore(db) as s:  # while the user is in the editor, the agent uses the memory 5 times
        for k in range(5):
            s.record_injection([mid])
            s.record_outcome([mid], k % 2 == 0)
    d = json.load(open(path))
    d["content"] = d["content"] + "\\n- Confirm the gauge reads zero afterwards."
    json.dump(d, open(path, "w"))
""")


def test_cli_edit_while_the_memory_is_in_use_keeps_both(tmp_path):
    "`procmem edit` (an editor open for a while) and the agent's counters on the same memory: both land."
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(3)])
        s.record_outcome(["L001"], True)
    script = tmp_path / "editor.py"
    script.write_text(BUSY_EDITOR)
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "{db}" L001 "$1"\n')
    editor.chmod(0o755)
    env = {**os.environ, "EDITOR": str(editor), "PYTHONWARNINGS": ""}
    env.pop("VISUAL", None)
    r = subprocess.run([sys.executable, "-m", "procmem.cli", "--store", str(db), "edit", "L001"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with MemoryStore(db) as s:
        m = s.get("L001")
        assert m.content.endswith("Confirm the gauge reads zero afterwards.")
        assert (m.use_count, m.success_count, m.failure_count, m.injected_count) == (6, 4, 2, 5)
        assert [e["kind"] for e in s.events()][-1] == "edit" and s.check() == []


MERGING_EDITOR = textwrap.dedent("""
    import json, sys
    import procmem.lifecycle
    from procmem import MemoryStore
    db, path = sys.argv[1], sys.argv[2]
    with MemoryStore(db) as s:  # while the user is in the editor, someone merges B into A
        s.merge(["A001", "B001"], by="someone else")
    d = json.load(open(path))
    d["content"] = "1. Drain queue pq1\\n2. Restart only the stuck worker"
    json.dump(d, open(path, "w"))
""")


def test_cli_edit_refuses_when_a_merge_changed_the_memory_meanwhile(tmp_path):
    "An edit whose memory was merged while the editor was open is refused; the merge is kept, nothing lost."
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many([m for i in range(3) for m in _pair(i)])
    script = tmp_path / "editor.py"
    script.write_text(MERGING_EDITOR)
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "{db}" "$1"\n')
    editor.chmod(0o755)
    env = {**os.environ, "EDITOR": str(editor), "PYTHONWARNINGS": ""}
    env.pop("VISUAL", None)
    r = subprocess.run([sys.executable, "-m", "procmem.cli", "--store", str(db), "edit", "A001"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "changed" in r.stderr, (r.returncode, r.stderr)
    with MemoryStore(db) as s:
        a = s.get("A001")
        assert "Alert the on-call owner" in a.content and "stuck worker" not in a.content
        assert s.get("B001").status == "archived" and [e["kind"] for e in s.events()][-1] == "merge"


# ------------------------------------------------------------------ crash safety

MERGER = textwrap.dedent("""
    import sys
    import procmem.store_status, procmem.lifecycle
    from procmem import MemoryStore
    s = MemoryStore(sys.argv[1])
    for i in range(int(sys.argv[2])):
        s.merge([f"A{i:03d}", f"B{i:03d}"], by="crash-test")
        print(f"merged {i}", flush=True)
""")

PRUNER = textwrap.dedent("""
    import sys
    import procmem.store_status, procmem.lifecycle
    from procmem import MemoryStore
    s = MemoryStore(sys.argv[1])
    n = s.count()
    while n > 10:
        n -= int(sys.argv[2])
        rep = s.prune(dry_run=False, max_items=n, by="crash-test")
        print("pruned " + " ".join(rep.archived), flush=True)
""")


class _Lines:
    "A child's stdout read on a thread (from tests/test_crash.py)."
    def __init__(self, proc):
        self.lines, self.eof, self._cv = [], False, threading.Condition()
        self._t = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self._t.start()

    def _pump(self, proc):
        for line in proc.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self.eof = True
            self._cv.notify_all()

    def wait_until(self, pred, timeout=120):
        with self._cv:
            self._cv.wait_for(lambda: self.eof or pred(self.lines), timeout)
            assert pred(self.lines), f"child ended or timed out first; last lines {self.lines[-5:]}"

    def finish(self) -> list[str]:
        self._t.join(30)
        return list(self.lines)


def _spawn(code, *args):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _kill_after(proc, out, n_lines, delay):
    out.wait_until(lambda ls: len(ls) >= n_lines)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return out.finish()


def _open_cleanly(db) -> MemoryStore:
    with warnings.catch_warnings():
        warnings.simplefilter("error", QuarantineWarning)  # a crash must never make the store look foreign
        s = MemoryStore(db)
    v = validate_store(db)
    assert v["ok"] and s.check() == [], v["problems"]
    return s


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_sigkill_in_a_merge_loop_leaves_each_merge_all_or_nothing(tmp_path, seed):
    db, n = tmp_path / "m.db", 400
    with MemoryStore(db) as s:
        s.add_many([m for i in range(n) for m in _pair(i)])
        before = {m.id: m.to_dict() for m in s.items(status=None)}
    proc = _spawn(MERGER, db, n)
    rng = random.Random(seed)
    lines = _kill_after(proc, _Lines(proc), rng.randint(3, 40), rng.uniform(0, 0.05))
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    acked = {int(l.split()[1]) for l in lines if l.startswith("merged ")}
    assert len(acked) < n, "the loop finished before the kill; the test did not hit it"
    s = _open_cleanly(db)
    merged = set()
    for i in range(n):
        a, b = s.get(f"A{i:03d}"), s.get(f"B{i:03d}")
        if b.status == "archived":  # merged: the kept item holds both items' bullets and a lineage entry
            assert a.status == "active" and a.lineage and "Alert the on-call owner" in a.content, (i, a.content)
            assert "Check the backlog" in a.content
            merged.add(i)
        else:  # not merged: both exactly as before
            assert a.to_dict() == before[a.id] and b.to_dict() == before[b.id], i
    assert acked <= merged and len(merged - acked) <= 1, (sorted(acked)[-3:], sorted(merged - acked))
    assert len(s.events(kind="merge")) == len(merged)
    assert s.count(status=None) == 2 * n and s.count() == 2 * n - len(merged)
    found = {m.id for m, _ in s.search("restart worker queue", k=2 * n)}
    assert found == {m.id for m in s} and len(s._index()) == len(s)
    s.close()


@pytest.mark.slow
def test_sigkill_in_a_prune_loop_archives_only_with_an_event(tmp_path):
    db, n, step = tmp_path / "m.db", 3000, 40
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(n)])
    proc = _spawn(PRUNER, db, step)
    rng = random.Random(3)
    lines = _kill_after(proc, _Lines(proc), rng.randint(2, 8), rng.uniform(0, 0.05))
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    acked = [l.split()[1:] for l in lines if l.startswith("pruned")]
    assert len(acked) < (n - 10) // step, "the loop finished before the kill"
    s = _open_cleanly(db)
    archived = {m.id for m in s.items(status="archived")}
    logged = [set(e["ids"]) for e in s.events(kind="archive")]
    assert set().union(*logged) == archived  # no archived item without its event, no event without effect
    assert {i for rep in acked for i in rep} <= archived  # every acknowledged prune is there
    assert all(len(ids) == step for ids in logged), [len(x) for x in logged]  # each prune whole or not at all
    assert s.count(status=None) == n and len(s) == n - len(archived) and not s.events(kind="delete")
    found = {m.id for m, _ in s.search("calibrate lever gauge", k=n)}  # the index caught up with the crash
    assert found == {m.id for m in s} and not found & archived and len(s._index()) == len(s)
    s.close()


IMPORTER = textwrap.dedent("""
    import sys
    import procmem.store_status
    from procmem import MemoryStore
    s = MemoryStore(sys.argv[1])
    print("START", flush=True)
    print(s.import_file(sys.argv[2], update=True), flush=True)
""")


@pytest.mark.slow
def test_sigkill_inside_import_update_is_all_or_nothing(tmp_path):
    "An edited export of 6,000 memories re-imported with update=True, killed mid-transaction: none or all updated."
    db, n = tmp_path / "m.db", 6000
    with MemoryStore(db) as s:
        s.add_many([_item(i) for i in range(n)])
        s.record_outcome(["L001", "L002"], True)
        s.export(tmp_path / "x.json")
        before = {m.id: m.to_dict() for m in s.items(status=None)}
    rows = json.loads((tmp_path / "x.json").read_text())
    for r in rows:
        r["content"] = r["content"] + "\n3. Log the reading " + "y" * 400
    (tmp_path / "x.json").write_text(json.dumps(rows))
    wal = Path(str(db) + "-wal")
    proc = _spawn(IMPORTER, db, tmp_path / "x.json")
    out = _Lines(proc)
    out.wait_until(lambda ls: "START" in ls)
    base = wal.stat().st_size if wal.exists() else 0
    deadline = time.time() + 120
    while (wal.stat().st_size if wal.exists() else 0) < base + 2_000_000 and time.time() < deadline:
        time.sleep(0.002)  # the update transaction has written megabytes but not committed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    lines = out.finish()
    assert len(lines) == 1, f"the import finished before the kill: {lines[-1:]}"
    s = _open_cleanly(db)
    after = {m.id: m.to_dict() for m in s.items(status=None)}
    changed = [i for i in after if after[i]["content"] != before[i]["content"]]
    assert changed == [] and after == before, f"{len(changed)} of {n} updated: a partial import survived"
    assert s.get("L001").use_count == 1 and not s.events(kind="update")
    s.close()


LOOPER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    import procmem.store_status, procmem.lifecycle
    from procmem import MemoryStore
    from procmem.loop import run_with_memory
    from procmem.simulation import null_extractor
    from test_lifecycle_concurrency import _real_runs
    s = MemoryStore(sys.argv[1])
    runs = _real_runs(0, 1)
    k = 0
    while True:
        t = runs[k % len(runs)]
        run_with_memory(t.task, lambda task, block, t=t: t, s, extractor=null_extractor)
        k += 1
        print(f"run {k}", flush=True)
""")


def _counts_from_store_events(s: MemoryStore) -> dict:
    "id -> counters as the store's own events (written in the same transaction as the counters) tell them."
    want = {}
    for e in s.events():
        kind, d = e["kind"], e["detail"]
        for i in e["ids"] if kind in ("retrieve", "inject", "outcome") else ():
            c = want.setdefault(i, Counter())
            if kind == "retrieve":
                c["access_count"] += 1
            elif kind == "inject":
                c["injected_count"] += 1
            else:
                c["use_count"] += 1
                c["success_count" if d["success"] else "failure_count"] += 1
    return want


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_in_the_loop_keeps_every_counter_with_its_event(tmp_path, seed):
    """An agent process running the loop on the real runs, killed at a random moment: the store opens and
    validates, and every memory's counters equal its store events exactly (counter and event commit together)."""
    from procmem.bootstrap import bootstrap_general_strategies
    from procmem.loop import run_with_memory
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(bootstrap_general_strategies())
        for t in _real_runs(0, 1):
            run_with_memory(t.task, lambda task, block, t=t: t, s)
        learned = len(s.events(kind="loop.done"))
    proc = _spawn(LOOPER, db, Path(__file__).resolve().parent)
    rng = random.Random(seed)
    lines = _kill_after(proc, _Lines(proc), rng.randint(5, 60), rng.uniform(0, 0.02))
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    done = sum(1 for l in lines if l.startswith("run "))
    s = _open_cleanly(db)
    want = _counts_from_store_events(s)
    for m in s.items(status=None):
        got = Counter({k: getattr(m, k) for k in COUNTERS})
        assert +got == +want.get(m.id, Counter()), (m.id, dict(got), dict(want.get(m.id, {})))
    logged = len(s.events(kind="loop.done")) - learned
    assert done <= logged <= done + 1, (done, logged)  # every acknowledged run logged, at most one more
    s.close()

