"""procmem.lifecycle (issue 9): utility, harmful demotion, prune/restore, merge, history."""
from datetime import datetime, timedelta, timezone

import fastcore.test as ft
import pytest

from procmem.bootstrap import bootstrap_general_strategies
from procmem.core import MemoryItem
from procmem import lifecycle as lc
from procmem.lifecycle import utility, is_harmful

T0 = "2026-01-01T00:00:00+00:00"


def _item(s=0, f=0, last=None, created=T0, **kw):
    return MemoryItem("a procedure", content="1. do it", success_count=s, failure_count=f,
                      use_count=s + f, created_at=created, last_used_at=last, **kw)


def test_utility_never_used_is_neutral_prior_then_decays():
    m = _item()
    prior = lc.PRIOR_SUCCESSES / (lc.PRIOR_SUCCESSES + lc.PRIOR_FAILURES)
    ft.test_close(utility(m, now=T0), prior, eps=1e-12)
    later = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=lc.HALF_LIFE_DAYS)
    ft.test_close(utility(m, now=later), prior / 2, eps=1e-12)
    assert utility(m, now="2040-01-01") > 0  # the floor: stale, not zero


@pytest.mark.parametrize("f", [0, 1, 5, 50])
def test_utility_increases_with_successes(f):
    us = [utility(_item(s, f, last=T0), now=T0) for s in range(0, 60, 3)]
    assert all(a < b for a, b in zip(us, us[1:])), us


@pytest.mark.parametrize("s", [0, 1, 5, 50])
def test_utility_decreases_with_failures(s):
    us = [utility(_item(s, f, last=T0), now=T0) for f in range(0, 60, 3)]
    assert all(a > b for a, b in zip(us, us[1:])), us


def test_utility_decreases_with_idle_time_and_uses_last_use():
    m = _item(3, 1, last="2026-06-01T00:00:00Z")
    days = [utility(m, now=f"2026-{mo:02d}-15") for mo in range(6, 13)]
    assert all(a > b for a, b in zip(days, days[1:])), days
    # decay counts from the last use, not from creation
    ft.test_close(utility(m, now="2026-06-01"), utility(_item(3, 1, created="2026-06-01T00:00:00Z"),
                                                         now="2026-06-01"), eps=1e-12)


def test_utility_bounded_and_accepts_datetimes():
    for s, f in [(0, 0), (10_000, 0), (0, 10_000), (500, 500)]:
        u = utility(_item(s, f, last=T0), now=T0)
        assert 0.0 <= u < 1.0, (s, f, u)
    naive = datetime(2026, 3, 1)
    ft.test_eq(utility(_item(2, 1), now=naive), utility(_item(2, 1), now="2026-03-01T00:00:00Z"))


def test_utility_real_bootstrap_pack():
    pack = bootstrap_general_strategies()
    us = [utility(m, now="2025-01-01T00:00:00Z") for m in pack]
    ft.test_eq(set(us), {0.5})  # fresh and never used: all neutral
    helped = pack[0]
    helped.success_count, helped.use_count = 3, 3
    assert utility(helped, now="2025-01-01") > utility(pack[1], now="2025-01-01")


def test_utility_error_paths():
    with pytest.raises(TypeError, match="must be a MemoryItem, got dict"):
        utility({"title": "x"})
    for bad in ("yesterday", "", 12, 1.5, ["2026-01-01"]):
        with pytest.raises(ValueError, match="ISO-8601"):
            utility(_item(), now=bad)


def test_is_harmful_thresholds():
    ft.test_eq(is_harmful(_item(0, lc.HARMFUL_MIN_USES - 1)), False)  # too few verdicts
    ft.test_eq(is_harmful(_item(0, lc.HARMFUL_MIN_USES)), True)
    ft.test_eq(is_harmful(_item(1, 4)), False)
    ft.test_eq(is_harmful(_item(10, 10)), False)
    with pytest.raises(TypeError):
        is_harmful("id-1")


# ---- demotion -------------------------------------------------------------------------------
from procmem.store import MemoryStore, StoreReadOnlyError
from procmem.lifecycle import demote_harmful


@pytest.fixture
def bank():
    s = MemoryStore()
    s.add_many(bootstrap_general_strategies())
    return s


def _fail(store, id, n, success=False):
    for _ in range(n):
        store.record_outcome([id], success=success)


def test_demote_harmful_quarantines_with_reason_and_event(bank):
    a, b, c = [m.id for m in list(bank)[:3]]
    _fail(bank, a, 4)
    _fail(bank, b, 3)
    _fail(bank, c, 1, success=True)
    _fail(bank, c, 4)  # 1 of 5: rate 2/7 > 0.25, not harmful
    out = demote_harmful(bank, [a, b, c])
    ft.test_eq([m.id for m in out], [a])
    got = bank.get(a)
    ft.test_eq(got.status, "quarantined")
    assert got.status_reasons[0].startswith("harmful: failed 4 of 4 uses"), got.status_reasons
    ev = bank.events(kind="quarantine")[-1]
    ft.test_eq((ev["ids"], ev["detail"]["by"], ev["detail"]["harmful"]), ([a], "procmem", True))
    ft.test_eq({bank.get(i).status for i in (b, c)}, {"active"})
    assert a not in {m.id for m in bank}


def test_demote_harmful_all_and_no_write_when_nothing(bank, tmp_path):
    ft.test_eq(demote_harmful(bank), [])
    ft.test_eq(bank.events(kind="quarantine"), [])
    path = tmp_path / "b.db"
    with MemoryStore(path) as s:
        s.add_many(bootstrap_general_strategies())
        ids = [m.id for m in s]
    with MemoryStore(path, readonly=True) as ro:  # nothing harmful: a read-only store is fine
        ft.test_eq(demote_harmful(ro, ids), [])
    with MemoryStore(path) as s:
        _fail(s, ids[2], 5)
    with MemoryStore(path, readonly=True) as ro:
        with pytest.raises(StoreReadOnlyError):
            demote_harmful(ro)
    with MemoryStore(path) as s:
        ft.test_eq([m.id for m in demote_harmful(s, by="reviewer")], [ids[2]])


def test_released_memory_needs_new_evidence(bank):
    a = list(bank)[0].id
    _fail(bank, a, 4)
    demote_harmful(bank, a)
    bank.release(a, "the tool was down that day")
    ft.test_eq(demote_harmful(bank, a), [])
    _fail(bank, a, 3)
    ft.test_eq(demote_harmful(bank, a), [])
    _fail(bank, a, 1)
    ft.test_eq([m.id for m in demote_harmful(bank, a)], [a])
    assert "since its release" in bank.get(a).status_reasons[-1]


def test_demote_harmful_errors(bank):
    with pytest.raises(TypeError, match="store must be a MemoryStore"):
        demote_harmful([], None)
    with pytest.raises(TypeError, match="ids must be strings"):
        demote_harmful(bank, [1, 2])
    with pytest.raises(TypeError, match="ids must be an id or a list"):
        demote_harmful(bank, 5)
    with pytest.raises(ValueError, match="by must be a non-empty string"):
        demote_harmful(bank, by="")
