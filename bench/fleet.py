"""One bank for a fleet: procmem's PostgreSQL store (issue 11) measured on loopback, next to SQLite.

Usage: python bench/fleet.py [--size 100000] [--writers 4] [--adds 500] [--repeats 3] [--trials 200]
                             [--queries 200] [--dsn postgresql://…] [--out bench/results/fleet.md]

Without --dsn a throwaway server is started (`procmem.postgres.TempPostgres`: initdb + pg_ctl in a temp
directory, fsync=off, loopback) and stopped at the end. With --dsn the bank in that database is used;
if it already holds >= --size memories it is not loaded again (so a rerun skips the load).

The corpus is the one every retrieval benchmark uses: `../shared/bench/gen_corpus.py`, the first `size`
items of the 1M file and its 200 queries (bench/retrieval.py's helpers, same `MemoryItem` mapping).
The PostgreSQL bank is loaded with the store's `add_many` in batches (without building an index in the
loader); a SQLite store of the same items is built for the comparison rows.

Every measurement runs in fresh processes (`--worker` mode of this file); timings are medians over
`--repeats` processes. Times across processes are `time.monotonic_ns()`: CLOCK_MONOTONIC, which on Linux
is one system-wide clock, so a time taken in process A and one taken in process B are comparable.

Measured (each also for SQLite where it makes sense):
- visibility: process A adds a memory holding a unique word; process B (its own store and index, already
  caught up) polls for it; time from A's `add` returning (commit acknowledged) to B's first hit, over
  `--trials` trials, three ways: B polls `store.search` (each search checks the revision: one round trip);
  the same with `listen=True`; and B with `listen=True` polling only its local index (no round trip: the
  NOTIFY prefetch alone).
- search: `store.search(q, 5)` as a user calls it (revision check + local BM25 + item fetch), its parts
  (index only, revision check, `get_many`), and `retrieve_memories(k=5)` without and with the access
  record (a write transaction).
- add: single `store.add` of distinct memories into the bank.
- writers: W processes x N adds at once -> exactly W*N new rows, every id once, every writer's index
  (after one search) holds every new memory (each found by its unique word); adds/s over the whole run.
- index build: a fresh process's first search on the bank (full build from PostgreSQL), in RAM and with
  `index_dir` (writes the file), then another fresh process starting from that file.
"""
from __future__ import annotations
import argparse, json, os, platform, random, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

from _common import REPO, git_commit
import retrieval as R  # the corpus helpers (ensure_corpus, load_items, load_queries, to_memory, pct)

pct = R.pct


def mono() -> int:
    "CLOCK_MONOTONIC in ns: system-wide on Linux, so comparable between processes."
    return time.monotonic_ns()


def ms(ns) -> float: return ns / 1e6


def stats(xs_ms: list) -> dict:
    return dict(p50=pct(xs_ms, 50), p95=pct(xs_ms, 95), max=max(xs_ms) if xs_ms else float("nan"), n=len(xs_ms))


def open_store(store: str, **kw):
    from procmem import MemoryStore
    if not store.startswith("postgres"):
        kw.pop("listen", None); kw.pop("index_dir", None)
    return MemoryStore(store, **kw)


def new_item(d: dict, id: str, word: str):
    "A distinct memory from corpus item `d`, holding the unique `word` in its title."
    from procmem import MemoryItem
    return MemoryItem(title=f"{d['title']} {word}", description=d["description"], content=d["description"],
                      tags=d["tags"], id=id)


def hit(ix_or_store, word: str, want: str, ns: str, index_only: bool) -> bool:
    if index_only:
        return any(k == f"{ns}/{want}" for k, _ in ix_or_store.search(word, 3, filters={"namespace": ns}))
    return any(m.id == want for m, _ in ix_or_store.search(word, 3))

# ---------------------------------------------------------------- workers (each in its own process)

def w_build(store: str, index_dir: str | None, nq: int):
    "Fresh process: open the store, first search (with an empty index_dir or none: the full build)."
    q = R.load_queries(1)[0]["text"]
    t = mono()
    import procmem, procmem.postgres  # noqa: F401  (psycopg too, so the open below is not charged with imports)
    t_imp = mono() - t
    had_file = bool(index_dir) and any(Path(index_dir).glob("*.bm25"))
    t0 = mono(); s = open_store(store, index_dir=index_dir); t1 = mono()
    s.search(q, 5); t2 = mono()
    n = len(s._index())
    s.close()
    R.emit(dict(import_ms=ms(t_imp), open_ms=ms(t1 - t0), first_search_ms=ms(t2 - t1), total_s=(t2 - t0) / 1e9,
                docs=n, had_file=had_file, hwm_mb=R.proc_status()["VmHWM"]))


def w_search(store: str, nq: int):
    "store.search p50/p95 and its parts; retrieve_memories without/with the access record."
    from procmem.retrieval import retrieve_memories
    qs = [q["text"] for q in R.load_queries(nq)]
    targets = [f"m{q['target']}" for q in R.load_queries(nq)]
    s = open_store(store)
    s.search(qs[0], 5)  # the build (or index file read): not timed here
    ns = s.namespace
    for _ in range(2):  # two passes: the second is reported (warm caches, as in retrieval.py)
        full, found = [], 0
        for q, tgt in zip(qs, targets):
            a = mono(); res = s.search(q, 5); full.append(ms(mono() - a))
            found += any(m.id == tgt for m, _ in res)
    ix_only, rev, fetch = [], [], []
    for q in qs:
        ix = s._index()
        a = mono(); hits = ix.search(q, 5, filters={"domain": None, "source_type": None, "namespace": ns})
        ix_only.append(ms(mono() - a))
        a = mono(); s.rev; rev.append(ms(mono() - a))
        ids = [k.split("/", 1)[1] for k, _ in hits]
        a = mono(); s.get_many(ids); fetch.append(ms(mono() - a))
    retr, retr_rec = [], []
    for q in qs:
        a = mono(); retrieve_memories(s, q, k=5, record=False); retr.append(ms(mono() - a))
    for q in qs:
        a = mono(); retrieve_memories(s, q, k=5, record=True); retr_rec.append(ms(mono() - a))
    s.close()
    R.emit(dict(search=stats(full), hit5=found / len(qs), index_only=stats(ix_only), rev_check=stats(rev),
                get_many=stats(fetch), retrieve=stats(retr), retrieve_record=stats(retr_rec)))


def w_add(store: str, tag: str, n: int):
    "n single adds of distinct memories into the bank."
    src = R.load_items(n)
    s = open_store(store)
    s.search("warm up query", 5)
    lat = []
    for i, d in enumerate(src):
        m = new_item(d, f"{tag}-add-{i}", f"{tag}add{i}q")
        a = mono(); s.add(m); lat.append(ms(mono() - a))
    s.close()
    R.emit(dict(add=stats(lat)))


def w_watch(store: str, mode: str):
    "Process B: for each 'word id' on stdin, poll until the memory is visible; print the monotonic time."
    s = open_store(store, listen=mode != "search")
    s.search("warm up query", 5)
    if mode != "search":
        if not s._listener.connected.wait(10):
            sys.exit("listener did not connect")
    ns = s.namespace
    print("ready", flush=True)
    polls = []
    for line in sys.stdin:
        word, want = line.split()
        print("polling", flush=True)
        n = 0
        while True:
            n += 1
            a = mono()
            if mode == "index-listen":
                with s._lock:
                    ok = hit(s._bm25, word, want, ns, index_only=True)
            else:
                ok = hit(s, word, want, ns, index_only=False)
            if ok:
                break
            time.sleep(0.0002)
        b = mono()
        print(f"found {b} {b - a}", flush=True)  # the time, and how long the successful poll took
        polls.append(n)
    s.close()


def w_vis(store: str, mode: str, tag: str, trials: int):
    "Process A: add a memory with a unique word while process B polls for it (see w_watch)."
    src = R.load_items(trials)
    s = open_store(store)
    s.search("warm up query", 5)
    w = subprocess.Popen([sys.executable, __file__, "--worker", "watch", "--store", store, "--mode", mode],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert w.stdout.readline().strip() == "ready"
    after_ack, after_start, add_ms, last_poll = [], [], [], []
    rnd = random.Random(11)
    for i, d in enumerate(src):
        word = f"{tag}vis{i}q"
        m = new_item(d, f"{tag}-vis-{i}", word)
        w.stdin.write(f"{word} {m.id}\n"); w.stdin.flush()
        assert w.stdout.readline().strip() == "polling"
        time.sleep(rnd.uniform(0.002, 0.006))  # B is somewhere in its poll loop
        a = mono(); s.add(m); b = mono()
        _, found, took = w.stdout.readline().split()
        found = int(found)
        last_poll.append(ms(int(took)))
        after_ack.append(ms(found - b)); after_start.append(ms(found - a)); add_ms.append(ms(b - a))
    w.stdin.close(); w.wait()
    s.close()
    R.emit(dict(after_ack=stats(after_ack), after_start=stats(after_start), add=stats(add_ms), last_poll=stats(last_poll),
                seen_before_ack=sum(x < 0 for x in after_ack)))


def w_writer(store: str, tag: str, j: int, writers: int, n: int):
    "One of W concurrent writers: n adds after 'go'; after 'check', one search, then its index is checked."
    src = R.load_items(n)
    s = open_store(store)
    s.search("warm up query", 5)
    items = [new_item(d, f"{tag}-w{j}-{i}", f"{tag}w{j}n{i}q") for i, d in enumerate(src)]
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    lat = []
    t0 = mono()
    for m in items:
        a = mono(); s.add(m); lat.append(ms(mono() - a))
    t1 = mono()
    print("done", flush=True)
    assert sys.stdin.readline().strip() == "check"
    a = mono(); s.search("warm up query", 5); t_sync = ms(mono() - a)  # the one search that catches up
    ns, ix = s.namespace, s._bm25
    missing = [f"{tag}-w{jj}-{i}" for jj in range(writers) for i in range(n)
               if not hit(ix, f"{tag}w{jj}n{i}q", f"{tag}-w{jj}-{i}", ns, index_only=True)]
    docs = len(ix)
    s.close()
    R.emit(dict(t0=t0, t1=t1, add=stats(lat), catch_up_ms=t_sync, missing=len(missing),
                missing_sample=missing[:5], docs=docs))

# ---------------------------------------------------------------- orchestration

def worker_cmd(*args):
    return [sys.executable, __file__, "--worker", *map(str, args)]


def run_worker(*args, timeout=3600) -> dict:
    p = subprocess.run(worker_cmd(*args), capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-5000:])
        raise RuntimeError(f"worker {args} failed with exit code {p.returncode}")
    return json.loads(lines[-1][7:])


def run_writers(store: str, tag: str, writers: int, n: int) -> dict:
    "W writer processes started together; every one checks its index after all have finished."
    ps = [subprocess.Popen(worker_cmd("writer", "--store", store, "--tag", tag, "--j", j, "--writers", writers,
                                      "--n", n), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
          for j in range(writers)]
    for p in ps:
        assert p.stdout.readline().strip() == "ready"
    for p in ps:
        p.stdin.write("go\n"); p.stdin.flush()
    for p in ps:
        assert p.stdout.readline().strip() == "done"
    for p in ps:
        p.stdin.write("check\n"); p.stdin.flush()
    res = []
    for p in ps:
        out, _ = p.communicate(timeout=600)
        res.append(json.loads([l for l in out.splitlines() if l.startswith("RESULT ")][-1][7:]))
    wall = (max(r["t1"] for r in res) - min(r["t0"] for r in res)) / 1e9
    return dict(per_writer=res, wall_s=wall, adds_per_s=writers * n / wall,
                add_p50=statistics.median(r["add"]["p50"] for r in res),
                add_p95=max(r["add"]["p95"] for r in res),
                missing=sum(r["missing"] for r in res), docs=[r["docs"] for r in res])


def count_rows(store: str, tag: str) -> tuple[int, int, int]:
    "(rows whose id starts with tag-w, distinct such ids, active memories) read straight from the database."
    like = f"{tag}-w%"
    if store.startswith("postgres"):
        import psycopg
        with psycopg.connect(store) as con:
            a, b = con.execute("SELECT count(*), count(DISTINCT id) FROM procmem.memories WHERE id LIKE %s", (like,)).fetchone()
            c = con.execute("SELECT count(*) FROM procmem.memories WHERE status='active'").fetchone()[0]
    else:
        import sqlite3
        con = sqlite3.connect(store)
        a, b = con.execute("SELECT count(*), count(DISTINCT id) FROM memories WHERE id LIKE ?", (like,)).fetchone()
        c = con.execute("SELECT count(*) FROM memories WHERE status='active'").fetchone()[0]
        con.close()
    return a, b, c


def load_bank(store: str, n: int, log, batch: int = 5000, src: str | None = None) -> dict:
    """The first n corpus items into the store unless it already holds them: `migrate_store` from the
    SQLite bank `src` when given (PostgreSQL), else `add_many` in batches."""
    from procmem.index import _store_add_many  # the store's add_many, without the loader's own index sync
    s = open_store(store)
    have = s.count()
    if have >= n:
        s.close()
        log(f"  {store.split('?')[0]}: already holds {have:,} memories; not loaded again")
        return dict(loaded=0, have=have, load_s=None, how="reused")
    if src and have == 0:
        from procmem.migrate import migrate_store
        s.close()
        t = time.perf_counter(); counts = migrate_store(src, store); load_s = time.perf_counter() - t
        s = open_store(store); total = s.count(); s.close()
        return dict(loaded=total, have=total, load_s=load_s, how="migrate_store from the SQLite bank", counts=counts)
    items = R.load_items(n)[have:]
    t = time.perf_counter()
    for i in range(0, len(items), batch):
        _store_add_many(s, [R.to_memory(d) for d in items[i:i + batch]])
        if (i // batch) % 4 == 0:
            log(f"    {min(n, have + i + batch):,} loaded ({time.perf_counter() - t:.0f} s)")
    load_s = time.perf_counter() - t
    if not store.startswith("postgres"):
        s.sync_index(flush=True)  # the SQLite store keeps its index file next to it
    total = s.count(); s.close()
    return dict(loaded=len(items), have=total, load_s=load_s, how=f"add_many in batches of {batch:,}")


def pg_stats(dsn: str) -> dict:
    "Whether PostgreSQL has planner statistics for the memories table (autovacuum's ANALYZE)."
    import psycopg
    with psycopg.connect(dsn) as con:
        r = con.execute("SELECT last_autoanalyze, last_analyze, n_mod_since_analyze FROM pg_stat_user_tables "
                        "WHERE schemaname = 'procmem' AND relname = 'memories'").fetchone()
    return dict(analyzed=bool(r and (r[0] or r[1])), n_mod_since_analyze=r[2] if r else None)


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def phase(name, results, log, f):
    before = loadavg(); t = time.perf_counter()
    out = f()
    results.setdefault("load", {})[name] = dict(before=before, after=loadavg(), secs=time.perf_counter() - t)
    log(f"  [{name}: {time.perf_counter() - t:.0f} s; load avg before {before}, after {loadavg()}]")
    return out


def bench_store(kind: str, store: str, a, work: Path, log, src: str | None = None) -> dict:
    "Every measurement on one store (kind: 'pg' or 'sqlite'; `src`: a SQLite bank to migrate from)."
    res = {"kind": kind}
    log(f"\n== {kind}: {store.split('?')[0] if kind == 'pg' else store} ==")
    res["bank"] = phase(f"{kind} load", res, log, lambda: load_bank(store, a.size, log, src=src))
    log(f"  bank: {res['bank']}")
    if kind == "pg":
        res["stats_after_load"] = pg_stats(store)
        log(f"  planner statistics after the load: {res['stats_after_load']}")

    def builds():
        out = []
        for r in range(a.repeats):
            row = dict(ram=run_worker("build", "--store", store, "--nq", 1))
            if kind == "pg":
                d = work / f"ixdir-{r}"; shutil.rmtree(d, ignore_errors=True); d.mkdir(parents=True)
                row["dir_build"] = run_worker("build", "--store", store, "--index-dir", d, "--nq", 1)
                row["dir_load"] = run_worker("build", "--store", store, "--index-dir", d, "--nq", 1)
                shutil.rmtree(d, ignore_errors=True)
            log(f"  build {r}: " + "; ".join(f"{k} {v['first_search_ms']:.0f} ms first search "
                                             f"(open {v['open_ms']:.0f} ms, {v['docs']} docs, peak RSS {v['hwm_mb']:.0f} MB)"
                                             for k, v in row.items()))
            out.append(row)
        return out
    res["build"] = phase(f"{kind} build", res, log, builds)

    def searches():
        out = []
        for r in range(a.repeats):
            s = run_worker("search", "--store", store, "--nq", a.queries); out.append(s)
            log(f"  search {r}: p50 {s['search']['p50']:.3f} p95 {s['search']['p95']:.3f} ms (index only "
                f"{s['index_only']['p50']:.3f}, rev {s['rev_check']['p50']:.3f}, get_many {s['get_many']['p50']:.3f}); "
                f"retrieve {s['retrieve']['p50']:.3f} / with record {s['retrieve_record']['p50']:.3f} ms; hit@5 {s['hit5']:.3f}")
        return out
    res["search"] = phase(f"{kind} search", res, log, searches)

    def adds():
        out = []
        for r in range(a.repeats):
            x = run_worker("add", "--store", store, "--tag", f"{a.tag}a{r}", "--n", a.single_adds); out.append(x)
            log(f"  add {r}: p50 {x['add']['p50']:.2f} p95 {x['add']['p95']:.2f} ms")
        return out
    res["add"] = phase(f"{kind} add", res, log, adds)

    def vis():
        out = {}
        for mode in (("search", "search-listen", "index-listen") if kind == "pg" else ("search",)):
            x = run_worker("vis", "--store", store, "--mode", mode, "--tag", f"{a.tag}{mode[:3]}{mode[-3:]}",
                           "--trials", a.trials)
            out[mode] = x
            log(f"  visible ({mode}): after ack p50 {x['after_ack']['p50']:.2f} p95 {x['after_ack']['p95']:.2f} max "
                f"{x['after_ack']['max']:.2f} ms; after add start p50 {x['after_start']['p50']:.2f} p95 "
                f"{x['after_start']['p95']:.2f}; seen before ack {x['seen_before_ack']}/{x['after_ack']['n']}")
        return out
    res["vis"] = phase(f"{kind} visibility", res, log, vis)

    def writers():
        tag = f"{a.tag}{kind}"
        before = count_rows(store, tag)[2]
        w = run_writers(store, tag, a.writers, a.adds)
        rows, distinct, after = count_rows(store, tag)
        w.update(rows=rows, distinct=distinct, active_before=before, active_after=after)
        log(f"  writers {a.writers}x{a.adds}: {rows} rows ({distinct} distinct ids), active {before} -> {after}, "
            f"{w['adds_per_s']:.0f} adds/s ({w['wall_s']:.2f} s), add p50 {w['add_p50']:.2f} ms, "
            f"missing from indexes {w['missing']}, index docs {w['docs']}")
        return w
    res["writers"] = phase(f"{kind} writers", res, log, writers)
    return res

# ---------------------------------------------------------------- report

def med(rows, *path):
    vals = []
    for r in rows:
        for p in path:
            r = r[p]
        vals.append(r)
    return statistics.median(vals)


def rng(rows, *path, f="{:.2f}"):
    vals = []
    for r in rows:
        for p in path:
            r = r[p]
        vals.append(r)
    s = f.format(statistics.median(vals))
    return s + (f" ({f.format(min(vals))}–{f.format(max(vals))})" if len(vals) > 1 else "")


def report(res: dict, a, started: str, commit: str, server: str) -> str:
    pg, sq = res["pg"], res.get("sqlite")
    W, N = a.writers, a.adds
    L = ["# Fleet benchmark: PostgreSQL store (issue 11)", "",
         f"Run {started} UTC with `python bench/fleet.py --size {a.size} --writers {W} --adds {N} --repeats {a.repeats} "
         f"--trials {a.trials}` on procmem commit {commit}; {platform.machine()}, {os.cpu_count()} cores "
         f"(shared with other jobs), Python {platform.python_version()}; {server}; loopback TCP. "
         f"Corpus: the first {a.size:,} items of `shared/bench/gen_corpus.py`'s 1M file and its {a.queries} queries. "
         f"Timings: median of {a.repeats} fresh processes (range in brackets) unless noted.", "",
         "| measure | PostgreSQL | SQLite | target | result |", "|---|---|---|---|---|"]

    def row(name, p, s, target="", ok=None):
        L.append(f"| {name} | {p} | {s if s is not None else '—'} | {target} | "
                 f"{'' if ok is None else ('PASS' if ok else '**FAIL**')} |")

    def both(*path, f="{:.3f}"):
        return rng(pg[path[0]], *path[1:], f=f), (rng(sq[path[0]], *path[1:], f=f) if sq else None)

    v = pg["vis"]
    row("**visibility**: A's add returned → B's first hit, B polls `store.search` [ms] p50 / p95",
        f"{v['search']['after_ack']['p50']:.2f} / {v['search']['after_ack']['p95']:.2f}",
        f"{sq['vis']['search']['after_ack']['p50']:.2f} / {sq['vis']['search']['after_ack']['p95']:.2f}" if sq else None,
        "p95 ≤ 5 ms", v["search"]["after_ack"]["p95"] <= 5)
    row("  same, B opened with `listen=True` [ms] p50 / p95",
        f"{v['search-listen']['after_ack']['p50']:.2f} / {v['search-listen']['after_ack']['p95']:.2f}", "n/a",
        "p95 ≤ 5 ms", v["search-listen"]["after_ack"]["p95"] <= 5)
    row("  B with `listen=True` polls only its local index (NOTIFY prefetch alone, no round trip) [ms] p50 / p95",
        f"{v['index-listen']['after_ack']['p50']:.2f} / {v['index-listen']['after_ack']['p95']:.2f}", "n/a")
    row("  of which B's successful poll (the catch-up `store.search`) p50 / p95 [ms]",
        f"{v['search']['last_poll']['p50']:.2f} / {v['search']['last_poll']['p95']:.2f}" if "last_poll" in v["search"] else "—",
        f"{sq['vis']['search']['last_poll']['p50']:.2f} / {sq['vis']['search']['last_poll']['p95']:.2f}"
        if sq and "last_poll" in sq["vis"]["search"] else None)
    row("  A's `add` while B polls p50 / p95 [ms]",
        f"{v['search']['add']['p50']:.2f} / {v['search']['add']['p95']:.2f}",
        f"{sq['vis']['search']['add']['p50']:.2f} / {sq['vis']['search']['add']['p95']:.2f}" if sq else None)
    row(f"  from the start of A's add (p50 / p95, polling search) [ms]; trials",
        f"{v['search']['after_start']['p50']:.2f} / {v['search']['after_start']['p95']:.2f}; {v['search']['after_ack']['n']}",
        (f"{sq['vis']['search']['after_start']['p50']:.2f} / {sq['vis']['search']['after_start']['p95']:.2f}; "
         f"{sq['vis']['search']['after_ack']['n']}") if sq else None)
    p, s = both("search", "search", "p50")
    ok = med(pg["search"], "search", "p50") <= 1.5
    row(f"**search** top-5 p50 at {a.size // 1000}k: `store.search` (revision check + BM25 + item fetch) [ms]", p, s,
        "p50 ≤ 1.5 ms", ok)
    p, s = both("search", "search", "p95"); row("  search p95 [ms]", p, s)
    p, s = both("search", "index_only", "p50"); row("  of which the local index alone (`BM25Index.search`) p50 [ms]", p, s)
    p, s = both("search", "rev_check", "p50"); row("  of which the revision check (`store.rev`) p50 [ms]", p, s)
    p, s = both("search", "get_many", "p50"); row("  of which the item fetch (`get_many` of the top 5) p50 [ms]", p, s)
    p, s = both("search", "hit5", f="{:.3f}"); row("  hit@5 (same ranking on both backends)", p, s)
    p, s = both("search", "retrieve", "p50"); row("`retrieve_memories(k=5, record=False)` p50 (20 candidates, relevance floor, read checks) [ms]", p, s)
    p, s = both("search", "retrieve", "p95"); row("  p95 [ms]", p, s)
    p, s = both("search", "retrieve_record", "p50"); row("`retrieve_memories(k=5)` with the access record (a write transaction) p50 [ms]", p, s)
    p, s = both("search", "retrieve_record", "p95"); row("  p95 [ms]", p, s)
    p, s = both("add", "add", "p50", f="{:.2f}")
    row(f"**add** (single, distinct, into the {a.size // 1000}k bank; {a.single_adds} per process) p50 [ms]", p, s,
        "p50 ≤ 5 ms", med(pg["add"], "add", "p50") <= 5)
    p, s = both("add", "add", "p95", f="{:.2f}"); row("  add p95 [ms]", p, s)
    w = pg["writers"]
    okw = w["rows"] == W * N == w["distinct"] and w["missing"] == 0 and w["active_after"] - w["active_before"] == W * N

    def wdesc(x):
        return (f"{x['rows']:,} rows, {x['distinct']:,} distinct ids, active +{x['active_after'] - x['active_before']:,}; "
                f"{x['missing']} missing from the {W} indexes")
    row(f"**{W} writers × {N} adds** at once (processes)", wdesc(w), wdesc(sq["writers"]) if sq else None,
        f"{W * N:,} items, none lost, every index complete", okw)
    row("  throughput [adds/s] (wall time of the whole run)", f"{w['adds_per_s']:.0f} ({w['wall_s']:.2f} s)",
        f"{sq['writers']['adds_per_s']:.0f} ({sq['writers']['wall_s']:.2f} s)" if sq else None)
    row("  add latency under contention p50 / worst writer's p95 [ms]", f"{w['add_p50']:.2f} / {w['add_p95']:.2f}",
        f"{sq['writers']['add_p50']:.2f} / {sq['writers']['add_p95']:.2f}" if sq else None)
    row("  each writer's catch-up search after the run [ms]",
        " / ".join(f"{r['catch_up_ms']:.0f}" for r in w["per_writer"]),
        " / ".join(f"{r['catch_up_ms']:.0f}" for r in sq["writers"]["per_writer"]) if sq else None)
    b = pg["build"]
    okb = med(b, "ram", "total_s") <= 10
    row(f"**index build** from the {a.size // 1000}k bank, fresh process, in RAM: open + first search [s]",
        rng(b, "ram", "total_s"), None, "≤ 10 s", okb)
    row("  with `index_dir` (empty: builds and writes the file) [s]", rng(b, "dir_build", "total_s"), None,
        "≤ 10 s", med(b, "dir_build", "total_s") <= 10)
    row("  another process starting from that file: open + first search [s]", rng(b, "dir_load", "total_s", f="{:.3f}"),
        rng(sq["build"], "ram", "total_s", f="{:.3f}") + " (its own index file)" if sq else None)
    row("  peak RSS of the building process (RAM / index_dir / from file) [MB]",
        f"{med(b, 'ram', 'hwm_mb'):.0f} / {med(b, 'dir_build', 'hwm_mb'):.0f} / {med(b, 'dir_load', 'hwm_mb'):.0f}",
        f"{med(sq['build'], 'ram', 'hwm_mb'):.0f}" if sq else None)
    lb, sb = pg["bank"], res.get("sqlite_bank") or (sq or {}).get("bank")
    row(f"bank load [s]: PostgreSQL {lb['how']}; SQLite `add_many` in batches of 5,000 + index flush",
        f"{lb['load_s']:.1f}" if lb["load_s"] else "(reused)",
        f"{sb['load_s']:.1f}" if sb and sb["load_s"] else None)
    L += ["", "Machine load (1/5/15-min load averages, before → after each phase):", "",
          "| phase | seconds | load before | load after |", "|---|---|---|---|"]
    for r in (res, pg, sq):
        if r:
            for k, x in r.get("load", {}).items():
                L.append(f"| {k} | {x['secs']:.0f} | {x['before']} | {x['after']} |")
    if pg.get("stats_after_load"):
        st = pg["stats_after_load"]
        L += ["", f"PostgreSQL planner statistics for `memories` right after the load: "
                  f"{'present' if st['analyzed'] else 'none yet (autovacuum had not analyzed the table)'}, "
                  f"{st['n_mod_since_analyze']:,} rows changed since."]
    L += ["", "How it is measured:",
          "- Every measurement runs in fresh processes (`python bench/fleet.py --worker …`); each opens its own store "
          "(`MemoryStore(dsn)` → `PgStore`, its own connection and BM25 index in RAM unless `index_dir`).",
          "- Clocks: `time.monotonic_ns()` = `clock_gettime(CLOCK_MONOTONIC)`, one system-wide clock on Linux, "
          "so the time A's `add` returned and the time B saw the memory are comparable across the two processes.",
          f"- Visibility: B is caught up first; for each of {a.trials} trials A tells B a unique word, B starts polling "
          "(`store.search(word, 3)` with a 0.2 ms sleep between polls, as bench/retrieval.py does for SQLite), A sleeps "
          "2–6 ms then adds a memory holding the word; the time is B's first hit minus the moment A's `add` returned "
          "(negative when B saw the commit before A's client got the acknowledgement: counted in the JSON). "
          "`listen=True`: B's NOTIFY thread catches its index up on each writer's NOTIFY; in the third row B does not "
          "call `store.search` at all, only its local index (under the store's lock), so the row is the prefetch path alone.",
          f"- Search: the {a.queries} queries twice in one process, the second pass reported; the split rows time "
          "`BM25Index.search` (the same filters `store.search` passes), `store.rev` (the revision round trip; "
          "SQLite: a local read) and `get_many` of the 5 hits separately. `retrieve_memories` asks for 20 "
          "candidates, applies the relevance floor and the read checks; with `record=True` it also writes the access "
          "counts in one write transaction (rev-row lock, UPDATE per id, event).",
          "- Writers: the W processes open the bank, build their index, wait for one 'go', then each adds N distinct "
          "memories (unique word in the title); after all are done, each runs one `store.search` (catching up) and "
          "looks up every one of the W×N unique words in its local index. Rows are counted straight from the database.",
          "- Index build: a fresh process opens the bank and runs one search (`import procmem` and psycopg excluded); "
          "with an empty `index_dir` the index is built by `_sync`'s bulk path and written to the file; the next "
          "fresh process with the same `index_dir` reads the file and catches up by revision.",
          "- The PostgreSQL server is a `TempPostgres` (fsync=off, full_page_writes=off: a commit does not wait for "
          "the disk, as with SQLite in WAL mode with synchronous=NORMAL it waits little); the bench processes and the "
          "server share the same 2 cores, so every round trip includes a context switch.",
          ]
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--adds", type=int, default=500, help="adds per writer")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=200, help="visibility trials per mode")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--single-adds", type=int, default=200, help="single adds per add process")
    ap.add_argument("--dsn", default=None, help="an existing database (default: start a TempPostgres)")
    ap.add_argument("--no-sqlite", action="store_true", help="skip the SQLite comparison")
    ap.add_argument("--load", choices=("migrate", "add_many"), default="migrate",
                    help="fill the PostgreSQL bank by procmem.migrate from a SQLite bank built first, or add_many")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "fleet.md"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--report-only", default=None, help="rewrite --out from this run's JSON, measuring nothing")
    # worker mode (internal)
    ap.add_argument("--worker"); ap.add_argument("--store"); ap.add_argument("--nq", type=int)
    ap.add_argument("--index-dir"); ap.add_argument("--tag", default=None); ap.add_argument("--n", type=int)
    ap.add_argument("--mode"); ap.add_argument("--j", type=int)
    a = ap.parse_args()
    if a.worker == "build": return w_build(a.store, a.index_dir, a.nq)
    if a.worker == "search": return w_search(a.store, a.nq)
    if a.worker == "add": return w_add(a.store, a.tag, a.n)
    if a.worker == "watch": return w_watch(a.store, a.mode)
    if a.worker == "vis": return w_vis(a.store, a.mode, a.tag, a.trials)
    if a.worker == "writer": return w_writer(a.store, a.tag, a.j, a.writers, a.n)
    if a.worker: sys.exit(f"unknown worker {a.worker}")

    if a.report_only:  # rewrite the markdown from a run's JSON (e.g. after changing the report)
        res = json.loads(Path(a.report_only).read_text())
        m = res["meta"]
        for k, v in m["args"].items():
            if k not in ("out", "report_only"):
                setattr(a, k, v)
        return Path(a.out).write_text(report(res, a, m["started"], m["commit"], m["where"]))
    R.ensure_corpus()
    a.tag = a.tag or f"f{int(time.time()) % 100000}"  # ids unique across reruns on a reused bank
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime()); commit = git_commit()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="procmem-fleet-"))
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    def log(msg): print(msg, flush=True)
    log(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    server, res = None, {}
    try:
        if a.dsn:
            dsn, where = a.dsn, "an existing server (--dsn)"
        else:
            from procmem.postgres import TempPostgres
            server = TempPostgres().start()
            dsn = server.create_database("fleet")
            ver = subprocess.run([str(server.bindir / "postgres"), "--version"], capture_output=True, text=True).stdout.strip()
            where = f"a throwaway {ver} server (`TempPostgres`, fsync=off)"
        sq = str(work / "bank.db")
        if a.load == "migrate":  # the SQLite bank first (add_many), copied into PostgreSQL by procmem.migrate
            res["sqlite_bank"] = phase("sqlite bank for migrate", res, log, lambda: load_bank(sq, a.size, log))
        res["pg"] = bench_store("pg", dsn, a, work, log, src=sq if a.load == "migrate" else None)
        if not a.no_sqlite:
            res["sqlite"] = bench_store("sqlite", sq, a, work, log)
        res["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        res["meta"] = dict(started=started, commit=commit, where=where, args=vars(a))
        out.with_suffix(".json").write_text(json.dumps(res, indent=1))
        md = report(res, a, started, commit, where)
        out.write_text(md)
        print("\n" + md)
        print(f"written to {out} and {out.with_suffix('.json')}")
    finally:
        if server is not None:
            server.stop()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
