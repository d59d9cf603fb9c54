"""Archive, restore, injection counts, independent confirmation and `import --update` (issue 9).

An archived memory stays in the file but is never searched, retrieved, injected or counted, in this process and
in another process's index once it catches up; restore brings it back (a quarantined one back to quarantine);
every change is all or nothing with an event saying who, when and why; read-only stores refuse; concurrent
counters are never lost; stores written by older procmem versions open and archive. Real inputs: the bootstrap
pack, the Reflexion ALFWorld reflections in tests/fixtures/trajectories (and the shared set when present), the
old-store fixtures written by earlier procmem commits."""
import copy, dataclasses, hashlib, json, multiprocessing as mp, shutil, sqlite3, subprocess, sys, warnings
from pathlib import Path

import fastcore.test as ft
import pytest
from procmem import MemoryItem, MemoryStore
import procmem.store_status  # noqa: F401  (adds archive/restore/record_injection until procmem imports it)
from procmem.bootstrap import bootstrap_general_strategies
from procmem.core import parse_timestamp
from procmem.store import STORE_FORMAT
from procmem.reflexion_lessons import lessons_from_env_results
from procmem.retrieval import retrieve_memories
from procmem.store import (STORE_FORMAT, MemoryNotFoundError, ReadOnlyWarning, StoreBudgetError,
                           StoreConflictError, StoreError, StoreImportError, StoreReadOnlyError, validate_store)

HERE = Path(__file__).resolve().parent
PACK = bootstrap_general_strategies()
ALFWORLD = HERE / "fixtures" / "trajectories" / "reflexion" / "alfworld"
SHARED_ALFWORLD = HERE.parents[1] / "shared" / "data" / "reflexion" / "alfworld"
OLD_STORES = HERE / "fixtures" / "stores"
CTX = mp.get_context("spawn")


def _lessons(folder=ALFWORLD) -> list[MemoryItem]:
    "The real Reflexion ALFWorld reflections as candidate pitfalls, one per distinct text."
    out = {}
    for f in sorted(folder.glob("env_results_trial_*.json")):
        for m in lessons_from_env_results(f):
            out.setdefault(m.fingerprint, m)
    return list(out.values())


def _ids(hits) -> list[str]:
    return [(h[0] if isinstance(h, tuple) else h).id for h in hits]


def _retrieved(s, text, k=10):
    return _ids(retrieve_memories(s, text, k=k, min_relevance=0, record=False, min_confirmations=0, by_form=False))


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def bank(tmp_path):
    "A file store holding the bootstrap pack and the real ALFWorld lessons."
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(PACK + _lessons())
    return db


# ------------------------------------------------------------------ archived: kept, never used

@pytest.mark.parametrize("pick", ["pack", "lessons"])
def test_archived_memories_are_kept_but_never_searched_retrieved_or_counted(bank, pick):
    with MemoryStore(bank) as s:
        pool = PACK if pick == "pack" else [m for m in s if m.domain == "alfworld"]
        gone = [m.id for m in pool[::2]]
        n, before = len(s), {m.id: _ids(s.search(m.title, k=3)) for m in pool}
        assert all(i in before[i] for i in gone)  # each is found before: the test can fail
        put = s.archive(gone, "test: put away", by="tester")
        assert [m.status for m in put] == ["archived"] * len(gone)
        ft.test_eq((len(s), s.count("archived"), s.count(None)), (n - len(gone), len(gone), n))
        assert not set(gone) & {m.id for m in s}  # iteration: active only
        ft.test_eq(len(s.sync_index()), n - len(gone))  # the index holds active memories only
        for m in pool:
            hits, got = _ids(s.search(m.title, k=50)), _retrieved(s, m.title, k=10)
            if m.id in gone:
                assert m.id not in hits and m.id not in got
            else:
                assert m.id in hits
        assert all(i in s and s.get(i).status_reasons == ["test: put away"] for i in gone)  # kept, with the reason
        s.restore(gone, by="tester")
        ft.test_eq(len(s), n)
        assert all(i in _ids(s.search(s.get(i).title, k=3)) for i in gone)  # searchable again
        assert all(i in _retrieved(s, s.get(i).title) for i in gone)


def test_another_process_index_drops_and_readds_archived_memories(bank):
    "A long-lived process with its index loaded catches up with another process's archive and restore."
    m = PACK[2]
    with MemoryStore(bank) as reader:
        assert m.id in _ids(reader.search(m.title, k=3))
        code = ("import sys, procmem.store_status; from procmem import MemoryStore\n"
                "with MemoryStore(sys.argv[1]) as s: getattr(s, sys.argv[2])([sys.argv[3]], *sys.argv[4:])\n")
        subprocess.run([sys.executable, "-c", code, str(bank), "archive", m.id, "other process"], check=True)
        assert m.id not in _ids(reader.search(m.title, k=20))
        assert m.id not in _retrieved(reader, m.title)
        ft.test_eq(len(reader), len(PACK) + len(_lessons()) - 1)
        subprocess.run([sys.executable, "-c", code, str(bank), "restore", m.id], check=True)
        assert m.id in _ids(reader.search(m.title, k=3))
    with MemoryStore(bank, readonly=True) as ro:  # a fresh reader of the index file agrees
        assert m.id in _ids(ro.search(m.title, k=3))


def test_archive_and_restore_write_events_with_who_when_why(bank):
    with MemoryStore(bank) as s:
        lesson = next(m for m in s if m.domain == "alfworld")
        s.quarantine(lesson.id, "reviewer: unsure", by="alice")
        s.archive([PACK[0].id, lesson.id], "unused for 200 days", by="prune")
        s.restore([PACK[0].id, lesson.id], by="bob", reason="needed again")
        arch, rest = s.events(kind="archive")[-1], s.events(kind="restore")[-1]
    ft.test_eq((arch["ids"], arch["detail"]), ([PACK[0].id, lesson.id],
               {"by": "prune", "reasons": ["unused for 200 days"], "was": {lesson.id: "quarantined"}}))
    ft.test_eq((rest["ids"], rest["detail"]), ([PACK[0].id, lesson.id],
               {"by": "bob", "reason": "needed again", "quarantined": [lesson.id]}))
    assert parse_timestamp(arch["at"]) <= parse_timestamp(rest["at"])


def test_a_quarantined_memory_is_never_made_active_by_archive_and_restore(bank):
    with MemoryStore(bank) as s:
        lesson = next(m for m in s if m.domain == "alfworld")
        s.quarantine(lesson.id, ["sinks/sink in content: only in untrusted text", "reviewer: check"], by="gates")
        s.archive(lesson.id, "spring cleaning", by="alice")
        s.archive(lesson.id, "still unused", by="alice")  # archived again: reasons added, nothing else
        back = s.restore_all(by="alice")
        ft.test_eq([(m.id, m.status, m.status_reasons) for m in back],
                   [(lesson.id, "quarantined", ["sinks/sink in content: only in untrusted text", "reviewer: check"])])
        assert lesson.id not in _ids(s.search(lesson.title, k=20))
        ft.test_fail(lambda: s.release(PACK[0].id, "x"), contains="is active, not quarantined")
        s.archive(PACK[0].id, "x")
        ft.test_fail(lambda: s.release(PACK[0].id, "x"), contains="is archived, not quarantined")
        ft.test_eq(s.get(PACK[0].id).status, "archived")


def test_relearning_an_archived_memory_is_held_not_revived(bank):
    "A person archived it: the same text learned again (even from another task) leaves it archived, with a 'held' event."
    with MemoryStore(bank) as s:
        lesson = next(m for m in s if m.domain == "alfworld")
        s.archive(lesson.id, "outdated", by="alice")
        again = dataclasses.replace(copy.deepcopy(lesson), id="relearned", task_query="put a hot apple in the fridge")
        got = s.add(again)
        ft.test_eq((got.id, got.status, got.confidence, "relearned" in s), (lesson.id, "archived", lesson.confidence, False))
        e = s.events(kind="held")[-1]
        ft.test_eq((e["ids"], e["detail"]["existing_status"], e["detail"]["candidate"]), ([lesson.id], "archived", "relearned"))
        ft.test_eq(s.add_many([dataclasses.replace(again, id="relearned-2")])["held"], 1)


def test_repair_and_validate_keep_archived_memories_archived(bank):
    from procmem.store import repair_store
    with MemoryStore(bank) as s:
        s.archive([PACK[0].id, PACK[1].id], "unused", by="t")
        s._con.execute("UPDATE memories SET data = '{broken' WHERE id=?", (PACK[2].id,))  # one unreadable row
    assert not validate_store(bank)["ok"]
    r = repair_store(bank)
    assert r["repaired"] and r["unreadable"] == [PACK[2].id]
    with MemoryStore(bank) as s:
        ft.test_eq(sorted(m.id for m in s.items("archived")), sorted([PACK[0].id, PACK[1].id]))
        ft.test_eq(s.get(PACK[0].id).status_reasons, ["unused"])
        assert PACK[0].id not in _ids(s.search(PACK[0].title, k=20)) and s.check() == []
    assert validate_store(bank)["ok"]


# ------------------------------------------------------------------ all or nothing, refusals

def test_archive_and_restore_are_all_or_nothing(bank):
    with MemoryStore(bank) as s:
        before, n_events = [m.to_dict() for m in s.items(None)], len(s.events())
        ids = [m.id for m in PACK[:3]]
        with pytest.raises(MemoryNotFoundError, match="no memory has id 'missing'"):
            s.archive(ids + ["missing"], "x", by="t")
        with pytest.raises(StoreConflictError, match=f"memory '{ids[0]}' is active, not archived"):
            s.restore(ids[:1])
        s.archive(ids[1:], "x", by="t")
        mid = [m.to_dict() for m in s.items(None)]
        with pytest.raises(StoreConflictError, match=f"memory '{ids[0]}' is active, not archived; nothing was restored"):
            s.restore(ids)  # two archived, one active: none restored
        with pytest.raises(MemoryNotFoundError):
            s.restore(ids[1:] + ["missing"])
        with pytest.raises(ValueError, match="no reason given for memory"):
            s.archive(ids[:2], {ids[0]: "x"})
        ft.test_eq([m.to_dict() for m in s.items(None)], mid)
        s.restore(ids[1:])
        after = [m.to_dict() for m in s.items(None)]
        ft.test_eq([{k: v for k, v in d.items() if k != "status_reasons"} for d in after],
                   [{k: v for k, v in d.items() if k != "status_reasons"} for d in before])
        ft.test_eq(len(s.events()), n_events + 2)  # one archive, one restore; refusals write nothing


def test_restore_respects_the_domain_cap(tmp_path):
    lessons = _lessons()
    with MemoryStore(tmp_path / "m.db", max_active_per_domain=len(lessons)) as s:
        s.add_many(lessons)
        s.archive([lessons[0].id, lessons[1].id], "make room", by="t")
        s.add(MemoryItem("Check the drawer before the cabinet", content="1. Open the drawer first", domain="alfworld"))
        with pytest.raises(StoreBudgetError, match="domain 'alfworld' holds"):
            s.restore([lessons[0].id, lessons[1].id])
        ft.test_eq(s.count("archived"), 2)  # nothing restored
        ft.test_eq(s.restore(lessons[0].id)[0].status, "active")  # one fits


def test_a_read_only_store_refuses_archive_and_restore_and_changes_no_byte(bank):
    with MemoryStore(bank) as s:
        s.archive(PACK[0].id, "x", by="t")
        s.sync_index(flush=True)
    shas = {p.name: _sha(p) for p in bank.parent.iterdir()}
    with MemoryStore(bank, readonly=True) as ro:
        for call in (lambda: ro.archive(PACK[1].id, "x"), lambda: ro.restore(PACK[0].id), lambda: ro.restore_all()):
            with pytest.raises(StoreReadOnlyError, match="store opened read-only"):
                call()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ro.record_injection([PACK[1].id])
        assert [x.category for x in w] == [ReadOnlyWarning] and ro.unrecorded_injections == 1
    ft.test_eq({p.name: _sha(p) for p in bank.parent.iterdir()}, shas)


# ------------------------------------------------------------------ concurrency: nothing acknowledged is lost

def _counter(path, ids, rounds, out):
    s = MemoryStore(path)
    for _ in range(rounds):
        s.record_outcome(ids, True)
        s.record_injection(ids)
    s.close()
    Path(out).write_text(json.dumps({"done": rounds}))


def _archiver(path, ids, rounds, out):
    s = MemoryStore(path)
    for r in range(rounds):
        s.archive(ids, f"round {r}", by="archiver")
        s.restore(ids, by="archiver")
    s.archive(ids[::2], "final", by="archiver")
    s.close()
    Path(out).write_text(json.dumps({"done": rounds}))


@pytest.mark.slow
def test_concurrent_archive_and_counters_lose_nothing(bank, tmp_path):
    ids = [m.id for m in PACK[:4]]
    procs = [CTX.Process(target=_counter, args=(str(bank), ids, 40, str(tmp_path / "c.json"))),
             CTX.Process(target=_counter, args=(str(bank), ids[:2], 30, str(tmp_path / "c2.json"))),
             CTX.Process(target=_archiver, args=(str(bank), ids, 25, str(tmp_path / "a.json")))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with MemoryStore(bank) as s:
        assert s.check() == []
        got = {i: (s.get(i).use_count, s.get(i).success_count, s.get(i).injected_count, s.get(i).status) for i in ids}
        want = {i: (70, 70, 70) if i in ids[:2] else (40, 40, 40) for i in ids}
        ft.test_eq({i: g[:3] for i, g in got.items()}, want)
        ft.test_eq({i: g[3] for i, g in got.items()}, {i: "archived" if i in ids[::2] else "active" for i in ids})
        ft.test_eq(len(s.events(kind="archive")), 26)
        ft.test_eq(len(s.events(kind="restore")), 25)
        ft.test_eq(sum(len(e["ids"]) for e in s.events(kind="inject")), 40 * 4 + 30 * 2)
        assert ids[1] in _ids(s.search(PACK[1].title, k=3)) and ids[0] not in _ids(s.search(PACK[0].title, k=20))


def _injector(path, ids, rounds):
    with MemoryStore(path) as s:
        for _ in range(rounds):
            s.record_injection(ids)


@pytest.mark.slow
def test_concurrent_injection_counts_are_exact(bank):
    ids = [m.id for m in PACK]
    procs = [CTX.Process(target=_injector, args=(str(bank), ids, 50)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with MemoryStore(bank) as s:
        ft.test_eq({s.get(i).injected_count for i in ids}, {150})


# ------------------------------------------------------------------ old stores and old procmem versions

@pytest.mark.parametrize("name", ["store_format1.db", "store_format2_schema1.db"])
def test_an_old_store_opens_archives_and_restores(tmp_path, name):
    db = tmp_path / name
    shutil.copyfile(OLD_STORES / name, db)
    with MemoryStore(db) as s:
        old = s.get("old-success")
        ft.test_eq((old.injected_count, old.success_count), (0, 1))  # rows without the field read 0
        s.archive(["old-success", "old-seed"], "test: old store", by="t")
        assert "old-success" not in _ids(s.search("run the test suite before committing", k=5))
        ft.test_eq((len(s), s.count("archived")), (1, 2))
        s.record_injection(["old-failure"])
        ft.test_eq(s.get("old-failure").injected_count, 1)
        s.restore_all(by="t")
        assert "old-success" in _ids(s.search("run the test suite before committing", k=3))
        assert s.check() == []
    with sqlite3.connect(db) as con:
        ft.test_eq(int(dict(con.execute("SELECT key, value FROM meta"))["format"]), STORE_FORMAT)
    assert validate_store(db)["ok"]


def _old_procmem(tmp_path, commit="b70b366") -> Path | None:
    "The procmem package of an older commit (store format 3), extracted with git archive; None without git."
    repo = HERE.parent
    try:
        arch = subprocess.run(["git", "-C", str(repo), "archive", commit, "procmem"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    out = tmp_path / "old"
    out.mkdir()
    subprocess.run(["tar", "-x", "-C", str(out)], input=arch.stdout, check=True)
    return out


def test_a_format_3_procmem_refuses_a_store_with_archived_memories(tmp_path):
    "An older procmem would read an archived row as damaged (and its repair would drop it): it must refuse the file."
    old = _old_procmem(tmp_path)
    if old is None:
        pytest.skip("git history of this checkout is not available")
    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        s.add_many(PACK)
        s.archive(PACK[0].id, "x", by="t")
    before = _sha(db)
    code = "import sys; from procmem import MemoryStore; MemoryStore(sys.argv[1], readonly=True)"
    r = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{old}:{':'.join(p for p in sys.path if 'site-packages' in p)}"})
    assert r.returncode != 0 and f"written by a newer procmem (store format {STORE_FORMAT})" in r.stderr, r.stderr[-500:]
    ft.test_eq(_sha(db), before)


# ------------------------------------------------------------------ independent confirmation

def test_importing_the_same_export_twice_does_not_raise_confidence(bank, tmp_path):
    with MemoryStore(bank) as s:
        s.export(tmp_path / "bank.jsonl")
        s.export(tmp_path / "bank.json")
    fresh = MemoryStore(tmp_path / "fresh.db")
    first = fresh.import_file(tmp_path / "bank.jsonl")
    again = [fresh.import_file(tmp_path / "bank.jsonl"), fresh.import_file(tmp_path / "bank.json")]
    n = len(PACK) + len(_lessons())
    ft.test_eq((first["added"], [a["unchanged"] for a in again]), (n, [n, n]))
    # the same lessons read again from the trajectories (new ids, the same tasks): not independent either
    c = fresh.add_many(_lessons())
    ft.test_eq((c["added"], c["confirmed"], c["unchanged"]), (0, 0, len(_lessons())))
    assert {m.confidence for m in fresh} == {0.1}
    fresh.close()


def test_a_same_meaning_memory_from_another_task_confirms_once_up_to_one(bank):
    with MemoryStore(bank) as s:
        lesson = next(m for m in s if m.domain == "alfworld")
        other = dataclasses.replace(copy.deepcopy(lesson), id="from-another-task",
                                    task_query="find two pillows and put them in the armchair",
                                    provenance={**lesson.provenance, "env": "env_99"})
        ft.test_eq(s.add(other).confidence, 0.2)
        ft.test_eq(s.add(dataclasses.replace(other, id="same-task-again")).confidence, 0.2)  # that task already counted
        got = s.get(lesson.id)
        assert "from-another-task" not in s and other.task_query in got.example_queries
        assert lesson.id in _ids(s.search("pillows armchair", k=5))  # found for the confirming task too
        for i in range(12):
            s.add(dataclasses.replace(other, id=f"t{i}", task_query=f"put a clean mug number {i} in the coffeemachine"))
        got = s.get(lesson.id)
        ft.test_eq((got.confidence, got.provenance["confirmations"]), (1.0, 13))
        ft.test_eq(len(s.events(kind="confirm")), 13)


@pytest.mark.skipif(not SHARED_ALFWORLD.exists(), reason=f"shared data absent: {SHARED_ALFWORLD}")
def test_relearning_every_shared_trial_confirms_only_across_tasks(tmp_path):
    "The 8 shared Reflexion trials repeat reflections across trials: only a repeat for ANOTHER task is a confirmation."
    per_trial = [lessons_from_env_results(f) for f in sorted(SHARED_ALFWORLD.glob("env_results_trial_*.json"))]
    with MemoryStore(tmp_path / "m.db") as s:
        counts = [s.add_many(ls) for ls in per_trial]
        again = s.add_many([m for ls in per_trial for m in ls])  # every trial re-read: nothing new, nothing confirmed
        confirmed = sum(c["confirmed"] for c in counts)
        expected = 0
        seen: dict = {}
        for m in (m for ls in per_trial for m in ls):
            tasks = seen.setdefault((m.fingerprint, m.domain), set())
            expected += bool(tasks) and m.task_query not in tasks
            tasks.add(m.task_query)
        ft.test_eq(confirmed, expected)
        ft.test_eq((again["added"], again["confirmed"]), (0, 0))
        assert max(m.confidence for m in s) <= 1.0


# ------------------------------------------------------------------ an edited export round-trips

def test_an_edited_export_reimported_with_update_changes_the_item_and_duplicates_nothing(bank, tmp_path):
    with MemoryStore(bank) as s:
        target = PACK[3]
        s.record_outcome([target.id], True)
        s.archive(PACK[5].id, "unused", by="t")
        s.export(tmp_path / "bank.json")
        data = json.loads((tmp_path / "bank.json").read_text())
        row = next(d for d in data if d["id"] == target.id)
        row["content"] += "\n6. Stop after 20 hits and say so."
        row["tags"] = row["tags"] + ["limit"]
        row["status"], row["success_count"], row["provenance"] = "active", 0, {"trust": "trusted", "confirmations": 50}
        arch = next(d for d in data if d["id"] == PACK[5].id)
        arch["description"] = "Edited while archived."
        (tmp_path / "bank.json").write_text(json.dumps(data))
        n, n_all, prov = len(s), s.count(None), s.get(target.id).provenance
        c = s.import_file(tmp_path / "bank.json", update=True, by="alice")
        got, kept = s.get(target.id), s.get(PACK[5].id)
        ft.test_eq((c["updated"], c["added"], c["confirmed"], c["unchanged"]), (2, 0, 0, n_all - 2))
        ft.test_eq((len(s), s.count(None)), (n, n_all))  # nothing duplicated
        assert got.content.endswith("Stop after 20 hits and say so.") and "limit" in got.tags
        ft.test_eq((got.success_count, got.status, got.provenance, got.confidence), (1, "active", prov, 0.1))
        ft.test_eq((kept.status, kept.description), ("archived", "Edited while archived."))  # status kept
        ft.test_eq(got.lineage[-1]["content"], target.content)
        assert got.id in _ids(s.search("stop after 20 hits limit", k=3))  # the new text is indexed
        ft.test_eq([e["detail"]["by"] for e in s.events(kind="update")[-2:]], ["alice", "alice"])


def test_a_bad_update_file_changes_nothing(bank, tmp_path):
    with MemoryStore(bank) as s:
        s.export(tmp_path / "bank.jsonl")
        lines = (tmp_path / "bank.jsonl").read_text().splitlines()
        before = [m.to_dict() for m in s.items(None)]
        edited = json.loads(lines[0])
        edited["content"] = "1. changed"
        cases = {
            "trunc.jsonl": [json.dumps(edited)] + lines[1:-1] + [lines[-1][: len(lines[-1]) // 2]],
            "clash.jsonl": [json.dumps(edited), json.dumps(dict(json.loads(lines[1]), title=edited["title"],
                                                                 content=edited["content"]))],
            "dup.jsonl": [json.dumps(edited), json.dumps(dict(edited, content="2. other"))],
        }
        errors = {}
        for name, rows in cases.items():
            (tmp_path / name).write_text("\n".join(rows) + "\n")
            with pytest.raises(StoreError) as e:
                s.import_file(tmp_path / name, update=True)
            errors[name] = (type(e.value), str(e.value))
        ft.test_eq([m.to_dict() for m in s.items(None)], before)
    assert errors["trunc.jsonl"][0] is StoreImportError and f"line {len(lines)} is not valid JSON" in errors["trunc.jsonl"][1]
    assert errors["clash.jsonl"][0] is StoreConflictError and "clash.jsonl: item 1" in errors["clash.jsonl"][1]
    assert errors["dup.jsonl"][0] is StoreImportError and "appears twice" in errors["dup.jsonl"][1]
