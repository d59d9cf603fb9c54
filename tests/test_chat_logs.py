"""Contracts of procmem.chat_logs on real files written by other projects: LangChain/LangGraph messages
(recorded LangGraph.js runs in vercel/ai and LangChain's own serializations of them), OpenAI chats and
Anthropic Messages transcripts (vercel/ai recordings). Each format is
read through the registry (`LOG_FORMATS`) as `procmem learn` reads it, and through `read_logs`.
Origins and licences: `tests/fixtures/trajectories/<format>/LICENSE-NOTICE.md`."""
import json
from pathlib import Path

import fastcore.test as ft
import pytest

from procmem.chat_logs import from_anthropic_messages, from_langchain_messages, from_openai_chat
from procmem.ingest import read_logs
from procmem.trajectory import (LOG_FORMATS, LogKeys, RecordError, Trajectory, TrajectoryError,
                                hide_outcome)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "trajectories"
LC, OA, AN = (FIXTURES / d for d in ("langchain", "openai", "anthropic"))
NO_RESULT = "no tool result: the transcript ends before the tool answered"
MINE = ("langchain", "langchain-jsonl", "openai", "openai-jsonl", "anthropic", "anthropic-jsonl")


def load(path: Path):
    "The fixture as the registry hands it to a format: parsed JSON, or (line, record) pairs."
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".jsonl":
        return json.loads(text)
    return [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def read(name: str, path: Path, keys: LogKeys = LogKeys()) -> list:
    return list(LOG_FORMATS[name].read(load(path), keys))


def claimed_by(path: Path) -> list:
    kind = "jsonl" if path.suffix == ".jsonl" else "json"
    return [n for n in MINE if LOG_FORMATS[n].kind == kind and LOG_FORMATS[n].detect(load(path))]


# --- detection ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(p for d in (LC, OA, AN) for p in d.glob("*.json*")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_real_fixture_is_claimed_by_exactly_its_format(path):
    family = path.parent.name
    assert claimed_by(path) == [family if path.suffix == ".json" else f"{family}-jsonl"]


def test_read_logs_detects_every_fixture_folder_and_skips_nothing():
    rep = read_logs([LC, OA, AN])
    by_file = {Path(f.path).name: f for f in rep.files}
    assert {f.format for f in by_file.values()} == set(MINE)
    assert all(f.error is None and not f.skipped for f in by_file.values()), [f.to_dict() for f in rep.files]
    assert by_file["transcripts.jsonl"].read == by_file["langgraph_runs.jsonl"].read == 2
    assert by_file["langgraph_states.jsonl"].read == 2


def test_other_formats_records_are_not_claimed():
    mini = {"trajectory_format": "mini-swe-agent-1", "info": {}, "messages": [{"role": "user", "content": "x"}]}
    for name in MINE:
        fmt = LOG_FORMATS[name]
        for data in (mini, {"task": "t", "steps": []}, "plain text", 42, [], {"messages": "x"}):
            assert fmt.detect(data if fmt.kind == "json" else [(1, data)]) is False, (name, data)


# --- LangChain / LangGraph ---------------------------------------------------------------------------

def test_langgraph_state_and_both_python_serializations_read_alike():
    ts = [from_langchain_messages(json.loads((LC / n).read_text(encoding="utf-8")), id="r")
          for n in ("langgraph_react_agent_state.json", "react_agent_messages_dumpd.json",
                    "react_agent_messages_to_dict.json")]
    t = ts[0]
    assert t.task == "What's the weather in Tokyo and what time is it there?"
    assert [(s.name, s.args) for s in t.steps] == [("get_weather", {"city": "Tokyo", "units": "celsius"}),
                                                   ("get_datetime", {"timezone": "Asia/Tokyo", "format": "full"})]
    assert t.steps[1].observation.startswith("Current date and time in Asia/Tokyo")
    assert t.steps[0].thought.startswith("**Getting weather and time**")  # the reasoning summary
    assert t.answer.startswith("Here’s the latest for Tokyo") and "Getting weather" not in t.answer
    assert ts[1].to_dict() == t.to_dict() == ts[2].to_dict()


def test_langgraph_state_keys_go_to_metadata_and_labels_to_outcome():
    [(_, state)] = load(LC / "langgraph_states.jsonl")[:1]
    rec = {**state, "thread_id": "t-1", "resolved": False, "task_id": "weather-7"}
    [t] = LOG_FORMATS["langchain-jsonl"].read([(1, rec)], LogKeys())
    assert (t.id, t.outcome) == ("weather-7", {"success": False, "label_key": "resolved", "label": False})
    assert t.metadata == {"thread_id": "t-1", "format": "langchain"}
    ts = read("langchain-jsonl", LC / "langgraph_states.jsonl")
    assert [len(t.steps) for t in ts] == [2, 1] and ts[1].task == "Delete the file report.pdf"
    assert [t.id for t in ts] == [t.id for t in read("langchain-jsonl", LC / "langgraph_states.jsonl")]
    assert all(t.id.startswith("sha1-") for t in ts) and ts[0].id != ts[1].id  # no id in a state: a stable hash


def test_langchain_errors():
    msgs = load(LC / "react_agent_messages_to_dict.json")
    with pytest.raises(TrajectoryError, match=r"messages\[1\] is not a LangChain message"):
        from_langchain_messages([msgs[0], {"role": "assistant", "content": "x"}])
    with pytest.raises(TrajectoryError, match="answers tool call 'call_lxFuvuhpu9gvtx04WrmXZF9h'"):
        from_langchain_messages([msgs[0], msgs[2]])
    t = from_langchain_messages(msgs[:3])  # the second call is never answered
    assert (t.steps[0].error, t.steps[1].error, t.answer) == (None, NO_RESULT, None)
    failed = {**msgs[2], "data": {**msgs[2]["data"], "status": "error"}}
    assert from_langchain_messages([*msgs[:2], failed]).steps[0].error == "Weather in Tokyo: 20°C, Clear skies"


# --- OpenAI chat -------------------------------------------------------------------------------------

def test_openai_transcripts_json_and_jsonl():
    [one] = read("openai", OA / "react_agent_chat.json")
    runs = read("openai-jsonl", OA / "langgraph_runs.jsonl")
    assert [(s.name, s.observation) for s in one.steps] == [
        ("get_weather", "Weather in Tokyo: 20°C, Clear skies"),
        ("get_datetime", "Current date and time in Asia/Tokyo: Wednesday, December 17, 2025 at 04:00:28 AM")]
    assert [s.to_dict() for s in runs[0].steps] == [s.to_dict() for s in one.steps]
    assert [t.id for t in runs] == ["659b061c-0f61-408a-900b-0cf00e8923fb", "0fe6a7d5-a6fc-44b4-99f7-dccc537de149"]
    assert runs[1].metadata == {"model": "gpt-5-2025-08-07", "format": "openai"}  # the record's other keys
    assert runs[1].answer.startswith('The file "report.pdf" has been queued for deletion')


def test_openai_record_labels_ids_and_user_keys():
    msgs = load(OA / "react_agent_chat.json")
    data = [{"instance_id": "w-1", "id": "x", "messages": msgs, "reward": 0.0, "status": "completed"},
            {"task_id": 3, "messages": msgs, "success": True, "metadata": {"trial": 2}},
            {"messages": "not a list"}]
    a, b, bad = LOG_FORMATS["openai"].read(data, LogKeys())
    assert (a.id, a.outcome["success"], a.metadata) == ("w-1", False, {"id": "x", "status": "completed",
                                                                      "format": "openai"})
    assert (b.id, b.outcome["label_key"], b.metadata) == ("3", "success", {"trial": 2, "format": "openai"})
    assert hide_outcome(a).metadata == a.metadata  # the label used is in outcome only
    assert isinstance(bad, RecordError) and bad.index == 2 and "needs a 'messages' list" in bad.reason
    c = LOG_FORMATS["openai"].read(data[:1], LogKeys(outcome="status", id="id"))[0]
    assert (c.id, c.outcome["success"]) == ("x", True)


# --- Anthropic Messages ------------------------------------------------------------------------------

def test_anthropic_server_tool_transcripts():
    runs = read("anthropic-jsonl", AN / "transcripts.jsonl")
    code, fetch = runs
    assert [s.name for s in code.steps] == ["text_editor_code_execution", "bash_code_execution"]
    assert code.steps[1].args == {"command": "python /tmp/fibonacci.py"}
    assert code.steps[1].observation.startswith("The 10th Fibonacci number is: 55") and code.steps[1].error is None
    assert code.answer.startswith("Perfect! The script has been created and executed successfully.")
    assert (code.id, code.metadata["model"], code.metadata["stop_reason"]) == (
        "msg_01Wx5dv3Qisv7pjTdanFgc9Q", "claude-sonnet-4-5-20250929", "end_turn")
    assert fetch.steps[0].args == {"url": "https://en.wikipedia.org/wiki/Maglemosian_culture"}
    assert fetch.steps[0].observation.startswith("This article needs additional citations")
    assert "Maglemosian" in fetch.answer
    [same] = read("anthropic", AN / "code_execution_transcript.json")
    assert [s.to_dict() for s in same.steps] == [s.to_dict() for s in code.steps]


def test_anthropic_failed_code_run_is_an_error():
    rec = load(AN / "code_execution_transcript.json")
    response = json.loads(json.dumps(rec["messages"][1]))
    result = response["content"][5]["content"]
    result.update(stdout="", stderr="python: can't open file '/tmp/fibonacci.py'", return_code=2)
    t = from_anthropic_messages([rec["messages"][0], response])
    assert (t.steps[1].observation, t.steps[1].error) == ("", "python: can't open file '/tmp/fibonacci.py'")


def test_chat_adapters_still_reject_malformed_transcripts():
    msgs = load(OA / "react_agent_chat.json")
    with pytest.raises(TrajectoryError, match="which no earlier unanswered call has"):
        from_openai_chat([msgs[0], msgs[2]])
    with pytest.raises(TrajectoryError, match="which no earlier unanswered tool_use has"):
        from_anthropic_messages([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}])
    ft.test_eq(from_openai_chat(msgs[:2]).steps[-1].error, NO_RESULT)


def test_openai_reader_on_tau_bench_published_runs():
    "tau-bench's historical trajectories (another project's published runs) hold OpenAI chats with tool calls."
    tau = json.loads((FIXTURES / "tau-bench" / "gpt-4o-airline_excerpt.json").read_text(encoding="utf-8"))
    ts = [from_openai_chat(r["traj"], id=str(r["task_id"])) for r in tau]
    assert [[s.name for s in t.steps] for t in ts] == [
        ["transfer_to_human_agents"], ["cancel_reservation"], ["get_reservation_details", "transfer_to_human_agents"], []]
    assert ts[1].steps[0].args == {"reservation_id": "3RK2T9"} and json.loads(ts[1].steps[0].observation)["user_id"]
    assert ts[1].answer.startswith("Your reservation with ID 3RK2T9 has been successfully cancel")
    assert all(not t.task.startswith("# Airline Agent Policy") for t in ts)  # the system prompt is not the task
    recs = [{"messages": r["traj"], "task_id": r["task_id"], "reward": r["reward"], "trial": r["trial"]} for r in tau]
    read_back = LOG_FORMATS["openai"].read(recs, LogKeys())
    assert [(t.id, t.outcome["success"], t.metadata["trial"]) for t in read_back] == [
        ("38", True, 2), ("41", False, 2), ("48", True, 1), ("44", False, 3)]
