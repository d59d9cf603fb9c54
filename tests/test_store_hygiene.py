"""Store-level guarantees of issue 6: read-only opening writes nothing (and searches are not counted),
one bad row is skipped and reported instead of killing the store, `update` cannot lose a concurrent
counter increment, `modify` is one atomic read-modify-write, export never clobbers a foreign file, and
the new history fields (`example_queries`, `lineage`) round-trip."""
import json, os, sqlite3, warnings
from pathlib import Path

import pytest
import fastcore.test as ft
from procmem import MemoryItem, MemoryStore, retrieve_memories
from procmem import store as store_mod
from procmem.store import (BadRowError, BadRowWarning, ExportRefusedError, ReadOnlyWarning, StoreReadOnlyError,
                           validate_store)


def _make(p: Path, n=30) -> list[str]:
    with MemoryStore(p) as s:
        s.add_many([MemoryItem(f"Procedure {i} for widget{i}", f"Widget {i} tasks.", f"1. step {i}", id=f"m{i:02d}")
                    for i in range(n)])
    return [f"m{i:02d}" for i in range(n)]


def _files(d: Path) -> list[str]:
    return sorted(os.listdir(d))


# ---------------------------------------------------------------- read-only

def test_readonly_store_reads_searches_exports_and_writes_nothing(tmp_path):
    p = tmp_path / "m.db"
    ids = _make(p)
    before = _files(tmp_path)
    data = p.read_bytes()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with MemoryStore(p, readonly=True) as s:
            assert s.readonly and len(s) == 30 and [m.id for m in s] == ids
            assert s.get("m07").title == "Procedure 7 for widget7"
            hits = s.search("widget7", k=3)
            assert hits[0][0].id == "m07"
            s.record_access(["m07"])  # what retrieve_memories(record=True) calls
            assert s.get("m07").access_count == 0 and s.unrecorded_accesses == 1
            got = retrieve_memories(s, "Procedure 7 for widget7: widget7 tasks", record=True)
            assert got and got[0].id == "m07" and s.get("m07").access_count == 0
            for write in (lambda: s.add(MemoryItem("x", content="y")), lambda: s.record_outcome(["m07"], True),
                          lambda: s.update(s.get("m07")), lambda: s.modify("m07", lambda m: m), lambda: s.delete("m07")):
                ft.test_fail(write, contains="store opened read-only")
    assert [x.category for x in w] == [ReadOnlyWarning]
    assert _files(tmp_path) == before and p.read_bytes() == data  # no -wal/-shm left, no index created


def test_readonly_without_write_permission_uses_no_side_files(tmp_path, monkeypatch):
    """Tests run as root, where chmod does not stop writes: make procmem *believe* it cannot write (os.access),
    which is what selects the immutable read path, and check that not even a transient side file appears."""
    p = tmp_path / "m.db"
    _make(p)
    before = _files(tmp_path)
    monkeypatch.setattr(store_mod.os, "access", lambda path, mode: mode != os.W_OK)
    s = MemoryStore(p, readonly=True)
    try:
        assert len(list(s)) == 30 and _files(tmp_path) == before  # while open, too
    finally:
        s.close()
    ft.test_fail(lambda: MemoryStore(p), contains="cannot write store")  # a writer is refused before touching it
    assert _files(tmp_path) == before


# ---------------------------------------------------------------- bad rows

def test_one_bad_row_is_skipped_everywhere_and_reported(tmp_path):
    p = tmp_path / "m.db"
    ids = _make(p)
    con = sqlite3.connect(p)
    con.execute("UPDATE memories SET data = '{\"title\": ' WHERE id='m03'")  # JSON that does not parse
    con.execute("UPDATE memories SET data = json_set(data, '$.confidence', 7) WHERE id='m05'")  # does not validate
    con.commit()
    con.close()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with MemoryStore(p) as s:
            good = [i for i in ids if i not in ("m03", "m05")]
            assert [m.id for m in s] == good
            assert sorted(s.bad_rows) == ["m03", "m05"]
            assert [m.id for m in s.get_many(["m03", "m04", "m05"])] == ["m04"]
            assert s.search("widget4", k=3)[0][0].id == "m04"
            assert all(m.id != "m03" for m, _ in s.search("widget3", k=3))
            assert s.export(tmp_path / "out.jsonl") == 28
            s.record_outcome(["m03", "m04"], True)  # the bad row does not break a batch
            assert s.get("m04").use_count == 1
            with pytest.raises(BadRowError, match="memory 'm03' cannot be read"):
                s.get("m03")
            assert any("m03" in p_ for p_ in s.check()) and any("m05" in p_ for p_ in s.check())
            assert s.delete("m03") is None and "m03" not in s
    assert {x.category for x in w} == {BadRowWarning}
    report = validate_store(p)
    assert not report["ok"] and len(report["problems"]) == 1 and "'m05'" in report["problems"][0]


# ---------------------------------------------------------------- lost updates, modify

def test_update_keeps_counters_recorded_since_the_callers_read(tmp_path):
    with MemoryStore(tmp_path / "m.db") as s:
        m = s.add(MemoryItem("Retry", content="1. wait"))
        stale = s.get(m.id)
        s.record_outcome([m.id], True)
        s.record_access([m.id])
        stale.content = "1. wait longer"
        stored = s.update(stale)
        got = s.get(m.id)
        assert (got.use_count, got.success_count, got.access_count, got.content) == (1, 1, 1, "1. wait longer")
        assert got == stored


def test_modify_is_atomic_and_rolls_back(tmp_path):
    with MemoryStore(tmp_path / "m.db") as s:
        m = s.add(MemoryItem("Retry", content="1. wait", task_query="load the page"))
        rev = s.rev
        out = s.modify(m.id, lambda it: it.confirm().add_example_query("reload the dashboard"))
        assert out.example_queries == ["reload the dashboard"] and out.confidence == 0.2
        assert s.rev == rev + 1  # example_queries are indexed text

        def fail(it):
            it.content = "half written"
            raise ValueError("gate crashed")
        ft.test_fail(lambda: s.modify(m.id, fail), contains="gate crashed")
        assert s.get(m.id) == out and s.events()[-1]["kind"] == "modify"


# ---------------------------------------------------------------- export, history fields

def test_export_never_clobbers_a_foreign_file(tmp_path):
    s = MemoryStore()
    s.add(MemoryItem("A", content="a"))
    cfg = tmp_path / "config.json"
    cfg.write_text('{"keep": true}')
    with pytest.raises(ExportRefusedError, match="exists and is not a procmem export"):
        s.export(cfg)
    assert cfg.read_text() == '{"keep": true}' and _files(tmp_path) == ["config.json"]
    assert s.export(cfg, force=True) == 1 and s.export(cfg) == 1


def test_history_fields_round_trip_and_old_files_still_load(tmp_path):
    s = MemoryStore(tmp_path / "m.db")
    m = MemoryItem("A", content="a", example_queries=["q1", "q2"], lineage=[{"title": "old A", "content": "old"}])
    s.add(m)
    s.export(tmp_path / "e.json")
    back = MemoryStore.load(tmp_path / "e.json")
    assert back.get(m.id).example_queries == ["q1", "q2"] and back.get(m.id).lineage[0]["title"] == "old A"
    old = [{"id": "x1", "title": "Seed item", "content": "1. do", "tags": None}]  # seed format: no new fields
    (tmp_path / "seed.json").write_text(json.dumps(old))
    item = MemoryStore.load(tmp_path / "seed.json").get("x1")
    assert (item.example_queries, item.lineage) == ([], [])
    s.close()
