"""Many processes, one store file: concurrent adds lose nothing and duplicate nothing, searches run
safely alongside writes, the shared index is consistent afterwards, and the same memory learned by
eight processes at once is stored once with eight confirmations' worth of confidence."""
import json, multiprocessing as mp, os, random, time
from pathlib import Path

import pytest
from procmem import MemoryItem, MemoryStore

CTX = mp.get_context("spawn")
N_PER = 500


def _item(w: int, i: int) -> MemoryItem:
    return MemoryItem(f"Procedure w{w}n{i} for gadget", f"Written by worker {w}.", f"1. step {i}\n2. check {w}",
                      id=f"w{w}-{i:04d}", tags=[f"w{w}"])


def _adder(path, w, n, barrier, out):
    s = MemoryStore(path)
    barrier.wait(timeout=120)
    wrong = []
    for i in range(n):
        got = s.add(_item(w, i))
        if got.id != f"w{w}-{i:04d}": wrong.append(got.id)
    s.close()
    Path(out).write_text(json.dumps({"wrong": wrong}))


def _searcher(path, barrier, stop_file, out, final_ids):
    s = MemoryStore(path)
    barrier.wait(timeout=120)
    n = 0; rng = random.Random(os.getpid())
    while not os.path.exists(stop_file):
        w, i = rng.randrange(4), rng.randrange(N_PER)
        s.search(f"w{w}n{i} gadget", k=5)
        s.search("procedure gadget", k=20, source_type="success")
        n += 2
    # once every adder is done, this long-lived object must see every last write
    found = {}
    for doc_id in final_ids:
        w, i = doc_id[1:].split("-")
        hits = s.search(f"w{w}n{int(i)}", k=3)
        found[doc_id] = bool(hits) and hits[0][0].id == doc_id
    Path(out).write_text(json.dumps({"searches": n, "found": found, "index_len": len(s._index()), "store_len": len(s)}))
    s.close()


def _same(path, barrier, out, w):
    s = MemoryStore(path)
    barrier.wait(timeout=120)
    got = s.add(MemoryItem("Retry a timed-out page load", "Web pages that time out.", "1. Wait two seconds\n2. Reload once",
                           task_query=f"Open the status page of site {w}"))  # 8 tasks: 7 independent confirmations
    Path(out).write_text(json.dumps({"id": got.id, "confidence": got.confidence}))
    s.close()


def _run(procs, timeout=300):
    for p in procs: p.start()
    deadline = time.time() + timeout
    for p in procs: p.join(max(1, deadline - time.time()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive: p.kill()
    assert not alive, f"{len(alive)} processes still running after {timeout}s"
    assert [p.exitcode for p in procs] == [0] * len(procs)


@pytest.mark.slow
def test_eight_processes_add_concurrently(tmp_path):
    db, n_w = tmp_path / "m.db", 8
    MemoryStore(db).close()  # create it first, so the workers only race on adds
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"out{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_adder, args=(str(db), w, N_PER, barrier, str(outs[w]))) for w in range(n_w)])
    assert all(json.loads(o.read_text())["wrong"] == [] for o in outs)  # no add was taken for a confirmation

    s = MemoryStore(db)
    assert len(s) == n_w * N_PER == 4000
    ids = [m.id for m in s]
    assert len(ids) == len(set(ids)) == 4000  # none duplicated
    assert set(ids) == {f"w{w}-{i:04d}" for w in range(n_w) for i in range(N_PER)}  # none lost
    assert s.check() == []
    assert s.rev == 4000 and len(s.events(kind="add")) == 4000
    for w in range(n_w):  # each worker's items are in its own order
        mine = [i for i in ids if i.startswith(f"w{w}-")]
        assert mine == sorted(mine)
    s.close()

    fresh = MemoryStore(db)  # a new process's view: the index is built from the file and agrees with it
    rng = random.Random(0)
    for w, i in [(0, 0), (7, 499), (3, 250)] + [(rng.randrange(n_w), rng.randrange(N_PER)) for _ in range(40)]:
        hits = fresh.search(f"w{w}n{i}", k=3)
        assert hits and hits[0][0].id == f"w{w}-{i:04d}", (w, i, hits)
    assert len(fresh.search("gadget", k=5000)) == 4000
    assert len(fresh._index()) == 4000
    fresh.close()


@pytest.mark.slow
def test_searches_run_safely_during_concurrent_adds(tmp_path):
    db, n_add, n_search = tmp_path / "m.db", 4, 2
    with MemoryStore(db) as s:  # some items already flushed into the on-disk index, so searches read segments too
        s.add_many([MemoryItem(f"Old procedure {i}", content=f"old step {i}") for i in range(300)])
        s.sync_index(flush=True)
    barrier, stop = CTX.Barrier(n_add + n_search), tmp_path / "stop"
    final_ids = [f"w{w}-{i:04d}" for w in range(n_add) for i in (0, N_PER // 2, N_PER - 1)]
    adders = [CTX.Process(target=_adder, args=(str(db), w, N_PER, barrier, str(tmp_path / f"a{w}.json"))) for w in range(n_add)]
    searchers = [CTX.Process(target=_searcher, args=(str(db), barrier, str(stop), str(tmp_path / f"s{j}.json"), final_ids))
                 for j in range(n_search)]
    for p in adders + searchers: p.start()
    for p in adders: p.join(300)
    stop.write_text("")
    for p in searchers: p.join(300)
    for p in adders + searchers:
        if p.is_alive(): p.kill()
    assert [p.exitcode for p in adders + searchers] == [0] * (n_add + n_search)  # no exception anywhere

    for j in range(n_search):
        r = json.loads((tmp_path / f"s{j}.json").read_text())
        assert r["searches"] > 10, r["searches"]  # the searchers really ran alongside the adders
        assert all(r["found"].values()), [k for k, v in r["found"].items() if not v]
        assert r["index_len"] == r["store_len"] == 300 + n_add * N_PER
    with MemoryStore(db) as s:
        assert len(s) == 300 + n_add * N_PER and s.check() == []
        assert len({m.id for m in s}) == len(s)
        assert s.search("w2n123", k=1)[0][0].id == "w2-0123"
        assert s.search("old procedure 17", k=1)[0][0].title == "Old procedure 17"
        assert len(s._index()) == len(s)


def test_same_memory_from_eight_processes_is_stored_once(tmp_path):
    db, n_w = tmp_path / "m.db", 8
    MemoryStore(db).close()
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"o{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_same, args=(str(db), barrier, str(outs[w]), w)) for w in range(n_w)])
    results = [json.loads(o.read_text()) for o in outs]
    with MemoryStore(db) as s:
        assert len(s) == 1
        (m,) = list(s)
        assert m.confidence == pytest.approx(0.1 + 0.1 * 7) and round(m.confidence, 6) == 0.8
        assert {r["id"] for r in results} == {m.id}  # every process was handed the one stored memory
        assert sorted(r["confidence"] for r in results) == pytest.approx([round(0.1 * k, 6) for k in range(1, 9)])
        assert len(s.events(kind="add")) == 1 and len(s.events(kind="confirm")) == 7
        assert s.search("timed-out page", k=5)[0][0].id == m.id and len(s.search("page", k=5)) == 1


# ---------------------------------------------------------------- lost updates (issue 6 point 1)

N_OUTCOMES = 120


def _recorder(path, target, w, barrier, out):
    "Record outcomes (or, for w == 0, accesses) of one memory; write how many calls were acknowledged."
    s = MemoryStore(path)
    barrier.wait(timeout=120)
    acked = dict(outcomes=0, successes=0, accesses=0)
    for i in range(N_OUTCOMES):
        if w == 0:
            s.record_access([target])
            acked["accesses"] += 1
            continue
        ok = (i + w) % 3 != 0
        s.record_outcome([target], ok)  # returns only after the commit: acknowledged
        acked["outcomes"] += 1
        acked["successes"] += ok
    s.close()
    Path(out).write_text(json.dumps(acked))


def _merge(item):
    "What a gate's merge does: confirm, and keep the task that produced the duplicate."
    return item.confirm().add_example_query(f"merged task {random.randrange(10**6)}")


def _editor(path, target, barrier, out):
    "Edit the memory while the recorders run: get -> (slow) -> update, and modify (when the store has it)."
    s = MemoryStore(path)
    barrier.wait(timeout=120)
    n = 0
    for i in range(60):
        if i % 2 and hasattr(s, "modify"):
            s.modify(target, _merge)
        else:
            m = s.get(target)
            time.sleep(0.005)  # the gates' read -> judge -> write gap, where increments used to get lost
            m.description = f"Edited {i} times; applies to flaky page loads."
            s.update(m)
        n += 1
    s.close()
    Path(out).write_text(json.dumps({"edits": n}))


def test_no_counter_increment_is_lost_to_concurrent_updates(tmp_path):
    db, n_rec = tmp_path / "m.db", 4
    with MemoryStore(db) as s:
        target = s.add(MemoryItem("Retry a timed-out page load", "Flaky pages.", "1. Wait\n2. Reload once")).id
    barrier = CTX.Barrier(n_rec + 1)
    outs = [tmp_path / f"r{w}.json" for w in range(n_rec)]
    procs = [CTX.Process(target=_recorder, args=(str(db), target, w, barrier, str(outs[w]))) for w in range(n_rec)]
    procs.append(CTX.Process(target=_editor, args=(str(db), target, barrier, str(tmp_path / "e.json"))))
    _run(procs)
    acked = [json.loads(o.read_text()) for o in outs]
    assert json.loads((tmp_path / "e.json").read_text())["edits"] == 60
    with MemoryStore(db) as s:
        m = s.get(target)
        outcomes = sum(a["outcomes"] for a in acked)
        successes = sum(a["successes"] for a in acked)
        got = (m.use_count, m.success_count, m.failure_count, m.access_count)
        want = (outcomes, successes, outcomes - successes, sum(a["accesses"] for a in acked))
        assert got == want, f"counters (use, success, failure, access) {got} != acknowledged calls {want}"
        assert m.description == "Edited 58 times; applies to flaky page loads."  # the edits landed too
        assert len(s.events(kind="outcome")) == outcomes and s.check() == []
