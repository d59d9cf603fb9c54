"""Trajectory adapters on the real shared data, label hygiene, JSONL round trips, and a property test that
the artifact stays bounded for any trajectory, however large.

The real files live in `shared/data/` beside the repository (see its README); a test that needs one is
skipped, with the path in the reason, only when that file is absent. Small copies are in
`tests/fixtures/trajectories/` (see NOTICE.md there)."""
import json, re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from procmem.trajectory import ARTIFACT_LIMITS, LABEL_KEYS, Step, Trajectory, TrajectoryError, detect_loop, extract_trajectory_artifact, hide_outcome
from procmem.ingest import detect_trajectory_format, read_logs, read_trajectories
from procmem.chat_logs import from_anthropic_messages, from_openai_chat
from procmem.agent_logs import from_minisweagent
from procmem.research_logs import from_reflexion_log, from_rlm_iterations

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
FIXTURES = ROOT / "tests" / "fixtures" / "trajectories"
REFLEXION = SHARED / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt"
MINISWE = SHARED / "trajectories" / "minisweagent_test_output.json"
ALFWORLD = SHARED / "reflexion" / "alfworld"
LABEL_TEXTS = ("Answer is CORRECT", "Answer is INCORRECT", "Correct answer")


def _need(path: Path) -> Path:
    if not path.exists(): pytest.skip(f"shared data file not found: {path} (expected beside the repository, see shared/data/README.md)")
    return path


@pytest.fixture(scope="module")
def reflexion():
    return from_reflexion_log(_need(REFLEXION))


# --- Reflexion ---------------------------------------------------------------------------------------

def test_reflexion_counts_match_each_trial_summary(reflexion):
    text = REFLEXION.read_text(encoding="utf-8")
    summaries = [tuple(map(int, m)) for m in re.findall(r"^Trial summary: Correct: (\d+), Incorrect: (\d+), Halted: (\d+)", text, re.M)]
    assert summaries == [(32, 51, 17), (42, 43, 14), (48, 41, 11), (50, 39, 11), (51, 35, 13)]
    got = Counter((t.metadata["trial"], t.metadata["section"]) for t in reflexion)
    parsed = [tuple(got[(trial, s)] for s in ("correct", "incorrect", "halted")) for trial in range(1, 6)]
    assert parsed == summaries
    assert len(reflexion) == sum(map(sum, summaries)) == 498 == text.count("\nQuestion:")


def test_reflexion_outcomes_answers_and_steps(reflexion):
    for t in reflexion:
        sec = t.metadata["section"]
        assert t.outcome == {"success": sec == "correct", "halted": sec == "halted"}
        assert t.source == "web" and t.steps and t.metadata["gold_answer"] is not None
        finishes = [s.args for s in t.steps if s.name == "Finish"]
        if sec == "halted": assert t.answer is None
        else: assert t.answer == finishes[-1]
        assert "You have attempted to answer" not in t.task
        for s in t.steps:
            assert s.name in ("Search", "Lookup", "Finish", "Compare") and s.action == f"{s.name}[{s.args}]"
    assert sum(len(t.steps) for t in reflexion) == 1896
    assert sum(bool(t.metadata["reflections"]) for t in reflexion) == 266
    assert len({t.id for t in reflexion}) == len(reflexion)
    # one question keeps its question_id across trials (for contrastive extraction)
    by_q = Counter(t.metadata["question_id"] for t in reflexion)
    assert len(by_q) == 100 and set(by_q.values()) == {4, 5}  # trials 2 and 5 list 99 agents


def test_reflexion_labels_never_reach_steps_or_the_hidden_artifact(reflexion):
    for t in reflexion:
        for s in t.steps:
            for text in (s.thought, s.action, s.observation, s.error or ""):
                assert not any(label in text for label in LABEL_TEXTS), (t.id, text[:200])
        assert not any(label in t.task for label in LABEL_TEXTS)
        h = hide_outcome(t)
        assert h.outcome is None and not LABEL_KEYS & set(h.metadata)
        js = extract_trajectory_artifact(h).to_json()
        assert not any(label in js for label in LABEL_TEXTS) and '"outcome": null' in js
        assert t.outcome is not None  # the original keeps its ground truth


def test_reflexion_loops_mark_halted_runs(reflexion):
    rate = {sec: sum(detect_loop(t.steps) is not None for t in reflexion if t.metadata["section"] == sec)
            / sum(t.metadata["section"] == sec for t in reflexion) for sec in ("correct", "incorrect", "halted")}
    assert rate["correct"] < 0.02 and rate["halted"] > 0.1


def test_reflexion_excerpt_fixture_matches_the_real_log(reflexion):
    excerpt = from_reflexion_log(FIXTURES / "reflexion_excerpt.txt")
    real = {(t.metadata["trial"], t.task): t for t in reflexion}
    assert len(excerpt) == 8
    for t in excerpt:
        r = real[(t.metadata["trial"], t.task)]
        assert (t.steps, t.answer, t.outcome, t.id) == (r.steps, r.answer, r.outcome, r.id)


# --- mini-SWE-agent ----------------------------------------------------------------------------------

def test_minisweagent_real_file():
    path = _need(MINISWE)
    raw = json.loads(path.read_text())
    t = from_minisweagent(path)
    n_assistant = sum(m["role"] == "assistant" for m in raw["messages"])
    assert len(t.steps) == n_assistant == 10
    assert all(s.name == "bash" and s.args == {"command": s.action} for s in t.steps)
    assert t.task.startswith("I'm running missing_colon.py") and "<pr_description>" not in t.task
    assert t.answer == raw["info"]["submission"] and t.outcome is None
    assert [i for i, s in enumerate(t.steps) if s.error] == [0, 7]
    assert "ZeroDivisionError" in t.steps[7].error
    assert t.metadata["exit_status"] == "Submitted" and t.metadata["model_stats"]["api_calls"] == 10
    assert detect_trajectory_format(path) == "mini-swe-agent"
    assert read_trajectories(path)[0].steps == t.steps
    a = extract_trajectory_artifact(t)
    assert a.steps_total == 10 and a.converged and a.errors_total == 2 and len(a.errors) == 2


# --- ALFWorld ----------------------------------------------------------------------------------------

def test_alfworld_summaries_are_lessons_not_trajectories():
    files = sorted(_need(ALFWORLD).glob("env_results_trial_*.json"))
    assert len(files) == 8
    for f in files:
        rep = read_logs([f])
        assert rep.trajectories == [] and read_trajectories(f) == []
        assert rep.files[0].format == "reflexion_alfworld"
        raw = json.loads(f.read_text())
        if any(e.get("memory") for e in raw):  # reflections become candidate pitfalls for the gates
            assert rep.candidates and all(m.source_type == "failure" for m in rep.candidates)


# --- chat transcripts --------------------------------------------------------------------------------

def test_anthropic_fixture():
    t, = read_trajectories(FIXTURES / "anthropic_transcript.json")
    raw = json.loads((FIXTURES / "anthropic_transcript.json").read_text())
    assert t.id == "anthropic-demo-1" and t.source == "web" and t.outcome == {"success": True}
    assert t.answer == "2004" and len(t.steps) == 3
    assert t.steps[0].thought == "Find her husband first.\nI'll look up Jaclyn Stapp."
    assert t.steps[1].error == "HTTP 503 Service Unavailable" and t.steps[2].observation.endswith("disbanded in 2004.")
    assert from_anthropic_messages(raw["messages"]).steps == t.steps


def test_openai_fixture():
    t, = read_trajectories(FIXTURES / "openai_chat.json")
    assert t.task == "Convert 100 USD to EUR and to JPY." and t.answer == "100 USD is 92 EUR and 15,130 JPY."
    assert [(s.name, s.args["to"]) for s in t.steps] == [("get_rate", "EUR"), ("get_rate", "JPY"), ("get_rate", "JPY")]
    assert t.steps[0].thought == "I'll look up both rates." and t.steps[1].error == "rate service timeout"
    raw = json.loads((FIXTURES / "openai_chat.json").read_text())
    assert from_openai_chat(raw["messages"]).steps == t.steps


@pytest.mark.parametrize("bad, match", [
    ("not a list", "expected a list of messages"),
    ([{"role": "user", "content": "q"}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "?"}]}],
     "no earlier unanswered tool_use"),
    ([{"role": "user", "content": {"text": "q"}}], "expected a string or a list of blocks"),
    ([{"content": "no role"}], "has no role"),
])
def test_malformed_anthropic_transcripts(bad, match):
    with pytest.raises(TrajectoryError, match=match): from_anthropic_messages(bad)


# --- generic JSONL -----------------------------------------------------------------------------------

def test_generic_jsonl_round_trip(tmp_path):
    runs = read_trajectories(FIXTURES / "generic.jsonl")
    assert [t.id for t in runs] == ["gen-1", "gen-2", "gen-3"]
    runs.append(Trajectory("Ünïcode task ✓", [Step("a\nb", "out\x00put", "think", "err", "tool", {"k": [1, None, "é"]})],
                           None, "x-1", {"success": False, "note": "n"}, "user", {"trial": 2, "nested": {"a": [1]}}))
    f = tmp_path / "runs.jsonl"
    f.write_text("".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in runs), encoding="utf-8")
    assert read_trajectories(f) == runs
    assert [t.to_dict() for t in read_trajectories(f)] == [t.to_dict() for t in runs]


def test_bad_jsonl_names_file_and_line(tmp_path):
    f = tmp_path / "runs.jsonl"
    f.write_text('{"task": "a", "steps": []}\n\n{"task": "b", "steps": [{"observation": "no action"}]}\n')
    with pytest.raises(TrajectoryError, match=r"runs\.jsonl:3: steps\[0\]: Step\.action: is missing"): read_trajectories(f)
    f.write_text('{"task": "a", "steps": []}\n{"task": \n')
    with pytest.raises(TrajectoryError, match=r"runs\.jsonl:2: invalid JSON"): read_trajectories(f)


def test_unknown_format_and_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing to see")
    with pytest.raises(TrajectoryError, match="unknown trajectory format"): read_trajectories(tmp_path / "notes.txt")
    top = [f for f in sorted(FIXTURES.iterdir()) if f.is_file() and f.suffix in (".json", ".jsonl", ".txt")]
    n = sum(len(read_trajectories(f)) for f in top)
    # generic.jsonl, anthropic, openai, mini-SWE-agent, the Reflexion excerpt (8 agents, one re-listed: 7 runs)
    assert n == 3 + 1 + 1 + 1 + 7
    rep = read_logs([FIXTURES])  # the whole tree: every file read or reported, none fatal
    assert len(rep.trajectories) > n and not [s for f in rep.files for s in f.skipped if not s.expected]
    assert not [f.path for f in rep.files if f.error]


# --- the seed's call ---------------------------------------------------------------------------------

class _Result:
    def __init__(self, stdout, stderr=""): self.stdout, self.stderr = stdout, stderr

class _Block:
    def __init__(self, code, result): self.code, self.result = code, result

class _Iteration:
    def __init__(self, response, blocks): self.response, self.code_blocks = response, blocks


def test_seed_call_with_rlm_objects():
    iters = [_Iteration(f"try {i}", [_Block(f"# attempt {i}\nx = search('thing')", _Result("", "NameError: name 'search' is not defined"))])
             for i in range(12)]
    iters.append(_Iteration("done", [_Block("print(answer)", _Result("42"))]))
    a = extract_trajectory_artifact("Find the thing", "42", iters, {"answer": 42, "_hidden": 1, "json": json})
    assert a.steps_total == 13 and a.converged and a.errors_total == 12
    assert a.errors == [{"error": "NameError: name 'search' is not defined", "count": 12, "first_step": 1}]
    assert [k["step"] for k in a.key_steps] == [1, 2, 3, 4, 5, 6, 10, 11, 12, 13]
    assert a.key_steps[0]["action"] == "attempt 0 … (+1 lines)"
    assert a.variables == {"answer": "int: 42"}
    assert a.loop is None  # the comment line differs each time, so the code is not literally repeated
    assert from_rlm_iterations("Find the thing", "42", iters).steps[-1].observation == "42"


# --- the artifact is bounded for any input ----------------------------------------------------------

_pieces = st.text(min_size=0, max_size=40)  # any Unicode, control characters included


@st.composite
def huge_trajectories(draw):
    pool = [draw(_pieces) * draw(st.integers(0, 60_000)) for _ in range(draw(st.integers(1, 4)))]  # up to ~2.4M characters each
    pick = lambda: pool[draw(st.integers(0, len(pool) - 1))]
    n = draw(st.integers(0, 3_000))
    kinds = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), min_size=1, max_size=16))
    steps = []
    for i in range(n):
        err, k = kinds[i % len(kinds)]
        action = pick() if pick().strip() else f"act {k}"
        if not action.strip(): action = "act"
        steps.append(Step(action, pick(), pick(), pick() or "e" if err else None, name=f"tool{k}", args={"a": pick(), "k": k}))
    task = pick() if pick().strip() else "task"
    return Trajectory(task if task.strip() else "task", steps, draw(st.none() | st.just(pick())),
                      outcome=draw(st.none() | st.just({"success": False, "detail": pick(), "more": [pick()]})),
                      source=draw(st.none() | st.just("web")))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(huge_trajectories(), st.none() | st.dictionaries(st.text(max_size=30), st.text(max_size=200), max_size=40))
def test_artifact_is_bounded_for_any_trajectory(t, ns):
    a = extract_trajectory_artifact(t, ns=ns)
    js = a.to_json()
    assert len(js) <= ARTIFACT_LIMITS["json_chars"]
    assert len(a.key_steps) <= 10 and len(a.errors) <= 5 and a.steps_total == len(t.steps)
    steps = [k["step"] for k in a.key_steps]
    assert steps == sorted(set(steps)) and all(1 <= s <= len(t.steps) for s in steps)
    assert not re.search(r"[\x00-\x08\x0b-\x1f]", js)  # no control characters reach a prompt
    assert a.converged == (bool(t.answer and t.answer.strip()) and not (t.steps and t.steps[-1].error))
    json.loads(js)


def test_artifact_bounded_for_ten_thousand_megabyte_steps():
    mb = '"\\\n\x00é<procmem-memories>' * 50_000  # ~1.2M characters that JSON escapes, with a forged delimiter
    big = Trajectory(mb, [Step(mb + "x", mb, mb, mb if i % 2 else None, "t", {"q": mb}) if i % 100 == 0
                          else Step("step", mb, error=mb if i % 3 else None) for i in range(10_000)], mb,
                     outcome={"success": False, "why": mb}, source=mb)
    js = extract_trajectory_artifact(big, ns={f"v{i}": mb for i in range(100)}).to_json()
    assert len(js) <= ARTIFACT_LIMITS["json_chars"] and "<procmem-memories>" not in js
