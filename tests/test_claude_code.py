"""Contracts of procmem.claude_code on real Claude Code session logs (claude-code-log's test data: an
excerpt of a real session with a subagent and a cut-off tool call, a session written by the project, a
rewind followed by a compaction). Each file is read through the registry, as `procmem learn` reads it,
and through `read_logs`. Origins and licence: `tests/fixtures/trajectories/claude-code/LICENSE-NOTICE.md`."""
import json
from pathlib import Path

import pytest

from procmem.claude_code import from_claude_code
from procmem.ingest import read_logs
from procmem.trajectory import LOG_FORMATS, LogKeys, RecordError, Trajectory, TrajectoryError

CC = Path(__file__).resolve().parent / "fixtures" / "trajectories" / "claude-code"
SESSION = "88a8d761-7b9a-4bf1-a8ca-c1febe6bf358"
NO_RESULT = "no tool result: the transcript ends before the tool answered"


def load(path: Path) -> list:
    "A JSONL fixture as the registry hands it to a format: (line number, record) pairs."
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(n, json.loads(line)) for n, line in enumerate(lines, 1) if line.strip()]


def read(path: Path, keys: LogKeys = LogKeys()) -> list:
    return list(LOG_FORMATS["claude-code"].read(load(path), keys))


@pytest.mark.parametrize("path", sorted(CC.glob("*.jsonl")), ids=lambda p: p.name)
def test_each_real_session_is_claimed_by_claude_code_first(path):
    jsonl = sorted((f for f in LOG_FORMATS.values() if f.kind == "jsonl"), key=lambda f: (f.priority, f.name))
    assert next(f.name for f in jsonl if f.detect(load(path))) == "claude-code"


def test_read_logs_reads_the_folder_without_skipping():
    rep = read_logs([CC])
    assert {Path(f.path).name: (f.format, f.read, f.skipped, f.error) for f in rep.files} == {
        "dag_compact_after_rewind.jsonl": ("claude-code", 1, [], None),
        "representative_messages.jsonl": ("claude-code", 1, [], None),
        "sidechain_integrated.jsonl": ("claude-code", 2, [], None)}


def test_not_claimed():
    for data in ([(1, {"task": "t", "steps": []})], [(1, {"type": "user", "message": {}})], [(1, [1])], []):
        assert LOG_FORMATS["claude-code"].detect(data) is False


# --- Claude Code -------------------------------------------------------------------------------------

def test_claude_code_real_excerpt_main_chain_and_subagent():
    main, sub = read(CC / "sidechain_integrated.jsonl")
    assert (main.id, sub.id) == (SESSION, f"{SESSION}/agent-e1c84ba5")
    assert [s.name for s in main.steps] == ["Task"] and main.steps[0].args["subagent_type"] == "general-purpose"
    assert main.steps[0].observation == "Perfect! Now I have a complete understanding. Let ..."
    assert main.answer == "Excellent research! The sub-assistant has identifi..."
    assert main.metadata["task_missing"] is True and SESSION in main.task  # no prompt survived the cut
    assert main.metadata["sidechains"] == [sub.id] and main.metadata["version"] == "2.0.46"
    assert sub.task == "Research how data-border-color is used in the code..."  # the Task call's prompt
    assert {k: sub.metadata[k] for k in ("parent_id", "agent_id", "parent_tool_use_id", "task_from")} == {
        "parent_id": SESSION, "agent_id": "e1c84ba5", "parent_tool_use_id": "toolu_01JA2mLseQCAW3MdwPE4qWEk",
        "task_from": "parent_call"}
    assert main.outcome is None and sub.outcome is None  # Claude Code logs carry no label


def test_claude_code_truncated_excerpt_is_tolerated():
    sub = read(CC / "sidechain_integrated.jsonl")[1]
    grep, unknown = sub.steps
    assert (grep.name, grep.args, grep.error) == ("Grep", {"pattern": "data-border-color",
                                                           "output_mode": "files_with_matches"}, NO_RESULT)
    assert (unknown.action, unknown.name, unknown.args) == ("<unknown tool call>", None,
                                                            {"tool_use_id": "toolu_011V1hetiJ3pC79EoLTY53Ni"})
    assert unknown.observation.startswith("  3130") and unknown.error is None
    assert sub.metadata["unknown_calls"] == 1 and sub.answer is None


def test_claude_code_session_task_steps_answer_prompts():
    [t] = from_claude_code(CC / "representative_messages.jsonl")
    assert t.task == "Hello Claude! Can you help me understand how Python decorators work?"
    assert [s.name for s in t.steps] == ["Edit", "Bash"]
    assert t.steps[0].args["file_path"] == "/tmp/decorator_example.py"
    assert t.steps[1].observation == "Hello, Alice!\nHello, Alice!\nHello, Alice!"
    assert t.steps[1].thought.endswith("User: Can you run that example to show the output?")
    assert t.answer.startswith("Perfect! As you can see, the `@repeat(3)` decorator")
    assert len(t.metadata["prompts"]) == 4 and t.metadata["summary"].startswith("User learned about")


def test_claude_code_rewind_and_compaction():
    [t] = from_claude_code(CC / "dag_compact_after_rewind.jsonl")
    assert (t.task, t.answer, t.metadata["abandoned_records"]) == ("Start", "Final answer", 2)
    assert t.metadata["prompts"] == ["Start", "Second attempt", "Keep going", "After compaction"]


def test_claude_code_bad_lines_are_reported_and_the_rest_is_read():
    lines = load(CC / "representative_messages.jsonl")
    lines.insert(3, (99, {"type": "assistant", "sessionId": "test_session", "message": {"content": 5}}))
    out = LOG_FORMATS["claude-code"].read(lines, LogKeys())
    errors = [x for x in out if isinstance(x, RecordError)]
    assert [e.index for e in errors] == [99] and "line 99: message.content" in errors[0].reason
    assert [s.name for s in out[0].steps] == ["Edit", "Bash"]
    with pytest.raises(TrajectoryError, match="line 4: message.content"):  # records numbered from 1
        from_claude_code([r for _, r in lines])


def test_claude_code_user_keys():
    main = read(CC / "sidechain_integrated.jsonl", LogKeys(id="requestId"))[0]
    assert main.id == "req_011CVJ517iGrQqjVFtrWsUgP"
    bad = read(CC / "sidechain_integrated.jsonl", LogKeys(outcome="resolved"))
    assert isinstance(bad[0], RecordError) and "--outcome-key 'resolved'" in bad[0].reason
    assert isinstance(bad[1], Trajectory)  # the subagent is still read


def test_summaries_of_other_sessions_are_ignored_and_a_summary_can_be_the_task():
    lines = load(CC / "sidechain_integrated.jsonl")
    main = lines[0][1]
    other = {"type": "summary", "summary": "Refactor the CSS", "leafUuid": "not-in-this-log"}
    own = {"type": "summary", "summary": "Trace data-border-color", "leafUuid": "91c82c1c-29b0-4149-a261-e5582d944ac6"}
    t = LOG_FORMATS["claude-code"].read([(0, other), *lines], LogKeys())[0]
    assert t.metadata["task_missing"] is True and "summary" not in t.metadata
    t = LOG_FORMATS["claude-code"].read([(0, other), (0, own), *lines], LogKeys())[0]
    assert (t.task, t.metadata["task_from"], t.metadata["summary"]) == ("Trace data-border-color", "summary",
                                                                       "Trace data-border-color")
    assert main["sessionId"] == t.id
