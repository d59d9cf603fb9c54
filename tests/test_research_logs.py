"""Contract tests for the research-log formats (procmem.research_logs): the RLM logger's JSONL, Reflexion
HotpotQA logs of every trial, Reflexion programming runs, and ALFWorld env_results imported as lessons.

Each format reads a small real file written by the other project (tests/fixtures/trajectories/{rlm,reflexion}/,
licences in LICENSE-NOTICE.md there). Tests on the full public runs in shared/data skip, naming the file,
when it is absent."""
import json, re
from collections import Counter
from pathlib import Path

import pytest
import fastcore.test as ft

from procmem.core import MemoryItem
from procmem.trajectory import LOG_FORMATS, LogKeys, RecordError, Trajectory, TrajectoryError, hide_outcome
from procmem.research_logs import from_reflexion_log
from procmem.reflexion_lessons import import_lessons, lessons_from_env_results, lessons_from_reflections
from procmem.store import MemoryStore

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "trajectories"
SHARED = ROOT.parent / "shared" / "data"
RLM = FIX / "rlm" / "rlm_trace_log_example.jsonl"
R67 = FIX / "reflexion" / "hotpotqa_react_reflexion_trials_6_to_7_excerpt.txt"
RBASE = FIX / "reflexion" / "hotpotqa_react_base_excerpt.txt"
PROG_RS = FIX / "reflexion" / "humaneval-rs._reflexion_5_gpt-4_pass_at_k_1_rs.excerpt.jsonl"
PROG_PY = FIX / "reflexion" / "reflexion_humaneval_py_pass_at_1.excerpt.jsonl"
ALF = FIX / "reflexion" / "alfworld"
MINE = ("rlm_jsonl", "reflexion", "reflexion_programming", "reflexion_alfworld")


def _need(path: Path) -> Path:
    if not path.exists(): pytest.skip(f"shared data file not found: {path} (see shared/data/README.md)")
    return path


def _data(path: Path, kind: str):
    "What a LogFormat of `kind` receives for the file at `path`."
    text = path.read_text(encoding="utf-8")
    if kind == "text": return text
    if kind == "json": return json.loads(text)
    return [(n, json.loads(l)) for n, l in enumerate(text.splitlines(), 1) if l.strip()]


def _read(name: str, path: Path, keys=None) -> tuple[list, list]:
    "(trajectories, record errors) that format `name` reads from `path`."
    fmt = LOG_FORMATS[name]
    out = list(fmt.read(_data(path, fmt.kind), keys or LogKeys()))
    assert all(isinstance(x, (Trajectory, RecordError, MemoryItem)) for x in out)
    return [x for x in out if isinstance(x, Trajectory)], [x for x in out if isinstance(x, RecordError)]


@pytest.mark.parametrize("name,path", [("rlm_jsonl", RLM), ("reflexion", R67), ("reflexion", RBASE),
                                       ("reflexion_programming", PROG_RS), ("reflexion_programming", PROG_PY),
                                       ("reflexion_alfworld", ALF / "env_results_trial_2.json")])
def test_each_fixture_is_detected_as_its_format_only(name, path):
    fmt = LOG_FORMATS[name]
    assert fmt.detect(_data(path, fmt.kind)) is True
    for other in MINE:
        o = LOG_FORMATS[other]
        if other != name and o.kind == fmt.kind: assert o.detect(_data(path, o.kind)) is False, other
    # no other registered format of the same kind that is tried first (lower priority) claims the file
    for o in LOG_FORMATS.values():
        if o.name != name and o.kind == fmt.kind and o.priority <= fmt.priority:
            assert not o.detect(_data(path, o.kind)), f"{o.name} (priority {o.priority}) also claims {path.name}"


def test_formats_never_raise_in_detect_on_junk():
    for name in MINE:
        fmt = LOG_FORMATS[name]
        for junk in (None, "", "Question: x", [], [(1, None)], {"a": 1}, [1, 2], [(1, {"type": 5})]):
            assert fmt.detect(junk) in (True, False)
            assert fmt.detect(junk) is False, (name, junk)


# --- RLM logger JSONL ----------------------------------------------------------------------------------

def test_rlm_jsonl_one_trajectory_per_run_context():
    ts, errs = _read("rlm_jsonl", RLM)
    assert errs == []
    ft.test_eq([t.task for t in ts], ["Generate a random number between 1 and 100.", "What was the number you just generated?",
                                      "Pick a color.", "Why did you pick that one?", "Set x = 500 in the repl",
                                      "Read the value of x from the repl. do not assume the value. Then set x to the double of its value."])
    ft.test_eq([len(t.steps) for t in ts], [3, 2, 1, 0, 2, 2])
    ft.test_eq(ts[-1].answer, "1000")
    ft.test_eq(ts[-1].steps[-1].observation, "500\n1000\n")
    ft.test_eq(ts[0].steps[0].thought[:40], "First, I will check the contents of the ")
    for t in ts:
        assert t.outcome is None and t.source == "tool" and t.metadata["format"] == "rlm_jsonl"
        assert t.metadata["run_metadata"]["root_model"] == "gpt-4o"  # unknown keys kept
        assert set(t.metadata["run_context"]) >= {"timestamp", "environment_type", "session_mode"}
    ft.test_eq(len({t.id for t in ts}), 6)
    ft.test_eq([t.id for t in _read("rlm_jsonl", RLM)[0]], [t.id for t in ts])  # stable ids


def test_rlm_jsonl_without_run_context_and_with_bad_lines():
    lines = _data(RLM, "jsonl")
    old = [(n, r) for n, r in lines if r["type"] != "run_context"]  # what the logger wrote before run_context
    (t,) = LOG_FORMATS["rlm_jsonl"].read(old, LogKeys())
    ft.test_eq((t.task, len(t.steps), t.answer, t.metadata["run_context"]), ("Generate a random number between 1 and 100.", 10, "1000", None))
    broken = [(n, {**r, "code_blocks": {"code": "x"}}) if n == 8 else (n, r) for n, r in lines] + [(99, ["not", "a", "record"])]
    out = LOG_FORMATS["rlm_jsonl"].read(broken, LogKeys())
    errs = [x for x in out if isinstance(x, RecordError)]
    ft.test_eq(errs, [RecordError(99, "not an RLM log record (type None)"),
                      RecordError(7, "line 8: expected a dict or object with a list of code_blocks, got dict")])
    ft.test_eq(sum(isinstance(x, Trajectory) for x in out), 5)
    no_task = [(n, {**r, "code_blocks": []}) for n, r in old]
    ft.test_eq(LOG_FORMATS["rlm_jsonl"].read(no_task, LogKeys()), [RecordError(3, "iterations without a run_context line and no context"
                                                                           " variable in their locals: the task is unknown (give --task-key)")])


def test_rlm_jsonl_user_keys():
    ts, _ = _read("rlm_jsonl", RLM, LogKeys(task="prompt", outcome="session_mode", id="timestamp"))
    ft.test_eq(ts[2].outcome, {"success": True, "label_key": "session_mode", "label": True})
    ft.test_eq(ts[0].id, "2026-01-13T13:25:38.249350")
    ts, errs = _read("rlm_jsonl", RLM, LogKeys(outcome="reward"))
    assert ts == [] and len(errs) == 6 and "--outcome-key 'reward': not in this record" in errs[0].reason


# --- Reflexion HotpotQA ----------------------------------------------------------------------------------

def test_reflexion_later_trials_skip_agents_solved_earlier():
    ts, errs = _read("reflexion", R67)
    ft.test_eq([(t.metadata["trial"], t.metadata["section"], t.outcome["success"], t.outcome["halted"]) for t in ts],
               [(6, "correct", True, False), (6, "incorrect", False, False), (6, "halted", False, True),
                (7, "incorrect", False, False), (7, "incorrect", False, False), (7, "halted", False, True)])
    ft.test_eq(Counter(e.reason for e in errs), {"solved in an earlier trial: listed without steps": 6,
                                                 "solved in trial 6: listed again with that trial's steps (read once)": 1})
    ft.test_eq(sorted(e.index for e in errs), [8, 11, 16, 90, 93, 98, 101])  # the agents' Question: lines
    assert all(e.expected for e in errs)  # skipped by design: no run is lost, --strict tolerates them
    for t in ts:
        assert t.outcome == {"success": t.metadata["section"] == "correct", "halted": t.metadata["section"] == "halted"}
        assert t.metadata["gold_answer"] and t.steps
        assert t.answer is None if t.outcome["halted"] else t.answer == t.steps[-1].args
        h = hide_outcome(t)
        assert h.outcome is None and "gold_answer" not in h.metadata and "section" not in h.metadata
        for s in t.steps: assert "Answer is" not in s.observation and "Correct answer" not in s.observation


def test_reflexion_base_halted_agents_are_failures_and_read_once():
    skipped = []
    ts = from_reflexion_log(RBASE, skipped=skipped)
    ft.test_eq([(t.metadata["section"], t.answer, t.outcome["success"]) for t in ts],
               [("correct", "Jonny Craig", True), ("incorrect", "Viacom", False), ("incorrect", "Cody Bellinger", False), ("halted", None, False)])
    ft.test_eq([(e.index, e.reason, e.expected) for e in skipped],
               [(80, "listed as incorrect in this trial and again as halted (read once)", True)])
    text = RBASE.read_text()
    ft.test_fail(lambda: from_reflexion_log(_tmp(text.replace("Halted: 1", "Halted: 2"))), contains="but its summary line says (1, 2, 2)")
    out = LOG_FORMATS["reflexion"].read(text.replace("Halted: 1", "Halted: 2"), LogKeys())
    ft.test_eq(out[-1].index, "trial 1")  # reported, the file still read
    ft.test_eq(sum(isinstance(x, Trajectory) for x in out), 4)


def _tmp(text: str) -> Path:
    import tempfile
    p = Path(tempfile.mkdtemp()) / "log.txt"
    p.write_text(text)
    return p


def test_reflexion_bad_agents_are_reported_not_fatal():
    text = R67.read_text()
    bad = text.replace("Answer is INCORRECT", "Answer is CORRECT", 1)  # trial 6's incorrect agent
    ts, errs = _read("reflexion", _tmp(bad))
    ft.test_eq(len(ts), 5)
    bad_errs = [(e.index, e.reason) for e in errs if not e.expected]
    ft.test_eq(bad_errs, [(38, "an agent in the INCORRECT section says 'Answer is CORRECT'")])  # damage: not expected


def test_reflexion_full_logs_in_shared_data():
    log, skipped = _need(SHARED / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt"), []
    ts = from_reflexion_log(log, skipped=skipped, keep_relisted=False)
    ft.test_eq((len(ts), len(skipped), sum(len(t.steps) for t in ts)), (326, 172, 1343))
    every = from_reflexion_log(log)  # the default keeps the re-listings, marked
    ft.test_eq((len(every), sum("relisted_from_trial" in t.metadata for t in every)), (498, 172))
    ft.test_eq({t.id for t in every if "relisted_from_trial" not in t.metadata}, {t.id for t in ts})
    ft.test_eq(Counter(t.metadata["section"] for t in ts), {"correct": 51, "incorrect": 209, "halted": 66})
    assert all(e.reason.startswith("solved in trial ") for e in skipped)
    ft.test_eq(len({t.metadata["question_id"] for t in ts}), 100)


# --- Reflexion programming runs ------------------------------------------------------------------------

def test_reflexion_programming_runs():
    ts, errs = _read("reflexion_programming", PROG_RS)
    ft.test_eq([(t.id, t.outcome["success"], len(t.metadata["reflections"])) for t in ts],
               [("HumanEval_111_histogram", True, 0), ("HumanEval_112_reverse_delete", True, 2), ("HumanEval_113_odd_count", False, 4)])
    assert errs == []
    for t in ts:
        assert t.task.startswith("/// ") or t.task.startswith("use ") or t.task.startswith("fn ")
        assert t.outcome["label_key"] == "is_solved" and t.metadata["format"] == "reflexion_programming"
        assert t.metadata["language"] == "rs" and "test" in t.metadata  # unknown keys kept
        assert t.metadata["test"] not in t.steps[0].action
    ft.test_eq(ts[2].steps[0].thought, ts[2].metadata["reflections"][-1])
    ts, errs = _read("reflexion_programming", PROG_PY)
    ft.test_eq([(t.id, t.outcome["success"], len(t.steps)) for t in ts], [("HumanEval/0", True, 1), ("HumanEval/1", True, 1), ("HumanEval/32", False, 0)])
    assert errs == [] and ts[-1].metadata["no_code_logged"] is True  # a failed run that logged no code is still a failure


def test_reflexion_programming_current_format_with_implementations():
    # the shape reflexion's programming_runs/reflexion.py writes today (item["implementations"], item["test_feedback"]);
    # built from a real record, since every published run predates those keys
    _, r = _data(PROG_RS, "jsonl")[2]
    impls = ["fn odd_count() {}", r["solution"]]
    rec = {**r, "implementations": impls, "test_feedback": ["Tests failed: 3", "Tests passed"], "reflections": r["reflections"][:1]}
    (t,), _ = LOG_FORMATS["reflexion_programming"].read([(1, rec)], LogKeys()), None
    ft.test_eq([(s.action, s.observation, s.thought) for s in t.steps],
               [(impls[0], "Tests failed: 3", ""), (impls[1], "Tests passed", r["reflections"][0])])
    ft.test_eq(_read_junk(), [RecordError(1, "expected an object with a 'prompt' string"),
                              RecordError(2, "reflections: expected a list of strings, got 'x'"),
                              RecordError(3, "solved, but the run logged no code (no implementations, no solution)"),
                              RecordError(4, "solution: expected the code as a string, got list")])


def _read_junk():
    recs = [(1, "x"), (2, {"prompt": "p", "is_solved": True, "solution": "s", "reflections": "x"}),
            (3, {"prompt": "p", "is_solved": True, "solution": ""}),
            (4, {"prompt": "p", "is_solved": True, "solution": ["assert f() == 1"]})]  # a test-generation run's shape
    return LOG_FORMATS["reflexion_programming"].read(recs, LogKeys())


# --- ALFWorld env_results -> lessons through the gates -------------------------------------------------

def test_alfworld_env_results_read_as_lessons_not_trajectories():
    fmt = LOG_FORMATS["reflexion_alfworld"]
    out = list(fmt.read(_data(ALF / "env_results_trial_2.json", "json"), LogKeys()))
    assert len(out) == 7 and all(isinstance(x, MemoryItem) for x in out)  # env_2: 1, env_4: 3, env_20: 3 reflections
    ft.test_eq([x.provenance["env"] for x in out], ["env_2"] + ["env_4"] * 3 + ["env_20"] * 3)
    bad = _data(ALF / "env_results_trial_2.json", "json") + [{"name": "env_x", "memory": "not a list", "is_success": False}]
    ft.test_eq([x for x in fmt.read(bad, LogKeys()) if isinstance(x, RecordError)],
               [RecordError(4, "expected {name, memory: [reflection texts], is_success}")])


def test_alfworld_lessons_merge_across_trials(tmp_path):
    store = MemoryStore(tmp_path / "m.db")
    acts = []
    for t in range(3):
        lessons = lessons_from_env_results(ALF / f"env_results_trial_{t}.json")
        originals = {" ".join(x.split()) for e in _data(ALF / f"env_results_trial_{t}.json", "json") for x in e["memory"]}
        for m in lessons:
            assert m.source_type == "failure" and m.domain == "alfworld" and m.confidence == 0.1
            assert m.provenance["source"] == "import" and m.provenance["trust"] == "untrusted"
            assert m.provenance["trial"] == t and not m.title.startswith("I ")  # said impersonally
            assert not re.search(r"\b[a-z]+ \d+\b", m.title + m.task_query)  # no "plate 2": instance numbers masked
            assert m.content in originals  # the agent's own words, unchanged (whitespace normalised)
        acts += [r.action for r in import_lessons(lessons, store)]
    ft.test_eq(Counter(acts), {"add": 6, "merge": 9})
    ft.test_eq(len(list(store)), 6)  # 15 reflections, 7 distinct texts (two restate one lesson), 6 memories
    again = import_lessons(lessons_from_env_results(ALF / "env_results_trial_2.json"), store)
    assert {r.action for r in again} <= {"merge", "skip"} and len(list(store)) == 6


def test_lessons_errors():
    ft.test_fail(lambda: lessons_from_env_results(RLM), contains="cannot read it as JSON")
    ft.test_fail(lambda: lessons_from_env_results(FIX / "openai_chat.json"), contains="not a Reflexion ALFWorld env_results file")
    ft.test_eq(lessons_from_reflections(["", "   "]), [])


def test_alfworld_all_trials_in_shared_data(tmp_path):
    d = _need(SHARED / "reflexion" / "alfworld" / "env_results_trial_7.json").parent
    store = MemoryStore(tmp_path / "m.db")
    acts = Counter(r.action for t in range(8) for r in import_lessons(lessons_from_env_results(d / f"env_results_trial_{t}.json"), store))
    ft.test_eq(sum(acts.values()), 1006)
    n = len(list(store))
    assert n <= 147 and acts["merge"] > 700, (n, acts)  # grows with distinct lessons, not with files


# --- through procmem.ingest (what `procmem learn` reads) ------------------------------------------------

def test_read_logs_detects_and_reads_every_research_format():
    from procmem.ingest import read_logs
    files = [RLM, R67, RBASE, PROG_RS, PROG_PY, ALF / "env_results_trial_2.json"]
    rep = read_logs(files)
    got = [(Path(f.path).name, f.format, f.read, f.candidates, len(f.skipped), f.error) for f in rep.files]
    ft.test_eq(got, [(RLM.name, "rlm_jsonl", 6, 0, 0, None), (R67.name, "reflexion", 6, 0, 7, None),
                     (RBASE.name, "reflexion", 4, 0, 1, None), (PROG_RS.name, "reflexion_programming", 3, 0, 0, None),
                     (PROG_PY.name, "reflexion_programming", 3, 0, 0, None), ("env_results_trial_2.json", "reflexion_alfworld", 0, 7, 0, None)])
    ft.test_eq(len(rep.trajectories), 22)
    assert all(c.provenance["file"] == "env_results_trial_2.json" for c in rep.candidates)


def test_strict_reading_tolerates_deliberate_skips_only():
    from procmem.ingest import read_trajectories
    ts = read_trajectories(R67)  # 7 listings skipped by design: the file still reads under strict
    ft.test_eq(len(ts), 6)
    ft.test_fail(lambda: read_trajectories(_tmp(R67.read_text().replace("Answer is INCORRECT", "Answer is CORRECT", 1))),
                 contains="an agent in the INCORRECT section says 'Answer is CORRECT'")
