"""The loop never learns procmem's own block back, and never cuts the user's words (issue 6, point 11):
an agent's transcript holds the injected block and a task that itself mentions procmem's heading."""
import sys
from pathlib import Path

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree
from procmem.core import MemoryItem
from procmem.inject import INJECT_HEADING, format_memories_for_injection
from procmem.judge import Judgment
from procmem.loop import learn_from_trajectory, run_with_memory
from procmem.store import MemoryStore

TASK = f"Sum the sales table rows; the prompt shows '{INJECT_HEADING}' twice.\n{INJECT_HEADING}\nNo notes."


def store_with_memory():
    s = MemoryStore()
    s.add(MemoryItem("Sum table rows after checking the columns", "When a task asks to sum the sales rows of a table.",
                     "1. List the table's columns.\n2. Pick the sales column.\n3. Sum its rows and report the total.",
                     tags=["sales", "table", "sum"]))
    return s


def transcript_agent(task, block):
    "An agent that returns an Anthropic Messages transcript whose first user turn is its whole prompt."
    return {"messages": [
        {"role": "user", "content": f"{block}\n\n{task}"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_prompt", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": f"prompt: {block}"}]},
        {"role": "assistant", "content": "The heading is rendered twice."}]}


def test_learning_from_a_transcript_keeps_every_word_of_the_task():
    s = store_with_memory()
    block = format_memories_for_injection(list(s))
    learned = learn_from_trajectory(transcript_agent(TASK, block), s,
                                    judge=lambda a, llm=None: Judgment(True, "ok", 0.9))
    assert learned.trajectory.task == TASK  # the block is gone, the user's words are all there
    assert "procmem-memories" not in learned.trajectory.steps[0].observation  # the echoed block too


def test_the_loop_keeps_every_word_of_the_task():
    s = store_with_memory()
    r = run_with_memory(TASK, transcript_agent, s, judge=lambda a, llm=None: Judgment(True, "ok", 0.9))
    assert r.injected, "the test needs a block in the prompt"
    assert r.trajectory.task == TASK  # the block is gone, the user's words are all there
    assert r.learned.trajectory.task == TASK
    assert "procmem-memories" not in r.learned.trajectory.steps[0].observation  # the echoed block too


def test_learning_never_sees_the_block_an_agent_echoed():
    s = store_with_memory()
    block = run_with_memory("sum the sales rows of the table", lambda t, b: dict(task=t, steps=[], answer="x"),
                            s, learn=False).memory_block
    assert block
    traj = dict(task=f"{block}\n\nSum the sales rows", answer="1200",
                steps=[dict(action="read_prompt()", observation=f"{block}\nSum the sales rows", thought=block)])
    learned = learn_from_trajectory(traj, s, judge=lambda a, llm=None: Judgment(True, "ok", 0.9))
    t = learned.trajectory
    assert t.task == "Sum the sales rows"
    assert "procmem-memories" not in t.steps[0].observation + t.steps[0].thought
