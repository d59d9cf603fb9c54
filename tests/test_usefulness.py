"""Usefulness in ranking (issue 9): `retrieve_memories(use_utility=...)`, `exclude_ids`, and the
usefulness SIMULATION (`procmem.simulation`).

The off switch must reproduce the ranking of relevance alone exactly; utility re-ranks only the
candidates that cleared the relevance floor (by BM25 score x `utility_factor(utility)`), never pulls
in an irrelevant memory and never returns a score below the floor. Checked on memories nobody here
wrote where there are any: the bootstrap pack and the 423 WebArena tasks of the shared data (skipped,
naming the file, when it is absent).
"""
import json
import random
from pathlib import Path

import pytest
import fastcore.test as ft

from procmem.core import MemoryItem, utc_now
from procmem.store import MemoryStore
from procmem.bootstrap import bootstrap_general_strategies
from procmem.index import memory_text
from procmem.lifecycle import utility
from procmem.retrieval import (DEFAULT_CANDIDATES, DEFAULT_MIN_RELEVANCE, UTILITY_WEIGHT, _idf_lookup,
                               hit_relevance, retrieve_memories, utility_factor)
from procmem.text import tokenize
from procmem.trust import DEFAULT_MIN_CONFIRMATIONS, read_check
from procmem.loop import run_with_memory
from procmem import simulation as sim

ROOT = Path(__file__).resolve().parent.parent
WEBARENA = ROOT.parent / "shared" / "data" / "webarena" / "tasks_dev.json"
NOW = "2026-06-01T00:00:00+00:00"


def webarena_store():
    "The WebArena tasks as memories (title = intent, description = its template): 400+ real texts."
    if not WEBARENA.exists():
        pytest.skip(f"shared data file not found: {WEBARENA}")
    tasks = json.loads(WEBARENA.read_text())
    s = MemoryStore()
    seen = set()
    for t in tasks:
        title = t["intent"][:200].rsplit(" ", 1)[0] if len(t["intent"]) > 200 else t["intent"]
        if title in seen:
            continue
        seen.add(title)
        desc = " ".join(t["intent_template"].replace("{{", " ").replace("}}", " ").split())
        s.add(MemoryItem(title, desc[:500], desc, id=f"wa-{t['task_id']}", created_at="2026-01-01T00:00:00Z"))
    return s, [t["intent"] for t in tasks]


def reference(store, task, k, floor=DEFAULT_MIN_RELEVANCE, candidates=DEFAULT_CANDIDATES):
    """Today's ranking, written out independently: the first k BM25 hits (in BM25 order) whose
    relevance clears the floor and that the read checks accept."""
    idf = _idf_lookup(store._index())
    toks = tokenize(task)
    mass = sum(idf(t) for t in toks)
    out = []
    for m, score in store.search(task, max(k, candidates)):
        rel = hit_relevance(m, score, mass, toks, idf)
        if rel >= floor and not read_check(m, task, DEFAULT_MIN_CONFIRMATIONS)[0]:
            out.append((m.id, rel))
        if len(out) == k:
            break
    return out


def ids_scores(store, task, **kw):
    return [(m.id, r) for m, r in retrieve_memories(store, task, record=False, with_scores=True, **kw)]


def give_records(store, seed=0, share=0.5):
    "Random outcome counters on a share of the memories (fixed time), so utility is not neutral."
    rng = random.Random(seed)
    for m in list(store):
        if rng.random() < share:
            for _ in range(rng.randint(1, 6)):
                store.record_outcome([m.id], rng.random() < rng.random(), when=NOW)


# ------------------------------------------------------------------ the off switch

def test_off_switch_is_todays_ranking_on_the_bootstrap_pack():
    s = MemoryStore()
    s.add_many(bootstrap_general_strategies())
    give_records(s, seed=1, share=1.0)  # records exist but must not matter when utility is off
    tasks = [m.title for m in s] + [m.description for m in s] + ["What are the subclasses of Activity?"]
    assert sum(len(reference(s, t, 3)) for t in tasks) >= len(tasks)
    for t in tasks:
        ft.test_eq(ids_scores(s, t, k=3), reference(s, t, 3))
        ft.test_eq(ids_scores(s, t, k=3, use_utility=False), reference(s, t, 3))


def test_off_switch_and_a_fresh_bank_on_webarena_tasks():
    "Off: exactly today's ranking. On, with no record yet (all neutral, same age): exactly the same too."
    s, tasks = webarena_store()
    sample = tasks[::4]
    found = 0
    for t in sample:
        ref = reference(s, t, 3)
        found += len(ref)
        ft.test_eq(ids_scores(s, t, k=3, use_utility=False), ref)
        ft.test_eq(ids_scores(s, t, k=3, use_utility=True, now=NOW), ref)
    assert found >= len(sample)  # the tasks do reach their memories


# ------------------------------------------------------------------ what utility may change

def test_utility_reorders_only_what_cleared_the_floor_on_webarena():
    s, tasks = webarena_store()
    give_records(s, seed=2)
    changed = 0
    for t in tasks[::3]:
        cleared = reference(s, t, DEFAULT_CANDIDATES)  # every candidate that clears the floor, BM25 order
        got = ids_scores(s, t, k=3, use_utility=True, now=NOW)
        rel = dict(cleared)
        assert all(i in rel and r == rel[i] for i, r in got), t  # only floor-clearing, same relevance
        assert all(r >= DEFAULT_MIN_RELEVANCE for _, r in got)
        ft.test_eq(len(got), min(3, len(cleared)))
        # the order is BM25 x utility_factor(utility), best first, among those candidates
        score = {m.id: sc for m, sc in s.search(t, DEFAULT_CANDIDATES)}
        combined = sorted(cleared, key=lambda p: -score[p[0]] * utility_factor(utility(s.get(p[0]), NOW)))
        ft.test_eq([i for i, _ in got], [i for i, _ in combined[:3]])
        changed += [i for i, _ in got] != [i for i, _ in cleared[:3]]
    assert changed > 0  # with records, utility does change some rankings


def test_the_ranker_is_the_full_sort_of_the_floor_clearing_hits_on_random_hits():
    "Relevance is computed lazily in combined order: what the ranker gives is the full sort's order."
    import itertools
    from procmem.retrieval import _utility_ranker
    rng = random.Random(0)

    def fake_hits(n):
        out = []
        for i in range(n):
            m = MemoryItem(f"memory {i}", "d", "c", id=f"m{i:02d}", created_at="2026-01-01T00:00:00Z",
                           success_count=rng.randint(0, 5), failure_count=rng.randint(0, 5))
            out.append((m, rng.choice([rng.uniform(1, 10), 5.0])))  # some exact ties
        return sorted(out, key=lambda h: -h[1])

    computed = []

    def relevance(m, score):  # some hits fall below the floor
        computed.append(m.id)
        return 0.3 if int(m.id[1:]) % 4 == 0 else 0.8

    rank, checked = _utility_ranker(NOW), 0
    for _ in range(300):
        hits = fake_hits(rng.randint(0, 25))
        combined = [(-sc * utility_factor(utility(m, NOW)), i, m.id) for i, (m, sc) in enumerate(hits)]
        full = [i for _, _, i in sorted(combined) if int(i[1:]) % 4 != 0]
        for n in (1, 3, 5, len(hits)):
            computed.clear()
            ft.test_eq([h[0].id for h in itertools.islice(rank(hits, relevance, 0.5), n)], full[:n])
            assert len(computed) <= n + sum(int(i[1:]) % 4 == 0 for i in computed)  # lazily
            checked += 1
    assert checked == 1200


def test_an_irrelevant_memory_with_a_perfect_record_is_never_pulled_in():
    s = MemoryStore()
    s.add_many(bootstrap_general_strategies())
    star = MemoryItem("Bake sourdough bread", "Feed the starter, then bake.", "1. Feed\n2. Bake", id="bread")
    s.add(star)
    for _ in range(50):
        s.record_outcome(["bread"], True, when=NOW)
    assert utility(s.get("bread"), NOW) > 0.95
    for t in [m.title for m in s if m.id != "bread"]:
        got = [i for i, _ in ids_scores(s, t, k=5, use_utility=True, now=NOW)]
        assert "bread" not in got
    ft.test_eq(ids_scores(s, "How do I build a rocket engine?", k=3, use_utility=True, now=NOW), [])


def test_the_weight_bounds_what_utility_can_overturn():
    ft.test_close(utility_factor(0.5), 1.0)
    ft.test_close(utility_factor(1.0) / utility_factor(0.0), (1 + UTILITY_WEIGHT) / (1 - UTILITY_WEIGHT))
    assert 0 < UTILITY_WEIGHT < 1


def test_bad_now_is_a_value_error():
    s = MemoryStore()
    s.add_many(bootstrap_general_strategies())
    with pytest.raises(ValueError, match="now must be"):
        retrieve_memories(s, "subclasses of a class", use_utility=True, now="next Tuesday")
    with pytest.raises(ValueError, match="now must be"):
        retrieve_memories(s, "subclasses of a class", use_utility=True, now=12)


# ------------------------------------------------------------------ exclude_ids

def test_exclude_ids_on_webarena_never_returns_them_and_keeps_the_rest_in_order():
    s, tasks = webarena_store()
    for t in tasks[::10]:
        full = reference(s, t, 4)
        if not full:
            continue
        top = full[0][0]
        got = ids_scores(s, t, k=3, exclude_ids=[top])
        assert top not in [i for i, _ in got]
        ft.test_eq(got, [p for p in full if p[0] != top][:3])


def test_exclude_ids_reaches_the_agent_in_the_loop():
    s = sim.sim_store(["deploy"], created_at=utc_now())
    seen = []

    def agent(task, block):
        seen.append(block)
        return sim.ScriptedAgent()(task, block)

    r = run_with_memory(sim.SIM_TASKS["deploy"][0], agent, s, k=2, exclude_ids={"sim-deploy-harmful"},
                        judge=sim.truth_judge, extractor=sim.null_extractor)
    ft.test_eq([m.id for m in r.injected], ["sim-deploy-helpful"])
    assert sim.SIM_FAMILIES["deploy"].harmful not in seen[0] and sim.SIM_FAMILIES["deploy"].helpful in seen[0]
    ft.test_eq((s.get("sim-deploy-harmful").injected_count, s.get("sim-deploy-harmful").use_count), (0, 0))
    with pytest.raises(TypeError, match="not one string"):
        run_with_memory(sim.SIM_TASKS["deploy"][0], agent, s, exclude_ids="sim-deploy-harmful")


# ------------------------------------------------------------------ the simulation

def test_every_simulated_task_reaches_its_two_memories_with_equal_scores():
    s = sim.sim_store()
    for name, f in sim.SIM_FAMILIES.items():
        ft.test_eq(sorted(tokenize(memory_text(s.get(f"sim-{name}-helpful")))),
                   sorted(tokenize(memory_text(s.get(f"sim-{name}-harmful")))))
        for t in f.tasks:
            got = dict(ids_scores(s, t, k=10))
            h, b = got.get(f"sim-{name}-helpful"), got.get(f"sim-{name}-harmful")
            assert h is not None and h == b and h >= DEFAULT_MIN_RELEVANCE, (t, got)


def test_the_scripted_agent_is_deterministic_and_shares_draws_across_arms():
    t = sim.SIM_TASKS["db-migration"][2]
    good = sim.simulated_memory("db-migration", "helpful").title
    a, b = sim.ScriptedAgent(seed=7), sim.ScriptedAgent(seed=7)
    ra = [a(t, good) for _ in range(20)]
    rb = [b(t, "") for _ in range(20)]
    ft.test_eq([r.metadata["simulation"]["draw"] for r in ra], [r.metadata["simulation"]["draw"] for r in rb])
    # common random numbers: a success without memory (p 0.5) is a success with the helpful one (p 0.85)
    assert all(x.outcome["success"] for x, y in zip(ra, rb) if y.outcome["success"])
    ft.test_eq({r.metadata["simulation"]["followed"] for r in ra}, {"helpful"})


def test_truth_judge_makes_every_simulated_failure_the_agents_own():
    failing = sim.ScriptedAgent(p_helpful=0, p_harmful=0, p_none=0)
    for t in sim.sim_tasks():
        j = sim.truth_judge(failing(t, ""))
        ft.test_eq((j.is_success, j.failure_class, j.judge), (False, "intrinsic", "ground-truth"))
    ft.test_eq(sim.truth_judge({"task": "x", "steps": [], "answer": "y"}).is_success, None)


def test_the_usefulness_simulation_sinks_harmful_memories_only_with_utility():
    r = sim.usefulness_simulation(["deploy", "dedup-csv", "error-spike"], uses=10, seed=[0, 1], demote=False)
    conv = r.convergence()
    assert conv[conv.arm == "utility"]["N"].notna().all()
    assert conv[conv.arm == "relevance"]["N"].isna().all()  # relevance alone never separates them
    summ = r.summary()
    assert summ.loc["utility", "success_rate"] > summ.loc["relevance", "success_rate"]
    ft.test_eq(len(r.demotions()), 0)
    d = r.to_dict()
    assert d["simulation"] is True and set(d["summary"]) == {"utility", "relevance"}
    json.dumps(d)  # JSON-ready
    fig = r.plot()
    ft.test_eq(len(fig.axes), 2)


def test_with_demotion_the_relevance_arm_quarantines_what_keeps_failing():
    r = sim.usefulness_simulation(["web-form", "api-export"], uses=12, seed=3, use_utility=False, control=False)
    ft.test_eq(list(r.summary().index), ["relevance"])
    dem = r.demotions()
    assert len(dem) >= 1 and set(dem["id"]) <= {"sim-web-form-harmful", "sim-api-export-harmful"}
    assert (dem["uses"] >= 4).all() and (dem["failures"] >= 0.75 * dem["uses"]).all()
    conv = r.convergence().set_index("family")
    for _, d in dem.iterrows():  # demoted at its use: from then on it ranks below the helpful one
        assert conv.loc[d["family"], "N"] <= d["use"]


@pytest.mark.parametrize("kw, msg", [
    (dict(uses=0), "uses must be a positive integer"),
    (dict(uses=True), "uses must be a positive integer"),
    (dict(seed="0"), "seed must be an int"),
    (dict(families=["deploy", "cooking"]), "unknown simulation families ['cooking']"),
    (dict(p_harmful=2), "p_harmful must be a probability"),
])
def test_usefulness_simulation_rejects_bad_arguments(kw, msg):
    with pytest.raises(ValueError) as e:
        sim.usefulness_simulation(**kw)
    assert msg in str(e.value)
