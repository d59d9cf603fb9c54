"""`procmem.ingest` on real logs written by other projects (tests/fixtures/trajectories/<project>/) mixed
with junk: every file's format is detected through the registry, a bad file or record is reported (file,
record index, reason) and skipped, `strict=True` raises at the first one, folders, `.traj` and stdin."""
import io, json, shutil
from pathlib import Path

import pytest
import fastcore.test as ft

from procmem.ingest import LOG_EXTS, FileReport, IngestReport, log_files, read_logs, read_trajectories
from procmem.trajectory import LOG_FORMATS, RecordError, TrajectoryError

FIX = Path(__file__).parent / "fixtures" / "trajectories"
SWE = FIX / "swe-agent" / "swe-agent__test-repo-i1.traj"
TAU = FIX / "tau-bench" / "gpt-4o-airline_excerpt.json"
REFLEXION = FIX / "reflexion_excerpt.txt"
SYNTHETIC = {"anthropic_transcript.json", "openai_chat.json", "generic.jsonl"}  # written for procmem


def real_logs() -> list:
    "Every real log in the fixtures (files written by other projects; the synthetic ones left out)."
    return [p for p in log_files(FIX) if p.name not in SYNTHETIC]


def junk(d: Path) -> dict:
    "Junk files next to real logs: name -> what its report must say."
    d.mkdir(parents=True, exist_ok=True)
    (d / "picture.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    (d / "empty.jsonl").write_text("")
    real = TAU.read_text()
    (d / "cut.json").write_text(real[: len(real) // 2])  # a real file cut in half
    shutil.copy(Path(__file__).parent / "fixtures" / "seed_memories.json", d / "memories.json")
    (d / "notes.txt").write_text("Shopping list\n- milk\n- eggs\n")
    return {"picture.json": "binary file", "empty.jsonl": "the file is empty", "cut.json": "invalid JSON",
            "memories.json": "unknown trajectory format", "notes.txt": "unknown trajectory format"}


def mixed(tmp_path) -> tuple[Path, dict]:
    "A folder of every real fixture log (in subfolders, as given) plus junk and a hidden file."
    d = tmp_path / "logs"
    for p in real_logs():
        q = d / p.relative_to(FIX)
        q.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, q)
    bad = junk(d / "junk")
    (d / ".cache").mkdir()
    (d / ".cache" / "hidden.json").write_text("{not json")
    (d / "README.md").write_text("# not a log")
    return d, bad


def test_every_real_fixture_has_a_format():
    "Each real log in the fixtures is claimed by a registered format and yields trajectories or lessons."
    logs = real_logs()
    assert len(logs) >= 8, logs
    for p in logs:
        r = read_logs(p)
        f, = r.files
        assert f.error is None and f.format in LOG_FORMATS, (p, f)
        assert f.read + f.candidates > 0, (p, f)


def test_mixed_folder_reports_junk_and_reads_the_rest(tmp_path):
    d, bad = mixed(tmp_path)
    r = read_logs(d)
    by_name = {Path(f.path).name: f for f in r.files}
    assert "hidden.json" not in by_name and "README.md" not in by_name
    for name, why in bad.items():
        f = by_name[name]
        assert f.format is None and f.read == 0 and why in f.error, (name, f)
    alone = {p.name: read_logs(p) for p in real_logs()}  # each real file read on its own
    for name, one in alone.items():
        f, = one.files
        ft.test_eq((by_name[name].format, by_name[name].read, by_name[name].error), (f.format, f.read, f.error))
    ft.test_eq(len(r.trajectories), sum(len(one.trajectories) for one in alone.values()))
    ft.test_eq(len(r.files), len(alone) + len(bad))


def test_strict_raises_at_the_first_bad_file(tmp_path):
    "Files are read in sorted order; strict stops at the first bad one, after the good ones before it."
    shutil.copy(TAU, tmp_path / "a.json")
    shutil.copy(SWE, tmp_path / "b.traj")
    junk(tmp_path / "c")
    assert len(read_logs(tmp_path).trajectories) == len(read_logs([TAU, SWE]).trajectories)
    ft.test_fail(lambda: read_logs(tmp_path, strict=True), contains=f"{tmp_path / 'c' / 'cut.json'}: invalid JSON (line")
    ft.test_fail(lambda: read_trajectories(tmp_path / "c" / "picture.json"), contains="picture.json: a binary file")


def test_bad_records_are_skipped_with_their_line(tmp_path):
    "A JSONL file of real records with a broken line and a record of another kind: both reported, the rest read."
    lines = [json.dumps(x) for x in json.loads(TAU.read_text())]
    f = tmp_path / "runs.jsonl"
    f.write_text("\n".join([lines[0], '{"task_id": 9, "traj": [', lines[1], '{"unrelated": true}', ""]))
    r = read_logs(f)
    rep, = r.files
    ft.test_eq(rep.read, 2)
    ft.test_eq([e.index for e in rep.skipped], [2, 4])
    assert "invalid JSON" in rep.skipped[0].reason, rep.skipped
    ft.test_fail(lambda: read_logs(f, strict=True), contains="runs.jsonl:2: invalid JSON")


def test_keys_for_records_procmem_cannot_guess():
    "tau-bench's task is the user simulator's instruction (info.task.instruction), not the first user message."
    r = read_logs(TAU, task_key="info.task.instruction", outcome_key="reward", id_key="task_id")
    raw = json.loads(TAU.read_text())
    ft.test_eq([t.task for t in r.trajectories], [x["info"]["task"]["instruction"] for x in raw])
    ft.test_eq([t.id for t in r.trajectories], [str(x["task_id"]) for x in raw])
    ft.test_eq([t.outcome["success"] for t in r.trajectories], [x["reward"] > 0 for x in raw])
    ft.test_eq(read_trajectories(TAU, task_key="info.task.instruction")[0].task, raw[0]["info"]["task"]["instruction"])
    r = read_logs(TAU, task_key="question")
    assert not r.trajectories and all("--task-key 'question': not in this record" in e.reason for e in r.files[0].skipped)


def test_stdin_and_folders(tmp_path):
    stdin = io.TextIOWrapper(io.BytesIO(SWE.read_bytes()))
    r = read_logs(["-"], stdin=stdin)
    ft.test_eq((r.files[0].path, r.files[0].format), ("-", read_logs(SWE).files[0].format))
    ft.test_eq([t.steps for t in r.trajectories], [t.steps for t in read_logs(SWE).trajectories])
    assert ".traj" in LOG_EXTS
    names = {p.name for p in log_files(FIX)}
    assert SWE.name in names and "LICENSE-NOTICE.md" not in names and "NOTICE.md" not in names
    ft.test_eq(read_logs([SWE, SWE]).files, read_logs(SWE).files)  # a file named twice is read once


def test_missing_paths_are_reported(tmp_path):
    r = read_logs([tmp_path / "nope.json", SWE])
    ft.test_eq(r.files[0].error, "no such file or directory")
    assert r.trajectories
    ft.test_fail(lambda: read_trajectories(tmp_path / "nope.json"), contains="nope.json: no such file or directory")


def test_report_as_data(tmp_path):
    d, bad = mixed(tmp_path)
    j = read_logs(d / "junk").to_dict()
    ft.test_eq(j["trajectories"], 0)
    ft.test_eq(sorted(Path(f["path"]).name for f in j["files"]), sorted(bad))
    assert all(set(f) >= {"path", "format", "read", "skipped", "error"} for f in j["files"])
    json.dumps(j)


def test_deliberate_skips_are_reported_and_do_not_stop_strict():
    "Reflexion's later-trial log re-lists solved agents (without steps or with old ones): reported as expected, strict reads on."
    p = FIX / "reflexion" / "hotpotqa_react_reflexion_trials_6_to_7_excerpt.txt"
    rep, = read_logs(p).files
    assert rep.skipped and all(e["expected"] for e in rep.to_dict()["skipped"]), rep
    ft.test_eq(len(read_trajectories(p)), rep.read)
    ft.test_eq(len(read_logs(p, strict=True).trajectories), rep.read)


def test_a_damaged_record_in_a_real_log_still_stops_strict(tmp_path):
    "The same log with one agent's 'Correct answer:' line damaged: that is an error, reported, and strict stops."
    p = FIX / "reflexion" / "hotpotqa_react_reflexion_trials_6_to_7_excerpt.txt"
    f = tmp_path / "damaged.txt"
    f.write_text(p.read_text().replace("Correct answer:", "Correct answr:", 1))
    r = read_logs(f)
    assert r.files[0].error or any(not e.expected for e in r.files[0].skipped), r.files[0]
    ft.test_fail(lambda: read_trajectories(f), contains=str(f))


def test_a_hidden_folder_given_by_name_is_read(tmp_path):
    "Claude Code keeps sessions in ~/.claude/projects/<project>/: naming that folder reads it; hidden folders inside are skipped."
    cc = sorted((FIX / "claude-code").glob("*.jsonl"))
    d = tmp_path / ".claude" / "projects" / "-home-me-repo"
    (d / ".trash").mkdir(parents=True)
    for p in cc:
        shutil.copy(p, d / p.name)
    shutil.copy(cc[0], d / ".trash" / "old.jsonl")
    r = read_logs(tmp_path / ".claude")
    ft.test_eq(sorted(Path(f.path).name for f in r.files), sorted(p.name for p in cc))
    assert {f.format for f in r.files} == {"claude-code"} and all(f.read for f in r.files), r.files
