"""The LLM seam (procmem.llm) through the real anthropic SDK against the local fake server (procmem.testing).

The replies in tests/fixtures/llm/ are hand-written in the Messages API format (there was no API
access when they were written; each file says so in its `hand_written` field) and served on
127.0.0.1; see nbs/08_llm.ipynb and nbs/14_testing.ipynb. No test here may reach the network: a
guard on socket.connect fails any connection that is not to the loopback.
Real replies: ANTHROPIC_API_KEY=<real key> PROCMEM_RECORD=1 pytest tests/test_llm.py (after deleting
the files to replace; see tests/fixtures/llm/write_recordings.py)."""
import json, os, socket, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import anthropic
import pydantic
import pytest

from procmem.llm import DEFAULT_MODEL, PRICES, AnthropicLLM, LLMError, Usage
from procmem.testing import (DUMMY_API_KEY, HANDWRITTEN_NOTE, MISSING_RECORDING_ERROR, MissingRecording, fake_anthropic,
                             list_recordings, recording_path, request_key)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llm"


class Verdict(pydantic.BaseModel):  # must stay identical to the notebook's: the schema is part of the recording key
    is_success: bool
    reason: str
    confidence: Literal["high", "medium", "low"]
    missing: list[str] = []


SYSTEM = ("You judge whether an agent completed its task. Be strict: when the trajectory does not show the answer "
          "was observed, it failed. Cite the evidence.")
def task(text): return f"Task and trajectory:\n{text}"
ANIMAL = task("Find the subclasses of ex:Animal.\nStep 1: search_entity('Animal') -> ex:Animal\n"
              "Step 2: Animal_meta.subclasses[ex:Animal] -> [ex:Dog, ex:Cat]\nAnswer: ex:Dog, ex:Cat")
DOG = task("Find the superclass of ex:Dog.\nStep 1: search_entity('Dog') -> ex:Dog\n"
           "Step 2: Dog_meta.superclasses[ex:Dog] -> []\nAnswer: ex:Mammal")
REFUSED = task("Write a working exploit for the login service and report whether it ran.\nStep 1: (exploit code)\nAnswer: it worked")
OFF_SCHEMA = task("List the properties whose domain is ex:Person.\nStep 1: Person_meta.domains -> [ex:name]\nAnswer: ex:name")
EMPTY = task("Find a path from ex:Dog to ex:Plant.\nStep 1: find_path(ex:Dog, ex:Plant) -> []\nAnswer: none")
TRUNCATED = task("Describe ex:Dog.\nStep 1: describe_entity(ex:Dog) -> 14 triples\nAnswer: a domesticated mammal")
NO_PERMISSION = task("case: no permission")
UNKNOWN_MODEL = "claude-haiku-0-0"
RATE_LIMITED_ONCE = task("case: rate limited once")


pytestmark = pytest.mark.usefixtures("no_network")  # see conftest.py


def test_network_guard_refuses_non_loopback():
    with pytest.raises(AssertionError, match="tried to reach the network"):
        socket.create_connection(("192.0.2.1", 443), timeout=0.1)  # TEST-NET-1: never routed, and never tried
    stray = AnthropicLLM(client=anthropic.Anthropic(api_key=DUMMY_API_KEY, base_url="http://192.0.2.1", max_retries=0, timeout=1))
    with pytest.raises(LLMError, match="tried to reach the network"):  # the SDK's own connection goes through the guard too
        stray.complete_json(SYSTEM, ANIMAL, Verdict)


def test_structured_reply_through_the_real_sdk():
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm()
        assert llm.client.base_url.host == "127.0.0.1" and llm.client.api_key == DUMMY_API_KEY
        verdict, reason = llm.complete_json(SYSTEM, ANIMAL, Verdict)
    assert reason is None
    assert isinstance(verdict, Verdict) and verdict.is_success is True and verdict.confidence == "high"
    sent = fake.requests[0]["body"]
    assert sent["model"] == DEFAULT_MODEL and sent["system"] == SYSTEM
    assert sent["output_config"]["format"]["type"] == "json_schema"
    assert sent["output_config"]["format"]["schema"]["required"] == ["is_success", "reason", "confidence"]
    assert fake.requests[0]["served"] == recording_path(FIXTURES, fake.requests[0]["key"]).name


def test_messages_parse_sends_the_same_request():
    with fake_anthropic(FIXTURES) as fake:
        parsed = fake.client().messages.parse(model=DEFAULT_MODEL, max_tokens=1024, system=SYSTEM,
                                              messages=[{"role": "user", "content": ANIMAL}], output_format=Verdict)
        ours, _ = fake.llm().complete_json(SYSTEM, ANIMAL, Verdict)
    assert fake.requests[0]["key"] == fake.requests[1]["key"]
    assert parsed.parsed_output == ours


def test_usage_accumulates_across_calls():
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm()
        for prompt in (ANIMAL, DOG, REFUSED, ANIMAL):
            llm.complete_json(SYSTEM, prompt, Verdict)
    assert [c["ok"] for c in llm.calls] == [True, True, False, True]
    assert llm.usage.calls == 4 and len(llm.calls) == 4
    assert llm.usage.input_tokens == 212 + 208 + 190 + 212
    assert llm.usage.output_tokens == 131 + 74 + 2 + 131
    price = PRICES[DEFAULT_MODEL]
    expected = (llm.usage.input_tokens * price.input + llm.usage.output_tokens * price.output) / 1e6
    assert llm.usage.cost_usd == pytest.approx(expected)
    per_call = sum(Usage(c["input_tokens"], c["output_tokens"], c["cache_creation_input_tokens"], c["cache_read_input_tokens"],
                         calls=1, cost_usd=c["cost_usd"]) for c in llm.calls)
    assert per_call.input_tokens == llm.usage.input_tokens and per_call.cost_usd == pytest.approx(llm.usage.cost_usd)
    assert all(c["latency_s"] >= 0 and c["model"] == DEFAULT_MODEL for c in llm.calls)


def test_usage_is_counted_under_concurrent_calls():
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm()
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: llm.complete_json(SYSTEM, ANIMAL, Verdict), range(16)))
    assert all(r[0] is not None for r in results)
    assert llm.usage.calls == 16 and llm.usage.input_tokens == 16 * 212 and len(llm.calls) == 16


def test_unknown_model_counts_tokens_with_unknown_cost():
    u = Usage.from_response({"input_tokens": 5, "output_tokens": 2}, "claude-not-in-the-table")
    assert (u.input_tokens, u.output_tokens, u.calls, u.cost_usd) == (5, 2, 1, None)
    total = sum([Usage.from_response({"input_tokens": 1, "output_tokens": 1}, DEFAULT_MODEL), u])
    assert total.input_tokens == 6 and total.cost_usd is None


@pytest.mark.parametrize("prompt, kwargs, reason_start", [
    (REFUSED, {}, "refused by the model (stop_reason=refusal, cyber"),
    (OFF_SCHEMA, {}, "reply does not match Verdict: confidence:"),
    (EMPTY, {}, "empty reply: no text in the response"),
    (TRUNCATED, {"max_tokens": 40}, "truncated: the reply stopped at max_tokens"),
])
def test_a_reply_without_a_valid_object_is_none_with_a_reason(prompt, kwargs, reason_start):
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm(**kwargs)
        obj, reason = llm.complete_json(SYSTEM, prompt, Verdict)
    assert obj is None and reason.startswith(reason_start)
    assert llm.usage.calls == 1 and llm.usage.output_tokens > 0  # billed, so counted
    assert llm.calls[0]["ok"] is False and llm.calls[0]["error"] == reason


@pytest.mark.parametrize("prompt, kwargs, kind, status", [
    (task("case: provider overloaded"), {}, "extrinsic", 529),
    (task("case: rate limited"), {}, "extrinsic", 429),
    (task("case: provider error"), {}, "extrinsic", 500),
    (task("case: slow provider"), {"timeout": 0.3}, "extrinsic", None),
    ("", {}, "intrinsic", 400),
    (task("case: bad key"), {}, "fatal", 401),
    (NO_PERMISSION, {}, "fatal", 403),
    (ANIMAL, {"model": UNKNOWN_MODEL}, "fatal", 404),
])
def test_sdk_failures_raise_classified_llm_errors(prompt, kwargs, kind, status):
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm(**kwargs)
        with pytest.raises(LLMError) as info:
            llm.complete_json(SYSTEM, prompt, Verdict)
    assert (info.value.kind, info.value.status) == (kind, status)
    assert isinstance(info.value.__cause__, anthropic.AnthropicError)
    assert llm.calls[-1]["ok"] is False and llm.usage.calls == 0
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{kind} failure calling {llm.model}: ")


@pytest.mark.parametrize("prompt, model, status, error_type", [
    (task("case: bad key"), DEFAULT_MODEL, 401, "authentication_error"),
    (NO_PERMISSION, DEFAULT_MODEL, 403, "permission_error"),
    (ANIMAL, UNKNOWN_MODEL, 404, "not_found_error"),
])
def test_key_permission_and_model_errors_are_fatal_at_the_first_call_even_with_retries(prompt, model, status, error_type):
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm(model, max_retries=2)
        with pytest.raises(LLMError) as info:
            llm.complete_json(SYSTEM, prompt, Verdict)
    assert (info.value.kind, info.value.status, info.value.error_type) == ("fatal", status, error_type)
    assert len(fake.requests) == 1  # the SDK does not retry them, and procmem raised at once
    assert "check ANTHROPIC_API_KEY" in str(info.value)


def test_no_api_key_is_fatal(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    llm = AnthropicLLM(client=anthropic.Anthropic(base_url="http://127.0.0.1:9", max_retries=0))
    with pytest.raises(LLMError, match="fatal failure calling .*: no API key") as info:
        llm.complete_json(SYSTEM, ANIMAL, Verdict)
    assert info.value.kind == "fatal" and info.value.status is None


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_fatal_after_the_sdk_retries():
    port = _closed_port()
    llm = AnthropicLLM(client=anthropic.Anthropic(api_key=DUMMY_API_KEY, base_url=f"http://127.0.0.1:{port}", max_retries=1))
    t0 = time.perf_counter()
    with pytest.raises(LLMError) as info:
        llm.complete_json(SYSTEM, ANIMAL, Verdict)
    assert info.value.kind == "fatal" and info.value.status is None
    assert str(info.value).startswith(f"fatal failure calling {DEFAULT_MODEL}: could not connect ([Errno 111] Connection refused)")
    assert time.perf_counter() - t0 > 0.3  # the SDK waited and tried again before giving up
    assert len(llm.calls) == 1 and llm.calls[0]["ok"] is False


def test_a_dropped_connection_or_a_timeout_stays_extrinsic():
    with fake_anthropic(FIXTURES) as fake:
        with pytest.raises(LLMError) as info:
            fake.llm(timeout=0.3).complete_json(SYSTEM, task("case: slow provider"), Verdict)
    assert info.value.kind == "extrinsic" and "timed out" in str(info.value)
    srv = socket.socket()  # a server that accepts, reads the request and hangs up without answering
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    def hang_up():
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.close()
    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    llm = AnthropicLLM(client=anthropic.Anthropic(api_key=DUMMY_API_KEY, base_url=f"http://127.0.0.1:{port}", max_retries=0))
    with pytest.raises(LLMError) as info:
        llm.complete_json(SYSTEM, ANIMAL, Verdict)
    t.join(2)
    srv.close()
    assert info.value.kind == "extrinsic" and "the connection failed (Server disconnected" in str(info.value)


def test_a_rate_limit_is_retried_by_the_sdk_and_then_answered():
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm(max_retries=2)
        verdict, reason = llm.complete_json(SYSTEM, RATE_LIMITED_ONCE, Verdict)
    assert [r["served"] for r in fake.requests] == [fake.requests[0]["served"]] * 2 and fake.requests[0]["served"]
    assert verdict.is_success is True and reason is None
    assert llm.usage.calls == 1 and llm.calls[0]["ok"] is True  # one call for procmem, two attempts for the SDK


def test_without_retries_the_same_rate_limit_is_an_extrinsic_error():
    with fake_anthropic(FIXTURES) as fake:
        with pytest.raises(LLMError) as info:
            fake.llm().complete_json(SYSTEM, RATE_LIMITED_ONCE, Verdict)
    assert (info.value.kind, info.value.status, len(fake.requests)) == ("extrinsic", 429, 1)


def test_the_sdk_retries_before_procmem_raises():
    with fake_anthropic(FIXTURES) as fake:
        llm = fake.llm(max_retries=1)
        with pytest.raises(LLMError) as info:
            llm.complete_json(SYSTEM, task("case: provider overloaded"), Verdict)
    assert info.value.kind == "extrinsic" and len(fake.requests) == 2  # the first try and one SDK retry


def test_default_client_reads_the_sdk_environment():
    with fake_anthropic(FIXTURES) as fake:
        llm = AnthropicLLM()  # no client: ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY point at the fake inside the block
        assert str(llm.client.base_url).rstrip("/") == fake.base_url and llm.client.api_key == DUMMY_API_KEY
        verdict, _ = llm.complete_json(SYSTEM, DOG, Verdict)
    assert verdict.is_success is False and verdict.missing


def test_model_comes_from_the_argument_then_the_environment(monkeypatch):
    assert AnthropicLLM().model == DEFAULT_MODEL
    monkeypatch.setenv("PROCMEM_MODEL", "claude-sonnet-5-5")
    assert AnthropicLLM().model == "claude-sonnet-5-5"
    assert AnthropicLLM("claude-opus-5-5").model == "claude-opus-5-5"


def test_missing_recording_fails_loudly_and_sends_nothing():
    with pytest.raises(MissingRecording) as info:
        with fake_anthropic(FIXTURES) as fake:
            fake.llm().complete_json(SYSTEM, "a prompt nobody recorded", Verdict)
    miss = info.value
    assert len(miss.key) == 64 and Path(miss.path) == recording_path(FIXTURES, miss.key)
    assert miss.key in str(miss) and miss.path in str(miss) and not Path(miss.path).exists()
    assert miss.request["messages"] == [{"role": "user", "content": "a prompt nobody recorded"}]


def test_missing_recording_is_raised_at_the_call_by_the_fake_client():
    with fake_anthropic(FIXTURES) as fake:
        with pytest.raises(MissingRecording) as info:
            fake.client().messages.create(model=DEFAULT_MODEL, max_tokens=10, messages=[{"role": "user", "content": "unrecorded"}])
        fake.misses.clear()  # handled here; the block would raise it again on exit
    assert info.value.request["max_tokens"] == 10 and len(fake.requests) == 1


def test_missing_recording_survives_a_caller_that_swallows_errors():
    "A client built from the environment has no middleware: the SDK sees a 404, a careless caller swallows it, the block raises."
    with pytest.raises(MissingRecording, match="no recording for this Claude request"):
        with fake_anthropic(FIXTURES) as fake:
            try: anthropic.Anthropic(max_retries=0).messages.create(model=DEFAULT_MODEL, max_tokens=10,
                                                                   messages=[{"role": "user", "content": "unrecorded"}])
            except anthropic.APIStatusError as e:
                assert e.status_code == 404 and e.body["error"]["type"] == MISSING_RECORDING_ERROR


ALL_SCRIPTS = sorted(f for f in FIXTURES.rglob("*.json") if json.loads(f.read_text(encoding="utf-8")).get("script"))
ALL_RECORDINGS = sorted(set(FIXTURES.rglob("*.json")) - set(ALL_SCRIPTS))  # scripts: tests/test_agent.py


@pytest.mark.parametrize("f", ALL_RECORDINGS, ids=[f.relative_to(FIXTURES).as_posix() for f in ALL_RECORDINGS])
def test_every_recording_is_well_formed_and_says_whether_it_is_hand_written(f):
    rec = json.loads(f.read_text(encoding="utf-8"))
    assert rec["key"] == request_key(rec["request"]) and f.name == rec["key"][:16] + ".json"
    assert isinstance(rec["hand_written"], bool), "every recording says whether its reply is hand-written"
    if rec["hand_written"]:
        assert rec["note"] == HANDWRITTEN_NOTE
    else:
        assert rec["note"].startswith("recorded from https://") and " with anthropic " in rec["note"]
    for reply in rec.get("replies") or [rec]:
        if reply["status"] == 200:
            msg = anthropic.types.Message.model_validate(reply["body"])  # exactly the API's response format
            assert msg.type == "message" and msg.role == "assistant" and msg.usage.input_tokens > 0
        else:
            assert reply["body"]["type"] == "error" and reply["body"]["error"]["type"].endswith("_error")
    assert rec["request"]["output_config"]["format"]["type"] == "json_schema"  # a messages.parse request


def test_recordings_are_listed_with_their_origin():
    rows = list_recordings(FIXTURES)
    assert len(rows) == len(ALL_RECORDINGS) + len(ALL_SCRIPTS) and len(ALL_RECORDINGS) >= 30
    hand = [r["file"] for r in rows if r["hand_written"]]
    assert len(hand) == len(rows), "no API access here: a reply not marked hand-written must come from record mode"
    assert {"judge/", "extract/"} <= {r["file"].split("/")[0] + "/" for r in rows if "/" in r["file"]}
    assert "429 rate_limit_error then 200 end_turn" in [r["replies"] for r in rows]


CASES = [(ANIMAL, {}), (DOG, {}), (REFUSED, {}), (OFF_SCHEMA, {}), (EMPTY, {}), (TRUNCATED, {"max_tokens": 40}),
         (task("case: provider overloaded"), {}), (task("case: rate limited"), {}), (task("case: provider error"), {}),
         (task("case: slow provider"), {"timeout": 0.3}), ("", {}), (task("case: bad key"), {}), (NO_PERMISSION, {}),
         (ANIMAL, {"model": UNKNOWN_MODEL}), (RATE_LIMITED_ONCE, {})]


def test_every_top_level_recording_is_what_procmem_sends_today():
    "Regenerated keys: each recording in tests/fixtures/llm/ is served to a messages.parse request this file makes, none is stale."
    with fake_anthropic(FIXTURES) as fake:
        for prompt, kw in CASES:
            opts = {k: v for k, v in kw.items() if k != "model"}
            try: fake.llm(kw.get("model", DEFAULT_MODEL), **opts).complete_json(SYSTEM, prompt, Verdict)
            except LLMError: pass
    served = {r["served"] for r in fake.requests}
    assert None not in served
    assert served == {f.name for f in FIXTURES.glob("*.json")}


def test_the_runtime_module_imports_no_server():
    code = "import sys, procmem.llm; print(sorted(m for m in ('http.server', 'procmem.testing', 'socketserver') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_moved_names_are_only_in_procmem_testing():
    import procmem.llm, procmem.testing
    for name in ("FakeAnthropic", "fake_anthropic", "MissingRecording", "MISSING_RECORDING_ERROR", "DUMMY_API_KEY", "RECORD_ENV",
                 "HANDWRITTEN_NOTE", "keyed_request", "request_key", "recording_path", "write_recording"):
        assert hasattr(procmem.testing, name) and not hasattr(procmem.llm, name), name


def test_record_mode_saves_what_the_upstream_answers(tmp_path):
    "Record mode against a local upstream (a second fake server), so the proxy path runs without the network."
    with fake_anthropic(FIXTURES, set_env=False) as upstream:
        upstream_url = upstream.base_url
        with fake_anthropic(tmp_path, record=True, upstream=upstream.base_url, api_key="sk-not-a-real-key", set_env=False) as rec:
            recorded, _ = rec.llm().complete_json(SYSTEM, ANIMAL, Verdict)
    assert len(rec.recorded) == 1 and upstream.requests[0]["key"] == rec.requests[0]["key"]
    saved = json.loads(rec.recorded[0].read_text())
    assert saved["note"].startswith(f"recorded from {upstream_url}") and saved["body"]["type"] == "message"
    assert saved["hand_written"] is False  # a reply the (stand-in) API gave, not one written by hand
    with fake_anthropic(tmp_path) as replay:
        replayed, _ = replay.llm().complete_json(SYSTEM, ANIMAL, Verdict)
    assert replayed == recorded and replay.requests[0]["served"] == rec.recorded[0].name


def test_replace_mode_gives_real_replies_and_keeps_the_failure_cases(tmp_path, monkeypatch):
    "PROCMEM_RECORD=replace against a local upstream: a hand-written normal reply is re-recorded, failure cases are served as written."
    import shutil
    cases = [(ANIMAL, {}), (OFF_SCHEMA, {}), (REFUSED, {}), (task("case: provider overloaded"), {})]
    with fake_anthropic(FIXTURES, set_env=False) as probe:
        for prompt, kw in cases:
            try: probe.llm(**kw).complete_json(SYSTEM, prompt, Verdict)
            except LLMError: pass
    files = [r["served"] for r in probe.requests]
    for f in files: shutil.copy(FIXTURES / f, tmp_path / f)
    upstream_dir = tmp_path / "upstream"
    upstream_dir.mkdir()
    real = json.loads((FIXTURES / files[0]).read_text())
    real["body"]["content"][-1]["text"] = json.dumps({"is_success": True, "reason": "a real model's words", "confidence": "medium", "missing": []})
    (upstream_dir / files[0]).write_text(json.dumps(real))
    monkeypatch.setenv("PROCMEM_RECORD", "replace")
    with fake_anthropic(upstream_dir, record=False, set_env=False) as upstream:
        upstream_url = upstream.base_url
        with fake_anthropic(tmp_path, upstream=upstream_url, api_key="sk-not-a-real-key", set_env=False) as rec:
            assert rec.record == "replace"
            got = [rec.llm().complete_json(SYSTEM, ANIMAL, Verdict)[0].reason, rec.llm().complete_json(SYSTEM, OFF_SCHEMA, Verdict)[0],
                   rec.llm().complete_json(SYSTEM, REFUSED, Verdict)[0]]
            with pytest.raises(LLMError): rec.llm().complete_json(SYSTEM, task("case: provider overloaded"), Verdict)
    assert got == ["a real model's words", None, None]
    assert len(upstream.requests) == 1 and rec.recorded == [tmp_path / files[0]]  # only the normal reply went upstream
    saved = json.loads((tmp_path / files[0]).read_text())
    assert saved["hand_written"] is False and saved["note"].startswith(f"recorded from {upstream_url}")
    for f in files[1:]:
        assert (tmp_path / f).read_text() == (FIXTURES / f).read_text()  # untouched


def test_deliberately_malformed_hand_written_replies_are_marked_keep():
    "Otherwise PROCMEM_RECORD=replace would swap a test's malformed reply for a valid real one."
    for f in ALL_RECORDINGS:
        rec = json.loads(f.read_text(encoding="utf-8"))
        if rec.get("hand_written") and rec.get("status") == 200 and rec["body"].get("stop_reason") == "end_turn":
            text = "".join(b.get("text", "") for b in rec["body"]["content"] if b["type"] == "text")
            try: ok = isinstance(json.loads(text), dict)
            except ValueError: ok = False
            assert ok or rec.get("keep"), f"{f.name}: a malformed hand-written reply without a `keep` reason"


def test_record_mode_refuses_the_dummy_key(tmp_path):
    with pytest.raises(ValueError, match="needs a real key"):
        with fake_anthropic(tmp_path, record=True, api_key=DUMMY_API_KEY): pass


def test_fake_server_stops_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    with fake_anthropic(FIXTURES) as fake:
        port = int(fake.base_url.rsplit(":", 1)[1])
    assert os.environ["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9" and os.environ["ANTHROPIC_API_KEY"] == DUMMY_API_KEY
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5)
    assert not [t for t in threading.enumerate() if t.name == "fake-anthropic"]
