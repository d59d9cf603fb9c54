"""The store contract (issue 11): ONE suite every store backend must pass, run against both through
the `store_location` fixture (a SQLite file, then a fresh PostgreSQL database). Stores are opened
with `MemoryStore(store_location, ...)` only, so the backend is chosen as a user chooses it.

Inputs are real texts: the bootstrap pack, the seed memories and the Reflexion ALFWorld lessons in
tests/fixtures, the WebArena task intents and prompt-injection texts under ../shared/data (skipped,
naming the file, when absent).
"""
import json, warnings
from pathlib import Path

import fastcore.test as ft
import pytest
from procmem import MemoryItem, MemoryStore
from procmem.bootstrap import bootstrap_general_strategies
from procmem.reflexion_lessons import lessons_from_env_results
from procmem.store import (MemoryNotFoundError, StoreBudgetError, StoreConflictError, StoreError,
                           StoreNotFoundError, StoreReadOnlyError, read_memory_file)
import procmem.store_status  # noqa: F401  (record_injection, record_retrieval, archive, restore)
import procmem.namespace  # noqa: F401  (in_namespace, namespaces)
import procmem.lifecycle as lifecycle

HERE = Path(__file__).resolve().parent
SEED = HERE / "fixtures" / "seed_memories.json"
ALFWORLD = HERE / "fixtures" / "trajectories" / "reflexion" / "alfworld"
SHARED = HERE.parent.parent / "shared" / "data"
WEBARENA = SHARED / "webarena" / "tasks_dev.json"
INJECTION = SHARED / "injection" / "benchmark_dev.jsonl"


def _pack() -> list[MemoryItem]:
    return bootstrap_general_strategies()


def _lessons() -> list[MemoryItem]:
    "The real Reflexion ALFWorld reflections as pitfalls, one per distinct text."
    out = {}
    for f in sorted(ALFWORLD.glob("env_results_trial_*.json")):
        for m in lessons_from_env_results(f):
            out.setdefault(m.fingerprint, m)
    return list(out.values())


def _copy(m: MemoryItem, **kw) -> MemoryItem:
    return MemoryItem.from_dict(dict(m.to_dict(), **kw))


def _is_pg(loc) -> bool:
    return str(loc).startswith("postgresql://")


def _queries(n: int = 20) -> list[str]:
    "n real task texts: WebArena intents when the shared data is there, else the pack's own queries."
    if WEBARENA.exists():
        return [t["intent"] for t in json.loads(WEBARENA.read_text())][:n]
    mems = _pack() + _lessons()  # without the shared data: their task queries, titles, descriptions
    qs = [t for field in ("task_query", "title", "description") for m in mems if (t := getattr(m, field))]
    return list(dict.fromkeys(qs))[:n]


@pytest.fixture
def store(store_location):
    s = MemoryStore(store_location)
    yield s
    s.close()


# --- add / confirm / hold -----------------------------------------------------------------------
def test_add_get_len_contains_and_confirm(store):
    pack = _pack()
    for m in pack:
        got = store.add(m)
        ft.test_eq(got.id, m.id)
    ft.test_eq(len(store), len(pack))
    assert pack[0].id in store and "no-such-id" not in store
    ft.test_eq(store.get(pack[0].id).title, pack[0].title)
    ft.test_eq([m.id for m in store.get_many([pack[2].id, "nope", pack[1].id])], [pack[2].id, pack[1].id])
    # the same meaning under another id confirms the stored one (confidence +0.1, provenance)
    again = _copy(pack[0], id="confirm-1", task_query="a different task that taught the same thing")
    got = store.add(again)
    ft.test_eq(got.id, pack[0].id)
    assert abs(got.confidence - (pack[0].confidence + 0.1)) < 1e-9, got.confidence
    ft.test_eq(len(store), len(pack))
    assert "confirm-1" not in store
    ft.test_eq([e["ids"] for e in store.events(kind="confirm")], [[pack[0].id]])
    ft.test_eq(len(store.events(kind="add")), len(pack))
    # the same id with a different text is a conflict
    ft.test_fail(lambda: store.add(_copy(pack[1], id=pack[0].id)), contains="already holds a different memory")
    ft.test_eq(store.add(pack[0]).confidence, got.confidence)  # re-adding the identical item: unchanged


def test_held_contradiction(store):
    m = _pack()[0]
    store.add(m)
    store.quarantine(m.id, reasons="suspicious wording")
    cand = _copy(m, id="held-1")
    out = store.add(cand)
    ft.test_eq(out.id, m.id)
    ft.test_eq(out.status, "quarantined")
    ev = store.events(kind="held")
    ft.test_eq(len(ev), 1)
    ft.test_eq(ev[0]["detail"]["candidate"], "held-1")
    assert "held-1" not in store


def test_pitfall_and_strategy_of_one_text_are_two_memories(store):
    m = _pack()[0]
    store.add(m)
    store.add(_copy(m, id="pitfall-1", source_type="failure"))
    ft.test_eq(len(store), 2)
    ft.test_eq(store.get("pitfall-1").source_type, "failure")


def test_items_and_count(store):
    pack, lessons = _pack(), _lessons()[:10]
    store.add_many(pack + lessons)
    store.quarantine(pack[0].id, reasons="review")
    store.archive(pack[1].id, reasons="old")
    ft.test_eq(store.count(), len(pack) + len(lessons) - 2)
    ft.test_eq({m.id for m in store.items("quarantined")}, {pack[0].id})
    ft.test_eq({m.id for m in store.items("archived")}, {pack[1].id})
    ft.test_eq(len(list(store.items(None))), len(pack) + len(lessons))
    for d in {m.domain for m in pack + lessons}:
        want = sum(m.domain == d for m in pack[2:] + lessons)
        ft.test_eq(store.count(domain=d), want)
    n = store.count(domain="no-such-domain")
    ft.test_eq((n, type(n)), (0, int))


# --- update / modify / delete / changes -----------------------------------------------------------
def test_update_modify_delete_and_changes_since(store):
    pack = _pack()
    store.add_many(pack)
    rev0 = store.rev
    ft.test_eq(store.changes_since(rev0), (rev0, [], []))
    up = store.update(_copy(store.get(pack[0].id), description="When the page is slow to load."))
    ft.test_eq(up.description, "When the page is slow to load.")
    mod = store.modify(pack[1].id, lambda m: _copy(m, tags=m.tags + ["edited"]), kind="edit", by="alice")
    assert "edited" in mod.tags
    ft.test_eq(store.events(kind="edit")[-1]["detail"]["by"], "alice")
    gone = store.delete(pack[2].id, by="bob", reason="duplicate")
    ft.test_eq(gone.id, pack[2].id)
    assert pack[2].id not in store
    rev, changed, deleted = store.changes_since(rev0)
    ft.test_eq([m.id for m in changed], [pack[0].id, pack[1].id])  # in revision order
    ft.test_eq(deleted, [pack[2].id])
    ft.test_eq(rev, store.rev)
    ft.test_eq(store.events(kind="delete")[-1]["detail"], {"by": "bob", "reason": "duplicate"})
    for op in (lambda: store.delete("nope"), lambda: store.get("nope"),
               lambda: store.update(_copy(pack[3], id="nope")), lambda: store.modify("nope", lambda m: m)):
        ft.test_fail(op, exc=MemoryNotFoundError)
    ft.test_fail(lambda: store.modify(pack[3].id, lambda m: _copy(m, id="other")), exc=StoreConflictError)
    store.add(pack[2])  # a deleted id can come back: the tombstone goes
    rev2, changed, deleted = store.changes_since(rev)
    ft.test_eq(([m.id for m in changed], deleted), ([pack[2].id], []))


# --- counters -------------------------------------------------------------------------------------
def test_counters_and_last_used_at(store):
    pack = _pack()
    store.add_many(pack)
    a, b = pack[0].id, pack[1].id
    store.record_access([a, b, "unknown"], when="2026-01-02T03:04:05Z")
    store.record_access([a])
    store.record_injection([a], when="2026-02-01T00:00:00Z")
    store.record_retrieval([b], injected=[b], when="2026-03-01T00:00:00Z")
    assert store.get(b).last_used_at.startswith("2026-03-01"), store.get(b).last_used_at
    assert store.get(a).last_used_at.startswith("2026-02-01"), store.get(a).last_used_at
    store.record_outcome([a, b], True)
    store.record_outcome([a], False)
    ma, mb = store.get(a), store.get(b)
    ft.test_eq((ma.access_count, ma.injected_count, ma.use_count, ma.success_count, ma.failure_count),
               (2, 1, 2, 1, 1))
    ft.test_eq((mb.access_count, mb.injected_count, mb.use_count, mb.success_count, mb.failure_count),
               (2, 1, 1, 1, 0))
    assert mb.last_used_at > "2026-03-01", mb.last_used_at  # the outcome's time (now)
    for m in (ma, mb):
        ft.test_eq(type(m.access_count), int)
    ft.test_eq(store.get(pack[2].id).access_count, 0)
    ft.test_eq(store.check(), [])


def test_a_nul_in_a_memorys_json(store, store_location):
    """A NUL character where MemoryItem allows one (a tag, provenance): SQLite stores and counts it;
    PostgreSQL's jsonb (the counters' updates) cannot hold it, so the write is refused up front with
    a StoreConflictError naming the NUL, and nothing is written (never a row its counters fail on)."""
    pack = _pack()
    store.add(pack[1])
    m = _copy(pack[0], tags=["nul\x00tag"], provenance={"note": "a\x00b"})
    rev = store.rev
    if _is_pg(store_location):
        ft.test_fail(lambda: store.add(m), exc=StoreConflictError, contains="NUL character")
        ft.test_fail(lambda: store.add_many([pack[2], m]), exc=StoreConflictError, contains="NUL")
        ft.test_fail(lambda: store.update(_copy(pack[1], tags=["x\x00"])), exc=StoreConflictError)
        ft.test_eq((len(store), store.rev, m.id in store, pack[2].id in store), (1, rev, False, False))
        store.record_access([pack[1].id])  # the bank stays usable
        ft.test_eq(store.get(pack[1].id).access_count, 1)
        return
    store.add(m)
    store.record_access([m.id])
    store.record_outcome([m.id], True)
    got = store.get(m.id)
    ft.test_eq((got.tags, got.provenance["note"], got.access_count, got.success_count),
               (["nul\x00tag"], "a\x00b", 1, 1))


def test_lookups_of_odd_ids_find_nothing(store):
    "Ids no memory can have (a NUL, a lone surrogate, very long) are simply not found, on any backend."
    store.add_many(_pack())
    for odd in ("a\x00b", "x" * 5000, "'; DROP TABLE memories; --", "%s %(x)s ? $1"):
        assert odd not in store
        ft.test_fail(lambda: store.get(odd), exc=MemoryNotFoundError)
        ft.test_eq(store.get_many([odd]), [])
        ft.test_fail(lambda: store.delete(odd), exc=MemoryNotFoundError)
        store.record_access([odd])
    ft.test_eq(len(store), len(_pack()))
    # a lone surrogate is not text at all: a ValueError (UnicodeEncodeError) on both backends
    ft.test_fail(lambda: store.get("\ud800"), exc=ValueError)


# --- events ---------------------------------------------------------------------------------------
def test_events_kinds_and_namespaces(store):
    pack = _pack()
    store.add_many(pack[:3])
    t = store.in_namespace("team-web")
    t.add(pack[3])
    t.quarantine(pack[3].id, reasons="check it")
    t.release(pack[3].id, reason="reviewed")
    kinds = [e["kind"] for e in t.events()]
    ft.test_eq(kinds, ["add", "quarantine", "release"])
    assert all(e["ids"] == [pack[3].id] for e in t.events())
    ft.test_eq({tuple(e["ids"]) for e in store.events()} & {(pack[3].id,)}, set())
    seqs = [e["seq"] for e in store.events()]
    ft.test_eq(seqs, sorted(seqs))
    ft.test_eq(store.events(since=seqs[-1]), [])
    t.close()


# --- statuses -------------------------------------------------------------------------------------
def test_non_active_items_are_never_searched(store):
    pack = _pack()
    store.add_many(pack)
    q = pack[0].title
    ft.test_eq(store.search(q, k=1)[0][0].id, pack[0].id)
    store.quarantine(pack[0].id, reasons="injection suspected")
    assert pack[0].id not in [m.id for m, _ in store.search(q, k=10)]
    store.release(pack[0].id, reason="false alarm")
    ft.test_eq(store.search(q, k=1)[0][0].id, pack[0].id)
    store.archive(pack[0].id, reasons="superseded")
    assert pack[0].id not in [m.id for m, _ in store.search(q, k=10)]
    ft.test_eq(len(store), len(pack) - 1)
    store.restore(pack[0].id, reason="needed again")
    ft.test_eq(store.search(q, k=1)[0][0].id, pack[0].id)
    ft.test_fail(lambda: store.quarantine(["nope", pack[1].id], reasons="x"), exc=MemoryNotFoundError)
    ft.test_eq(store.get(pack[1].id).status, "active")  # all or nothing


def test_budget_per_domain(store_location):
    s = MemoryStore(store_location, max_active_per_domain=3)
    lessons = _lessons()
    for m in lessons[:3]:
        s.add(m)
    ft.test_fail(lambda: s.add(lessons[3]), exc=StoreBudgetError, contains="max_active_per_domain")
    ft.test_eq(len(s), 3)
    s.archive(lessons[0].id, reasons="make room")
    s.add(lessons[3])
    ft.test_eq(len(s), 3)
    s.close()


def test_add_many_is_all_or_nothing(store):
    pack = _pack()
    store.add(pack[0])
    rev = store.rev
    bad = [pack[1], _copy(pack[2], id=pack[0].id)]  # the second holds another memory's id
    ft.test_fail(lambda: store.add_many(bad), exc=StoreConflictError)
    ft.test_eq((len(store), store.rev), (1, rev))
    assert pack[1].id not in store
    counts = store.add_many(pack)
    ft.test_eq(counts["added"], len(pack) - 1)


def test_export_import_round_trip(store, store_location, tmp_path):
    seed = read_memory_file(SEED)
    store.add_many(seed + _pack())
    out = tmp_path / "bank.jsonl"
    n = store.export(out)
    ft.test_eq(n, len(seed) + len(_pack()))
    again = MemoryStore(store_location, namespace="copy")
    counts = again.import_file(out)
    ft.test_eq(counts["added"], n)
    ft.test_eq({m.id: m.content for m in again.items()}, {m.id: m.content for m in store.items()})
    ft.test_eq(again.import_file(out)["added"], 0)
    again.close()


# --- search ---------------------------------------------------------------------------------------
def test_search_top_k_filters_and_namespace(store):
    pack, lessons = _pack(), _lessons()
    store.add_many(pack + lessons)
    q = lessons[0].content[:80]
    hits = store.search(q, k=5)
    ft.test_eq(len(hits), 5)
    scores = [sc for _, sc in hits]
    ft.test_eq(scores, sorted(scores, reverse=True))
    ft.test_eq(hits[0][0].id, lessons[0].id)
    everything = store.search(q, k=1000)  # exact top-k: the first k of the full ranking
    ft.test_eq([(m.id, sc) for m, sc in hits], [(m.id, sc) for m, sc in everything[:5]])
    only = store.search(q, k=5, source_type="success")
    assert only and all(m.source_type == "success" for m, _ in only)
    d = pack[0].domain
    assert all(m.domain == d for m, _ in store.search(q, k=5, domain=d))
    ft.test_fail(lambda: store.search(None), exc=TypeError)
    # a small namespace gets its own k best past a crowd of better matches in another
    small = store.in_namespace("small")
    small.add(_copy(lessons[0], id="mine"))
    got = small.search(q, k=5)
    ft.test_eq([m.id for m, _ in got], ["mine"])
    small.close()


def test_a_second_store_object_sees_writes_at_its_next_search(store_location):
    a, b = MemoryStore(store_location), MemoryStore(store_location)
    pack = _pack()
    a.add_many(pack[:3])
    ft.test_eq(b.search(pack[1].title, k=1)[0][0].id, pack[1].id)
    a.add(pack[4])
    ft.test_eq(b.search(pack[4].title, k=1)[0][0].id, pack[4].id)
    a.delete(pack[4].id)
    assert pack[4].id not in [m.id for m, _ in b.search(pack[4].title, k=5)]
    a.archive(pack[1].id, reasons="old")
    assert pack[1].id not in [m.id for m, _ in b.search(pack[1].title, k=5)]
    a.close()
    b.close()


def test_bootstrap_pack_searches_identically_on_both_backends(store_location, tmp_path):
    "Loaded into each backend, the pack (and the lessons) give the same ids and ranks for 20 queries."
    items = _pack() + _lessons()
    ref = MemoryStore(tmp_path / "reference.db")
    ref.add_many(items)
    s = MemoryStore(store_location)
    s.add_many(items)
    qs = _queries(20)
    ft.test_eq(len(qs), 20)
    found = 0
    for q in qs:
        want = [(m.id, round(sc, 6)) for m, sc in ref.search(q, k=5)]
        got = [(m.id, round(sc, 6)) for m, sc in s.search(q, k=5)]
        ft.test_eq(got, want)
        found += bool(got)
    assert found >= 10, found  # the queries do match memories: the comparison is not empty lists
    ref.close()
    s.close()


# --- read-only ------------------------------------------------------------------------------------
def test_readonly_writes_nothing(store_location):
    w = MemoryStore(store_location)
    pack = _pack()
    w.add_many(pack)
    before = (w.rev, len(w.events()), [m.to_dict() for m in w.items(None)])
    r = MemoryStore(store_location, readonly=True)
    for op in (lambda: r.add(_lessons()[0]), lambda: r.delete(pack[0].id),
               lambda: r.quarantine(pack[0].id, reasons="x"), lambda: r.archive(pack[0].id, reasons="x"),
               lambda: r.update(pack[0]), lambda: r.record_outcome([pack[0].id], True)):
        ft.test_fail(op, exc=StoreReadOnlyError)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r.record_access([pack[0].id])
        r.record_injection([pack[0].id])
    ft.test_eq(r.unrecorded_accesses, 1)
    ft.test_eq(r.search(pack[0].title, k=1)[0][0].id, pack[0].id)
    ft.test_eq((w.rev, len(w.events()), [m.to_dict() for m in w.items(None)]), before)
    r.close()
    w.close()


def test_readonly_on_nothing_is_store_not_found(store_location):
    ft.test_fail(lambda: MemoryStore(store_location, readonly=True), exc=StoreNotFoundError)
    if _is_pg(store_location):  # the database is still empty: no schema was created
        import psycopg
        with psycopg.connect(store_location) as con:
            ft.test_eq(con.execute("SELECT to_regnamespace('procmem')").fetchone()[0], None)
    else:
        assert not Path(store_location).exists()


# --- namespaces -----------------------------------------------------------------------------------
NAMESPACES = ["default", "alice", "bob@example.com", "team-web"]


def test_namespaces_are_partitions(store):
    pack = _pack()
    for i, ns in enumerate(NAMESPACES):
        s = store.in_namespace(ns)
        s.add_many(pack[: i + 2])  # identical texts and ids in every namespace
        s.close()
    ft.test_eq(store.namespaces(), {ns: i + 2 for i, ns in enumerate(NAMESPACES)})
    for i, ns in enumerate(NAMESPACES):
        s = store.in_namespace(ns)
        ft.test_eq(len(s), i + 2)
        ft.test_eq({m.namespace for m in s.items(None)}, {ns})
        ft.test_eq({m.namespace for m, _ in s.search(pack[0].title, k=10)}, {ns})
        added = [x for e in s.events(kind="add_many") for x in e["ids"]]
        ft.test_eq(sorted(added), sorted(m.id for m in pack[: i + 2]))
        s.close()
    # writes by id never cross: alice's item is unknown to default once alice archives hers
    alice = store.in_namespace("alice")
    alice.archive(pack[0].id, reasons="mine only")
    ft.test_eq(store.get(pack[0].id).status, "active")
    only = pack[2]  # held by alice (3 items) and the later namespaces, not by default (2 items)
    ft.test_fail(lambda: store.delete(only.id), exc=MemoryNotFoundError)
    ft.test_fail(lambda: store.record_outcome([only.id], True) or store.get(only.id), exc=MemoryNotFoundError)
    ft.test_eq(alice.get(only.id).use_count, 0)
    alice.close()


def test_bad_namespace_is_refused(store_location):
    ft.test_fail(lambda: MemoryStore(store_location, namespace="no spaces allowed"), exc=ValueError)


# --- the layers above the store ---------------------------------------------------------------------
def test_run_with_memory(store):
    from procmem.loop import run_with_memory
    from procmem.trajectory import Trajectory
    pack = _pack()
    store.add_many(pack)
    seen = []

    def agent(task, memory_block):
        seen.append(memory_block)
        return Trajectory(task=task, steps=[], answer="done")
    r = run_with_memory(pack[0].task_query or pack[0].title, agent, store, learn=False)
    assert r.injected and pack[0].id in {m.id for m in r.injected}, r.injected
    assert pack[0].title in seen[0]
    ft.test_eq(store.get(pack[0].id).injected_count, 1)


def test_learning_from_real_trajectories_is_the_same_on_both_backends(store_location, tmp_path):
    "learn_from_trajectory (offline judge + extractor) over the shipped demo trajectories stores the same."
    from procmem.loop import demo_trajectories, learn_from_trajectory
    trajs = demo_trajectories()
    assert trajs
    ref, s = MemoryStore(tmp_path / "ref.db"), MemoryStore(store_location)
    for t in trajs:
        a, b = learn_from_trajectory(t, ref), learn_from_trajectory(t, s)
        ft.test_eq([m.fingerprint for m in b.stored], [m.fingerprint for m in a.stored])
    assert len(s) > 0
    ft.test_eq(sorted(m.fingerprint for m in s.items(None)), sorted(m.fingerprint for m in ref.items(None)))
    ft.test_eq([e["kind"] for e in s.events()], [e["kind"] for e in ref.events()])
    ref.close()
    s.close()


def test_tools_recall_and_record(store):
    from procmem.tools import recall, record
    pack = _pack()
    store.add_many(pack)
    r = recall(store, pack[0].title, nonce="0123456789ab")
    assert pack[0].id in r.ids and "0123456789ab" in r.text
    ft.test_eq(store.get(pack[0].id).injected_count, 1)
    rec = record(store, "Check the export before importing it", "When moving a bank between machines.",
                 "1. Export to JSONL\n2. Count the lines\n3. Import and compare the counts",
                 domain="ops", new_id="rec-1")
    ft.test_eq(rec.action, "add")
    ft.test_eq(store.get("rec-1").domain, "ops")
    if INJECTION.exists():
        rows = [json.loads(l) for l in INJECTION.read_text().splitlines()]
        bad = next(r["text"] for r in rows if r["label"] == 1 and r.get("standalone") and 40 < len(r["text"]) < 400)
        out = record(store, "Helpful tip", "When anything happens.", bad, new_id="bad-1")
        assert out.action in ("reject", "quarantine", "skip"), out.action
        assert "bad-1" not in [m.id for m in store.items()]


def test_notes_memory_action(store):
    from procmem.notes import memory_action
    out = memory_action(store, "add", content="The staging server restarts at 02:00 UTC.", new_id="note-1")
    assert not out.startswith("refused"), out
    ft.test_eq(store.get("note-1").status, "active")
    out = memory_action(store, "replace", old_text="The staging server restarts at 02:00 UTC.",
                        content="The staging server restarts at 03:00 UTC.")
    assert not out.startswith("refused"), out
    assert any("03:00" in m.content for m in store.items())
    out = memory_action(store, "remove", old_text="The staging server restarts at 03:00 UTC.", reason="moved")
    assert not out.startswith("refused"), out
    assert not any("03:00" in m.content for m in store.items())
    assert memory_action(store, "remove", old_text="never written").startswith("refused")


def test_lifecycle_prune(store):
    lessons = _lessons()
    n = len(lessons)
    assert n >= 5, n
    store.add_many(lessons)
    bad = lessons[0].id
    for _ in range(6):
        store.record_outcome([bad], False)
    rev = store.rev
    dry = store.prune(max_items=3)
    ft.test_eq((len(store), store.rev), (n, rev))  # a dry run writes nothing
    done = store.prune(dry_run=False, max_items=3, by="ops")
    ft.test_eq(sorted(done.archived), sorted(c["id"] for c in dry.candidates))
    assert bad in done.archived
    ft.test_eq(store.count(domain=lessons[0].domain), 3)
    ft.test_eq(sorted(m.id for m in store.items("archived")), sorted(done.archived))
    assert store.events(kind="archive") or store.events(kind="prune")
    ft.test_fail(lambda: store.prune(), exc=ValueError)  # no criterion


def test_demote_harmful(store):
    lessons = _lessons()[:5]
    store.add_many(lessons)
    for _ in range(8):
        store.record_outcome([lessons[0].id], False)
    lifecycle.demote_harmful(store, [lessons[0].id])
    ft.test_eq(store.get(lessons[0].id).status, "quarantined")
    ft.test_eq(store.get(lessons[1].id).status, "active")


# --- PostgreSQL-only error paths ---------------------------------------------------------------------
def test_refused_connection_is_unavailable_without_the_password(pg_server):
    from procmem.postgres import StoreUnavailableError
    with pytest.raises(StoreUnavailableError) as e:
        MemoryStore("postgresql://u:s3cretpw@127.0.0.1:1/x?connect_timeout=2")
    assert "s3cretpw" not in str(e.value) and "***" in str(e.value), str(e.value)


def test_wrong_password_is_redacted(pg_server, tmp_path):
    "A role with a password and an md5/scram pg_hba line: a wrong password fails, never printed."
    from procmem.postgres import StoreUnavailableError
    import psycopg
    if not hasattr(pg_server, "data"):
        pytest.skip("needs the throwaway server (its pg_hba.conf)")
    with psycopg.connect(pg_server.dsn(), autocommit=True) as con:
        con.execute("DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='pwuser') THEN "
                    "CREATE ROLE pwuser LOGIN PASSWORD 'right-one'; END IF; END$$")
    hba = pg_server.data / "pg_hba.conf"
    text = hba.read_text()
    if "pwuser" not in text:
        hba.write_text("host all pwuser 127.0.0.1/32 scram-sha-256\n" + text)
        pg_server._run("pg_ctl", "-D", pg_server.data, "reload")
    url = f"postgresql://pwuser:wr0ng-s3cret@127.0.0.1:{pg_server.port}/postgres"
    with pytest.raises(StoreError) as e:
        MemoryStore(url)
    msg = str(e.value)
    assert "wr0ng-s3cret" not in msg and "password" in msg.lower(), msg
    assert isinstance(e.value, StoreUnavailableError), type(e.value)
    # the way the README says to give the password: a passfile, the URL carrying none
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{pg_server.port}:*:pwuser:right-one\n")
    passfile.chmod(0o600)
    bare = f"postgresql://pwuser@127.0.0.1:{pg_server.port}/postgres"
    with pytest.raises(StoreUnavailableError):
        MemoryStore(bare + f"?passfile={tmp_path / 'missing'}")  # no password anywhere: refused
    dbname = pg_server.create_database()
    with psycopg.connect(pg_server.dsn(dbname.rsplit("/", 1)[1]), autocommit=True) as con:
        con.execute("GRANT CREATE ON DATABASE " + dbname.rsplit("/", 1)[1] + " TO pwuser")
    bank = f"postgresql://pwuser@127.0.0.1:{pg_server.port}/{dbname.rsplit('/', 1)[1]}?passfile={passfile}"
    s = MemoryStore(bank)
    s.add(_pack()[0])
    ft.test_eq(len(s), 1)
    s.close()


def test_sslmode_reaches_libpq(pg_server):
    "The URL's libpq options are honoured: sslmode=require against a server without TLS is refused."
    from procmem.postgres import StoreUnavailableError
    if not hasattr(pg_server, "data"):
        pytest.skip("needs the throwaway server (no TLS); $PROCMEM_TEST_PG's may have it")
    with pytest.raises(StoreUnavailableError) as e:
        MemoryStore(pg_server.dsn("postgres", sslmode="require"))
    assert "ssl" in str(e.value).lower(), str(e.value)
    s = MemoryStore(pg_server.create_database() + "?sslmode=disable")  # and a harmless one works
    ft.test_eq(len(s), 0)
    s.close()


def test_merge_and_history(store):
    import procmem.editing  # noqa: F401  (merge, history)
    lessons = _lessons()
    a, b = lessons[0], _copy(lessons[1], domain=lessons[0].domain, source_type=lessons[0].source_type)
    store.add_many([a, b])
    store.record_outcome([a.id], True)
    store.record_outcome([b.id], True)
    store.record_outcome([b.id], False)
    merged = store.merge([a.id, b.id], by="ops")
    ft.test_eq(merged.id, a.id)
    ft.test_eq((merged.success_count, merged.failure_count, merged.use_count), (2, 1, 3))
    ft.test_eq(store.get(b.id).status, "archived")
    assert b.id not in [m.id for m, _ in store.search(b.content[:60], k=10)]
    hist = store.history(a.id)
    assert len(hist) >= 2, hist
    ft.test_eq(len(store.events(kind="merge")), 1)
    ft.test_fail(lambda: store.merge([a.id, "nope"]), exc=MemoryNotFoundError)


def test_restore_all_and_to_df(store):
    import procmem.analysis  # noqa: F401  (to_df, events_df)
    pack = _pack()
    store.add_many(pack)
    store.archive([m.id for m in pack[:3]], reasons="spring cleaning")
    ft.test_eq(len(store), len(pack) - 3)
    back = store.restore_all(by="ops")
    ft.test_eq(sorted(m.id for m in back), sorted(m.id for m in pack[:3]))
    ft.test_eq(len(store), len(pack))
    df = store.to_df()
    ft.test_eq(sorted(df["id"]), sorted(m.id for m in pack))
    ev = store.events_df()
    assert {"archive", "restore"} <= set(ev["kind"]), set(ev["kind"])


@pytest.mark.parametrize("mode", ["inject", "tool"])
def test_claude_agent_run_with_memory_on_the_scripted_server(store, mode):
    """run_with_memory(task, ClaudeAgent) on procmem.testing's scripted fake Messages server: in
    'inject' mode the memory block in the system prompt, in 'tool' mode recall_memory's results, hold
    this bank's memory; its counters are written to this backend."""
    pytest.importorskip("anthropic")
    from procmem.agent import ClaudeAgent
    from procmem.judge import Judgment
    from procmem.loop import run_with_memory
    from procmem.testing import scripted_anthropic, text_reply, tool_use_reply
    pack = _pack()
    store.add_many(pack)
    task = pack[0].task_query or pack[0].title

    def judge(artifact, llm=None):
        return Judgment(True, "the scripted answer is accepted", 0.9)

    def extractor(artifact, judgment, llm=None, domain=None):
        return []
    script = ([tool_use_reply(("recall_memory", {"query": task}))] if mode == "tool" else []) + [text_reply("done")]
    with scripted_anthropic(script) as fake:
        agent = ClaudeAgent(model="claude-haiku-5-5", mode=mode, client=fake.client(), max_tool_rounds=2)
        r = run_with_memory(task, agent, store, judge=judge, extractor=extractor)
    shown = r.injected if mode == "inject" else r.recalled
    assert pack[0].id in {m.id for m in shown}, (mode, shown)
    sent = json.dumps([q["body"] for q in fake.requests])
    assert pack[0].title in sent
    got = store.get(pack[0].id)
    ft.test_eq((got.use_count, got.success_count), (1, 1))
    assert got.injected_count >= 1


FOREIGN_WRITES = {
    "update": lambda s, m: s.update(_copy(m, description="Changed by another tenant.")),
    "modify": lambda s, m: s.modify(m.id, lambda x: _copy(x, description="Changed.")),
    "delete": lambda s, m: s.delete(m.id),
    "quarantine": lambda s, m: s.quarantine(m.id, reasons="x"),
    "archive": lambda s, m: s.archive(m.id, reasons="x"),
    "release": lambda s, m: s.release(m.id, reason="x"),
    "restore": lambda s, m: s.restore(m.id),
}
FOREIGN_COUNTERS = {
    "record_access": lambda s, m: s.record_access([m.id]),
    "record_injection": lambda s, m: s.record_injection([m.id]),
    "record_outcome": lambda s, m: s.record_outcome([m.id], False),
    "record_retrieval": lambda s, m: s.record_retrieval([m.id], [m.id]),
}


@pytest.mark.parametrize("op", sorted(FOREIGN_WRITES))
def test_a_write_by_another_namespaces_id_is_refused(store, op):
    "bob's id written through alice's store: MemoryNotFoundError, bob's memory and events unchanged."
    m = _lessons()[0]
    bob, alice = store.in_namespace("bob"), store.in_namespace("alice")
    bob.add(m)
    alice.add(_pack()[0])
    before = (bob.get(m.id).to_dict(), bob.events(), bob.rev)
    ft.test_fail(lambda: FOREIGN_WRITES[op](alice, m), exc=MemoryNotFoundError)
    ft.test_eq((bob.get(m.id).to_dict(), bob.events(), bob.rev), before)
    bob.close()
    alice.close()


@pytest.mark.parametrize("op", sorted(FOREIGN_COUNTERS))
def test_counters_by_another_namespaces_id_change_nothing(store, op):
    m = _lessons()[0]
    bob, alice = store.in_namespace("bob"), store.in_namespace("alice")
    bob.add(m)
    before = bob.get(m.id).to_dict()
    try:
        FOREIGN_COUNTERS[op](alice, m)
    except MemoryNotFoundError:
        pass  # refusing is fine too; changing bob's memory is not
    ft.test_eq(bob.get(m.id).to_dict(), before)
    ft.test_eq([e["kind"] for e in bob.events()], ["add"])
    bob.close()
    alice.close()
