"""PostgreSQL as the system of record (issue 11), under stress: the SQLite reliability tests ported
to a PostgreSQL bank, plus what only a server brings.

- concurrency: 4 processes x 200 adds -> exact count; every process's search (in RAM, and with a
  shared `index_dir`) finds every item; revisions are 1..N, one per add, in each writer's order; a
  reader following `changes_since(cursor)` during the run never skips one (the rev-row lock);
- SIGKILL: writers killed at random moments lose nothing they acknowledged; the bank passes check()
  and a fresh index (and the killed writers' index_dir) answers for every acknowledged item;
- lost update: a hot counter under record_outcome / record_access / modify / update from several
  processes keeps every increment; merges racing counters keep each increment exactly once;
- index repair: a damaged `index_dir` file is rebuilt; another bank's index is never used;
- listener: NOTIFY prefetch catches the index up without a query; a killed LISTEN backend reconnects
  and catches up;
- server restart mid-run: failing calls raise StoreUnavailableError (no raw psycopg error, no
  password); later calls reconnect; nothing acknowledged is lost;
- standby (pg_basebackup -R): reads served, writes refused naming standby/primary; a multi-host DSN
  with target_session_attrs=prefer-standby reads from the standby and writes to the primary;
- every message and repr above is free of the DSN's password.
Worker functions are reused from the SQLite tests (test_concurrency, test_crash,
test_lifecycle_concurrency, test_index_repair): they take a location, and a DSN is one."""
import json, multiprocessing as mp, os, random, re, subprocess, sys, textwrap, time
from pathlib import Path

import fastcore.test as ft
import pytest

from procmem import MemoryItem, MemoryStore
from procmem.store import ReadOnlyWarning, StoreError, StoreReadOnlyError
from test_concurrency import N_OUTCOMES, _editor, _recorder, _same
from test_crash import _Lines, _kill, _spawn
from test_index_repair import DAMAGE
from test_lifecycle_concurrency import N_PAIRS, _from_log, _merger, _pair, _pair_recorder, _run

CTX = mp.get_context("spawn")
SECRET = "pw-Zq8xK3vv"  # the servers here trust loopback and ignore it: it must never be shown


def _pw(dsn: str) -> str:
    "`dsn` with a password option (unless it already carries one: an existing server's own)."
    if "password" in dsn or re.match(r"\w+://[^/@]*:[^/@]*@", dsn):
        return dsn
    return dsn + ("&" if "?" in dsn else "?") + f"password={SECRET}"


def _no_secret(*texts):
    for t in texts:
        assert SECRET not in str(t), f"the password leaked: {str(t)[:300]}"


def _until(pred, timeout=60.0, what="condition"):
    "Poll `pred()` until it is true (returns its value) or fail after `timeout` seconds."
    end = time.time() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.time() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)


def _sql(dsn: str, q: str, args=()):
    "Rows of one query on a plain connection (the test's own view of the database)."
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        return con.execute(q, args).fetchall()


@pytest.fixture
def temp_server(pg_server):
    "A private server of this test (restarted or cloned by it); skips without server programs."
    from procmem.postgres import TempPostgres, pg_bindir

    if pg_bindir() is None:
        pytest.skip("PostgreSQL's server programs are not installed: this test starts its own server")
    srv = TempPostgres().start()
    yield srv
    srv.stop()


# ------------------------------------------------------------------ concurrency

N_W, N_ADD = 4, 200


def _term(w: int, i: int) -> str:
    return f"w{w}n{i}"


def _adder(dsn, w, ixdir, start, done, out):
    "Add N_ADD distinct memories (searching now and then), then find every writer's items."
    s = MemoryStore(dsn)
    start.wait(timeout=300)
    wrong = []
    for i in range(N_ADD):
        got = s.add(MemoryItem(f"Procedure {_term(w, i)} for gadget", f"By worker {w}.", f"1. step {i}",
                               id=f"w{w}-{i:04d}"))
        wrong += [got.id] if got.id != f"w{w}-{i:04d}" else []
        if i % 37 == 0:
            s.search(f"{_term(w, i)} gadget", k=3)  # the in-RAM index is built mid-run, then caught up
    done.wait(timeout=300)
    on_disk = MemoryStore(dsn, index_dir=ixdir)  # four processes share the one index file
    missing = {"ram": [], "dir": []}
    for store, key in ((s, "ram"), (on_disk, "dir")):
        for v in range(N_W):
            for i in range(N_ADD):
                hits = store.search(_term(v, i), k=2)
                if not hits or hits[0][0].id != f"w{v}-{i:04d}":
                    missing[key].append(f"w{v}-{i:04d}")
    lens = [len(s._index()), len(on_disk._index())]
    s.close()
    on_disk.close()
    Path(out).write_text(json.dumps({"wrong": wrong, "missing": missing, "index_lens": lens}))


def _follower(dsn, start, stop_file, out):
    "Follow `changes_since(cursor)` while the adders run: every memory must be delivered once."
    s = MemoryStore(dsn)
    start.wait(timeout=300)
    cursor, seen, cursors = 0, [], []
    while True:
        last = os.path.exists(stop_file)
        cur, changed, deleted = s.changes_since(cursor)
        assert cur >= cursor and not deleted, (cur, cursor, deleted)
        seen += [m.id for m in changed]
        cursors.append(cur)
        cursor = cur
        if last:
            break
    s.close()
    Path(out).write_text(json.dumps({"seen": seen, "cursors": cursors}))


@pytest.mark.slow
def test_four_processes_add_concurrently_and_every_search_sees_every_item(pg_dsn, tmp_path):
    dsn = _pw(pg_dsn)
    MemoryStore(dsn).close()  # the bank exists first: the workers only race on adds
    start, done, stop = CTX.Barrier(N_W + 1), CTX.Barrier(N_W), tmp_path / "stop"
    outs = [tmp_path / f"a{w}.json" for w in range(N_W)]
    adders = [CTX.Process(target=_adder, args=(dsn, w, str(tmp_path / "ix"), start, done, str(outs[w])))
              for w in range(N_W)]
    follower = CTX.Process(target=_follower, args=(dsn, start, str(stop), str(tmp_path / "f.json")))
    follower.start()
    try:
        _run(adders)
    finally:
        stop.write_text("")
        follower.join(300)
    assert follower.exitcode == 0
    want = {f"w{w}-{i:04d}" for w in range(N_W) for i in range(N_ADD)}
    for o in outs:
        r = json.loads(o.read_text())
        assert r["wrong"] == [], r["wrong"][:5]  # no add was taken for a confirmation
        assert r["missing"] == {"ram": [], "dir": []}, {k: v[:5] for k, v in r["missing"].items()}
        assert r["index_lens"] == [len(want)] * 2
    f = json.loads((tmp_path / "f.json").read_text())
    ft.test_eq(len(f["seen"]), len(want))  # each memory delivered once...
    ft.test_eq(set(f["seen"]), want)  # ...and none skipped
    assert f["cursors"] == sorted(f["cursors"]) and f["cursors"][-1] == len(want)
    assert len(set(f["cursors"])) > 10, "the follower never saw the bank mid-run"
    with MemoryStore(dsn) as s:
        assert len(s) == len(want) and {m.id for m in s} == want and s.check() == []
        assert s.rev == len(want) and len(s.events(kind="add")) == len(want)
    revs = dict(_sql(pg_dsn, "SELECT id, rev FROM procmem.memories"))
    ft.test_eq(sorted(revs.values()), list(range(1, len(want) + 1)))  # one revision per add, no gaps
    for w in range(N_W):  # each writer's revisions strictly increase in its own order
        mine = [revs[f"w{w}-{i:04d}"] for i in range(N_ADD)]
        assert all(a < b for a, b in zip(mine, mine[1:])), w


def test_same_memory_from_six_processes_is_stored_once(pg_dsn, tmp_path):
    "The unique meaning key under a race: one row, every other add a confirmation."
    dsn, n_w = _pw(pg_dsn), 6
    MemoryStore(dsn).close()
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"o{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_same, args=(dsn, barrier, str(outs[w]), w)) for w in range(n_w)])
    results = [json.loads(o.read_text()) for o in outs]
    with MemoryStore(dsn) as s:
        (m,) = list(s)
        assert {r["id"] for r in results} == {m.id}
        assert round(m.confidence, 6) == round(0.1 * n_w, 6)
        assert sorted(round(r["confidence"], 6) for r in results) == [round(0.1 * k, 6) for k in range(1, n_w + 1)]
        assert len(s.events(kind="add")) == 1 and len(s.events(kind="confirm")) == n_w - 1


# ------------------------------------------------------------------ SIGKILL

WRITER = textwrap.dedent("""
    import sys
    from procmem import MemoryItem, MemoryStore
    dsn, tag, ixdir = sys.argv[1:4]
    s = MemoryStore(dsn, index_dir=ixdir)
    i = 0
    while True:
        item = MemoryItem(f"Crash item {tag} n{i} sprocket", "Written before a kill.", f"1. step {i}", id=f"{tag}-{i}")
        m = s.add(item)
        print(m.id, flush=True)  # after add returned: acknowledged
        if i % 25 == 24: s.search(f"sprocket n{i}", k=3)
        if i % 60 == 59: s.sync_index(flush=True)  # the index file is rewritten: a kill may land inside
        i += 1
""")


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing_acknowledged(pg_dsn, tmp_path):
    dsn, ixdir, rng, acked = _pw(pg_dsn), tmp_path / "ix", random.Random(11), []
    MemoryStore(dsn).close()
    for round_ in range(3):
        tags = [f"r{round_}w{k}" for k in range(2)]
        procs = [_spawn(WRITER, dsn, tag, ixdir) for tag in tags]
        outs = [_Lines(p) for p in procs]
        n = rng.randint(20, 150)
        for out, tag in zip(outs, tags):
            out.wait_until(lambda ls, tag=tag: sum(l.startswith(tag) for l in ls) >= n)
        for p in procs:  # each at its own random moment: between, inside or after an add or a flush
            time.sleep(rng.uniform(0, 0.1))
            _kill(p)
        for p, out, tag in zip(procs, outs, tags):
            mine = [l for l in out.finish() if l.startswith(f"{tag}-")]
            assert len(mine) >= n and mine == [f"{tag}-{i}" for i in range(len(mine))]
            _no_secret(p.stderr.read())
            acked += mine
        for store in (MemoryStore(dsn, index_dir=ixdir), MemoryStore(dsn)):  # the killed ones' index, a fresh one
            with store as s:
                assert s.check() == []
                got = {m.id for m in s.get_many(acked)}
                assert got == set(acked), f"{len(set(acked) - got)} acknowledged adds lost"
                assert len(s) - len(acked) <= 2 * (round_ + 1)  # at most one unacknowledged commit per kill
                for doc_id in rng.sample(acked, 25) + [acked[-1]]:
                    hits = s.search(s.get(doc_id).title, k=2)
                    assert hits and hits[0][0].id == doc_id, (doc_id, hits)
                assert len(s._index()) == len(s)


BATCH = textwrap.dedent("""
    import sys
    from procmem import MemoryItem, MemoryStore
    s = MemoryStore(sys.argv[1])
    s.add(MemoryItem("Before the batch cog", "x", "1. y", id="pre"))
    print("pre", flush=True)
    print("BATCH START", flush=True)
    batch = [MemoryItem(f"Batch item {j} cog", "part of a batch", f"step {j} " * 40, id=f"b{j}") for j in range(5000)]
    s.add_many(batch)
    print("BATCH DONE", flush=True)
""")


@pytest.mark.slow
def test_sigkill_inside_add_many_is_all_or_nothing(pg_dsn):
    dsn = _pw(pg_dsn)
    MemoryStore(dsn).close()
    proc = _spawn(BATCH, dsn)
    out = _Lines(proc)
    out.wait_until(lambda ls: "BATCH START" in ls)
    q = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
         "AND application_name = 'procmem' AND state <> 'idle'")
    _until(lambda: _sql(pg_dsn, q)[0][0] > 0, what="the batch's statements on the server")
    time.sleep(random.Random(3).uniform(0.05, 0.3))  # inside the batch's transaction
    _kill(proc)
    assert "BATCH DONE" not in out.finish(), "the batch committed before the kill: the test missed it"
    with MemoryStore(dsn) as s:
        assert s.check() == [] and s.get("pre") is not None
        assert len(s) == 1 and not s.events(kind="add_many"), "a partial batch survived"
        s.add_many([MemoryItem(f"Again {j} cog", "x", f"step {j}", id=f"again{j}") for j in range(300)])
        assert len(s) == 301 and s.search("again 250 cog", k=1)[0][0].id == "again250"


def test_backend_killed_inside_a_write_rolls_back_and_when_idle_reconnects(pg_dsn):
    "A connection lost mid-transaction: a StoreUnavailableError, nothing half-written; idle: silent."
    from procmem.postgres import StoreUnavailableError

    dsn = _pw(pg_dsn)
    s = MemoryStore(dsn)
    m = s.add(MemoryItem("Tighten the loose flange", "Leaks.", "1. Torque to spec", id="f1"))

    def terminate():
        assert _sql(pg_dsn, "SELECT pg_terminate_backend(%s)", (s._con.raw.info.backend_pid,)) == [(True,)]

    def edit(item):  # runs inside modify's write transaction
        terminate()
        item.description = "Changed while the connection died."
        return item

    with pytest.raises(StoreUnavailableError) as e:
        s.modify(m.id, edit)
    _no_secret(e.value)
    assert s.get("f1").description == "Leaks." and s.rev == 1  # rolled back, and the store reconnected
    terminate()  # lost while idle: the next calls reopen it, silently
    assert s.search("loose flange", k=1)[0][0].id == "f1"
    terminate()
    s.record_outcome(["f1"], True)
    assert s.get("f1").use_count == 1 and len(s.events(kind="outcome")) == 1 and s.check() == []
    s.close()


# ------------------------------------------------------------------ lost updates

def test_hot_counter_keeps_every_increment_under_concurrent_writers(pg_dsn, tmp_path):
    "4 processes record outcomes / accesses of one memory while a fifth modifies and updates it."
    dsn, n_rec = _pw(pg_dsn), 4
    with MemoryStore(dsn) as s:
        target = s.add(MemoryItem("Retry a timed-out page load", "Flaky pages.", "1. Wait\n2. Reload once")).id
    barrier = CTX.Barrier(n_rec + 1)
    outs = [tmp_path / f"r{w}.json" for w in range(n_rec)]
    procs = [CTX.Process(target=_recorder, args=(dsn, target, w, barrier, str(outs[w]))) for w in range(n_rec)]
    procs.append(CTX.Process(target=_editor, args=(dsn, target, barrier, str(tmp_path / "e.json"))))
    _run(procs)
    acked = [json.loads(o.read_text()) for o in outs]
    outcomes = sum(a["outcomes"] for a in acked)
    successes = sum(a["successes"] for a in acked)
    assert outcomes == (n_rec - 1) * N_OUTCOMES
    with MemoryStore(dsn) as s:
        m = s.get(target)
        got = (m.use_count, m.success_count, m.failure_count, m.access_count)
        want = (outcomes, successes, outcomes - successes, sum(a["accesses"] for a in acked))
        assert got == want, f"counters (use, success, failure, access) {got} != acknowledged calls {want}"
        assert m.description == "Edited 58 times; applies to flaky page loads."  # the edits landed too
        assert len(m.example_queries) >= 1 and m.confidence > 0.1  # and so did modify()'s merges
        assert len(s.events(kind="outcome")) == outcomes and s.check() == []


def test_merges_racing_counters_keep_each_increment_once(pg_dsn, tmp_path):
    dsn, n_rec = _pw(pg_dsn), 3
    with MemoryStore(dsn) as s:
        s.add_many([m for i in range(N_PAIRS) for m in _pair(i)])
    barrier = CTX.Barrier(n_rec + 1)
    outs = [tmp_path / f"r{w}.json" for w in range(n_rec)]
    procs = [CTX.Process(target=_pair_recorder, args=(dsn, w, barrier, str(outs[w]))) for w in range(n_rec)]
    procs.append(CTX.Process(target=_merger, args=(dsn, barrier, str(tmp_path / "m.json"))))
    _run(procs)
    assert json.loads((tmp_path / "m.json").read_text()) == [f"A{i:03d}" for i in range(N_PAIRS)]
    calls = {}
    for o in outs:
        for k, v in json.loads(o.read_text()).items():
            calls[k] = calls.get(k, 0) + v
    with MemoryStore(dsn) as s:
        assert s.check() == []
        assert len(s.events(kind="outcome")) == calls["outcome"]
        assert len(s.events(kind="inject")) == calls["inject"]
        merges = {e["ids"][0]: e for e in s.events(kind="merge")}
        ft.test_eq(sorted(merges), [f"A{i:03d}" for i in range(N_PAIRS)])
        for i in range(N_PAIRS):
            a, b = s.get(f"A{i:03d}"), s.get(f"B{i:03d}")
            seq = merges[a.id]["seq"]
            want = {k: v + _from_log(s, b.id, before=seq)[k] for k, v in _from_log(s, a.id).items()}
            assert {k: getattr(a, k) for k in want} == want, f"pair {i}: kept item lost or doubled increments"
            after = {k: _from_log(s, b.id)[k] - _from_log(s, b.id, before=seq)[k] for k in want}
            assert {k: getattr(b, k) for k in want} == after, (i, after)  # moved, not copied
            assert a.status == "active" and b.status == "archived"


# ------------------------------------------------------------------ index repair

def _bank(dsn, ixdir, n=1500, word="widget"):
    with MemoryStore(dsn, index_dir=ixdir) as s:
        s.add_many([MemoryItem(f"Procedure {i} for {word}{i}", "desc", f"step {i}") for i in range(n)])
        s.sync_index(flush=True)
        return s._index_file()


@pytest.mark.parametrize("damage", DAMAGE, ids=[f.__name__.strip("_") for f in DAMAGE])
def test_damaged_index_dir_file_is_rebuilt(pg_dsn, tmp_path, damage):
    dsn, ixdir = _pw(pg_dsn), tmp_path / "ix"
    f = _bank(dsn, ixdir)
    assert f.is_file() and f.parent == ixdir
    damage(f, tmp_path / "m.db")
    with MemoryStore(dsn, index_dir=ixdir) as s:
        got = {i: [m.title for m, _ in s.search(f"widget{i}", k=1)] for i in (0, 7, 42, 777, 1499)}
        assert got == {i: [f"Procedure {i} for widget{i}"] for i in got}
        assert len(s._index()) == len(s) == 1500
        m = s.add(MemoryItem("Fresh memory about gizmos", content="1. gizmo"))
        s.sync_index(flush=True)
    assert f.read_bytes()[:12] == b"procmem-bm25"  # a procmem index file again, in place
    with MemoryStore(dsn, index_dir=ixdir) as s:  # the rebuilt file is reused as it is
        ix = s._index()
        assert ix.damaged is None and len(ix) == 1501 and ix.meta["rev"] == s.rev
        assert ix.meta["store_id"] == s.store_id and s.search("gizmos")[0][0].id == m.id


def test_another_banks_index_in_the_same_index_dir_is_never_used(pg_server, tmp_path):
    ixdir = tmp_path / "ix"
    a, b = _pw(pg_server.create_database()), _pw(pg_server.create_database())
    fa, fb = _bank(a, ixdir, 300, "alpha"), _bank(b, ixdir, 500, "beta")
    assert fa != fb and sorted(p.name for p in ixdir.glob("*.bm25")) == sorted([fa.name, fb.name])
    with MemoryStore(a, index_dir=ixdir) as s:  # two banks side by side: each its own file
        assert s.search("beta7") == [] and s.search("alpha7")[0][0].title == "Procedure 7 for alpha7"
    fa.write_bytes(fb.read_bytes())  # bank B's valid index under bank A's name
    with MemoryStore(a, index_dir=ixdir) as s:
        assert s.search("beta7") == [], "bank A answered from bank B's index"
        assert s.search("alpha42")[0][0].title == "Procedure 42 for alpha42"
        assert len(s._index()) == len(s) == 300 and s._index().meta["store_id"] == s.store_id
    with MemoryStore(b, index_dir=ixdir) as s:
        assert len(s._index()) == 500 and s.search("beta7")[0][0].title == "Procedure 7 for beta7"


# ------------------------------------------------------------------ listener

ADD = textwrap.dedent("""
    import sys
    from procmem import MemoryItem, MemoryStore
    with MemoryStore(sys.argv[1]) as s:
        for i in range(int(sys.argv[3])):
            s.add(MemoryItem(f"Listener item {sys.argv[2]} n{i} valve", "From another process.", f"1. {i}"))
        print(s.rev, flush=True)
""")


def _add_elsewhere(dsn, tag, n) -> int:
    "Add `n` memories from another process; the bank's revision after them."
    r = subprocess.run([sys.executable, "-c", ADD, dsn, tag, str(n)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    _no_secret(r.stdout, r.stderr)
    return int(r.stdout.split()[-1])


def _listen_pids(dsn) -> list[int]:
    q = "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%%' AND datname = current_database()"
    return [r[0] for r in _sql(dsn, q)]


def test_listener_prefetches_and_reconnects_after_its_backend_is_killed(pg_dsn):
    dsn = _pw(pg_dsn)
    s = MemoryStore(dsn)
    try:
        lst = s.listen(poll=0.2)
        assert lst.connected.wait(60), lst.error
        s.search("anything")
        rev = _add_elsewhere(dsn, "a", 5)
        _until(lambda: lst.wakeups > 0 and s._bm25_rev == rev, what="the NOTIFY prefetch")
        assert s._bm25_rev == rev == 5  # caught up with no query of ours
        pids = _until(lambda: _listen_pids(pg_dsn), what="the LISTEN backend")
        assert len(pids) == 1
        assert _sql(pg_dsn, "SELECT pg_terminate_backend(%s)", (pids[0],)) == [(True,)]
        _until(lambda: lst.reconnects >= 1 and lst.connected.is_set(), what="the listener's reconnect")
        _until(lambda: _listen_pids(pg_dsn) and _listen_pids(pg_dsn) != pids, what="a new LISTEN backend")
        before = lst.wakeups
        rev = _add_elsewhere(dsn, "b", 3)
        _until(lambda: s._bm25_rev == rev, what="catch-up after the reconnect")
        assert lst.wakeups > before and lst.is_alive()
        assert [m.title for m, _ in s.search("listener item b n2 valve", k=1)] == ["Listener item b n2 valve"]
        _no_secret(repr(s), s.path, lst.error)
    finally:
        s.close()
    assert not lst.is_alive()  # close() stops the thread


@pytest.mark.slow
def test_listener_catches_up_after_a_server_restart(temp_server):
    dsn = _pw(temp_server.create_database())
    s = MemoryStore(dsn, listen=True)
    try:
        lst = s._listener
        assert lst.connected.wait(60), lst.error
        temp_server.restart(down=0.5)
        _until(lambda: lst.reconnects >= 1 and lst.connected.is_set(), what="the listener's reconnect")
        _no_secret(lst.error)
        rev = _add_elsewhere(dsn, "c", 4)
        _until(lambda: getattr(s, "_bm25_rev", None) == rev, what="the prefetch after the restart")
        assert lst.wakeups >= 1 and s.search("listener item c n3 valve", k=1)[0][0].title == "Listener item c n3 valve"
    finally:
        s.close()


# ------------------------------------------------------------------ server restart

RESTART_WRITER = textwrap.dedent("""
    import os, sys, time
    from procmem import MemoryItem, MemoryStore
    dsn, stop = sys.argv[1], sys.argv[2]
    s = MemoryStore(dsn)
    i = 0
    while not os.path.exists(stop):
        try:
            m = s.add(MemoryItem(f"Restart item n{i} flange", "Written across a restart.", f"1. step {i}", id=f"x-{i}"))
            print("OK", m.id, flush=True)
        except Exception as e:
            print("ERR", type(e).__module__, type(e).__name__, " ".join(str(e).split()), flush=True)
            time.sleep(0.05)
        i += 1
    print("FOUND", len(s.search("flange", k=100000)), len(s), flush=True)
""")


def _oks(lines) -> int:
    return sum(l.startswith("OK") for l in lines)


def _foreign(lines) -> list[str]:
    "The writer's failures that are not a StoreUnavailableError."
    return [l for l in lines if l.startswith("ERR") and "StoreUnavailableError" not in l]


@pytest.mark.slow
def test_server_restart_mid_run_loses_nothing_acknowledged(temp_server, tmp_path):
    from procmem.postgres import StoreUnavailableError

    srv = temp_server
    dsn = _pw(srv.create_database())
    mine = MemoryStore(dsn)  # a long-lived client in this process, idle across the restart
    mine.add(MemoryItem("Before the restart bolt", "x", "1. y", id="before"))
    stop = tmp_path / "stop"
    proc = _spawn(RESTART_WRITER, dsn, stop)
    out = _Lines(proc)
    out.wait_until(lambda ls: _oks(ls) >= 30)
    n_before = _oks(out.lines)
    srv.restart(down=0.5)
    out.wait_until(lambda ls: _oks(ls) >= n_before + 30 or _foreign(ls), timeout=180)
    stop.write_text("")
    lines = out.finish()
    proc.wait(60)
    err = proc.stderr.read()
    assert proc.returncode == 0, err[-3000:]
    _no_secret(*lines, err)
    errors = [l for l in lines if l.startswith("ERR")]
    assert errors, "no call failed while the server was down: the test did not hit the restart"
    for e in errors:  # a store error saying what happened, never psycopg's own
        assert e.startswith("ERR procmem.postgres StoreUnavailableError "), e
        assert "postgresql://procmem@127.0.0.1" in e and "***" in e, e
    acked = [l.split()[1] for l in lines if l.startswith("OK")]
    found = [l for l in lines if l.startswith("FOUND")][0].split()
    # the idle client reconnects by itself, and sees every acknowledged add
    assert mine.get("before").title == "Before the restart bolt"
    got = {m.id for m in mine.get_many(acked)}
    assert got == set(acked), f"{len(set(acked) - got)} acknowledged adds lost"
    assert int(found[1]) == int(found[2]) - 1 == len(mine) - 1  # the writer's index: all but "before"
    assert mine.check() == [] and len(mine) - 1 - len(acked) <= 1
    assert mine.search("restart item flange", k=1) and len(mine.search("flange", k=100000)) == len(mine) - 1
    srv.stop(remove=False)  # and while the server is down: a clear, redacted error
    with pytest.raises(StoreUnavailableError) as e:
        mine.add(MemoryItem("During the outage bolt", "x", "1. y"))
    _no_secret(e.value, mine.path)
    with pytest.raises(StoreUnavailableError) as e:
        MemoryStore(dsn)
    _no_secret(e.value)
    assert "cannot reach" in str(e.value) and "password=***" in str(e.value)
    mine.close()


# ------------------------------------------------------------------ standby and multi-host DSN

def _open_when_replicated(dsn) -> MemoryStore:
    "Open the bank on a standby once the standby has replayed it."

    def attempt():
        try:
            return MemoryStore(dsn)
        except StoreError:
            return None

    return _until(attempt, timeout=120, what="the bank on the standby")


def _in_recovery(con) -> bool:
    return con.execute("SELECT pg_is_in_recovery()").fetchone()[0]


@pytest.mark.slow
def test_standby_serves_reads_refuses_writes_and_multi_host_dsn_splits_them(temp_server):
    primary = temp_server
    db = primary.create_database().rsplit("/", 1)[1]
    p = MemoryStore(_pw(primary.dsn(db)))
    p.add_many([MemoryItem(f"Replicated procedure {i} rq{i}", "x", f"1. {i}", id=f"p{i}") for i in range(100)])
    standby = primary.standby()
    try:
        sb = _open_when_replicated(_pw(standby.dsn(db)))
        assert sb.standby and sb.readonly and _in_recovery(sb._con)
        assert sb.search("rq42", k=1)[0][0].id == "p42"
        p.add(MemoryItem("Written after the clone cog", "x", "1. y", id="late"))
        _until(lambda: sb.search("after the clone cog", k=1), timeout=120, what="replication to the standby")
        ft.test_eq(sb.search("after the clone cog", k=1)[0][0].id, "late")
        with pytest.raises(StoreReadOnlyError) as e:
            sb.add(MemoryItem("Refused on the standby", "x", "1. y"))
        msg = str(e.value)
        assert "standby" in msg and "primary" in msg, msg
        _no_secret(msg, repr(sb), sb.path)
        with pytest.warns(ReadOnlyWarning, match="read-only"):  # a retrieval on a standby: served, not counted
            sb.record_access(["p1"])
        with pytest.raises(StoreReadOnlyError, match="standby"):
            sb.record_outcome(["p1"], True)
        assert len(sb) == 101 and sb.get("p1").access_count == 0  # nothing was written there
        sb.close()

        multi = f"postgresql://procmem@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{db}"
        mh = MemoryStore(_pw(multi + "?target_session_attrs=prefer-standby"))
        assert _in_recovery(mh._con), "prefer-standby reads did not go to the standby"
        assert not mh.standby and not mh.readonly
        m = mh.add(MemoryItem("Written through the multi-host DSN nut", "x", "1. y", id="mh"))
        assert not _in_recovery(mh._writer()), "writes did not go to the primary"
        assert p.get("mh").title == m.title  # on the primary at once
        _until(lambda: mh.search("multi-host nut", k=1), timeout=120, what="the write to reach the standby reader")
        ft.test_eq(mh.search("multi-host nut", k=1)[0][0].id, "mh")
        mh.record_outcome(["mh"], True)  # a counter goes to the primary too
        _until(lambda: mh.get("mh").use_count == 1, timeout=120, what="the counter on the standby")
        _no_secret(repr(mh), mh.path)
        mh.close()
    finally:
        p.close()
        standby.stop()


# ------------------------------------------------------------------ passwords

def test_password_never_in_errors_or_reprs(pg_server, pg_dsn):
    from procmem.postgres import StoreUnavailableError, _free_port

    s = MemoryStore(_pw(pg_dsn))
    _no_secret(repr(s), s.path, str(s.path))
    if SECRET in _pw(pg_dsn):
        assert s.path._dsn == _pw(pg_dsn) and "password=***" in s.path
    s.close()
    dead = f"postgresql://procmem@127.0.0.1:{_free_port()}/nobank?password={SECRET}&connect_timeout=5"
    with pytest.raises(StoreUnavailableError) as e:
        MemoryStore(dead)
    _no_secret(e.value, repr(e.value), e.value.__cause__, e.value.__context__)
    assert "password=***" in str(e.value)
    url_pw = f"postgresql://procmem:{SECRET}@127.0.0.1:{_free_port()}/nobank"
    with pytest.raises(StoreUnavailableError) as e:
        MemoryStore(url_pw)
    _no_secret(e.value, repr(e.value))


def test_repr_of_a_store_whose_server_is_down_does_not_raise(temp_server):
    "A repr runs in logs, debuggers and tracebacks: it must answer (redacted) even when the server is gone."
    s = MemoryStore(_pw(temp_server.create_database()))
    s.add(MemoryItem("Seal the hatch", "x", "1. y"))
    temp_server.stop(remove=False)
    text = repr(s)
    _no_secret(text)
    assert str(s.path) in text and "unreachable" in text
    temp_server.start()  # back: the same object answers again
    assert len(s) == 1 and "1 items" in repr(s)
    s.close()
    _no_secret(repr(s))
