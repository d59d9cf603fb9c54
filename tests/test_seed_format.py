"""Seed-format compatibility: a JSON list holding only the seed's ten fields loads, exports and
reloads with every original key and value intact (JSON and JSONL), and unknown keys survive."""
import copy, json
from pathlib import Path

import pytest
from procmem import MemoryStore

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "seed_memories.json"
SEED_FIELDS = {"id", "title", "description", "content", "source_type", "task_query", "created_at", "access_count", "tags", "session_id"}


def _seed() -> list[dict]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def _expected(v, k):
    "What a seed value reads back as: the seed's `tags: null` means no tags, so it comes back as []."
    return [] if k == "tags" and v is None else v


def _assert_preserved(originals: list[dict], exported: list[dict]):
    assert len(exported) == len(originals)
    by_id = {d["id"]: d for d in exported}
    assert len(by_id) == len(exported), "exported ids are not distinct"
    for o in originals:
        assert o["id"] in by_id, f"{o['id']} lost"
        e = by_id[o["id"]]
        for k, v in o.items():
            assert k in e, f"{o['id']}: key {k!r} dropped"
            assert e[k] == _expected(v, k), f"{o['id']}: {k!r} was {v!r}, came back as {e[k]!r}"
            assert type(e[k]) is type(_expected(v, k)), f"{o['id']}: {k!r} changed type"


def test_fixture_is_seed_format():
    seed = _seed()
    assert isinstance(seed, list) and len(seed) >= 5
    assert all(set(d) == SEED_FIELDS for d in seed)
    assert any(d["tags"] is None for d in seed) and any(d["session_id"] is None for d in seed)
    assert all("T" in d["created_at"] and "+" not in d["created_at"] and not d["created_at"].endswith("Z") for d in seed)  # naive


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_seed_round_trip(tmp_path, suffix):
    seed = _seed()
    s = MemoryStore.load(FIXTURE)
    assert len(s) == len(seed)
    assert [m.id for m in s] == [d["id"] for d in seed]  # insertion order is the file's order
    assert s.get(seed[0]["id"]).created_at == seed[0]["created_at"]  # the naive timestamp is kept verbatim

    out = tmp_path / f"exported{suffix}"
    assert s.export(out) == len(seed)
    if suffix == ".json":
        exported = json.loads(out.read_text(encoding="utf-8"))
        assert isinstance(exported, list)
    else:
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == len(seed)
        exported = [json.loads(line) for line in lines]
    _assert_preserved(seed, exported)

    again = MemoryStore.load(out)  # reload the export
    assert len(again) == len(seed)
    assert list(again) == list(s)
    out2 = tmp_path / f"exported2{suffix}"
    again.export(out2)
    assert out2.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")  # a second round trip is byte-identical


def test_seed_round_trip_through_file_store(tmp_path):
    seed = _seed()
    with MemoryStore(tmp_path / "m.db") as s:
        assert s.import_file(FIXTURE) == dict(added=len(seed), confirmed=0, unchanged=0)
    with MemoryStore(tmp_path / "m.db") as s:  # reopened: durable
        s.export(tmp_path / "out.json")
        assert s.import_file(FIXTURE) == dict(added=0, confirmed=0, unchanged=len(seed))  # re-import is idempotent
        assert len(s) == len(seed)
    _assert_preserved(seed, json.loads((tmp_path / "out.json").read_text(encoding="utf-8")))


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_unknown_keys_survive(tmp_path, suffix):
    seed = _seed()
    odd = copy.deepcopy(seed)
    odd[0]["origin_notes"] = "kept verbatim"
    odd[1]["rating"] = {"stars": 4, "by": ["a", "b"]}
    odd[2]["legacy_flags"] = [1, None, True]
    odd[3]["x_null"] = None
    src = tmp_path / f"in{suffix}"
    src.write_text(json.dumps(odd) if suffix == ".json" else "".join(json.dumps(d) + "\n" for d in odd), encoding="utf-8")
    s = MemoryStore.load(src)
    assert s.get(odd[0]["id"]).extra == {"origin_notes": "kept verbatim"}
    out = tmp_path / f"out{suffix}"
    s.export(out)
    text = out.read_text(encoding="utf-8")
    exported = json.loads(text) if suffix == ".json" else [json.loads(l) for l in text.splitlines()]
    _assert_preserved(odd, exported)
    _assert_preserved(odd, [m.to_dict() for m in MemoryStore.load(out)])  # and through a second load


def test_seed_items_are_searchable():
    s = MemoryStore.load(FIXTURE)
    assert s.search("subclasses of Activity", k=1)[0][0].id == "5c1d7a30-1111-4a00-8000-000000000001"
    assert s.search("Entité properties range", k=1)[0][0].id == "5c1d7a30-1111-4a00-8000-000000000005"
