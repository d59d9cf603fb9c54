"""Namespaces are partitions, not ranking hints (issue 10, "Tenants and sharing").

A store object bound to one namespace never returns, counts, exports or changes another's memories
or events: a seeded randomized leak test over real texts (the bootstrap pack and the Reflexion
ALFWorld lessons) with identical and overlapping texts in five namespaces, every read path
(search, retrieve_memories with its question-form fallback, items, get, count, export, to_df,
events, changes_since, prune and merge candidates) and every write of another namespace's id
(refused, the file byte-for-byte unchanged); rank-safe top-k per namespace; processes writing
different namespaces of one file at once (exact counts); the migration of a real format-4 store
(written by the last pre-namespace commit) and its read-only use; the index built before the field.
"""
import hashlib, json, multiprocessing as mp, random, shutil, sqlite3, subprocess, sys, time, warnings
from pathlib import Path

import fastcore.test as ft
import pytest
from procmem import MemoryItem, MemoryStore
from procmem.bootstrap import bootstrap_general_strategies
from procmem.core import DEFAULT_NAMESPACE, MemoryValidationError
from procmem.gates import admit_memory
from procmem.reflexion_lessons import lessons_from_env_results
from procmem.retrieval import form_tag, question_form, retrieve_memories
from procmem.store import (STORE_FORMAT, MemoryNotFoundError, StoreBudgetError, StoreConflictError,
                           repair_store)
import procmem.analysis  # noqa: F401  (to_df, events_df)
import procmem.editing  # noqa: F401  (merge, history)
import procmem.lifecycle  # noqa: F401  (prune)
from procmem.editing import merge_candidates

HERE = Path(__file__).resolve().parent
OLD_STORE = HERE / "fixtures" / "stores" / "store_format4.db"
ALFWORLD = HERE / "fixtures" / "trajectories" / "reflexion" / "alfworld"
NAMESPACES = ["default", "alice", "bob@example.com", "team-web", "agent_7"]
CTX = mp.get_context("spawn")


def _lessons() -> list[MemoryItem]:
    "The real Reflexion ALFWorld reflections as candidate pitfalls, one per distinct text."
    out = {}
    for f in sorted(ALFWORLD.glob("env_results_trial_*.json")):
        for m in lessons_from_env_results(f):
            out.setdefault(m.fingerprint, m)
    return list(out.values())


POOL = bootstrap_general_strategies() + _lessons()


def _as(m: MemoryItem, id: str, ns: str = DEFAULT_NAMESPACE) -> MemoryItem:
    "A copy of `m` with id `id` (saying namespace `ns`)."
    return MemoryItem.from_dict(dict(m.to_dict(), id=id, namespace=ns))


def _dump(path: Path) -> str:
    "Every row of the store file, as SQL text (the byte-level truth of what it holds)."
    con = sqlite3.connect(path)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


def _ns_dump(path: Path, ns: str) -> str:
    "One namespace's memory rows and events."
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT * FROM memories WHERE namespace=? ORDER BY id", (ns,)).fetchall()
        evs = con.execute("SELECT * FROM events WHERE namespace=? ORDER BY seq", (ns,)).fetchall()
        return json.dumps([rows, evs])
    finally:
        con.close()


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------------
# the randomized bank: five namespaces, identical and overlapping real texts

def _build(path: Path, seed: int) -> dict:
    """Fill `path`: every namespace holds the same 8 texts plus a random half of the pool, a few of
    them archived or quarantined. Returns {ns: {"active": ids, "all": ids}} (ids start with ns)."""
    rng = random.Random(seed)
    expect = {}
    base = MemoryStore(path)
    for ns in NAMESPACES:
        s = base.in_namespace(ns)
        picks = sorted(set(range(8)) | set(rng.sample(range(len(POOL)), len(POOL) // 2)))
        items = [_as(POOL[i], f"{ns}:{i}") for i in picks]  # the item says "default": restamped
        counts = s.add_many(items)
        assert counts["added"] == len(items), counts
        archived = rng.sample([m.id for m in items], 3)
        s.archive(archived, "randomly put away", by="test")
        held = rng.sample([m.id for m in items if m.id not in archived], 2)
        s.quarantine(held, "randomly held", by="test")
        every = {m.id for m in items}
        expect[ns] = {"all": every, "active": every - set(archived) - set(held), "archived": archived,
                      "held": held}
        s.close()
    base.close()
    return expect


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    path = tmp_path_factory.mktemp("ns") / "bank.db"
    return path, _build(path, seed=10)


def _queries(rng: random.Random, n: int) -> list[str]:
    "Queries from the pool's own words: titles, tasks, random word pairs, question forms."
    words = [w for m in POOL for w in (m.title + " " + m.description).split() if len(w) > 3]
    out = []
    for _ in range(n):
        m = rng.choice(POOL)
        out.append(rng.choice([m.title, m.task_query or m.title, " ".join(rng.sample(words, 2)),
                               f"What is the {rng.choice(words)}?", f"When did the {rng.choice(words)} open?"]))
    return out


def _mine(ns: str, ids) -> bool:
    return all(i.startswith(ns + ":") for i in ids)


def test_identical_text_in_two_namespaces_is_two_items(bank):
    path, expect = bank
    with MemoryStore(path) as s:
        for i in range(8):  # the shared texts: one memory per namespace, never merged or confirmed
            copies = [s.in_namespace(ns).get(f"{ns}:{i}") for ns in NAMESPACES]
            assert len({m.fingerprint for m in copies}) == 1
            assert [m.namespace for m in copies] == NAMESPACES
            assert all(m.confidence == POOL[i].confidence for m in copies)  # no cross-namespace confirmation
        ft.test_eq(s.namespaces(), {ns: len(expect[ns]["active"]) for ns in sorted(NAMESPACES)})


def test_reads_never_cross_namespaces(bank, tmp_path):
    path, expect = bank
    rng = random.Random(7)
    queries = _queries(rng, 120)
    stores = {ns: MemoryStore(path, namespace=ns) for ns in NAMESPACES}
    try:
        for ns, s in stores.items():
            ft.test_eq({m.id for m in s.items()}, expect[ns]["active"])
            ft.test_eq({m.id for m in s.items(status=None)}, expect[ns]["all"])
            ft.test_eq((len(s), s.count(status=None), s.count("archived")),
                       (len(expect[ns]["active"]), len(expect[ns]["all"]), 3))
            assert all(m.namespace == ns for m in s.items(status=None))
            s.export(tmp_path / f"{ns}.jsonl")
            exported = [json.loads(line) for line in (tmp_path / f"{ns}.jsonl").read_text().splitlines()]
            ft.test_eq({d["id"] for d in exported}, expect[ns]["all"])
            ft.test_eq({d["namespace"] for d in exported}, {ns})
            ft.test_eq(set(s.to_df()["id"]), expect[ns]["all"])
            ev_ids = {i for e in s.events() for i in e["ids"]}
            assert ev_ids and _mine(ns, ev_ids), sorted(ev_ids)[:5]
            assert _mine(ns, s.events_df()["ids"].explode().dropna())
            assert _mine(ns, [m.id for m in s.changes_since(0)[1]])
            report = s.prune(dry_run=True, max_items=1)
            assert report.candidates and _mine(ns, [c["id"] for c in report.candidates])
            assert _mine(ns, [i for g in merge_candidates(s, threshold=0.3) for i in g["ids"]])
            others = [i for o in NAMESPACES if o != ns for i in rng.sample(sorted(expect[o]["all"]), 5)]
            for i in others:
                ft.test_fail(lambda: s.get(i), contains=f"no memory has id {i!r}")
                assert i not in s
            ft.test_eq(s.get_many(others), [])
        for q in queries:
            for ns, s in stores.items():
                k = rng.randint(1, 15)
                hits = [m.id for m, _ in s.search(q, k=k)]
                assert _mine(ns, hits), (ns, q, hits)
                got = retrieve_memories(s, q, k=k, min_relevance=0, record=False, min_confirmations=0)
                assert _mine(ns, [m.id for m in got]), (ns, q)
                got = retrieve_memories(s, q, k=3, record=False)  # default floor, question-form fallback
                assert _mine(ns, [m.id for m in got]), (ns, q)
    finally:
        for s in stores.values():
            s.close()


def test_top_k_is_rank_safe_per_namespace(bank):
    "The namespace is filtered inside the index query: the top k of a namespace is its true top k."
    path, expect = bank
    rng = random.Random(11)
    with MemoryStore(path) as base:
        for q in _queries(rng, 60):
            for ns in NAMESPACES:
                s = base.in_namespace(ns)
                full = [m.id for m, _ in s.search(q, k=1000)]
                for k in (1, 3, 10):
                    ft.test_eq([m.id for m, _ in s.search(q, k=k)], full[:k])
                s.close()


def test_a_small_namespace_gets_its_k_best_past_a_crowd(tmp_path):
    "Many better matches in another namespace do not crowd a small namespace out of its top k."
    with MemoryStore(tmp_path / "m.db") as crowd:
        crowd.add_many([MemoryItem(f"Reload the page when the page load times out {i}", "page load timeouts page",
                                   f"1. wait {i}\n2. reload", id=f"c{i}") for i in range(300)])
        small = crowd.in_namespace("small")
        small.add_many([MemoryItem(f"Page tip {i}", "about a page", f"1. look {i}", id=f"s{i}") for i in range(3)])
        hits = small.search("page load times out reload", k=3)
        ft.test_eq(sorted(m.id for m, _ in hits), ["s0", "s1", "s2"])
        ft.test_eq(len(crowd.search("page load times out reload", k=3)), 3)
        small.close()


def test_question_form_fallback_stays_in_its_namespace(tmp_path):
    "A memory found only by its question form serves its namespace, never another's."
    q = "When did the museum open?"
    form = question_form(q)
    assert form is not None
    with MemoryStore(tmp_path / "m.db", namespace="alice") as alice:
        alice.add(MemoryItem("Look up founding dates in an encyclopedia", "Date questions.",
                             "1. Search the entity\n2. Read the infobox date", tags=[form_tag(form)],
                             task_query="When was the Eiffel Tower built?", id="a-date", confidence=0.5))
        bob = alice.in_namespace("bob")
        bob.add(MemoryItem("Clear the cache after a deploy", "Deploys.", "1. Deploy\n2. Purge", id="b-1"))
        ft.test_eq([m.id for m in retrieve_memories(alice, q, record=False, min_confirmations=0)], ["a-date"])
        ft.test_eq(retrieve_memories(bob, q, record=False, min_confirmations=0), [])
        bob.close()


# ---------------------------------------------------------------------------------------------------
# writes of another namespace's id

def _attempts(alice: MemoryStore, victim: MemoryItem, archived: str, held: str, own: str, tmp: Path):
    "Every write of another namespace's id: (name, call)."
    edit = _as(victim, victim.id, "alice")
    edit.title = "Rewritten by alice"
    return [
        ("update", lambda: alice.update(edit)),
        ("modify", lambda: alice.modify(victim.id, lambda m: m)),
        ("archive", lambda: alice.archive(victim.id, "mine now", by="alice")),
        ("restore", lambda: alice.restore(archived, by="alice")),
        ("delete", lambda: alice.delete(victim.id, by="alice")),
        ("quarantine", lambda: alice.quarantine(victim.id, "held by alice", by="alice")),
        ("release", lambda: alice.release(held, "alice says fine", by="alice")),
        ("merge", lambda: alice.merge([own, victim.id], by="alice")),
        ("merge second", lambda: alice.merge([victim.id, own], by="alice")),
        ("history", lambda: alice.history(victim.id)),
    ]


def test_every_write_of_another_namespaces_id_is_refused(bank, tmp_path):
    path, expect = bank
    rng = random.Random(3)
    work = tmp_path / "bank.db"
    shutil.copyfile(path, work)
    with MemoryStore(work, namespace="alice") as alice:
        own = sorted(expect["alice"]["active"])[0]
        for victim_ns in [ns for ns in NAMESPACES if ns != "alice"]:
            victim_store = alice.in_namespace(victim_ns)
            victim = victim_store.get(rng.choice(sorted(expect[victim_ns]["active"])))
            ex = expect[victim_ns]
            before = _dump(work)
            for name, call in _attempts(alice, victim, ex["archived"][0], ex["held"][0], own, tmp_path):
                with pytest.raises((MemoryNotFoundError, StoreConflictError)) as e:
                    call()
                assert "alice" not in str(e.value) or "namespace 'alice'" in str(e.value), (name, e.value)
                msg = str(e.value)
                for i in (victim.id, ex["archived"][0], ex["held"][0]):
                    msg = msg.replace(i, "<id>")
                assert victim_ns not in msg, (name, e.value)  # never names the other tenant
                assert _dump(work) == before, name
            # counters: an id of another namespace is an unknown id (ignored), its tenant sees nothing
            theirs = _ns_dump(work, victim_ns)
            alice.record_outcome([victim.id], True)
            alice.record_access([victim.id])
            alice.record_injection([victim.id])
            alice.record_retrieval([victim.id], [victim.id])
            alice.log_events([{"kind": "note", "ids": [victim.id]}], outcome=([victim.id], False))
            alice.restore_all(by="alice", include_merged=True)
            alice.prune(dry_run=False, max_items=10_000, by="alice")
            assert _ns_dump(work, victim_ns) == theirs
            ft.test_eq(victim_store.get(victim.id).to_dict(), victim.to_dict())
            ft.test_eq(victim_store.count("archived"), 3)  # restore_all restored alice's only
            victim_store.close()
        ft.test_eq(alice.count("archived"), 0)


def _adds_of(store: MemoryStore, victim: MemoryItem, tmp: Path) -> list:
    "Every way to add a memory with `victim`'s id (and text) into `store`: (name, call)."
    clash = tmp / "clash.json"
    clash.write_text(json.dumps([dict(victim.to_dict(), title="Rewritten by alice")]))
    return [
        ("add same id", lambda: store.add(_as(victim, victim.id))),
        ("import update", lambda: store.import_file(clash, update=True)),
        ("import", lambda: store.import_file(clash)),
    ]


def _answer(call) -> tuple:
    "What a call answers: its result with the id masked, or its error's type and masked message."
    try:
        out = call()
    except Exception as e:  # noqa: BLE001 -- the answer itself is compared
        return type(e).__name__, str(e)
    return "ok", (out.title, out.status) if isinstance(out, MemoryItem) else out


def test_ids_are_per_namespace_and_adding_one_tells_nothing(bank, tmp_path):
    """Ids are unique per namespace: adding (or importing, with or without update) another tenant's id
    stores the caller's own memory, leaves the other tenant's byte for byte, and answers exactly as
    for an id nobody holds (no existence oracle)."""
    path, expect = bank
    rng = random.Random(5)
    for victim_ns in [ns for ns in NAMESPACES if ns != "alice"]:
        work, fresh = tmp_path / f"{victim_ns}.db", tmp_path / f"{victim_ns}-fresh.db"
        shutil.copyfile(path, work)
        with MemoryStore(work, namespace=victim_ns, readonly=True) as v:
            victim = v.get(rng.choice(sorted(expect[victim_ns]["active"])))
        shutil.copyfile(path, fresh)
        with MemoryStore(fresh, namespace=victim_ns) as v:
            v.delete(victim.id, by="test")  # the same file where nobody holds the id
        theirs = _ns_dump(work, victim_ns)
        for (name, call), (_, unused) in zip(_adds_of(MemoryStore(work, namespace="alice"), victim, tmp_path),
                                             _adds_of(MemoryStore(fresh, namespace="alice"), victim, tmp_path)):
            ft.test_eq(_answer(call), _answer(unused))  # the same answer as where nobody holds the id
            assert _ns_dump(work, victim_ns) == theirs, name
        with MemoryStore(work, namespace="alice") as alice, MemoryStore(work, namespace=victim_ns) as them:
            mine = alice.get(victim.id)
            ft.test_eq((mine.namespace, mine.title), ("alice", "Rewritten by alice"))
            ft.test_eq(them.get(victim.id).to_dict(), victim.to_dict())
            assert victim.id in [m.id for m, _ in alice.search(mine.title, k=50)]
            alice.delete(victim.id, by="alice")  # a tombstone of alice's: their copy stays searchable
            ft.test_eq(them.get(victim.id).to_dict(), victim.to_dict())
            assert victim.id in [m.id for m, _ in them.search(victim.title, k=50)]
            assert victim.id not in [m.id for m, _ in alice.search(mine.title, k=50)]


def test_add_restamps_and_update_keeps_the_namespace(tmp_path):
    "A store is the authority on where its writes go: an item naming another namespace lands in the store's."
    with MemoryStore(tmp_path / "m.db", namespace="alice") as alice:
        got = alice.add(MemoryItem("Pin versions", content="1. Pin", id="p1", namespace="bob"))
        ft.test_eq(got.namespace, "alice")
        moved = alice.get("p1")
        moved.namespace, moved.title = "bob", "Pin the versions"
        ft.test_eq(alice.update(moved).namespace, "alice")
        ft.test_eq(alice.modify("p1", lambda m: MemoryItem.from_dict(dict(m.to_dict(), namespace="bob"))).namespace,
                   "alice")
        ft.test_eq((alice.get("p1").namespace, alice.namespaces()), ("alice", {"alice": 1}))
        bob = alice.in_namespace("bob")
        ft.test_eq((len(bob), bob.events()), (0, []))
        bob.close()
        alice.export(tmp_path / "alice.json")
    with MemoryStore(tmp_path / "other.db", namespace="bob") as bob:  # another tenant's file
        ft.test_eq(bob.import_file(tmp_path / "alice.json"), dict(added=1, confirmed=0, unchanged=0))
        ft.test_eq([(m.id, m.namespace) for m in bob], [("p1", "bob")])
        ft.test_eq(bob.namespaces(), {"bob": 1})


def test_dedup_gates_and_cap_count_per_namespace(tmp_path):
    text = POOL[0]
    with MemoryStore(tmp_path / "m.db", max_active_per_domain=2, namespace="alice") as alice:
        bob = alice.in_namespace("bob")
        ra = admit_memory(_as(text, "a1"), alice, trust="trusted", source="user")
        rb = admit_memory(_as(text, "b1"), bob, trust="trusted", source="user")
        ft.test_eq((ra.action, rb.action), ("add", "add"))  # the same text: stored once per namespace
        again = admit_memory(_as(text, "a2"), alice, trust="trusted", source="user")
        assert again.action != "add" and again.target.id == "a1", again
        ft.test_eq(alice.add(_as(text, "a3")).id, "a1")  # store.add's same-meaning merge, inside alice
        ft.test_eq((len(alice), len(bob)), (1, 1))
        d = text.domain
        alice.add(MemoryItem("Second alice memory", content="1. two", id="a4", domain=d))
        bob.add(MemoryItem("Second bob memory", content="1. two", id="b4", domain=d))
        ft.test_fail(lambda: alice.add(MemoryItem("Third", content="1. three", id="a5", domain=d)),
                     contains=f"domain {d!r} in namespace 'alice' holds 2 active memories")
        ft.test_eq((alice.count(domain=d), bob.count(domain=d)), (2, 2))
        bob.close()
    with pytest.raises(StoreBudgetError):
        with MemoryStore(tmp_path / "m.db", max_active_per_domain=2, namespace="bob") as b:
            b.add(MemoryItem("Third bob", content="1. three", id="b5", domain=d))


def test_bad_namespaces_are_refused(tmp_path):
    for bad in ("", ".hidden", "a/b", "../etc", "x" * 65, "tab\there", "café", None, 3):
        with pytest.raises(MemoryValidationError) as e:
            MemoryItem("t", content="c", namespace=bad)
        named = repr(bad)[:20] if isinstance(bad, str) else type(bad).__name__
        assert str(e.value).startswith("MemoryItem.namespace: ") and named in str(e.value), e.value
        with pytest.raises(ValueError) as e:
            MemoryStore(tmp_path / "m.db", namespace=bad)
        assert str(e.value).startswith("MemoryStore: ") and named in str(e.value), e.value
    assert not (tmp_path / "m.db").exists()  # refused before the file was made
    line = json.dumps(dict(MemoryItem("t", content="c", id="x").to_dict(), namespace="../x"))
    (tmp_path / "bad.jsonl").write_text(line + "\n")
    with MemoryStore(tmp_path / "ok.db") as s:
        ft.test_fail(lambda: s.import_file(tmp_path / "bad.jsonl"), contains="MemoryItem.namespace: '../x'")


def test_repair_keeps_each_memory_in_its_namespace(bank, tmp_path):
    path, expect = bank
    work = tmp_path / "bank.db"
    shutil.copyfile(path, work)
    con = sqlite3.connect(work)
    bad = sorted(expect["bob@example.com"]["active"])[0]
    con.execute("UPDATE memories SET data='{not json' WHERE id=?", (bad,))
    con.commit()
    con.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = repair_store(work)
    ft.test_eq((r["repaired"], r["unreadable"]), (True, [bad]))
    with MemoryStore(work) as s:
        for ns in NAMESPACES:
            t = s.in_namespace(ns)
            want = expect[ns]["all"] - {bad}
            ft.test_eq({m.id for m in t.items(status=None)}, want)
            assert t.events() and _mine(ns, {i for e in t.events() for i in e["ids"]})
            t.close()


# ---------------------------------------------------------------------------------------------------
# processes writing different namespaces of one file

N_OWN, N_SHARED = 120, 40


def _writer(path, ns, barrier, out):
    s = MemoryStore(path, namespace=ns)
    barrier.wait(timeout=120)
    for i in range(N_OWN):
        s.add(MemoryItem(f"Procedure {ns} {i} for the gadget", "Own work.", f"1. step {i}\n2. check", id=f"{ns}:{i}"))
        if i < N_SHARED:  # the same texts in every namespace, interleaved with the own ones
            s.add(MemoryItem(f"Shared procedure {i}", "Everyone learns it.", f"1. shared step {i}",
                             id=f"{ns}:s{i}", task_query=f"task of {ns}"))
    hits = s.search("shared procedure", k=200)
    s.close()
    Path(out).write_text(json.dumps({"hits": [m.id for m, _ in hits]}))


def _twin(path, barrier, out, w):
    "Two processes of one namespace learning the same texts: one memory each, confirmed."
    s = MemoryStore(path, namespace="team")
    barrier.wait(timeout=120)
    ids = [s.add(MemoryItem(f"Team habit {i}", "Team.", f"1. habit {i}", id=f"team:{w}-{i}",
                            task_query=f"team task {w}")).id for i in range(N_SHARED)]
    s.close()
    Path(out).write_text(json.dumps({"ids": ids}))


def test_processes_writing_different_namespaces(tmp_path):
    path = tmp_path / "m.db"
    MemoryStore(path).close()
    names = ["ns0", "ns1", "ns2", "ns3"]
    barrier = CTX.Barrier(len(names) + 2)
    outs = {n: tmp_path / f"{n}.json" for n in names + ["t0", "t1"]}
    procs = [CTX.Process(target=_writer, args=(str(path), n, barrier, str(outs[n]))) for n in names]
    procs += [CTX.Process(target=_twin, args=(str(path), barrier, str(outs[f"t{w}"]), w)) for w in (0, 1)]
    for p in procs:
        p.start()
    deadline = time.time() + 300
    for p in procs:
        p.join(max(1, deadline - time.time()))
        assert p.exitcode == 0, (p.name, p.exitcode)
    with MemoryStore(path) as s:
        ft.test_eq(s.namespaces(), {**{n: N_OWN + N_SHARED for n in names}, "team": N_SHARED})
        for n in names:
            t = s.in_namespace(n)
            ft.test_eq(sorted(m.id for m in t), sorted([f"{n}:{i}" for i in range(N_OWN)] +
                                                       [f"{n}:s{i}" for i in range(N_SHARED)]))
            ft.test_eq(t.count(), N_OWN + N_SHARED)
            hits = json.loads(outs[n].read_text())["hits"]
            assert hits and _mine(n, hits)
            assert all(m.confidence == 0.1 for m in t)  # never confirmed by another namespace
            t.close()
        team = s.in_namespace("team")
        a, b = (json.loads(outs[f"t{w}"].read_text())["ids"] for w in (0, 1))
        ft.test_eq(a, b)  # each text stored once; the second process confirmed it
        ft.test_eq(sorted(m.confidence for m in team), [0.2] * N_SHARED)
        team.close()
        ft.test_eq(s.check(), [])


# ---------------------------------------------------------------------------------------------------
# a real format-4 store (written by bf11077, the last commit before namespaces)

def _old_procmem(tmp_path, commit="bf11077") -> Path | None:
    "The procmem package of the last format-4 commit, extracted with git archive; None without git."
    try:
        arch = subprocess.run(["git", "-C", str(HERE.parent), "archive", commit, "procmem"], check=True,
                              capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    out = tmp_path / "old"
    out.mkdir()
    subprocess.run(["tar", "-x", "-C", str(out)], input=arch.stdout, check=True)
    return out


def _run_old(old: Path, code: str, *args, cwd) -> subprocess.CompletedProcess:
    site = ":".join(p for p in sys.path if "site-packages" in p)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{old}:{site}"})


OLD_STATE = {"old-success": ("active", 1, 1, 0, 0.3), "old-failure": ("active", 0, 0, 0, 0.1),
             "old-seed": ("active", 0, 0, 1, 0.1), "old-held": ("quarantined", 0, 0, 0, 0.1),
             "old-archived": ("archived", 0, 0, 0, 0.1)}


def _state(s: MemoryStore) -> dict:
    return {m.id: (m.status, m.use_count, m.success_count, m.access_count, m.confidence) for m in s.items(status=None)}


def test_read_only_open_of_a_format_4_store_writes_nothing(tmp_path):
    db = tmp_path / "old.db"
    shutil.copyfile(OLD_STORE, db)
    before = _sha(db)
    with MemoryStore(db, readonly=True) as s:
        ft.test_eq(_state(s), OLD_STATE)
        ft.test_eq(len(s.events()), 12)
        ft.test_eq([m.id for m, _ in s.search("run the test suite before committing", k=2)][:1], ["old-success"])
        ft.test_eq(s.namespaces(), {"default": 3})
        alice = s.in_namespace("alice")  # read-only too: an empty bank, nothing written
        ft.test_eq((alice.readonly, len(alice), alice.count(status=None), alice.events()), (True, 0, 5 - 5, []))
        ft.test_eq(alice.search("run the test suite", k=5), [])
        ft.test_fail(lambda: alice.get("old-success"), contains="no memory has id 'old-success'")
        alice.close()
    ft.test_eq((_sha(db), sorted(p.name for p in tmp_path.iterdir())), (before, ["old.db"]))


def test_migration_of_a_format_4_store_keeps_everything(tmp_path):
    db = tmp_path / "old.db"
    shutil.copyfile(OLD_STORE, db)
    con = sqlite3.connect(db)
    old_events = con.execute("SELECT seq, at, kind, ids, detail FROM events ORDER BY seq").fetchall()
    old_rev = con.execute("SELECT value FROM meta WHERE key='rev'").fetchone()
    con.close()
    with MemoryStore(db) as s:
        ft.test_eq(_state(s), OLD_STATE)
        ft.test_eq(s.get("old-seed").example_queries, ["find a red mug"])
        ft.test_eq(s.get("old-held").status_reasons, ["looked unsafe"])
        ft.test_eq(s.check(), [])
        alice = s.in_namespace("alice")
        got = alice.add(_as(s.get("old-success"), "alice-1"))  # the same text: a new memory in alice
        ft.test_eq((got.id, got.namespace, s.get("old-success").confidence), ("alice-1", "alice", 0.3))
        ft.test_eq(s.namespaces(), {"alice": 1, "default": 3})
        alice.close()
    con = sqlite3.connect(db)
    ft.test_eq(con.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0], str(STORE_FORMAT))
    ft.test_eq(con.execute("SELECT seq, at, kind, ids, detail FROM events WHERE namespace='default' "
                           "ORDER BY seq").fetchall()[:len(old_events)], old_events)
    ft.test_eq(int(con.execute("SELECT value FROM meta WHERE key='rev'").fetchone()[0]), int(old_rev[0]) + 1)
    ft.test_eq(con.execute("SELECT count(*) FROM tombstones WHERE namespace='default'").fetchone()[0], 1)
    for table in ("memories", "tombstones"):  # re-keyed: ids unique per namespace
        ft.test_eq([r[1] for r in sorted(con.execute(f"PRAGMA table_info({table})"), key=lambda r: r[5]) if r[5]],
                   ["id", "namespace"])
    con.close()


def test_a_store_written_with_file_wide_ids_is_rekeyed(tmp_path):
    """A store written by procmem as of b721107 (format 5 with ids unique file-wide, before it was released):
    opened for writing, its tables are re-keyed (id, namespace) in place, every row, rowid order, event, tombstone
    and the search keep; its index file (keyed by id alone) is rebuilt; then a second tenant can reuse an id."""
    old = _old_procmem(tmp_path, "b721107")
    if old is None:
        pytest.skip("git history of this checkout is not available")
    db = tmp_path / "m.db"
    code = """import sys
from procmem import MemoryItem, MemoryStore
for ns, n in (("alice", 6), ("bob", 4)):
    with MemoryStore(sys.argv[1], namespace=ns) as s:
        s.add_many([MemoryItem(f"{ns} procedure {i} for widgets", content=f"1. step {i}", id=f"{ns}-{i}") for i in range(n)])
        s.delete(f"{ns}-1", by="t")
        s.search("procedure widgets")
        s.sync_index(flush=True)
"""
    r = _run_old(old, code, db, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-600:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT rowid, id, namespace, rev, data FROM memories ORDER BY rowid").fetchall()
    events = con.execute("SELECT * FROM events ORDER BY seq").fetchall()
    tombs = con.execute("SELECT id, rev, namespace FROM tombstones ORDER BY id").fetchall()
    con.close()
    with MemoryStore(db, namespace="bob") as bob:
        ft.test_eq([m.id for m in bob], ["bob-0", "bob-2", "bob-3"])
        ft.test_eq([m.id for m, _ in bob.search("procedure 2 widgets", k=1)], ["bob-2"])
        ft.test_eq(bob.add(MemoryItem("Bob's own first step", content="1. mine", id="alice-0")).namespace, "bob")
        alice = bob.in_namespace("alice")
        ft.test_eq((alice.get("alice-0").title, bob.get("alice-0").title), ("alice procedure 0 for widgets",
                                                                           "Bob's own first step"))
        ft.test_eq([m.id for m, _ in alice.search("procedure 0 widgets", k=1)], ["alice-0"])
        ft.test_eq(alice.check() + bob.check(), [])
        alice.close()
    con = sqlite3.connect(db)
    ft.test_eq(con.execute("SELECT rowid, id, namespace, rev, data FROM memories ORDER BY rowid").fetchall()[:len(rows)],
               rows)
    ft.test_eq(con.execute("SELECT * FROM events ORDER BY seq").fetchall()[:len(events)], events)
    ft.test_eq(con.execute("SELECT id, rev, namespace FROM tombstones ORDER BY id").fetchall(), tombs)
    ft.test_eq(con.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0], str(STORE_FORMAT))
    ft.test_eq([r[1] for r in sorted(con.execute("PRAGMA table_info(memories)"), key=lambda r: r[5]) if r[5]],
               ["id", "namespace"])
    ft.test_eq({r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL")},
               {"memories_rev", "tombstones_rev", "memories_meaning_ns", "memories_status_ns", "events_ns"})
    con.close()


def test_a_format_4_procmem_refuses_a_format_5_store(tmp_path):
    old = _old_procmem(tmp_path)
    if old is None:
        pytest.skip("git history of this checkout is not available")
    db = tmp_path / "m.db"
    with MemoryStore(db, namespace="alice") as s:
        s.add(MemoryItem("Alice's secret procedure", content="1. only for alice", id="a1"))
    before = _sha(db)
    for ro in ("True", "False"):
        code = f"import sys; from procmem import MemoryStore; MemoryStore(sys.argv[1], readonly={ro})"
        r = _run_old(old, code, db, cwd=tmp_path)
        assert r.returncode != 0 and f"newer procmem (store format {STORE_FORMAT})" in r.stderr, r.stderr[-400:]
    ft.test_eq(_sha(db), before)


def test_an_index_built_before_namespaces_is_rebuilt(tmp_path):
    "The format-4 procmem writes its index file; the new code cannot filter it, so it rebuilds it."
    old = _old_procmem(tmp_path)
    if old is None:
        pytest.skip("git history of this checkout is not available")
    db = tmp_path / "old.db"
    shutil.copyfile(OLD_STORE, db)
    code = ("import sys; from procmem import MemoryStore\n"
            "with MemoryStore(sys.argv[1]) as s: s.search('x'); s.sync_index(flush=True)")
    r = _run_old(old, code, db, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-400:]
    index = tmp_path / "old.db-index.bm25"
    assert index.exists()
    with MemoryStore(db, readonly=True) as ro:  # read-only: catches up in memory, writes nothing
        ft.test_eq([m.id for m, _ in ro.search("search box product", k=1)], ["old-seed"])
        assert "built before the 'namespace' field existed" in ro._index().damaged
    with MemoryStore(db) as s:
        alice = s.in_namespace("alice")
        alice.add(MemoryItem("Use the search box to find a product", "Shopping sites.", "1. Type it\n2. Enter",
                             id="a-seed", domain="web"))
        ft.test_eq([m.id for m, _ in s.search("search box product", k=5)], ["old-seed"])
        ft.test_eq([m.id for m, _ in alice.search("search box product", k=5)], ["a-seed"])
        s.sync_index(flush=True)  # the rebuilt file has the field
        alice.close()
    with MemoryStore(db, namespace="alice") as a:
        assert a._index().damaged is None
        ft.test_eq([m.id for m, _ in a.search("search box product", k=5)], ["a-seed"])


def test_check_reports_a_row_whose_namespace_column_disagrees(tmp_path):
    db = tmp_path / "m.db"
    with MemoryStore(db, namespace="alice") as s:
        s.add(MemoryItem("Pin versions", content="1. Pin", id="p1"))
        ft.test_eq(s.check(), [])
    con = sqlite3.connect(db)
    con.execute("UPDATE memories SET namespace='bob' WHERE id='p1'")  # a hand edit of the file
    con.commit()
    con.close()
    with MemoryStore(db, namespace="bob") as s:
        ft.test_eq(s.check(), ["memory 'p1' says namespace 'alice', its column 'bob'"])


def test_id_lookups_use_the_primary_key(tmp_path):
    """Every query that names ids reads them by the primary key, never by scanning a namespace through
    the (namespace, status, domain) index (which made search 100x slower at 100k: 64 ms instead of 0.6)."""
    s = MemoryStore(tmp_path / "m.db", namespace="alice")
    s.add_many([MemoryItem(f"Procedure {i}", content=f"1. step {i}", id=f"m{i}") for i in range(300)])
    s.archive(["m1"], "x", by="t")
    seen = []
    s._con.set_trace_callback(seen.append)
    ids = [f"m{i}" for i in range(2, 12)]
    s.get_many(ids)
    s.get("m2")
    assert "m3" in s
    s.search("procedure step 4", k=5)
    s.record_retrieval(ids, ids)
    s.record_outcome(ids, True)
    s.update(s.get("m5"))
    s.restore("m1", by="t")
    s.delete("m6", by="t")
    s._con.set_trace_callback(None)
    con = sqlite3.connect(tmp_path / "m.db")
    checked = 0
    for sql in {q for q in seen if " id=" in q or " id IN" in q}:
        if sql.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
            plan = " ".join(r[-1] for r in con.execute("EXPLAIN QUERY PLAN " + sql))
            assert "memories_status_ns" not in plan and "memories_meaning_ns" not in plan, (sql, plan)
            checked += 1
    con.close()
    s.close()
    assert checked >= 6, checked


def test_an_import_file_mixing_namespaces_is_refused(bank, tmp_path):
    "An import restamps what it reads: a file holding two tenants' memories would merge them; refused whole."
    path, expect = bank
    with MemoryStore(path, namespace="alice", readonly=True) as alice:
        alice.export(tmp_path / "alice.jsonl")
        bob = alice.in_namespace("bob@example.com")
        bob.export(tmp_path / "bob.jsonl")
        bob.close()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text((tmp_path / "alice.jsonl").read_text() + (tmp_path / "bob.jsonl").read_text())
    with MemoryStore(tmp_path / "new.db", namespace="carol") as carol:
        for update in (False, True):
            ft.test_fail(lambda: carol.import_file(mixed, update=update),
                         contains="holds memories of 2 namespaces (alice, bob@example.com)")
        ft.test_eq((len(carol), carol.events()), (0, []))
        ft.test_eq(carol.import_file(tmp_path / "bob.jsonl")["added"], len(expect["bob@example.com"]["all"]))
        ft.test_eq({m.namespace for m in carol.items(status=None)}, {"carol"})
