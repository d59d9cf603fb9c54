"""Contract tests of procmem.agent_logs and procmem.tool_logs (issue 7, "Formats" and "Labels and ids"): each format reads
its real fixture, written by the other project (tests/fixtures/trajectories/<project>/, licences in
each LICENSE-NOTICE.md), through the registry that `procmem learn` uses; bad records are reported,
not fatal; ids and labels come from the sources' own keys."""
import copy
import json
from pathlib import Path

import fastcore.test as ft
import pytest

from procmem.agent_logs import from_minisweagent, from_sweagent
from procmem.tool_logs import from_openhands, from_taubench  # also registers their formats
from procmem.ingest import detect_trajectory_format, read_logs
from procmem.trajectory import LOG_FORMATS, LogKeys, RecordError, Trajectory, hide_outcome, label_outcome

FIX = Path(__file__).resolve().parent / "fixtures" / "trajectories"
MSWEA, SWEA, OH, TAU = (FIX / d for d in ("mini-swe-agent", "swe-agent", "openhands", "tau-bench"))
SHARED_MSWEA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trajectories" / "minisweagent_test_output.json"


def load(p):
    return json.loads(Path(p).read_text(encoding="utf-8"))


def only(report):
    "The one file report of `report`, which must have been read without skips."
    (f,) = report.files
    assert f.error is None and f.skipped == [], f.to_dict()
    return f


@pytest.mark.parametrize("folder", ["mini-swe-agent", "swe-agent", "openhands", "tau-bench"])
def test_fixture_folder_has_licence_notice(folder):
    notice = (FIX / folder / "LICENSE-NOTICE.md").read_text(encoding="utf-8")
    assert "MIT" in notice and "https://github.com/" in notice and "commit" in notice


# --- mini-SWE-agent --------------------------------------------------------------------------------

def test_minisweagent_v2_text_format_real_file():
    p = MSWEA / "github_issue_textbased.traj.json"
    raw = load(p)
    assert raw["trajectory_format"] == "mini-swe-agent-1.1" and raw["messages"][-1]["role"] == "exit"
    f = only(rep := read_logs(p))
    (t,) = rep.trajectories
    assert f.format == "mini-swe-agent" == t.metadata["format"] and detect_trajectory_format(p) == "mini-swe-agent"
    n_assistant = sum(m["role"] == "assistant" for m in raw["messages"])
    assert len(t.steps) == n_assistant == 10
    assert not any("format error" in s.action for s in t.steps)  # the bug this issue reports
    assert all(s.name == "bash" and s.args["command"] == s.action for s in t.steps)
    assert [s.args["command"] for s in t.steps] == [m["extra"]["actions"][0]["command"] for m in raw["messages"] if m["role"] == "assistant"]
    assert [i for i, s in enumerate(t.steps) if s.error] == [0, 7]
    assert "ZeroDivisionError" in t.steps[7].error
    assert t.task.startswith("GitHub Issue: SyntaxError: invalid syntax") and "You can execute bash" not in t.task
    assert t.answer == raw["info"]["submission"] and t.answer.startswith("diff --git")
    assert t.outcome is None and t.metadata["exit_status"] == "Submitted"  # submitted is not resolved
    assert t.metadata["mini_version"] == "2.4.6" and "submission" not in t.metadata


def test_minisweagent_v2_tool_calls_real_file():
    p = MSWEA / "github_issue_toolcall_limits.traj.json"
    raw = load(p)
    roles = [m["role"] for m in raw["messages"]]
    assert roles.count("tool") == 5 and roles[-1] == "exit"
    t = from_minisweagent(p)
    calls = [json.loads(m["tool_calls"][0]["function"]["arguments"])["command"] for m in raw["messages"] if m.get("tool_calls")]
    assert [s.action for s in t.steps] == calls and all(s.name == "bash" for s in t.steps)
    obs = [json.loads(m["content"])["output"] for m in raw["messages"] if m["role"] == "tool"]
    assert [s.observation for s in t.steps] == obs  # the JSON bodies decoded
    assert t.steps[0].error.startswith("returncode 1: cat: ") and [s.error is None for s in t.steps[1:]] == [True] * 4
    assert t.answer is None and t.metadata["exit_status"] == "LimitsExceeded"
    # stopped without submitting: a failure label, through the one label mapping
    assert t.outcome == label_outcome("LimitsExceeded", "info.exit_status") == {
        "success": False, "label_key": "info.exit_status", "label": "LimitsExceeded"}


def test_minisweagent_responses_api_items():
    p = MSWEA / "github_issue_responses_api.traj.json"
    raw = load(p)
    kinds = {m.get("object") or m.get("type") for m in raw["messages"] if "role" not in m}
    assert kinds == {"response", "function_call_output"}
    (t,) = read_logs(p).trajectories
    text = from_minisweagent(MSWEA / "github_issue_textbased.traj.json")
    assert [s.args for s in t.steps] == [s.args for s in text.steps] and len(t.steps) == 10
    calls = [x["call_id"] for m in raw["messages"] if m.get("object") == "response" for x in m["output"] if x["type"] == "function_call"]
    outs = [json.loads(m["output"])["output"] for m in raw["messages"] if m.get("type") == "function_call_output"]
    assert len(calls) == 10 and [s.observation for s in t.steps[:9]] == outs  # the 10th is the submission
    assert [i for i, s in enumerate(t.steps) if s.error] == [0, 7]
    assert t.answer == raw["info"]["submission"] == t.steps[-1].observation and t.outcome is None


def test_minisweagent_bare_message_list_from_its_test_data():
    p = MSWEA / "github_issue_messages.json"
    assert isinstance(load(p), list)
    (t,) = read_logs(p).trajectories
    assert t.metadata["format"] == "mini-swe-agent" and len(t.steps) == 10
    assert t.steps[-1].args["command"].startswith("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    assert t.steps[-1].observation.startswith("diff --git a/tests/missing_colon.py")


def test_minisweagent_v1_file_still_reads_the_same():
    t = from_minisweagent(FIX / "minisweagent_test_output.json")
    assert len(t.steps) == 10 and [i for i, s in enumerate(t.steps) if s.error] == [0, 7]
    assert t.metadata["trajectory_format"] == "mini-swe-agent-1" and t.outcome is None
    if not SHARED_MSWEA.exists():
        pytest.skip(f"{SHARED_MSWEA} not found")
    assert from_minisweagent(SHARED_MSWEA).steps == t.steps


def test_minisweagent_unreadable_file_is_a_record_error_not_an_exception():
    bad = load(MSWEA / "github_issue_textbased.traj.json")
    bad["messages"] = [m for m in bad["messages"] if m["role"] != "user"]
    out = list(LOG_FORMATS["mini-swe-agent"].read(bad, LogKeys()))
    assert out == [RecordError(0, "mini-SWE-agent trajectory: no user message holds the task")]


# --- SWE-agent -------------------------------------------------------------------------------------

def test_sweagent_function_calling_traj_real_file():
    p = SWEA / "6e44b9__sweagenttestrepo-1c2844.traj"
    raw = load(p)
    f = only(rep := read_logs(p))
    (t,) = rep.trajectories
    assert f.format == "swe-agent" and LOG_FORMATS["swe-agent"].exts == (".traj",)
    assert [s.action for s in t.steps] == [x["action"].strip() for x in raw["trajectory"]]
    assert [s.observation for s in t.steps] == [x["observation"] for x in raw["trajectory"]]
    tool_names = [m["tool_calls"][0]["function"]["name"] for m in raw["history"] if m.get("tool_calls")]
    assert [s.name for s in t.steps][: len(tool_names)] == tool_names == ["find_file", "open", "edit", "bash"]
    assert t.steps[1].args == {"path": "/SWE-agent__test-repo/tests/missing_colon.py"}
    assert t.id == "SWE-agent__test-repo-i1"  # replay_config.problem_statement.id
    assert t.task.startswith("SyntaxError: invalid syntax") and "INSTRUCTIONS" not in t.task
    assert t.answer == raw["info"]["submission"].strip() and t.outcome is None  # "submitted" states nothing
    assert t.metadata["model_stats"]["api_calls"] == 5 and t.metadata["exit_status"] == "submitted"


def test_sweagent_old_traj_skips_the_demonstration():
    raw = load(SWEA / "swe-agent__test-repo-i1.traj")
    assert raw["history"][1].get("is_demo") is True
    t = from_sweagent(raw)
    assert "DEMONSTRATION" not in t.task and "TimeDelta" not in t.task
    assert t.task.startswith("SyntaxError: invalid syntax")
    assert [s.name for s in t.steps] == ["find_file", "open", "edit", "python", "submit"]


def test_sweagent_demonstration_has_only_a_history():
    p = SWEA / "function_calling_simple.traj"
    raw = load(p)
    assert list(raw) == ["history"]
    (t,) = only(rep := read_logs(p)) and rep.trajectories
    assert t.metadata["format"] == "swe-agent"
    actions = [m["action"] for m in raw["history"] if m["role"] == "assistant"]
    assert [s.action for s in t.steps] == [a.strip() for a in actions]
    assert [s.name for s in t.steps] == ["find_file", "open", "edit", "bash", "submit"]
    assert t.steps[3].observation.startswith("8.2") and t.answer is None


def test_sweagent_labels_ids_and_bad_records():
    raw = load(SWEA / "swe-agent__test-repo-i1.traj")
    resolved = {**raw, "instance_id": "x__y-1", "resolved": True}
    t = next(LOG_FORMATS["swe-agent"].read(resolved, LogKeys()))
    assert (t.id, t.outcome) == ("x__y-1", {"success": True, "label_key": "resolved", "label": True})
    assert t.metadata["environment"] == "swe_main"  # unknown keys kept
    bad = copy.deepcopy(raw)
    del bad["trajectory"][2]["action"]
    (e,) = LOG_FORMATS["swe-agent"].read(bad, LogKeys())
    assert e == RecordError(0, "SWE-agent trajectory: trajectory[2] has no action text")


# --- OpenHands -------------------------------------------------------------------------------------

def test_openhands_event_stream_real_file():
    p = OH / "wrong_initial_state.json"
    raw = load(p)
    f = only(rep := read_logs(p))
    (t,) = rep.trajectories
    assert f.format == "openhands" == t.metadata["format"]
    agent_actions = [e for e in raw if e["source"] == "agent" and "action" in e]
    assert [s.name for s in t.steps] == [e["action"] for e in agent_actions] == ["read", "run", "read", "finish"]
    by_cause = {e["cause"]: e["content"] for e in raw if "cause" in e}
    assert [s.observation for s in t.steps[:3]] == [by_cause[e["id"]] for e in agent_actions[:3]]
    assert t.task == raw[0]["args"]["content"] == "Please rename game_2048.py to 2048.py"
    assert t.steps[1].action == "mv /workspace/game_2048.py /workspace/2048.py" and t.steps[1].error is None
    assert t.steps[0].thought == raw[1]["args"]["thought"]
    assert t.answer.startswith("The file has been successfully renamed") and t.outcome is None


def test_openhands_evaluation_output_jsonl():
    p = OH / "multi_swe_bench_output_excerpt.jsonl"
    raw = json.loads(p.read_text(encoding="utf-8").splitlines()[0])
    f = only(rep := read_logs(p))
    (t,) = rep.trajectories
    assert f.format == "openhands-output" and t.id == raw["instance_id"] == "ponylang__ponyc-4595"
    assert t.task == raw["instruction"].strip() and t.answer == raw["test_result"]["git_patch"].strip()
    hist = raw["history"]
    n_steps = sum(1 for e in hist if e.get("source") == "agent" and e.get("action") not in (None, "system", "think"))
    assert len(t.steps) == n_steps == 22
    codes = [e["extras"]["metadata"]["exit_code"] for e in hist if e.get("observation") == "run"]
    assert sum(1 for s in t.steps if s.error) == sum(1 for c in codes if c != 0) == 5
    assert t.steps[-1].name == "finish" and t.outcome is None  # no report in this record
    assert {"instance", "metadata", "metrics", "error"} <= set(t.metadata)


def test_openhands_bad_line_is_reported_with_its_line_number(tmp_path):
    good = (OH / "multi_swe_bench_output_excerpt.jsonl").read_text(encoding="utf-8").splitlines()[0]
    p = tmp_path / "output.jsonl"
    p.write_text(good + "\n" + json.dumps({"instance_id": "b", "history": "oops"}) + "\n" + good + "\n")
    rep = read_logs(p)
    (f,) = rep.files
    assert f.format == "openhands-output" and f.read == 2
    assert f.skipped == [RecordError(2, "OpenHands events: expected a list of events, got str")]


def test_openhands_graded_record_outcome():
    rec = json.loads((OH / "multi_swe_bench_output_excerpt.jsonl").read_text(encoding="utf-8").splitlines()[0])
    rec["test_result"]["report"] = {"resolved": True}
    t = from_openhands(rec)
    assert t.outcome == {"success": True, "label_key": "test_result.report.resolved", "label": True}
    assert "labels" in t.metadata and "labels" not in hide_outcome(t).metadata


# --- tau-bench -------------------------------------------------------------------------------------

def test_taubench_results_real_file():
    p = TAU / "gpt-4o-airline_excerpt.json"
    raw = load(p)
    f = only(rep := read_logs(p))
    ts = rep.trajectories
    assert f.format == "tau-bench" and f.read == len(raw) == 4
    assert [t.id for t in ts] == [f"{r['task_id']}#{r['trial']}" for r in raw]
    assert [t.outcome["success"] for t in ts] == [r["reward"] == 1 for r in raw] == [True, False, True, False]
    for t, r in zip(ts, raw):
        calls = [c["function"]["name"] for m in r["traj"] for c in m.get("tool_calls") or []]
        assert [s.name for s in t.steps if s.name != "respond"] == calls
        assert t.task == next(m["content"] for m in r["traj"] if m["role"] == "user")
        assert t.metadata["user_instruction"] == r["info"]["task"]["instruction"]
        assert "reward" not in json.dumps(hide_outcome(t).metadata)  # ground truth only under labels


def test_taubench_partial_reward_is_a_failure_and_bad_records_are_skipped():
    raw = load(TAU / "gpt-4o-airline_excerpt.json")
    assert from_taubench({**raw[0], "reward": 0.5}).outcome == {"success": False, "label_key": "reward", "label": 0.5}
    out = list(LOG_FORMATS["tau-bench"].read([raw[0], {"task_id": 3, "reward": 1.0, "traj": None}, raw[1]], LogKeys()))
    assert [type(x).__name__ for x in out] == ["Trajectory", "RecordError", "Trajectory"]
    assert out[1] == RecordError(1, "tau-bench result: expected a dict with a 'traj' list of messages")


def test_user_keys_override_the_guessed_ones():
    raw = load(TAU / "gpt-4o-airline_excerpt.json")
    (t,) = LOG_FORMATS["tau-bench"].read(raw[:1], LogKeys(task="info.task.instruction", id="info.task.user_id"))
    assert t.task == raw[0]["info"]["task"]["instruction"] and t.id == raw[0]["info"]["task"]["user_id"]


def test_ids_are_stable_without_an_id_key():
    mine = [MSWEA, SWEA, OH, TAU]
    one = [t.id for t in read_logs(mine).trajectories]
    two = [t.id for t in read_logs(mine).trajectories]
    assert one == two and len(set(one)) == len(one)
    assert "sha1-" in " ".join(one) and "38#2" in one and "SWE-agent__test-repo-i1" in one


def test_formats_do_not_claim_each_others_files():
    mine = ("mini-swe-agent", "swe-agent", "openhands", "tau-bench")
    files = [p for d in (MSWEA, SWEA, OH, TAU) for p in d.iterdir() if p.suffix in (".json", ".traj")]
    files += [FIX / "openai_chat.json", FIX / "anthropic_transcript.json"]
    claims = {p.name: [n for n in mine if LOG_FORMATS[n].detect(load(p))] for p in files}
    assert claims.pop("openai_chat.json") == [] and claims.pop("anthropic_transcript.json") == []
    assert all(len(v) == 1 for v in claims.values()), claims


def _paths(x, path=()):
    "Every path (tuple of keys and indices) into a JSON value."
    yield path
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        yield from _paths(v, path + (k,))


def test_damaged_real_files_never_raise_from_detect_or_read():
    """Contract of a LogFormat: detect never raises and answers a bool; read yields only Trajectory or
    RecordError. Checked on 100 seeded damaged copies of each real fixture (3 values each replaced by
    junk of the wrong type, or deleted)."""
    import random

    junk = [None, 0, -1, 1.5, True, "", "x", [], {}, [1], {"a": None}, "```mswea_bash_command\nls\n```", Ellipsis]
    mine = ("mini-swe-agent", "swe-agent", "openhands", "tau-bench")
    rng, reads = random.Random(7), 0
    for p in [p for d in (MSWEA, SWEA, OH, TAU) for p in sorted(d.iterdir()) if p.suffix in (".json", ".traj")]:
        data = load(p)
        paths = [q for q in _paths(data) if q]
        for _ in range(100):
            d = copy.deepcopy(data)
            for q in rng.sample(paths, 3):
                try:
                    parent = d
                    for k in q[:-1]:
                        parent = parent[k]
                    v = rng.choice(junk)
                    if v is Ellipsis:
                        del parent[q[-1]]
                    else:
                        parent[q[-1]] = v
                except (KeyError, IndexError, TypeError):
                    pass  # an earlier change removed this path
            for name in mine:
                ok = LOG_FORMATS[name].detect(d)
                assert isinstance(ok, bool), (p.name, name)
                if ok:
                    reads += 1
                    assert all(isinstance(x, (Trajectory, RecordError)) for x in LOG_FORMATS[name].read(d, LogKeys()))
    assert reads > 900  # most damaged copies are still recognised, so read really ran
