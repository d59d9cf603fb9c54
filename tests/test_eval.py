"""The A/B harness (issue 9, "Evaluation harness"): ab_test's frozen stores, self-exclusion, paired
seeds and error paths; summarize_ab's clustered bootstrap (coverage on synthetic data with a known
and a zero effect), its exact paired test and error paths; judge_agreement on real labelled runs.
Real inputs: the seed memories file (tests/fixtures/seed_memories.json), procmem's shipped demo
trajectories (memories learned from them by the real loop), the tau-bench and Reflexion runs in
tests/fixtures."""
import math, random, sys
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree
import fastcore.test as ft
from procmem.eval import (ARMS, FrozenStoreError, _store_state, ab_test, judge_agreement, mcnemar_exact,
                          store_copies, summarize_ab)
from procmem.ingest import read_trajectories
from procmem.judge import judge_trajectory
from procmem.loop import demo_trajectories, learn_from_trajectory, run_with_memory
from procmem.store import MemoryStore, StoreError
from procmem.trajectory import Step, Trajectory

FIX = Path(__file__).resolve().parent / "fixtures"
SEED_FILE = FIX / "seed_memories.json"


def scripted(task, block, seed=None):
    "Succeeds more often when the block shows any memory; reports its outcome, tokens and its seed."
    ok = random.Random(seed).random() < (0.8 if block else 0.3)
    return Trajectory(task=task, steps=[Step(action="act", observation="done" if ok else "error")],
                      answer="done" if ok else None, outcome={"success": ok},
                      metadata={"tokens": 100 + len(block), "seen_seed": seed})


@pytest.fixture
def seed_store(tmp_path):
    "The seed memories, imported into a store file (what a user would A/B)."
    s = MemoryStore(tmp_path / "learned.db")
    s.import_file(SEED_FILE)
    yield s
    s.close()


def _items(store):
    return {m.id: m for m in store.items(status=None)}


# ---------------------------------------------------------------- ab_test
def test_frozen_arm_leaves_every_copy_and_the_original_unchanged(seed_store, tmp_path):
    before = _store_state(seed_store)
    made = []
    copies = store_copies(seed_store.path, workdir=tmp_path / "copies")

    def factory():
        made.append(copies())
        return made[-1]

    tasks = [m.task_query for m in seed_store.items() if m.task_query] + ["Which classes are under Activity?"]
    df = ab_test(tasks, scripted, factory, arms=("none", "memory"), repeats=2, close_stores=False)
    assert len(made) == 4 and len({s.path for s in made}) == 4
    assert df[df.arm == "memory"].injected_ids.map(len).sum() > 0  # memory was really shown
    for s in made:
        assert _store_state(s) == before  # counters included: nothing retrieved was counted
        assert s.events(kind="loop.retrieve") == []  # run read-only: not even the event log grew
    assert _store_state(seed_store) == before
    assert sorted(p.name for p in copies.workdir.glob("*.db")) == [f"learned-copy{i}.db" for i in range(4)]


def test_stores_are_closed_after_their_arm_by_default(seed_store):
    made = []

    def factory():
        made.append(MemoryStore())
        return made[-1]

    ab_test(["What is a Plan?"], scripted, factory, arms=("none", "memory+learn"))
    for s in made:
        with pytest.raises(Exception, match="closed"):
            len(s)


def test_exclude_self_on_the_seed_memories(seed_store):
    by_query = {m.task_query: m.id for m in seed_store.items() if m.task_query}
    # the same tasks as users type them: other case and spacing
    tasks = [dict(task="  " + q.upper().replace(" ", "  "), id=f"q{i}") for i, q in enumerate(by_query)]
    factory = store_copies(seed_store.path)
    on = ab_test(tasks, scripted, factory, arms=("memory",))
    off = ab_test(tasks, scripted, factory, arms=("memory",), exclude_self=False)
    own = list(by_query.values())
    for (_, a), (_, b), mid in zip(on.iterrows(), off.iterrows(), own):
        assert mid not in a.injected_ids and a.excluded_ids == [mid]
    leaked = sum(mid in b.injected_ids for (_, b), mid in zip(off.iterrows(), own))
    assert leaked >= len(own) // 2, off.injected_ids.tolist()  # without the switch the leak is real


def test_learning_arm_excludes_what_it_learned_from_the_same_task():
    trajs = {t.task: t for t in demo_trajectories()}

    def replay(task, block):  # the shipped demo run for this task (real extractor input)
        return trajs[task]

    task = next(t for t, tr in trajs.items() if (tr.outcome or {}).get("success") is not False)
    probe = MemoryStore()
    learned = learn_from_trajectory(trajs[task], probe)
    assert learned.stored, "the demo run must teach something for this test to mean anything"
    tasks = [dict(task=task, id="first"), dict(task=task, id="again")]
    df = ab_test(tasks, replay, MemoryStore, arms=("memory+learn",))
    again = df.set_index("task_id").loc["again"]
    stored = {m.id for m in learned.stored}
    assert again.excluded_ids, "the lesson learned from 'first' must be excluded for 'again'"
    assert not set(again.injected_ids) & set(again.excluded_ids)
    assert len(stored) == len(again.excluded_ids)


def test_long_real_tasks_never_see_their_own_lesson(tmp_path):
    "Reflexion HumanEval runs (tasks of 700-850 characters): what a run taught is stored under the artifact's cut task."
    runs = [t for f in sorted((FIX / "trajectories" / "reflexion").glob("*humaneval*")) for t in read_trajectories(f)]
    assert runs and max(len(t.task) for t in runs) > 600
    db = tmp_path / "learned.db"
    taught = {}
    with MemoryStore(db) as s:
        for t in runs:
            taught.setdefault(t.task, set()).update(m.id for m in learn_from_trajectory(t, s).stored)
        active = {m.id for m in s.items()}
    assert any(taught.values()), "the runs must teach something for this test to mean anything"
    by_task = {t.task: t for t in runs}
    tasks = [dict(task=task, id=f"h{i}") for i, task in enumerate(by_task)]
    df = ab_test(tasks, lambda task, block: by_task[task], store_copies(db), arms=("memory",))
    for r in df.itertuples():
        assert not set(r.injected_ids) & taught[r.task], (r.task_id, r.injected_ids)
        assert taught[r.task] & active <= set(r.excluded_ids), (r.task_id, r.excluded_ids)  # found, not luck


def _sales(task, block):
    return dict(task=task, answer="1200", outcome={"success": True}, steps=[
        dict(action="list_columns('sales')", observation="month, region, sales"),
        dict(action="filter_rows(region)", observation="12 rows"),
        dict(action="sum_column('sales')", observation="total: 1200")])


def test_a_memory_taught_by_twenty_tasks_is_hidden_from_all_of_them(tmp_path):
    "One memory, merged from 20 tasks before the test: more than example_queries (5) and confirmed_by (8) keep."
    tasks = [f"Sum the monthly sales rows of the region number {i} sales table and report the total" for i in range(20)]
    db = tmp_path / "learned.db"
    with MemoryStore(db) as s:
        for t in tasks:
            run_with_memory(t, _sales, s, memory=False)
        assert len(s) == 1
    df = ab_test(tasks, _sales, store_copies(db), arms=("memory",))
    assert df.injected_ids.map(len).sum() == 0, df[df.injected_ids.map(len) > 0][["task_id", "injected_ids"]]


def test_runs_are_reproducible_from_the_seed():
    tasks = ["Sort the table by date", "Sum the sales column", "Find the largest region"]
    run = lambda seed: ab_test(tasks, scripted, MemoryStore, arms=("none",), repeats=4, seed=seed)  # noqa: E731
    a, b, c = run(7), run(7), run(8)
    assert a.success.tolist() == b.success.tolist()
    assert a.success.tolist() != c.success.tolist()


def test_agent_receives_the_same_seed_in_every_arm():
    calls = []

    def agent(task, block, seed=None):
        calls.append((task, bool(block), seed))
        return scripted(task, block, seed)

    store = lambda: MemoryStore()  # noqa: E731 (a factory)
    ab_test(["a task", "another task"], agent, store, arms=("none", "memory"), repeats=2, seed=3)
    by_arm = [calls[i * 2:(i + 1) * 2] for i in range(4)]  # repeat 0: none, memory; repeat 1: none, memory
    assert [s for _, _, s in by_arm[0]] == [s for _, _, s in by_arm[1]]
    assert [s for _, _, s in by_arm[2]] == [s for _, _, s in by_arm[3]]
    assert [s for _, _, s in by_arm[0]] != [s for _, _, s in by_arm[2]]
    assert all(isinstance(s, int) for _, _, s in calls)


def test_frozen_store_that_changes_names_the_ids(seed_store):
    one = store_copies(seed_store.path)()
    victim = next(iter(one.items())).id

    def meddling(task, block):
        one.record_outcome([victim], False)
        return scripted(task, block, 1)

    with pytest.raises(FrozenStoreError) as e:
        ab_test(["What is a Plan?"], meddling, lambda: one, arms=("memory",))
    assert e.value.changed == dict(added=[], removed=[], changed=[victim]) and victim in str(e.value)
    assert isinstance(e.value, StoreError)
    # the same meddling in a learning arm, or with freeze=False, is allowed
    other = store_copies(seed_store.path)()
    ab_test(["What is a Plan?"], meddling, lambda: other, arms=("memory",), freeze=False)


def test_factory_and_argument_errors(seed_store):
    shared = store_copies(seed_store.path)()
    ft.test_fail(lambda: ab_test(["x"], scripted, lambda: shared), contains="same store twice")
    same_file = store_copies(seed_store.path)().path
    ft.test_fail(lambda: ab_test(["x"], scripted, lambda: MemoryStore(same_file)), contains="same store twice")
    ft.test_fail(lambda: ab_test(["x"], scripted, lambda: str(same_file)), contains="must return a MemoryStore")
    flip = iter([store_copies(seed_store.path)(), MemoryStore()])
    ft.test_fail(lambda: ab_test(["x"], scripted, lambda: next(flip)), contains="unlike the first one")
    ft.test_fail(lambda: ab_test([], scripted, MemoryStore), contains="non-empty list")
    ft.test_fail(lambda: ab_test(["x"], scripted, MemoryStore, arms=("none", "memroy")), contains="unknown arm 'memroy'")
    ft.test_fail(lambda: ab_test(["x"], scripted, MemoryStore, repeats=True), contains="repeats")
    ft.test_fail(lambda: ab_test(["x"], scripted, MemoryStore, kk=2), contains="takes no kk")
    ft.test_fail(lambda: ab_test(["x"], scripted, MemoryStore, memory=False), contains="belong to the arms")
    ft.test_fail(lambda: ab_test(["x", dict(task="y", id="t000")], scripted, MemoryStore), contains="repeated: t000")
    ft.test_fail(lambda: store_copies(FIX / "nope.db"), contains="nope.db")
    assert set(ARMS) == {"none", "memory", "memory+learn"}


def test_truth_and_judged_columns_differ_when_the_judge_is_wrong():
    liar = lambda artifact, llm=None: procmem.judge.Judgment(True, "always yes", 0.5)  # noqa: E731
    tasks = [dict(task=f"task number {i}", truth=i % 2 == 0) for i in range(6)]

    def silent(task, block):  # reports no outcome: only the judge and the task's truth know
        return Trajectory(task=task, steps=[Step(action="act", observation="ok")], answer="ok")

    df = ab_test(tasks, silent, MemoryStore, arms=("none",), judge=liar)
    assert df.judged_success.tolist() == [True] * 6
    assert df.truth.tolist() == df.success.tolist() == [True, False] * 3
    assert math.isnan(df.tokens.iloc[0])


def test_a_crashing_agent_is_a_row_not_a_crash():
    def flaky(task, block):
        if "2" in task:
            raise TimeoutError("the model timed out")
        return dict(task=task, answer="ok", steps=[dict(action="a", observation="ok")], outcome={"success": True})

    df = ab_test(["task 1", "task 2"], flaky, MemoryStore, arms=("none", "memory"))
    bad = df[df.task_id == "t001"]
    assert bad.verdict.tolist() == ["extrinsic"] * 2 and bad.success.tolist() == [False] * 2
    assert all("TimeoutError: the model timed out" in e for e in bad.agent_error)
    s = summarize_ab(df[df.verdict != "extrinsic"]).set_index("arm")  # leaving them out drops their pairs
    assert s.loc["memory", "n_pairs"] == 1 and s.loc["memory", "success_rate"] == 1.0


# ---------------------------------------------------------------- summarize_ab
def _synthetic(effect, rng, n_tasks=50, repeats=2):
    base = rng.uniform(0.1, 0.7, n_tasks)
    return pd.DataFrame([dict(task_id=f"t{t}", arm=arm, repeat=r, success=bool(rng.random() < p))
                         for t in range(n_tasks) for r in range(repeats)
                         for arm, p in (("none", base[t]), ("memory", base[t] + effect))])


@pytest.mark.parametrize("effect", [0.25, 0.0])
def test_bootstrap_ci_covers_the_true_effect(effect):
    rng, cover, reject, reps = np.random.default_rng(123), 0, 0, 120
    for i in range(reps):
        m = summarize_ab(_synthetic(effect, rng), n_boot=300, seed=i).iloc[1]
        cover += m.diff_ci_low <= effect <= m.diff_ci_high
        reject += m.p_value < 0.05
    assert 0.85 <= cover / reps <= 1.0, cover / reps
    if effect == 0:
        assert reject / reps <= 0.10, reject / reps
    else:
        assert reject / reps >= 0.6, reject / reps


def test_bootstrap_resamples_tasks_not_rows():
    "Copying every run 10 times (perfectly correlated repeats) must not narrow the interval."
    rng = np.random.default_rng(5)
    one = _synthetic(0.2, rng, n_tasks=40, repeats=1)
    ten = pd.concat([one.assign(repeat=r) for r in range(10)], ignore_index=True)
    a, b = summarize_ab(one, seed=1).iloc[1], summarize_ab(ten, seed=1).iloc[1]
    assert a["diff"] == pytest.approx(b["diff"])
    assert (b.diff_ci_high - b.diff_ci_low) == pytest.approx(a.diff_ci_high - a.diff_ci_low, rel=0.15)
    assert (a.helped, a.harmed, a.p_value) == (b.helped, b.harmed, b.p_value)
    assert b.n_pairs == 10 * a.n_pairs


def test_mcnemar_exact_matches_the_binomial_by_enumeration():
    for b_, c_ in [(0, 0), (1, 0), (7, 3), (12, 2), (30, 31), (0, 9)]:
        n = b_ + c_
        probs = [math.comb(n, i) / 2**n for i in range(n + 1)]
        expected = min(1.0, sum(p for p in probs if p <= probs[min(b_, c_)] + 1e-12)) if n else 1.0
        assert mcnemar_exact(b_, c_) == pytest.approx(expected), (b_, c_)
    ft.test_fail(lambda: mcnemar_exact(1.5, 2), contains="non-negative ints")


def test_helped_and_harmed_are_counted_per_task_across_repeats():
    rows = []
    # t0: memory wins both repeats; t1: loses one, ties one; t2: one win one loss (mean 0: neither)
    for tid, pairs in {"t0": [(1, 0), (1, 0)], "t1": [(0, 1), (1, 1)], "t2": [(1, 0), (0, 1)]}.items():
        for r, (m, n) in enumerate(pairs):
            rows += [dict(task_id=tid, arm="memory", repeat=r, success=bool(m)),
                     dict(task_id=tid, arm="none", repeat=r, success=bool(n))]
    s = summarize_ab(pd.DataFrame(rows)).set_index("arm")
    assert (s.loc["memory", "helped"], s.loc["memory", "harmed"]) == (1, 1)
    assert s.loc["memory", "diff"] == pytest.approx((2 - 1 + 0) / 6)
    assert s.loc["memory", "p_value"] == 1.0
    assert list(s.index) == ["none", "memory"]


def test_summarize_errors_and_missing_outcomes():
    df = pd.DataFrame([dict(task_id=f"t{i}", arm=a, repeat=0, success=s, truth=t)
                       for i, (s, t) in enumerate([(True, True), (None, False), (False, None)])
                       for a in ("none", "memory")])
    s = summarize_ab(df).set_index("arm")
    assert s.loc["memory", "n_pairs"] == 2 and s.loc["memory", "missing"] == 1
    assert summarize_ab(df, outcome="truth").set_index("arm").loc["none", "n"] == 2
    ft.test_fail(lambda: summarize_ab(df, baseline="control"), contains="no baseline arm 'control'")
    ft.test_fail(lambda: summarize_ab(df.drop(columns="repeat")), contains="no column repeat")
    ft.test_fail(lambda: summarize_ab(pd.concat([df, df])), contains="two rows for arm 'none', task 't0'")
    unpaired = df.assign(repeat=np.where(df.arm == "memory", 1, 0))
    ft.test_fail(lambda: summarize_ab(unpaired), contains="arm 'memory' has no run paired with 'none'")
    ft.test_fail(lambda: summarize_ab(df, ci=95), contains="0 < ci < 1")


# ---------------------------------------------------------------- judge_agreement
def _reflexion_runs():
    return [t for f in sorted((FIX / "trajectories" / "reflexion").glob("hotpotqa_*.txt")) for t in read_trajectories(f)]


def test_judge_agreement_hides_the_labels_from_the_judge():
    runs = _reflexion_runs()
    assert len(runs) >= 8 and {t.outcome["success"] for t in runs} == {True, False}
    peeker = lambda t: isinstance(t.outcome, dict) and t.outcome.get("success")  # noqa: E731
    m = judge_agreement(runs, peeker)
    assert m["tp"] == 0 and m["fp"] == 0  # it saw no outcome, so it never said success
    cheat = judge_agreement(runs, peeker, hide=False)
    assert cheat["accuracy"] == 1.0


def test_judge_agreement_counts_on_real_runs():
    runs = _reflexion_runs()
    truth = [t.outcome["success"] for t in runs]
    m = judge_agreement(runs, lambda t: True)
    assert m["n"] == len(runs) and m["coverage"] == 1.0
    assert m["false_success_rate"] == 1.0 and m["accuracy"] == pytest.approx(sum(truth) / len(truth))
    ours = judge_agreement(runs, lambda t, llm=None: judge_trajectory(t, llm=llm, step_budget=6))
    assert ours["fp"] <= 1 and ours["tp"] + ours["fn"] + ours["fp"] + ours["tn"] + ours["abstained"] == len(runs)
    flipped = judge_agreement(runs, lambda t: True, truth=[not x for x in truth])
    assert flipped["fp"] == sum(truth)


def test_judge_agreement_extrinsic_is_not_covered():
    ex = procmem.judge.Judgment(False, "timed out", 0.9, failure_class="extrinsic", cause="timeout")
    runs = [Trajectory(task="t", outcome={"success": False}, id=f"r{i}") for i in range(3)]
    m = judge_agreement(runs, lambda t: ex)
    assert m["coverage"] == 0.0 and m["abstained"] == 3 and m["tn"] == 0
    ft.test_fail(lambda: judge_agreement(runs, lambda t: ex, truth=[True, False]), contains="must be 3 bools")
