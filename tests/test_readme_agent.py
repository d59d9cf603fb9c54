"""README's "Add memory to a Claude agent" examples run verbatim: each Python block is executed, in
order and in one namespace, against the local scripted Messages server (no network, no key)."""
import contextlib, io, json, re
from pathlib import Path

import fastcore.test as ft
import pytest

from procmem import MemoryItem, MemoryStore
from procmem.testing import scripted_anthropic, text_reply, tool_use_reply

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Add memory to a Claude agent"


def _blocks() -> list[str]:
    "The ```python blocks of README's agent section, in order."
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def _run(code: str, ns: dict, replies: list) -> tuple[str, object]:
    "Execute `code` in `ns` while the scripted server answers `replies`; its stdout and the server."
    out = io.StringIO()
    with scripted_anthropic(replies) as fake, contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), ns)
    return out.getvalue(), fake


@pytest.fixture
def bank(tmp_path, monkeypatch):
    "A store at ./memories.db (the path the examples use) holding one relevant lesson."
    monkeypatch.chdir(tmp_path)
    lesson = MemoryItem(
        id="m-refund",
        title="Filter flights by fare rules before comparing prices",
        description="When a booking must be refundable, check the fare conditions first.",
        content="1. Search flights to the destination\n2. Keep only refundable fares\n"
        "3. Sort the rest by price and book the cheapest",
        tags=["flights", "refundable", "booking"],
        domain="travel",
    )
    with MemoryStore("memories.db") as s:
        s.add(lesson)
    return tmp_path


def test_the_section_has_the_three_python_examples():
    blocks = _blocks()
    ft.test_eq(len(blocks), 3)
    ft.test_eq(["memory_tools(" in blocks[0], "ProcmemMemoryTool(" in blocks[1],
                "ClaudeAgent(" in blocks[2]], [True, True, True])


def test_the_examples_run_as_written(bank):
    tools_ex, memtool_ex, agent_ex = _blocks()
    ns: dict = {}
    recall = tool_use_reply(("recall_memory", {"query": "cheapest refundable flight"}))
    out, fake = _run(tools_ex, ns, [recall, text_reply("Booked the cheapest refundable fare.")])
    ft.test_eq(out.strip(), "['m-refund'] []")  # recalled the lesson, wrote nothing
    result = fake.requests[1]["body"]["messages"][-1]["content"][0]
    ft.test_eq(result["type"], "tool_result")
    assert "Keep only refundable fares" in str(result["content"])

    view = tool_use_reply(("memory", {"command": "view", "path": "/memories/travel"}))
    out, fake = _run(memtool_ex, ns, [view, text_reply("Nothing new to note.")])
    ft.test_eq(out.strip(), "[] []")  # a directory listing views no memory file
    assert ".md" in str(fake.requests[1]["body"]["messages"][-1]["content"][0]["content"])

    answer = "Booked the cheapest refundable fare."
    verdict = dict(is_success=True, reason="a refundable fare was booked", confidence="high",
                   missing=[], failure_class=None, evidence=[answer])
    replies = [recall, text_reply(answer), text_reply(json.dumps(verdict)),
               text_reply(json.dumps({"memories": []}))]  # agent (2 replies), judge, extractor
    out, fake = _run(agent_ex, ns, replies)
    ft.test_eq(len(fake.requests), 4)
    assert "recall_memory" in {t["name"] for t in fake.requests[0]["body"]["tools"]}
    assert "Judge this agent run" in str(fake.requests[2]["body"]["messages"])
    words = out.split(maxsplit=3)
    ft.test_eq(words[:2], ["True", "end_turn"])
    assert 0 < float(words[2]) < 0.50  # the agent's two replies, priced from their usage
    ft.test_eq(words[3].strip(), "['Filter flights by fare rules before comparing prices']")
    with MemoryStore("memories.db") as s:  # the recalled memory is credited like an injected one
        ft.test_eq((s.get("m-refund").use_count, s.get("m-refund").success_count), (1, 1))
