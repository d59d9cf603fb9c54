"""ClaudeAgent (issue 10, "A reference agent"): every guard exercised through the SDK's own tool runner
against the scripted fake Messages server (procmem.testing.scripted_anthropic; every reply is
hand-written, no network, no key) — the round and spend circuit breaker, the doom-loop stop with its
warning inside the tool_result the model gets back, exact token/cost totals, API errors as extrinsic
failures the loop learns nothing from, both memory modes end to end through run_with_memory, and the
A/B harness comparing the modes. Real agent behaviour: HotpotQA ReAct runs (Reflexion, MIT) replayed
as tool calls, whose repeated searches the live guard must stop where an independent count says."""
import json, re, sys, unicodedata
from pathlib import Path

import pytest

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree
import fastcore.test as ft
from anthropic import beta_tool
from anthropic.lib.tools import ToolError
from procmem.agent import ClaudeAgent, TOOL_MODE_SYSTEM
from procmem.core import MemoryItem
from procmem.eval import ab_test, summarize_ab
from procmem.judge import Judgment
from procmem.llm import PRICES, LLMError
from procmem.loop import run_with_memory
from procmem.store import MemoryStore
from procmem.testing import (ScriptExhausted, error_reply, scripted_anthropic, text_reply, tool_use_reply,
                             usage)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MODEL = "claude-haiku-5-5"
TASK = "Sum the monthly sales rows of the regional sales table and report the total"


@beta_tool
def sum_column(column: str) -> str:
    """Sum one column of the sales table.
    Args:
        column: the column's name"""
    if column.strip().lower() != "sales":
        raise ToolError(f"no column named {column!r}; the columns are month, region, sales")
    return "total: 1200"


def ok(artifact, llm=None): return Judgment(True, "the total is in the last observation", 0.9)
def failed(artifact, llm=None): return Judgment(False, "the total was never checked", 0.9, failure_class="intrinsic")
def no_lessons(artifact, judgment, llm=None, domain=None): return []


@pytest.fixture
def store():
    s = MemoryStore()
    s.add(MemoryItem("Sum table rows after checking the columns", "When a task asks to sum the rows of a sales table.",
                     "1. List the table's columns.\n2. Pick the sales column.\n3. Sum its rows and report the total.",
                     tags=["sales", "table", "sum"], id="mem-sum"))
    s.add(MemoryItem("Report monthly totals per region", "When sales are split by month and region.",
                     "1. Group the rows by region.\n2. Sum the monthly sales.\n3. Report each total.",
                     tags=["sales", "monthly", "regional"], id="mem-region"))
    return s


def tool_results(request) -> list:
    "The tool_result blocks of the last message of a request body."
    content = request["body"]["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block) -> str:
    c = block["content"]
    return c if isinstance(c, str) else "\n".join(b.get("text", "") for b in c)


def counters(store, ids):
    return [(store.get(i).use_count, store.get(i).success_count, store.get(i).failure_count) for i in ids]


# ---- the circuit breaker -------------------------------------------------------------------------------

def test_round_cap_stops_before_running_the_next_round():
    calls = [tool_use_reply(("sum_column", {"column": c})) for c in ("sales", "region", "month")]
    with scripted_anthropic(calls) as fake:  # a 4th request would be ScriptExhausted
        t = ClaudeAgent(tools=[sum_column], max_tool_rounds=2, client=fake.client())(TASK)
    assert (t.metadata["stopped_by"], t.metadata["rounds"], len(t.steps), t.answer) == ("max_tool_rounds", 2, 2, None)
    assert len(fake.requests) == 3 and t.metadata["usage"]["calls"] == 3  # the 3rd reply was paid for, not run
    assert [s.args for s in t.steps] == [{"column": "sales"}, {"column": "region"}]
    with scripted_anthropic(calls[:1]) as fake:
        zero = ClaudeAgent(tools=[sum_column], max_tool_rounds=0, client=fake.client())(TASK)
    assert (zero.metadata["stopped_by"], zero.steps) == ("max_tool_rounds", [])


def test_budget_stops_at_the_reply_that_crosses_it():
    price = PRICES[MODEL]
    u = usage(20_000, 1_000)  # $0.0025 per reply on haiku-5-5
    per_reply = (20_000 * price.input + 1_000 * price.output) / 1e6
    script = [tool_use_reply(("sum_column", {"column": "sales"}), usage=u),
              tool_use_reply(("sum_column", {"column": "region"}), usage=u)]
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[sum_column], budget_usd=1.5 * per_reply, client=fake.client())(TASK)
    assert t.metadata["stopped_by"] == "budget" and t.metadata["rounds"] == 1 and len(t.steps) == 1
    ft.test_close(t.metadata["cost_usd"], 2 * per_reply, eps=1e-12)  # spent at most one reply past the limit
    assert len(fake.requests) == 2


def _request_bytes(request) -> int:
    "UTF-8 bytes of what a recorded request sent the model (system, tools, messages), compact JSON."
    body = request["body"]
    sent = {k: body[k] for k in ("system", "tools", "messages") if k in body}
    return len(json.dumps(sent, ensure_ascii=False, separators=(",", ":")).encode())


def test_a_reply_without_usage_is_priced_at_its_bound():
    """A gateway that strips usage on the 3rd reply of a run: that reply counts max_tokens output and
    at least as many input tokens as the 3rd request carried bytes (a token is at least one byte)."""
    script = [tool_use_reply(("sum_column", {"column": "sales"}), usage=usage(900, 40)),
              tool_use_reply(("sum_column", {"column": "Sales"}), usage=usage(1000, 30)),
              dict(text_reply("The total is 1200."), usage={"input_tokens": None})]
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[sum_column], max_tokens=512, client=fake.client())(TASK)
    u = t.metadata["usage"]
    assert (t.metadata["stopped_by"], t.answer, t.metadata["usage_estimated"]) == ("end_turn", "The total is 1200.", 1)
    assert u["output_tokens"] == 40 + 30 + 512
    assert u["input_tokens"] - 1900 >= _request_bytes(fake.requests[2]) > 0
    price = PRICES[MODEL]
    ft.test_close(t.metadata["cost_usd"], (u["input_tokens"] * price.input + u["output_tokens"] * price.output) / 1e6,
                  eps=1e-12)
    only_out = [dict(text_reply("1200"), usage={"input_tokens": 77})]  # a count that is there is kept
    with scripted_anthropic(only_out) as fake:
        t = ClaudeAgent(max_tokens=100, client=fake.client())(TASK)
    assert (t.metadata["usage"]["input_tokens"], t.metadata["usage"]["output_tokens"]) == (77, 100)


def test_a_budget_stops_a_run_whose_usage_is_stripped():
    "Every reply without usage: the budget still stops the run before the round cap, and says why."
    script = [dict(tool_use_reply(("sum_column", {"column": c})), usage={}) for c in ["sales"] * 2 + ["x"] * 8]
    per_reply = 4096 * PRICES[MODEL].output / 1e6  # the output bound alone
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[sum_column], budget_usd=2.5 * per_reply, max_tool_rounds=50, client=fake.client())(TASK)
    assert t.metadata["stopped_by"] == "budget" and t.metadata["usage_estimated"] == len(fake.requests)
    assert 2 <= len(fake.requests) <= 3 and t.metadata["cost_usd"] >= 2.5 * per_reply


def test_a_budget_needs_a_price_and_limits_are_checked_before_any_request():
    ft.test_fail(lambda: ClaudeAgent(model="claude-not-a-model"), contains="no price for model")
    ft.test_fail(lambda: ClaudeAgent(budget_usd=-1), contains="budget_usd must be > 0")
    ft.test_fail(lambda: ClaudeAgent(max_tool_rounds=2.5), contains="max_tool_rounds must be an int")
    ft.test_fail(lambda: ClaudeAgent(mode="both"), contains="mode must be one of inject, tool")


# ---- live loop detection -------------------------------------------------------------------------------

def test_doom_loop_warns_inside_the_tool_result_then_stops():
    same = [tool_use_reply(("sum_column", {"column": v})) for v in ("sales", "Sales", " sales ", "SALES")]
    with scripted_anthropic(same) as fake:
        t = ClaudeAgent(tools=[sum_column], client=fake.client())(TASK)
    assert (t.metadata["stopped_by"], len(t.steps), t.answer) == ("doom_loop", 3, None)  # the 4th never ran
    assert t.metadata["doom_loop"] == dict(tool="sum_column", args={"column": "SALES"}, count=4)
    sent = [result_text(tool_results(r)[0]) for r in fake.requests[1:]]  # what the model read, request by request
    assert sent[0] == "total: 1200"  # the first call is not a repeat
    assert sent[1].startswith("total: 1200\n\n[procmem loop guard] This is call number 2 of `sum_column`")
    assert "call number 3" in sent[2] and "stopped at call number 4" in sent[2]
    assert t.metadata["loop_warnings"] == [dict(step=1, tool="sum_column", count=2), dict(step=2, tool="sum_column", count=3)]
    assert all("loop guard" not in s.observation for s in t.steps)  # the steps keep the tool's own output


def test_a_failing_repeated_tool_gets_its_error_and_the_warning():
    bad = [tool_use_reply(("sum_column", {"column": "total"}))] * 2 + [text_reply("I could not sum it.")]
    with scripted_anthropic(bad) as fake:
        t = ClaudeAgent(tools=[sum_column], client=fake.client())(TASK)
    last = tool_results(fake.requests[2])[0]
    assert last["is_error"] is True and "no column named 'total'" in result_text(last)
    assert "[procmem loop guard] This is call number 2" in result_text(last)
    assert [s.error for s in t.steps] == ["no column named 'total'; the columns are month, region, sales"] * 2
    assert (t.metadata["stopped_by"], t.answer) == ("end_turn", "I could not sum it.")


def test_different_calls_are_not_a_loop_and_blocks_get_a_text_warning():
    @beta_tool
    def chart(kind: str) -> list:
        """Draw a chart.
        Args:
            kind: bar or line"""
        return [{"type": "text", "text": f"{kind} chart drawn"}]
    script = [tool_use_reply(("chart", {"kind": "bar"}), ("chart", {"kind": "line"})),
              tool_use_reply(("chart", {"kind": "bar"})), text_reply("done")]
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[chart], client=fake.client())(TASK)
    assert [result_text(b) for b in tool_results(fake.requests[1])] == ["bar chart drawn", "line chart drawn"]
    warned = tool_results(fake.requests[2])[0]["content"]
    assert warned[0] == {"type": "text", "text": "bar chart drawn"} and "call number 2 of `chart`" in warned[1]["text"]
    assert t.metadata["loop_warnings"] == [dict(step=2, tool="chart", count=2)] and t.answer == "done"


def _norm(v) -> str:
    "An independent normalisation of a ReAct argument: NFKC, case-folded, whitespace collapsed."
    return " ".join(unicodedata.normalize("NFKC", v).casefold().split())


def _first_doom(steps, n: int):
    "Index of the first step that is the n-th identical (name, argument) call, by direct count."
    seen = {}
    for i, s in enumerate(steps):
        k = (s.name, _norm(s.args))
        seen[k] = seen.get(k, 0) + 1
        if seen[k] >= n:
            return i
    return None


def _replay(traj):
    "The scripted replies and tools that make ClaudeAgent replay a ReAct trajectory's actions."
    acts = [s for s in traj.steps if s.name in ("Search", "Lookup")]
    obs = iter(s.observation for s in acts)

    @beta_tool
    def Search(entity: str) -> str:
        """Search Wikipedia.
        Args:
            entity: what to search"""
        return next(obs)

    @beta_tool
    def Lookup(keyword: str) -> str:
        """Look a keyword up in the current page.
        Args:
            keyword: the keyword"""
        return next(obs)
    arg = dict(Search="entity", Lookup="keyword")
    script = [tool_use_reply((s.name, {arg[s.name]: s.args}), text=s.thought) for s in acts]
    return acts, script + [text_reply(traj.answer or "no answer")], [Search, Lookup]


def test_doom_loop_guard_on_real_react_runs():
    from procmem.research_logs import from_reflexion_log
    path = SHARED / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt"
    if not path.exists():
        pytest.skip(f"shared data absent: {path}")
    runs = [t for t in from_reflexion_log(path) if all(isinstance(s.args, str) for s in t.steps)]
    looping = [t for t in runs if _first_doom([s for s in t.steps if s.name in ("Search", "Lookup")], 3) is not None]
    assert len(runs) > 300 and len(looping) >= 5, (len(runs), len(looping))
    clean = [t for t in runs if t not in looping][:5]
    for t in looping[:12] + clean:
        acts, script, tools = _replay(t)
        doom = _first_doom(acts, 3)
        replies = script[:doom + 1] if doom is not None else script
        with scripted_anthropic(replies) as fake:
            out = ClaudeAgent(tools=tools, doom_loop_calls=3, max_tool_rounds=50, client=fake.client())(t.task)
        if doom is None:
            assert out.metadata["stopped_by"] == "end_turn" and len(out.steps) == len(acts), t.task
        else:
            assert out.metadata["stopped_by"] == "doom_loop" and len(out.steps) == doom, t.task
            assert out.metadata["doom_loop"]["tool"] == acts[doom].name
            assert any("[procmem loop guard]" in result_text(b) for r in fake.requests for b in tool_results(r))


# ---- tokens and cost -----------------------------------------------------------------------------------

def test_token_and_cost_totals_are_exact():
    p, sonnet = PRICES[MODEL], PRICES["claude-sonnet-4-5"]
    script = [tool_use_reply(("sum_column", {"column": "sales"}), usage=usage(1200, 80, cache_creation_input_tokens=3000)),
              tool_use_reply(("sum_column", {"column": "region"}), usage=usage(40, 60, cache_read_input_tokens=3000)),
              text_reply("The total is 1200.", usage=usage(70, 15, cache_read_input_tokens=3100), model="claude-sonnet-4-5")]
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[sum_column], client=fake.client())(TASK)
    assert t.metadata["usage"] == dict(input_tokens=1310, output_tokens=155, cache_creation_input_tokens=3000,
                                       cache_read_input_tokens=6100, calls=3, cost_usd=t.metadata["cost_usd"])
    want = ((1200 * p.input + 80 * p.output + 3000 * p.cache_write) + (40 * p.input + 60 * p.output + 3000 * p.cache_read)
            + (70 * sonnet.input + 15 * sonnet.output + 3100 * sonnet.cache_read)) / 1e6  # each reply at its own model's price
    ft.test_close(t.metadata["cost_usd"], want, eps=1e-12)


# ---- API errors are extrinsic ----------------------------------------------------------------------------

@pytest.mark.parametrize("reply,kind", [
    (error_reply(529, "overloaded_error", "Overloaded"), "overloaded_error"),
    (error_reply(429, "rate_limit_error", "rate limited", headers={"retry-after": "0"}), "rate_limit_error"),
    (error_reply(500, "api_error", "Internal server error"), "api_error"),
    (error_reply(400, "invalid_request_error", "prompt is too long"), "invalid_request_error"),
])
def test_api_errors_teach_nothing_and_blame_nobody(store, reply, kind):
    before = counters(store, ["mem-sum", "mem-region"])
    with scripted_anthropic([tool_use_reply(("sum_column", {"column": "sales"})), reply]) as fake:
        r = run_with_memory(TASK, ClaudeAgent(tools=[sum_column], client=fake.client()), store, judge=failed)
    t = r.trajectory
    assert r.injected and t.metadata["stopped_by"] == "api_error" and t.metadata["llm_error"]["error_type"] == kind
    assert len(t.steps) == 1 and t.metadata["usage"]["calls"] == 1  # the run so far is kept
    assert r.learned.judgment.failure_class == "extrinsic" and r.learned.stored == []
    assert len(store) == 2 and counters(store, ["mem-sum", "mem-region"]) == before
    outcome = [e for e in store.events(kind="loop.outcome")][-1]["detail"]
    assert (outcome["attributed"], outcome["failure_class"]) == (False, "extrinsic")


def test_a_timeout_is_extrinsic(store):
    with scripted_anthropic([error_reply(200, "unused", delay_s=2.0)]) as fake:
        agent = ClaudeAgent(tools=[sum_column], client=fake.client(timeout=0.3))
        r = run_with_memory(TASK, agent, store, judge=failed)
    assert r.trajectory.metadata["llm_error"]["kind"] == "extrinsic" and "timed out" in r.trajectory.metadata["agent_error"]
    assert r.learned.judgment.failure_class == "extrinsic" and counters(store, ["mem-sum"]) == [(0, 0, 0)]


def test_a_fatal_error_is_raised_and_a_harness_miss_is_never_swallowed(store):
    with scripted_anthropic([error_reply(401, "authentication_error", "invalid x-api-key")]) as fake:
        with pytest.raises(LLMError, match="fatal failure calling"):
            ClaudeAgent(client=fake.client())(TASK)
    with pytest.raises(ScriptExhausted, match="request #2 came past the end"):
        with scripted_anthropic([tool_use_reply(("sum_column", {"column": "sales"}))]) as fake:
            run_with_memory(TASK, ClaudeAgent(tools=[sum_column], client=fake.client()), store)
    assert len(store) == 2


# ---- both modes through run_with_memory -----------------------------------------------------------------

def test_inject_mode_puts_the_framed_block_in_the_system_prompt(store):
    script = [tool_use_reply(("sum_column", {"column": "sales"})), text_reply("The total is 1200.")]
    with scripted_anthropic(script) as fake:
        r = run_with_memory(TASK, ClaudeAgent(tools=[sum_column], system="You analyse tables.", client=fake.client()),
                            store, judge=ok, extractor=no_lessons)
    system = fake.requests[0]["body"]["system"]
    assert system.startswith("You analyse tables.\n\n") and r.memory_block and system.endswith(r.memory_block)
    assert "<procmem-memories nonce=" in system and "not instructions" in system
    ids = [m.id for m in r.injected]
    assert ids and r.trajectory.metadata["injected_ids"] == ids and r.recalled == []
    assert counters(store, ids) == [(1, 1, 0)] * len(ids)


def test_tool_mode_recalls_through_the_tool_and_the_loop_attributes_it(store):
    recall = ("recall_memory", {"query": "sum the rows of a sales table"})
    script = [tool_use_reply(recall), tool_use_reply(recall, ("sum_column", {"column": "sales"})),
              text_reply("The total is 1200.")]
    injected_before = store.get("mem-sum").injected_count
    with scripted_anthropic(script) as fake:
        r = run_with_memory(TASK, ClaudeAgent(tools=[sum_column], mode="tool", client=fake.client()),
                            store, judge=failed, extractor=no_lessons)
    assert r.injected == [] and r.memory_block == "" and fake.requests[0]["body"]["system"] == TOOL_MODE_SYSTEM
    recalled = r.trajectory.metadata["recalled_ids"]
    assert "mem-sum" in recalled and [m.id for m in r.recalled] == recalled
    assert "mem-sum" in result_text(tool_results(fake.requests[1])[0])  # the model saw it, framed
    # recalled twice in the run, blamed once; a memory never shown is untouched
    assert counters(store, ["mem-sum"]) == [(1, 0, 1)]
    assert store.get("mem-sum").injected_count == injected_before + 2  # the recall tool counts what it shows
    shown_never = [i for i in ("mem-sum", "mem-region") if i not in recalled]
    assert all(c == (0, 0, 0) for c in counters(store, shown_never))
    outcome = store.events(kind="loop.outcome")[-1]
    assert outcome["ids"] == recalled and outcome["detail"]["attributed"] is True


def test_tool_mode_agent_reads_the_loops_store_not_the_one_it_was_built_with(store):
    other = MemoryStore()
    agent = ClaudeAgent(mode="tool", store=other, tools=[sum_column])
    script = [tool_use_reply(("recall_memory", {"query": "sum the rows of a sales table"})), text_reply("1200")]
    with scripted_anthropic(script) as fake:
        agent._client = fake.client()
        r = run_with_memory(TASK, agent, store, judge=ok, extractor=no_lessons)
    assert "mem-sum" in r.trajectory.metadata["recalled_ids"] and agent.store is other
    assert counters(store, ["mem-sum"])[0][1] == 1


def test_agents_without_recalled_ids_behave_as_before(store):
    def plain(task, block):
        return dict(task=task, answer="1200", steps=[dict(action="sum_column('sales')", observation="total: 1200")])
    r = run_with_memory(TASK, plain, store, judge=ok, extractor=no_lessons)
    assert r.injected and r.recalled == [] and counters(store, [m.id for m in r.injected]) == [(1, 1, 0)] * len(r.injected)


# ---- the A/B harness compares the modes ------------------------------------------------------------------

def test_ab_test_compares_inject_and_tool_modes(store):
    tasks = [dict(task=TASK, id="sum", truth=lambda tr: "1200" in (tr.answer or ""))]
    recall = ("recall_memory", {"query": "sum the rows of a sales table"})
    script = [tool_use_reply(("sum_column", {"column": "sales"})), text_reply("The total is 1200."),  # inject: solves it
              tool_use_reply(recall), tool_use_reply(("sum_column", {"column": "total"})), text_reply("I could not.")]  # tool
    factory_calls = []

    def factory():
        s = MemoryStore()
        s.add_many(list(store))
        factory_calls.append(s)
        return s
    with scripted_anthropic(script) as fake:
        arms = [dict(name="inject", agent=ClaudeAgent(tools=[sum_column], client=fake.client())),
                dict(name="tool", agent=ClaudeAgent(tools=[sum_column], mode="tool", client=fake.client()))]
        df = ab_test(tasks, None, factory, arms=arms, exclude_self=False)
    assert list(df.arm) == ["inject", "tool"] and list(df.success) == [True, False]
    assert df.loc[0, "injected_ids"] and df.loc[0, "recalled_ids"] == []
    assert df.loc[1, "injected_ids"] == [] and "mem-sum" in df.loc[1, "recalled_ids"]
    assert list(df.steps) == [1, 2] and list(df.tokens) == [240, 360]
    summary = summarize_ab(df, baseline="inject", n_boot=200)
    assert set(summary.arm) == {"inject", "tool"}
    assert len(factory_calls) == 2  # each arm on its own copy of the store


# ---- the example's scripts -------------------------------------------------------------------------------

SCRIPT_FILES = sorted((ROOT / "tests" / "fixtures" / "llm" / "agent").glob("*.json"))


@pytest.mark.parametrize("f", SCRIPT_FILES, ids=[f.name for f in SCRIPT_FILES])
def test_every_script_is_hand_written_and_in_the_api_format(f):
    import json
    from anthropic.types.beta import BetaMessage
    from procmem.testing import HANDWRITTEN_NOTE, read_script
    from procmem.scripted import _with_ids
    rec = json.loads(f.read_text(encoding="utf-8"))
    assert rec["script"] is True and rec["hand_written"] is True and rec["note"] == HANDWRITTEN_NOTE
    assert isinstance(rec["task"], str) and rec["task"]
    for n, reply in enumerate(read_script(f)):
        msg = BetaMessage.model_validate(_with_ids(reply["body"], n))  # exactly what the API returns
        assert reply["status"] == 200 and msg.usage.input_tokens > 0 and msg.model in PRICES
    assert len(SCRIPT_FILES) >= 3


def test_the_tool_arm_never_recalls_what_was_learned_from_its_own_task(store):
    "ab_test(exclude_self=True) keeps a task's own lessons out of the recall tool too, as out of the block."
    def factory():
        s = MemoryStore()
        s.add_many(list(store))
        s.add(MemoryItem("Sum the sales rows of the regional table", "How this very task was solved.",
                         "1. Sum the sales column.\n2. Report the total.", tags=["sales", "sum"], task_query=TASK, id="mem-self"))
        return s
    recall = ("recall_memory", {"query": "sum the sales rows of the regional sales table"})
    rows = {}
    for exclude in (True, False):
        with scripted_anthropic([tool_use_reply(recall), text_reply("1200")]) as fake:
            arm = dict(name="tool", agent=ClaudeAgent(tools=[sum_column], mode="tool", client=fake.client()))
            rows[exclude] = ab_test([dict(task=TASK, truth=True)], None, factory, arms=[arm], exclude_self=exclude)
    assert "mem-self" in rows[False].loc[0, "recalled_ids"]  # it would be shown...
    assert "mem-self" not in rows[True].loc[0, "recalled_ids"] and rows[True].loc[0, "recalled_ids"]  # ...but is not
    assert rows[True].loc[0, "excluded_ids"] == ["mem-self"]


def test_a_tool_use_reply_without_calls_stops_and_keeps_its_text():
    script = [dict(text_reply("I will sum the sales column."), stop_reason="tool_use"), text_reply("1200")]
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[sum_column], client=fake.client())(TASK)
    m = t.metadata
    assert (m["stopped_by"], m["rounds"], t.answer, len(fake.requests)) == ("no_tool_calls", 0, None, 1)
    assert t.metadata["last_text"] == "I will sum the sales column."


def test_calls_to_tools_the_agent_lacks_are_steps_in_their_place_and_loops():
    """A reply calling an unknown tool, the real one, then a raw definition nothing runs: three steps in
    the reply's order; the model got the runner's error for the two; repeats of them stop the run."""
    raw = {"name": "ask_human", "description": "Ask a person.", "input_schema": {"type": "object", "properties": {}}}
    reply = tool_use_reply(("search_web", {"q": "sales"}), ("sum_column", {"column": "sales"}), ("ask_human", {}),
                           text="Three things at once.")
    with scripted_anthropic([reply, reply, reply]) as fake:
        t = ClaudeAgent(tools=[sum_column, raw], doom_loop_calls=3, client=fake.client())(TASK)
    names = [s.name for s in t.steps]
    assert names == ["search_web", "sum_column", "ask_human"] * 2, names
    assert t.steps[0].thought == "Three things at once." and t.steps[1].thought == ""
    assert [bool(s.error) for s in t.steps[:3]] == [True, False, True]
    sent = [result_text(b) for b in tool_results(fake.requests[1])]
    assert sent[0] == t.steps[0].observation == "Error: Tool 'search_web' not found" and sent[1] == "total: 1200"
    assert sent[2] == t.steps[2].observation == "Error: Tool 'ask_human' not found"
    m = t.metadata
    assert (m["stopped_by"], m["doom_loop"]["tool"], len(fake.requests)) == ("doom_loop", "search_web", 3)


def test_a_paused_turn_is_resumed_not_counted_as_a_round():
    script = [text_reply("Searching the web...", stop_reason="pause_turn"), text_reply("Done: 1200.")]
    with scripted_anthropic(script) as fake:
        t = ClaudeAgent(tools=[sum_column], max_tool_rounds=0, client=fake.client())(TASK)
    assert (t.metadata["stopped_by"], t.metadata["rounds"], t.metadata["usage"]["calls"], t.answer) == ("end_turn", 0, 2, "Done: 1200.")


def test_an_assertion_inside_a_tool_is_raised_after_the_run():
    @beta_tool
    def checked(x: str) -> str:
        """A tool whose harness checks its input.
        Args:
            x: anything"""
        raise AssertionError("harness: unexpected input " + x)
    with pytest.raises(AssertionError, match="harness: unexpected input boom"):
        with scripted_anthropic([tool_use_reply(("checked", {"x": "boom"})), text_reply("ok")]) as fake:
            ClaudeAgent(tools=[checked], client=fake.client())(TASK)


def test_the_control_arm_runs_a_tool_mode_agent_without_its_memory(store):
    "memory=False (the A/B 'none' arm) must be a real control: no recall tool, no hint, nothing attributed."
    script = [text_reply("I do not know."),  # the control: no memory tools at all
              tool_use_reply(("recall_memory", {"query": "sum the rows of a sales table"})), text_reply("1200")]

    def factory():
        s = MemoryStore()
        s.add_many(list(store))
        return s
    with scripted_anthropic(script) as fake:
        agent = ClaudeAgent(tools=[sum_column], mode="tool", client=fake.client())
        df = ab_test([dict(task=TASK, truth=lambda tr: "1200" in (tr.answer or ""))], agent, factory,
                     arms=("none", "memory"), exclude_self=False)
    assert [t["name"] for t in fake.requests[0]["body"]["tools"]] == ["sum_column"]
    assert "system" not in fake.requests[0]["body"]
    assert [t["name"] for t in fake.requests[1]["body"]["tools"]] == ["sum_column", "recall_memory"]
    assert list(df.success) == [False, True] and df.loc[0, "recalled_ids"] == [] and df.loc[1, "recalled_ids"]


def test_a_refusal_is_no_answer():
    with scripted_anthropic([text_reply("I can't help with that.", stop_reason="refusal")]) as fake:
        t = ClaudeAgent(client=fake.client())(TASK)
    assert (t.metadata["stopped_by"], t.answer, t.steps) == ("refusal", None, [])


def test_without_a_client_the_agent_uses_the_environment(monkeypatch):
    "What the example's real-key cell does: ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY (here: the local fake)."
    monkeypatch.delenv("PROCMEM_MODEL", raising=False)
    with scripted_anthropic([text_reply("The total is 1200.")]) as fake:
        t = ClaudeAgent(tools=[sum_column])(TASK)
    assert t.answer == "The total is 1200." and len(fake.requests) == 1
    assert fake.requests[0]["body"]["model"] == MODEL and fake.requests[0]["body"]["max_tokens"] == 4096


def test_what_tools_return_is_untrusted_for_the_learning_step():
    "A ClaudeAgent trajectory says its observations came from tools: the gates treat them as untrusted data."
    import json
    from procmem.trust import run_texts
    path = SHARED / "injection" / "benchmark_dev.jsonl"
    if not path.exists():
        pytest.skip(f"shared data absent: {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    attack = next(r["text"] for r in rows if r["label"] == 1 and r["standalone"] and len(r["text"]) < 400)

    @beta_tool
    def fetch_page(url: str) -> str:
        """Fetch a web page.
        Args:
            url: the page"""
        return attack
    with scripted_anthropic([tool_use_reply(("fetch_page", {"url": "https://shop.example/help"})), text_reply("done")]) as fake:
        t = ClaudeAgent(tools=[fetch_page], client=fake.client())(TASK)
    assert t.source == "tool" and t.steps[0].observation == attack
    assert run_texts(t) == {"trusted": [TASK], "untrusted": [attack]}
    assert result_text(tool_results(fake.requests[1])[0]) == attack  # passed to the model as a tool result, unchanged
