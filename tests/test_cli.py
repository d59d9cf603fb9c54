"""The `procmem` command line, run as a real process (`python -m procmem.cli`): the bootstrap-and-search
path, one-line errors with exit status 2 that leave the store untouched, all-or-nothing import, the
export/import round trip, and quarantine of a foreign file given as --store."""
import hashlib, json, os, shutil, subprocess, sys
from pathlib import Path

import pytest

QUERY = "What are the subclasses of Activity?"


def procmem(*args, store=None, cwd=None, env=None, input=None):
    "Run the CLI in a subprocess; the default store is pointed into the test's directory so the user's is never touched."
    cmd = [sys.executable, "-m", "procmem.cli"] + (["--store", str(store)] if store is not None else []) + [str(a) for a in args]
    e = {**os.environ, "PYTHONWARNINGS": "", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=e, input=input, timeout=120)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def exported(store: Path, out: Path) -> list:
    r = procmem("export", out, store=store)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    "A bootstrapped store plus one user memory, closed (no WAL left), copied by each test that changes it."
    d = tmp_path_factory.mktemp("template")
    db = d / "memories.db"
    assert procmem("bootstrap", store=db).returncode == 0
    r = procmem("add", "--title", "Retry a timed-out page load", "--content", "1. Wait\n2. Reload once",
                "--source-type", "failure", "--domain", "web", "--tags", "web,retry", store=db)
    assert r.returncode == 0, r.stderr
    assert not Path(str(db) + "-wal").exists()
    return db


@pytest.fixture
def store(template, tmp_path) -> Path:
    db = tmp_path / "memories.db"
    shutil.copy(template, db)
    return db


# (1) bootstrap, search, bootstrap again
def test_bootstrap_then_search(tmp_path):
    db = tmp_path / "m.db"
    r = procmem("bootstrap", store=db)
    assert (r.returncode, r.stdout, r.stderr) == (0, "added 7 general strategies\n", "")
    r = procmem("search", QUERY, store=db)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.splitlines()[0].endswith("  Find Subclasses Using GraphMeta")
    assert "\n## Relevant Prior Experience\n" in r.stdout
    assert "### 1. [strategy] Find Subclasses Using GraphMeta" in r.stdout
    r = procmem("bootstrap", store=db)
    assert (r.returncode, r.stdout) == (0, "nothing added: all 7 general strategies are already stored\n")
    stats = json.loads(procmem("stats", "--json", store=db).stdout)
    assert stats["count"] == 7 and stats["exists"] is True
    assert len(procmem("list", store=db).stdout.splitlines()) == 7


def test_search_json(store):
    r = procmem("search", "What", "are", "the", "subclasses", "of", "Activity?", "--json", "-k", "1", store=store)
    j = json.loads(r.stdout)
    assert j["query"] == QUERY and [m["title"] for m in j["memories"]] == ["Find Subclasses Using GraphMeta"]
    assert j["injection"].startswith("## Relevant Prior Experience")


# (2) bad inputs: one line on stderr, exit 2, no traceback, store unchanged
def _files(d: Path):
    (d / "list.json").write_text("[]")
    (d / "empty_obj.json").write_text("{}")
    (d / "broken.json").write_text("{not json")
    (d / "onebad.jsonl").write_text('{"title": "Fine", "content": "1. ok"}\n{"title": "", "content": "x"}\n')
    (d / "badjson.jsonl").write_text('{"title": "Fine", "content": "1. ok"}\n{oops\n')
    (d / "dups.json").write_text(json.dumps([dict(title="One", content="1. a", id="dup"), dict(title="Two", content="1. b", id="dup")]))
    (d / "clash.json").write_text(json.dumps(dict(title="Clash", content="1. x", id="8db6c4a5-6b27-53ac-a244-1307e11f9f72")))
    (d / "latin1.json").write_bytes('{"title": "café", "content": "x"}'.encode("latin-1"))
    (d / "adir.json").mkdir()


BAD = [
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "missing command"),
    (["search"], "the following arguments are required: query"),
    (["search", "subclasses", "-k", "-1"], "must be a non-negative integer, got '-1'"),
    (["search", "subclasses", "-k", "three"], "must be a non-negative integer, got 'three'"),
    (["search", "subclasses", "--k", "1.5"], "must be a non-negative integer, got '1.5'"),
    (["search", "subclasses", "-k", "100000"], "must be at most 100"),
    (["search", "subclasses", "--source-type", "guess"], "invalid choice: 'guess'"),
    (["search", "subclasses", "--budget", "-5"], "must be a non-negative integer"),
    (["search", "   "], "search needs a non-empty query"),
    (["show"], "the following arguments are required: id"),
    (["show", "no-such-id"], "no memory has id 'no-such-id'"),
    (["show", "8db6c4a5"], "no memory has id '8db6c4a5'"),  # a prefix is not an id
    (["list", "--limit", "-2"], "must be a non-negative integer"),
    (["list", "--bogus"], "unrecognized arguments: --bogus"),
    (["stats", "extra"], "unrecognized arguments: extra"),
    (["add", "--title", "T"], "add needs --title and --content"),
    (["add", "--title", "", "--content", "C"], "MemoryItem.title: must not be empty"),
    (["add", "--title", "T", "--content", "C", "--source-type", "guess"], "invalid choice: 'guess'"),
    (["add", "--title", "x" * 201, "--content", "C"], "the limit is 200"),
    (["add", "--title", "T", "--content", "C", "--tags", "t" * 60], "longer than 50 characters"),
    (["add", "--title", "T", "--content", "C", "--domain", ""], "MemoryItem.domain: must not be empty"),
    (["add", "--title", b"bad \xff byte", "--content", "C"], "--title is not valid UTF-8 text"),
    (["add", "--json", "missing.json"], "cannot read missing.json: No such file or directory"),
    (["add", "--json", "list.json"], "got a JSON list; use `procmem import`"),
    (["add", "--json", "broken.json"], "not valid JSON"),
    (["add", "--json", "empty_obj.json"], "MemoryItem.title: is missing"),
    (["add", "--json", "latin1.json"], "not UTF-8 text"),
    (["add", "--json", "empty_obj.json", "--title", "T"], "--json cannot be combined with --title"),
    (["add", "--json", "clash.json"], "already holds a different memory"),
    (["import"], "the following arguments are required: file"),
    (["import", "missing.jsonl"], "cannot read"),
    (["import", "onebad.jsonl"], "onebad.jsonl: line 2: MemoryItem.title: must not be empty"),
    (["import", "badjson.jsonl"], "line 2 is not valid JSON"),
    (["import", "dups.json"], "id 'dup' already holds a different memory"),
    (["import", "adir.json"], "cannot read"),
    (["import", "notes.txt"], "unknown format '.txt'"),
    (["export", "out.csv"], "unknown format '.csv'"),
    (["export", "no/such/dir/out.json"], "cannot write"),
    (["export", "adir.json"], "cannot write adir.json: it is a directory"),
    (["--store", ".", "list"], "is a directory"),
    (["--store", "", "stats"], "is a directory"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(map(str, a))[:60] or "(none)" for a, _ in BAD])
def test_bad_input(store, tmp_path, argv, message):
    _files(tmp_path)
    before = sha256(store)
    args = [os.fsdecode(a) if isinstance(a, bytes) else a for a in argv]
    cmd = args if args[:1] == ["--store"] else ["--store", str(store), *args]
    r = procmem(*cmd, cwd=tmp_path, env={"PROCMEM_STORE": str(tmp_path / "default.db")})
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("procmem: error: ") and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert sha256(store) == before
    assert not Path(str(store) + "-wal").exists()
    assert not (tmp_path / "default.db").exists()  # no stray store was created
    assert not list(tmp_path.glob("*.tmp-*")) and not list(tmp_path.glob(".*.tmp-*"))


def test_bad_inputs_leave_export_unchanged(store, tmp_path):
    _files(tmp_path)
    before = exported(store, tmp_path / "before.json")
    for argv, _ in BAD:
        args = [os.fsdecode(a) if isinstance(a, bytes) else a for a in argv]
        if args[:1] == ["--store"]: continue
        assert procmem(*args, store=store, cwd=tmp_path).returncode == 2
    assert exported(store, tmp_path / "after.json") == before


def test_help_and_version():
    r = procmem("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: procmem") and r.stderr == ""
    r = procmem("import", "--help")
    assert r.returncode == 0 and "all of them or, on any error, none" in " ".join(r.stdout.split())
    r = procmem("--version")
    assert r.returncode == 0 and r.stdout.startswith("procmem ")


def test_console_script(store):
    exe = Path(sys.executable).with_name("procmem")
    if not exe.exists(): pytest.skip("the procmem console script is not installed next to this Python")
    r = subprocess.run([str(exe), "--store", str(store), "stats"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "memories: 8" in r.stdout


# (3) an import with one bad line changes nothing
def test_import_with_one_bad_line_leaves_store_unchanged(store, tmp_path):
    before_json, before_sha = exported(store, tmp_path / "before.json"), sha256(store)
    good = [dict(title=f"Good {i}", content=f"1. step {i}") for i in range(5)]
    lines = [json.dumps(g) for g in good]
    lines.insert(3, json.dumps(dict(title="Bad", content="1. x", source_type="guess")))
    (tmp_path / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    r = procmem("import", tmp_path / "mixed.jsonl", store=store)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "mixed.jsonl: line 4: MemoryItem.source_type: 'guess' is not one of" in r.stderr
    assert sha256(store) == before_sha
    assert exported(store, tmp_path / "after.json") == before_json


# (4) an unrelated query finds nothing
def test_unrelated_query(store):
    r = procmem("search", "How do I bake sourdough bread at high altitude?", store=store)
    assert (r.returncode, r.stdout, r.stderr) == (0, "No relevant memories.\n", "")
    r = procmem("search", "sourdough", "--json", store=store)
    assert json.loads(r.stdout) == dict(query="sourdough", memories=[], injection="")


# (5) export/import round trip
@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_export_import_round_trip(store, tmp_path, suffix):
    out = tmp_path / f"bank{suffix}"
    r = procmem("export", out, store=store)
    assert (r.returncode, r.stdout) == (0, f"exported 8 memories to {out}\n")
    copy = tmp_path / "copy.db"
    r = procmem("import", out, store=copy)
    assert (r.returncode, r.stdout) == (0, "added 8, confirmed 0, unchanged 0\n")
    r = procmem("import", out, store=copy)
    assert (r.returncode, r.stdout) == (0, "added 0, confirmed 0, unchanged 8\n")
    assert exported(copy, tmp_path / "copy.json") == exported(store, tmp_path / "orig.json")
    assert procmem("validate", store=copy).stdout == "ok\n"


def test_add_show_confirm(store):
    r = procmem("add", "--title", "Check the cart total", "--content", "1. Open the cart\n2. Compare totals", store=store)
    new_id = r.stdout.strip()
    assert r.returncode == 0 and len(new_id) == 36
    r = procmem("add", "--title", "check the CART total", "--content", "1. open the cart\n2. compare totals", store=store)
    assert r.stdout == f"confirmed existing memory {new_id}\n"
    shown = json.loads(procmem("show", new_id, store=store).stdout)
    assert shown["confidence"] == 0.2 and shown["title"] == "Check the cart total"
    r = procmem("add", "--json", "-", store=store, input=json.dumps(shown))
    assert r.stdout == f"already stored, unchanged: {new_id}\n"


# (6) a foreign file given as --store is moved aside, not overwritten
def test_foreign_store_file_is_moved_aside(tmp_path):
    notes = tmp_path / "notes.db"
    notes.write_text("my precious notes\n")
    r = procmem("bootstrap", store=notes)
    assert r.returncode == 0 and r.stdout == "added 7 general strategies\n"
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"procmem: warning: {notes} is not an SQLite database; it was moved aside to ")
    moved = list(tmp_path.glob("notes.db.quarantined-*"))
    assert len(moved) == 1 and moved[0].read_text() == "my precious notes\n"
    assert moved[0].name in r.stderr
    assert json.loads(procmem("stats", "--json", store=notes).stdout)["count"] == 7


def test_read_only_commands_create_nothing(tmp_path):
    db = tmp_path / "absent" / "m.db"
    for args in (["list"], ["stats"], ["search", "subclasses"], ["validate"], ["export", tmp_path / "e.json"]):
        assert procmem(*args, store=db).returncode == 0
    assert procmem("show", "x", store=db).returncode == 2
    assert not db.parent.exists()
    assert json.loads((tmp_path / "e.json").read_text()) == []


def test_closed_pipe_is_quiet(store):
    r = subprocess.run(f"{sys.executable} -m procmem.cli --store {store} list | head -1", shell=True,
                       capture_output=True, text=True, timeout=120)
    assert r.stderr == "" and len(r.stdout.splitlines()) == 1
