"""Who failed? (issue 6, point 12) — a harness crash, a judge or extractor backend error and a run the
judge cannot decide are not the agent's failure: no lesson is stored and the injected memories get no
`use_count`/`failure_count`; the event log says extrinsic, with the cause. Also point 16: the
`success` column of `LoopResult.summary()`. Everything runs through the real `run_with_memory`, with
no network (the one real SDK client talks to a closed port on 127.0.0.1)."""
import socket, sys
from pathlib import Path

import pytest

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree
import anthropic, httpx
from procmem.core import MemoryItem
from procmem.store import MemoryStore
from procmem.judge import Judgment, judge_trajectory
from procmem.llm import AnthropicLLM, LLMError
from procmem.loop import run_with_memory

TASK = "Sum the monthly sales rows of the regional sales table and report the total"


@pytest.fixture
def store():
    s = MemoryStore()
    s.add_many([
        MemoryItem("Sum table rows after checking the columns",
                   "When a task asks to sum the rows of a sales table.",
                   "1. List the table's columns.\n2. Pick the sales column.\n3. Sum its rows and report the total.",
                   tags=["sales", "table", "sum"]),
        MemoryItem("Report monthly totals per region", "When sales are split by month and region.",
                   "1. Group the rows by region.\n2. Sum the monthly sales.\n3. Report each total.",
                   tags=["sales", "monthly", "regional"]),
    ])
    return s


def good_agent(task, block):
    "A run with a plausible answer and no ground truth, so the judge has to decide."
    return dict(task=task, answer="1200", steps=[
        dict(action="list_columns('sales')", observation="month, region, sales"),
        dict(action="sum_column('sales')", observation="total: 1200")])


def crashing_agent(task, block):
    raise KeyError("rows")  # a bug in the harness, not a lesson about summing tables


def counters(store, ids):
    return [(store.get(i).use_count, store.get(i).success_count, store.get(i).failure_count) for i in ids]


def loop_events(store, trajectory_id):
    return {e["kind"]: {**e["detail"], "ids": e["ids"]} for e in store.events()
            if e["detail"].get("trajectory_id") == trajectory_id}


def assert_blames_nobody(store, r, cause):
    "No memory stored, no counter moved, and the log says extrinsic with `cause`."
    assert r.injected, "the test needs memories injected into the run"
    assert len(store) == 2
    assert counters(store, [m.id for m in r.injected]) == [(0, 0, 0)] * len(r.injected)
    j = r.learned.judgment
    assert (j.is_success, j.failure_class, j.cause) == (False, "extrinsic", cause)
    ev = loop_events(store, r.trajectory.id)
    assert (ev["loop.judge"]["failure_class"], ev["loop.judge"]["cause"]) == ("extrinsic", cause)
    assert ev["loop.extract"]["skipped_extrinsic"] is True and ev["loop.extract"]["ids"] == []
    assert ev["loop.outcome"]["attributed"] is False and ev["loop.outcome"]["failure_class"] == "extrinsic"
    assert not [e for e in store.events() if e["kind"] == "outcome"]  # record_outcome was never called


def test_an_agent_that_raises_is_a_harness_crash(store):
    r = run_with_memory(TASK, crashing_agent, store)
    assert r.agent_error == "KeyError: 'rows'"
    assert_blames_nobody(store, r, "harness crash")
    assert r.summary()["success"] is False and r.summary()["cause"] == "harness crash"


class RaisingBackend:
    "A judge backend whose call raises the SDK's own exception (not wrapped in an LLMError)."
    model = "raising"
    def __init__(self, exc): self.exc = exc
    def complete_json(self, system, prompt, schema): raise self.exc


_REQ = httpx.Request("POST", "http://127.0.0.1/v1/messages")

@pytest.mark.parametrize("exc, cause", [
    (anthropic.APIConnectionError(request=_REQ), "network error"),
    (anthropic.APIStatusError("bad request", response=httpx.Response(400, request=_REQ), body=None), "judge error"),
    (LLMError("intrinsic failure calling m: HTTP 400 invalid_request_error", "intrinsic", 400), "judge error"),
    (RuntimeError("the judge's backend has a bug"), "judge error"),
])
def test_a_judge_backend_that_raises_blames_nobody(store, exc, cause):
    r = run_with_memory(TASK, good_agent, store, llm=RaisingBackend(exc))
    assert_blames_nobody(store, r, cause)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_the_real_sdk_with_an_unreachable_api_stops_and_blames_nobody(store, monkeypatch):
    "An API that cannot be reached at all is fatal (issue 7): raised to the caller at the first call; nothing learned or counted."
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{_closed_port()}", max_retries=0, timeout=5)
    with pytest.raises(LLMError) as e:
        run_with_memory(TASK, good_agent, store, llm=AnthropicLLM(client=client))
    assert e.value.kind == "fatal"
    assert len(store) == 2 and [m.use_count for m in store] == [0, 0]
    assert not [x for x in store.events() if x["kind"] in ("outcome", "loop.outcome")]


class NoVerdict:
    "A judge backend that answers, but with nothing that parses as a verdict."
    model = "no-verdict"
    def complete_json(self, system, prompt, schema): return None, "reply does not match JudgeVerdict"


def test_a_run_the_judge_cannot_decide_blames_nobody(store):
    r = run_with_memory(TASK, good_agent, store, llm=NoVerdict())
    assert_blames_nobody(store, r, "undecided")


def test_a_custom_judge_returning_no_judgment_blames_nobody(store):
    r = run_with_memory(TASK, good_agent, store, judge=lambda artifact, llm=None: None)
    assert_blames_nobody(store, r, "undecided")


def test_a_custom_judge_that_raises_blames_nobody(store):
    def judge(artifact, llm=None): raise ValueError("judge bug")
    r = run_with_memory(TASK, good_agent, store, judge=judge)
    assert_blames_nobody(store, r, "judge error")


def test_an_extractor_error_teaches_nothing_and_says_extrinsic(store):
    "An extractor backend error makes the run extrinsic: no lesson and no counter, even after a verdict."
    def failed(artifact, llm=None): return Judgment(False, "the total was never checked", 0.9, failure_class="intrinsic")
    def extractor(artifact, judgment, llm=None, domain=None): raise anthropic.APIConnectionError(request=_REQ)
    r = run_with_memory(TASK, good_agent, store, judge=failed, extractor=extractor)
    assert len(store) == 2 and r.learned.stored == []
    ev = loop_events(store, r.trajectory.id)["loop.extract"]
    assert (ev["failure_class"], ev["cause"]) == ("extrinsic", "network error")
    assert counters(store, [m.id for m in r.injected]) == [(0, 0, 0)] * len(r.injected)
    out = loop_events(store, r.trajectory.id)["loop.outcome"]
    assert (out["attributed"], out["failure_class"], out["cause"]) == (False, "extrinsic", "network error")


def test_the_agents_own_failure_still_counts(store):
    "The control: an intrinsic failure is attributed to the injected memories."
    def failed(artifact, llm=None): return Judgment(False, "the total was never checked", 0.9, failure_class="intrinsic")
    r = run_with_memory(TASK, good_agent, store, judge=failed)
    assert r.injected
    assert counters(store, [m.id for m in r.injected]) == [(1, 0, 1)] * len(r.injected)
    assert loop_events(store, r.trajectory.id)["loop.outcome"]["attributed"] is True


# ------------------------------------------------------------------ point 16: the success column

def test_summary_has_a_success_column_for_pandas(store):
    pd = pytest.importorskip("pandas")
    def ok(artifact, llm=None): return Judgment(True, "the total is in the last observation", 0.9)
    def failed(artifact, llm=None): return Judgment(False, "wrong column", 0.9, failure_class="intrinsic")
    rows = [run_with_memory(TASK, good_agent, store, judge=ok).summary(),
            run_with_memory(TASK, good_agent, store, judge=failed).summary(),
            run_with_memory(TASK, good_agent, store, judge=failed, memory=False).summary(),
            run_with_memory(TASK, good_agent, store, memory=False, learn=False).summary()]  # not judged
    assert [r["success"] for r in rows] == [True, False, False, None]
    df = pd.DataFrame(rows)
    rates = df.groupby("memory")["success"].mean()
    assert rates[True] == 0.5 and rates[False] == 0.0  # the unjudged run is left out of the mean


# ------------------------------------------------------------------ issue 7: a judge that may abstain

def test_an_abstention_teaches_nothing_and_counts_nothing(store):
    "The offline judge cannot tell whether the sales total is right (a tool run, no outcome signal): no lesson, no counter."
    r = run_with_memory(TASK, good_agent, store)
    assert r.injected, "the test needs memories injected into the run"
    j = r.learned.judgment
    assert (j.is_success, j.failure_class, j.cause, j.kind) == (None, None, None, "tool")
    assert r.success is None and r.summary()["success"] is None and r.summary()["verdict"] == "unknown"
    assert r.learned.candidates == [] and r.learned.stored == [] and len(store) == 2  # no lesson
    assert counters(store, [m.id for m in r.injected]) == [(0, 0, 0)] * len(r.injected)  # no counter
    assert not [e for e in store.events() if e["kind"] == "outcome"]  # record_outcome was never called
    ev = loop_events(store, r.trajectory.id)
    assert (ev["loop.judge"]["verdict"], ev["loop.judge"]["label"], ev["loop.judge"]["run_kind"]) == (None, "unknown", "tool")
    assert ev["loop.extract"]["ids"] == []
    out = ev["loop.outcome"]
    assert (out["attributed"], out["success"], out["verdict"], out["failure_class"]) == (False, None, "unknown", None)


def test_a_custom_judge_may_abstain(store):
    def unsure(artifact, llm=None): return Judgment(None, "cannot tell from the transcript", 0.0)
    r = run_with_memory(TASK, good_agent, store, judge=unsure)
    assert r.success is None and len(store) == 2 and r.learned.stored == []
    assert counters(store, [m.id for m in r.injected]) == [(0, 0, 0)] * len(r.injected)
    rows = [r.summary(), run_with_memory(TASK, good_agent, store, judge=lambda a, llm=None: Judgment(True, "ok", 0.9)).summary()]
    assert [x["verdict"] for x in rows] == ["unknown", "success"] and [x["success"] for x in rows] == [None, True]


def test_block_size_parameters_reach_the_injector(store):
    "run_with_memory passes budget_chars and max_bullets to the injector: the block is exactly the injector's."
    import re
    from procmem.inject import format_memories_for_injection
    for budget, bullets in ((3000, 0), (3000, None), (700, 2)):
        kw = {} if bullets is None else {"max_bullets": bullets}
        r = run_with_memory(TASK, good_agent, store, budget_chars=budget, learn=False, **kw)
        assert len(r.memory_block) <= budget
        if not r.injected:
            assert r.memory_block == ""
            continue
        nonce = re.search(r'nonce="([0-9a-f]{12})"', r.memory_block).group(1)
        assert r.memory_block == format_memories_for_injection(r.injected, budget_chars=budget, nonce=nonce, **kw)
    no_points = run_with_memory(TASK, good_agent, store, budget_chars=3000, max_bullets=0, learn=False)
    default = run_with_memory(TASK, good_agent, store, budget_chars=3000, learn=False)
    assert no_points.injected and len(no_points.memory_block) < len(default.memory_block)


def test_learning_from_real_coding_runs_uses_their_exit_status():
    """procmem's judge sees the whole run in the loop: a real mini-SWE-agent run stopped by its limits is a failure;
    a submitted patch nobody tested is unknown and teaches nothing."""
    from procmem.ingest import read_trajectories
    from procmem.loop import learn_from_trajectory
    root = Path(__file__).resolve().parent / "fixtures" / "trajectories" / "mini-swe-agent"
    (limits,) = read_trajectories(root / "github_issue_toolcall_limits.traj.json")
    r = learn_from_trajectory(limits, MemoryStore())
    assert (r.judgment.is_success, r.judgment.kind) == (False, "coding") and "LimitsExceeded" in r.judgment.reason
    (submitted,) = read_trajectories(root / "github_issue_textbased.traj.json")
    s = MemoryStore()
    r = learn_from_trajectory(submitted, s)
    assert (r.judgment.is_success, r.summary()["verdict"], r.candidates, len(s)) == (None, "unknown", [], 0)


def test_a_custom_extractor_gets_the_artifact_and_the_default_the_run(store, monkeypatch):
    "procmem's own extractor reads every step of the run (extract's request); a custom one keeps the documented artifact."
    from procmem import loop
    from procmem.trajectory import Trajectory, TrajectoryArtifact
    seen = []
    def spy(run, judgment, llm=None, domain=None):
        seen.append(type(run).__name__)
        return []
    def ok(artifact, llm=None): return Judgment(True, "the total is in the last observation", 0.9)
    run_with_memory(TASK, good_agent, store, judge=ok, extractor=spy)
    monkeypatch.setattr(loop, "extract_memories", spy)  # the loop's default is recognised by identity
    loop.learn_from_trajectory(good_agent(TASK, ""), store, judge=ok, extractor=spy)
    assert seen == [TrajectoryArtifact.__name__, Trajectory.__name__]


# ------------------------------------------------------------------ issue 9: counters, demotion, read-only

def failed_judge(artifact, llm=None): return Judgment(False, "the total was never checked", 0.9, failure_class="intrinsic")
def ok_judge(artifact, llm=None): return Judgment(True, "the total is in the last observation", 0.9)
def no_lessons(run, judgment, llm=None, domain=None): return []


def full_counters(store, ids):
    return [(store.get(i).access_count, store.get(i).injected_count, store.get(i).success_count,
             store.get(i).failure_count) for i in ids]


def test_retrieved_injected_and_outcome_counters_move_separately(store):
    "retrieved = access_count (what retrieval returned), injected = injected_count (what the block showed)."
    ids = [m.id for m in store]
    big = run_with_memory(TASK, good_agent, store, judge=ok_judge, extractor=no_lessons, k=2, budget_chars=5000)
    assert sorted(m.id for m in big.injected) == sorted(ids)
    assert full_counters(store, ids) == [(1, 1, 1, 0)] * 2
    # a block that fits only one of the two retrieved memories: both retrieved, one injected and blamed
    from procmem.inject import format_memories_for_injection
    one = min(len(format_memories_for_injection([m])) for m in store)
    assert len(format_memories_for_injection(list(store))) > one + 1
    small = run_with_memory(TASK, good_agent, store, judge=failed_judge, extractor=no_lessons, k=2, budget_chars=one + 1)
    assert len(small.injected) == 1, small.memory_block
    shown = small.injected[0].id
    other = next(i for i in ids if i != shown)
    assert full_counters(store, [shown, other]) == [(2, 2, 1, 1), (2, 1, 1, 0)]
    inject_events = store.events(kind="inject")
    assert [sorted(e["ids"]) for e in inject_events] == [sorted(ids), [shown]]


def test_memory_off_and_learn_off_count_what_they_should(store):
    ids = [m.id for m in store]
    run_with_memory(TASK, good_agent, store, memory=False, judge=failed_judge)  # the A/B control arm
    assert full_counters(store, ids) == [(0, 0, 0, 0)] * 2
    r = run_with_memory(TASK, good_agent, store, learn=False)  # shown, but nothing judged
    assert r.injected and r.demoted == []
    assert sorted(full_counters(store, [m.id for m in r.injected])) == [(1, 1, 0, 0)] * len(r.injected)


@pytest.mark.parametrize("agent, judge, why", [
    (crashing_agent, judge_trajectory, "harness crash"),
    (good_agent, judge_trajectory, "abstained"),
    (good_agent, lambda a, llm=None: Judgment(False, "rate limited", 0.9, failure_class="extrinsic", cause="rate limit"), "extrinsic"),
])
def test_unattributable_runs_never_demote(store, agent, judge, why):
    "A memory one failure away from demotion is shown in runs that blame nobody: it stays active, only its injection is counted."
    for m in store:
        for _ in range(3):
            store.record_outcome([m.id], False)
    r = run_with_memory(TASK, agent, store, judge=judge, extractor=no_lessons, k=2)
    assert r.injected and r.demoted == [], why
    assert [m.status for m in store] == ["active"] * 2 and len(store) == 2
    assert [(m.failure_count, m.injected_count) for m in store] == [(3, 1)] * 2
    out = loop_events(store, r.trajectory.id)["loop.outcome"]
    assert out["attributed"] is False and out["demoted"] == []
    # the control: one attributed failure now demotes both (4 failures of 4 uses)
    r = run_with_memory(TASK, good_agent, store, judge=failed_judge, extractor=no_lessons, k=2)
    assert sorted(r.demoted) == sorted(m.id for m in r.injected) and len(store) == 0
    assert sorted(loop_events(store, r.trajectory.id)["loop.outcome"]["demoted"]) == sorted(r.demoted)
    q = list(store.items(status="quarantined"))
    assert all(m.status_reasons[0].startswith("harmful: failed 4 of 4 uses") for m in q) and len(q) == 2


def test_demote_false_keeps_a_failing_memory_active_and_success_never_demotes(store):
    ids = [m.id for m in store]
    for _ in range(5):
        r = run_with_memory(TASK, good_agent, store, judge=failed_judge, extractor=no_lessons, k=2, demote=False)
        assert r.demoted == []
    assert [m.status for m in store.get_many(ids)] == ["active"] * 2 and len(store) == 2
    assert not store.events(kind="quarantine")
    # procmem.lifecycle agrees they are harmful: the next attributed failure with demote on quarantines them
    r = run_with_memory(TASK, good_agent, store, judge=failed_judge, extractor=no_lessons, k=2)
    assert sorted(r.demoted) == sorted(ids) and r.summary()["demoted"] == 2


def test_a_demoted_memory_is_never_injected_again():
    from procmem.simulation import ScriptedAgent, SIM_TASKS, sim_store, truth_judge, null_extractor
    from procmem.core import utc_now
    s = sim_store(["flaky-test"], created_at=utc_now())
    agent = ScriptedAgent(seed=0, p_helpful=1.0, p_harmful=0.0)
    runs = [run_with_memory(t, agent, s, k=1, judge=truth_judge, extractor=null_extractor, use_utility=False)
            for t in SIM_TASKS["flaky-test"] * 3]
    shown = [r.injected[0].id.rsplit("-", 1)[1] for r in runs]
    assert shown == ["harmful"] * 4 + ["helpful"] * 5
    assert [bool(r.demoted) for r in runs] == [False] * 3 + [True] + [False] * 5
    assert s.get("sim-flaky-test-harmful").status == "quarantined"
    assert s.get("sim-flaky-test-harmful").injected_count == 4


def test_a_read_only_store_is_judged_but_never_written(tmp_path):
    "procmem's contract: read-only means read-only. The run works and is judged; nothing is counted, learned, demoted or logged."
    from procmem.store import ReadOnlyWarning
    path = tmp_path / "bank.db"
    rw = MemoryStore(path)
    rw.add_many([MemoryItem("Sum table rows after checking the columns", "When a task asks to sum the rows of a sales table.",
                            "1. List the table's columns.\n2. Pick the sales column.\n3. Sum its rows.", tags=["sales", "table", "sum"])])
    for _ in range(3):
        rw.record_outcome([m.id for m in rw], False)  # one failure away from demotion
    before = (path.stat().st_mtime_ns, len(rw.events()))
    ro = MemoryStore(path, readonly=True)
    with pytest.warns(ReadOnlyWarning):
        r = run_with_memory(TASK, good_agent, ro, judge=failed_judge)  # the default extractor would learn
    assert r.injected and r.success is False and r.demoted == [] and r.learned.stored == []
    out = [e for e in r.events if e["kind"] == "loop.outcome"][0]
    assert (out["attributed"], out["skipped"]) == (False, "read-only store")
    again = MemoryStore(path)
    assert [(m.access_count, m.injected_count, m.failure_count, m.status) for m in again] == [(0, 0, 3, "active")]
    assert (path.stat().st_mtime_ns, len(again.events())) == before


def test_a_fixed_now_stamps_the_counters_and_a_success_is_recorded_with_the_events(store):
    "run_with_memory(now=...) on a simulated clock: last_used_at is that time; a success counts once, logged with the events."
    at = "2026-03-01T12:00:00+00:00"
    r = run_with_memory(TASK, good_agent, store, judge=ok_judge, extractor=no_lessons, k=2, now=at)
    assert r.injected and r.success is True
    assert [(m.use_count, m.success_count, m.last_used_at) for m in store] == [(1, 1, at)] * 2
    outcome_events = store.events(kind="outcome")
    assert len(outcome_events) == 1 and outcome_events[0]["detail"]["success"] is True
    assert sorted(outcome_events[0]["ids"]) == sorted(m.id for m in r.injected)
    # a failure is recorded before demotion reads it, also stamped with the run's time
    later = "2026-03-02T12:00:00+00:00"
    r = run_with_memory(TASK, good_agent, store, judge=failed_judge, extractor=no_lessons, k=2, now=later)
    assert [(m.use_count, m.failure_count, m.last_used_at) for m in store] == [(2, 1, later)] * 2
