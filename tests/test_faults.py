"""Fault tests (issue 8, reliability), bounded in time:
- disk full, simulated for real: a child process whose file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored)
  stops SQLite's writes, and, where unprivileged user namespaces exist, a tiny tmpfs (real ENOSPC).
  The store stays intact and readable and every acknowledged write is kept; the error is a one-line
  StoreError (CLI: exit 2), never "damaged, run repair".
- truncated files: a store cut at many offsets -> `procmem validate` says damaged, `procmem repair`
  moves it aside and salvages the rows still in the file (unchanged), validate then says ok; a WAL cut
  at any offset loses at most the transactions after the cut, never part of one.
- stores written by older procmem versions (tests/fixtures/stores, written by the code of older
  commits, see make_old_stores.py) -> read read-only without a byte changed, migrated on the first
  writable open, every field and event kept."""
import hashlib, json, os, random, shutil, sqlite3, subprocess, sys, textwrap
from pathlib import Path

import fastcore.test as ft
import pytest
from procmem import MemoryItem, MemoryStore
from procmem.store import STORE_FORMAT, StoreError, validate_store

FIXTURES = Path(__file__).parent / "fixtures"
OLD_STORES = FIXTURES / "stores"


def _env():
    return {**os.environ, "PYTHONWARNINGS": "", "PYTHONDONTWRITEBYTECODE": "1"}


def _cli(*args, store, preexec_fn=None):
    cmd = [sys.executable, "-m", "procmem.cli", "--store", str(store), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120, preexec_fn=preexec_fn)


def _main(*args, store, capsys):
    "The CLI in this process (fast): (exit code, stdout, stderr)."
    from procmem.cli import main
    capsys.readouterr()
    code = main(["--store", str(store), *map(str, args)])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def _sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _snapshot(d: Path) -> dict:
    return {f.name: _sha(f) for f in sorted(d.iterdir()) if f.is_file()}


_VERBS = ["Open", "Check", "Compare", "Select", "Copy", "Verify", "Close", "Save", "Filter", "Sort", "Export", "Review"]
_NOUNS = ["invoice", "cart", "settings page", "order history", "shipping form", "report", "calendar", "inbox",
          "dashboard", "profile", "address book", "price list", "ticket queue", "log file", "backup folder"]
_ADJ = ["latest", "pending", "archived", "monthly", "shared", "draft", "failed", "weekly", "primary", "old"]


def _procedure(j: int, n: int = 6) -> tuple[str, str]:
    "A distinct, plausible (title, numbered procedure) that the CLI's gates accept (n steps, ~60 chars each)."
    r = random.Random(j)
    steps = [f"{k}. {r.choice(_VERBS)} the {r.choice(_ADJ)} {r.choice(_NOUNS)} and note the {r.choice(_ADJ)} "
             f"{r.choice(_NOUNS)}" for k in range(1, n + 1)]
    return f"{r.choice(_VERBS)} the {r.choice(_ADJ)} {r.choice(_NOUNS)} before editing the {r.choice(_NOUNS)}", "\n".join(steps)


def _one_error_line(r):
    "The CLI failed with exactly one line on stderr and no traceback."
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("procmem: error: "), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


# ------------------------------------------------------------------------------------------ disk full

def _base_items(n=20):
    "Real memories (the shared seed fixture) plus generated ones."
    seeds = json.loads((FIXTURES / "seed_memories.json").read_text())
    gen = [MemoryItem(f"Base procedure {i} sprocket", "written before the disk filled", f"1. step {i}", id=f"base{i}")
           for i in range(n)]
    return [MemoryItem.from_dict(d) for d in seeds] + gen


# Runs in a child process: fills the store until a write fails, then tries a batch, a search and an
# update; prints what happened as JSON. Each id is recorded only after `add` returned (acknowledged).
FILL = textwrap.dedent("""
    import json, resource, signal, sys
    from procmem import MemoryItem, MemoryStore
    from procmem.store import StoreError
    db, limit = sys.argv[1], int(sys.argv[2])
    s = MemoryStore(db)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    def attempt(fn):
        try:
            fn()
        except Exception as e:
            return dict(type=type(e).__name__, store_error=isinstance(e, StoreError), message=str(e))
    acked = []
    def fill():
        for i in range(5000):
            item = MemoryItem(f"Filler {i} gizmo", "written until the disk is full", "step " * 800, id=f"f{i}")
            acked.append(s.add(item).id)
    def update():
        m = s.get("base1"); m.content = "changed " * 900; s.update(m)
    out = dict(add=attempt(fill))
    batch = [MemoryItem(f"Batch {j} cog", "a batch", "part " * 400, id=f"b{j}") for j in range(300)]
    out["add_many"] = attempt(lambda: s.add_many(batch))
    out["update"] = attempt(update)
    out["search"] = attempt(lambda: s.search("Filler 1 gizmo", k=3))
    out.update(acked=acked, check=s.check(), n=len(s))
    print(json.dumps(out))
""")


def _base_store(db: Path) -> list[str]:
    with MemoryStore(db) as s:
        items = _base_items()
        s.add_many(items)
    assert not Path(str(db) + "-wal").exists()
    return [m.id for m in items]


@pytest.fixture(scope="module")
def rlimit_run(tmp_path_factory):
    "A store filled until its file-size limit (64 KB past its size) stops the writes."
    d = tmp_path_factory.mktemp("fsize")
    db = d / "m.db"
    base = _base_store(db)
    limit = db.stat().st_size + 64 * 1024
    r = subprocess.run([sys.executable, "-c", FILL, str(db), str(limit)], capture_output=True, text=True,
                       env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    return db, base, json.loads(r.stdout)


def _can_mount_tmpfs() -> bool:
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
    return r.returncode == 0


@pytest.fixture(scope="module")
def tmpfs_run(tmp_path_factory):
    """A store on a 384 KiB tmpfs (real ENOSPC), mounted in an unprivileged user+mount namespace; the
    store files are copied out (the mount ends with the namespace) together with the CLI's results."""
    if not _can_mount_tmpfs():
        pytest.skip("no unprivileged user+mount namespaces (unshare -rm) here; the RLIMIT_FSIZE tests cover disk full")
    d = tmp_path_factory.mktemp("tmpfs")
    (d / "mnt").mkdir()
    (d / "out").mkdir()
    _base_store(d / "base.db")
    cli = f"{sys.executable} -m procmem.cli --store {d}/mnt/m.db"
    script = textwrap.dedent(f"""
        set -e
        mount -t tmpfs -o size=384k tmpfs {d}/mnt
        cp {d}/base.db {d}/mnt/m.db
        {sys.executable} -c "$FILL" {d}/mnt/m.db 0 > {d}/out/fill.json
        set +e
        dd if=/dev/zero of={d}/mnt/filler bs=1k 2> /dev/null  # the last free blocks too: the disk is full
        {cli} add --title "Check the cart total before paying" --content "$PROC" > {d}/out/add.out 2> {d}/out/add.err
        echo $? > {d}/out/add.rc
        {cli} import {d}/batch.jsonl > {d}/out/import.out 2> {d}/out/import.err
        echo $? > {d}/out/import.rc
        {cli} list > {d}/out/list.out 2> {d}/out/list.err
        echo $? > {d}/out/list.rc
        rm {d}/mnt/filler
        cp {d}/mnt/m.db* {d}/out/
    """)
    with open(d / "batch.jsonl", "w") as f:
        for j in range(200):
            title, content = _procedure(j, 30)
            f.write(json.dumps(dict(title=title, content=content, id=f"imp{j}")) + "\n")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                       env={**_env(), "FILL": FILL, "PROC": _procedure(12345, 8)[1]})
    assert r.returncode == 0, r.stderr
    return d / "out", json.loads((d / "out" / "fill.json").read_text())


def _assert_intact(db: Path, base: list[str], out: dict):
    "The store opens cleanly, checks healthy, holds every acknowledged write, and no partial batch."
    assert out["check"] == [] and out["add"] is not None, out  # the writer's own view, right after the failure
    assert len(out["acked"]) >= 1  # some writes succeeded before the disk filled
    with MemoryStore(db) as s:
        assert s.check() == [] and validate_store(db)["ok"]
        ids = {m.id for m in s}
        missing = [i for i in base + out["acked"] if i not in ids]
        assert not missing, f"acknowledged writes lost: {missing[:5]}"
        assert sum(i.startswith("b") and i[1:].isdigit() for i in ids) in (0, 300)  # the batch: all or nothing
        assert len(ids - set(base) - set(out["acked"])) <= 1 or out["add_many"] is None  # at most the unacked add
        last = s.get(out["acked"][-1])
        assert last.title == f"Filler {len(out['acked']) - 1} gizmo" and last.content == "step " * 800
        assert s.search(last.title, k=1)[0][0].id == last.id
        s.add(MemoryItem("Written after space came back", "recovery", "1. works", id="after"))
    with MemoryStore(db, readonly=True) as s:
        assert "after" in s and s.check() == []


def test_disk_full_rlimit_keeps_store_intact(rlimit_run):
    db, base, out = rlimit_run
    _assert_intact(db, base, out)


def test_disk_full_tmpfs_keeps_store_intact(tmpfs_run):
    d, out = tmpfs_run
    _assert_intact(d / "m.db", [m.id for m in _base_items()], out)


def _assert_clear_write_error(err):
    assert err is not None and err["store_error"], err
    msg = err["message"].lower()
    assert "disk" in msg or "space" in msg or "full" in msg, err
    assert "repair" not in msg and "\n" not in msg, err


def test_disk_full_rlimit_raises_store_error(rlimit_run):
    _, _, out = rlimit_run
    _assert_clear_write_error(out["add"])
    _assert_clear_write_error(out["add_many"])


def test_disk_full_tmpfs_raises_store_error(tmpfs_run):
    _, out = tmpfs_run
    _assert_clear_write_error(out["add"])
    _assert_clear_write_error(out["add_many"])


def test_disk_full_tmpfs_cli_says_so_in_one_line(tmpfs_run):
    """`procmem import` of 200 memories on the full disk: exit 2 with one error line; what it reported as
    added before the disk filled is in the store, nothing else. A small `add` may still fit in the WAL
    space a failed transaction left (SQLite reuses it): if it fails, the same rules."""
    d, _ = tmpfs_run
    for cmd in ("add", "import"):
        rc, err = int((d / f"{cmd}.rc").read_text()), (d / f"{cmd}.err").read_text()
        if cmd == "add" and rc == 0:
            continue
        assert rc == 2, (cmd, rc, err)
        assert err.count("\n") == 1 and err.startswith("procmem: error: ") and "repair" not in err, (cmd, err)
        assert "disk" in err.lower() or "full" in err.lower() or "space" in err.lower(), (cmd, err)
    assert int((d / "list.rc").read_text()) == 0  # reading a full disk's store still works
    reported = {l.split()[1] for l in (d / "import.out").read_text().splitlines() if l.startswith("added ")}
    with MemoryStore(d / "m.db") as s:
        assert s.check() == []
        stored = {m.id for m in s if m.id.startswith("imp")}
        assert reported <= stored and stored <= reported | {m.id for m in s if m.id.startswith("imp") and
                                                            m.confidence > 0.1}, (reported, stored)
        added = [m for m in s if m.title == "Check the cart total before paying"]
        assert len(added) == (int((d / "add.rc").read_text()) == 0)  # an acknowledged add is kept


def _fsize_limit(limit):
    def set_limit():
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.parametrize("limit", [1000, 40_000])
def test_disk_full_rlimit_cli_never_says_damaged(tmp_path, limit):
    """Writes that cannot grow a file (limit 1000: not even the WAL index; 40 KB: a few WAL frames) give
    one line, exit 2, saying the disk is full; read commands never call the healthy store damaged."""
    db = tmp_path / "m.db"
    _base_store(db)
    lim = _fsize_limit(limit)
    title, content = _procedure(12345, 60)
    for argv in (["add", "--title", title, "--content", content], ["bootstrap"], ["search", "hello"],
                 ["list"], ["stats"]):
        r = _cli(*argv, store=db, preexec_fn=lim)
        assert "damaged" not in r.stderr and "repair" not in r.stderr, (argv, r.stderr)
        if r.returncode:
            assert r.returncode == 2, (argv, r.returncode, r.stderr)
            _one_error_line(r)
    with MemoryStore(db) as s:  # and the store was never harmed
        assert s.check() == [] and {m.id for m in s} >= {m.id for m in _base_items()}


# ------------------------------------------------------------------------------------------ truncation

N_TRUNC = 600


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> tuple[Path, dict]:
    "A closed store of 606 memories (600 generated, the 6 real seed memories) with outcome events."
    db = tmp_path_factory.mktemp("trunc") / "src.db"
    gen = [MemoryItem(f"Procedure {i} for widget{i}", "desc " * 10, f"step {i} " * 20, id=f"p{i}") for i in range(N_TRUNC)]
    with MemoryStore(db) as s:
        s.add_many(gen + _base_items(0))
        for i in range(0, N_TRUNC, 7):
            s.record_outcome([f"p{i}"], True)
        items = {m.id: m.to_dict() for m in s}
    assert not Path(str(db) + "-wal").exists() and db.stat().st_size > 300_000
    return db, items


@pytest.mark.parametrize("frac", [0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, "page", "page+1"])
def test_truncated_store_is_salvaged_by_repair(healthy, tmp_path, capsys, frac):
    src, items = healthy
    data = src.read_bytes()
    cut = {"page": len(data) - 4096, "page+1": len(data) - 4095}.get(frac) or int(len(data) * frac)
    db = tmp_path / "memories.db"
    db.write_bytes(data[:cut])
    before = _snapshot(tmp_path)
    r = _main("validate", store=db, capsys=capsys)
    assert r.returncode == 1 and r.stdout.strip(), r
    _one_error_line(r)
    assert _snapshot(tmp_path) == before  # validate wrote nothing
    r = _main("repair", store=db, capsys=capsys)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    moved = Path(lines[0].rsplit(" ", 1)[1])
    assert lines[0].startswith(f"moved the damaged store aside to {db}.damaged-") and _sha(moved) == before[db.name]
    salvaged = int(lines[1].split()[1])
    share = cut / len(data)
    minimum = len(items) if share > 0.99 else 0.6 * share * N_TRUNC if share >= 0.25 else 1
    assert salvaged >= minimum, (cut, salvaged)  # the rows still in the file (measured: 0.5 -> 288, 0.9 -> 547)
    with MemoryStore(db) as s:  # every salvaged memory is exactly the one that was written
        assert len(s) == salvaged and s.check() == []
        for m in s:
            assert m.to_dict() == items[m.id], m.id
        assert s.events(kind="repair")[0]["detail"]["salvaged"] == salvaged
    r = _main("validate", store=db, capsys=capsys)
    assert r.returncode == 0 and r.stdout.startswith(f"ok: {db}\n") and f"checked: {salvaged} memories" in r.stdout


@pytest.mark.parametrize("cut", [50, 1000])
def test_store_cut_inside_its_first_page_is_reported_not_guessed(healthy, tmp_path, capsys, cut):
    "Too little is left to tell it is a procmem store: validate says damaged, repair refuses, nothing changes."
    db = tmp_path / "memories.db"
    db.write_bytes(healthy[0].read_bytes()[:cut])
    before = _snapshot(tmp_path)
    r = _main("validate", store=db, capsys=capsys)
    assert r.returncode == 1 and "damaged" in r.stdout, r
    r = _main("repair", store=db, capsys=capsys)
    assert r.returncode == 2 and "nothing was changed" in r.stderr, r
    _one_error_line(r)
    assert _snapshot(tmp_path) == before


# A child that leaves its last transactions in the WAL only: it exits without closing (no checkpoint).
WAL_WRITER = textwrap.dedent("""
    import os, sys
    from procmem import MemoryItem, MemoryStore
    s = MemoryStore(sys.argv[1])
    s._con.execute("PRAGMA wal_autocheckpoint=0")
    for i in range(12):
        s.add(MemoryItem(f"Wal item {i} bolt", "only in the WAL", f"1. step {i}", id=f"w{i}"))
        if i == 5:
            s.add_many([MemoryItem(f"Wal batch {j} nut", "a batch", "part " * 200, id=f"wb{j}") for j in range(30)])
    sys.stdout.flush()
    os._exit(0)
""")


@pytest.fixture(scope="module")
def wal_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("wal")
    db = d / "m.db"
    base = _base_store(db)
    r = subprocess.run([sys.executable, "-c", WAL_WRITER, str(db)], capture_output=True, text=True, env=_env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    wal = Path(str(db) + "-wal")
    assert wal.stat().st_size > 100_000
    return db, base


ORDER = [f"w{i}" for i in range(6)] + ["batch"] + [f"w{i}" for i in range(6, 12)]  # commit order


@pytest.mark.parametrize("frac", [0.0, 0.2, 0.5, 0.8, 0.97, 1.0])
def test_truncated_wal_keeps_a_prefix_of_whole_transactions(wal_store, tmp_path, frac):
    src, base = wal_store
    wal = Path(str(src) + "-wal").read_bytes()
    db = tmp_path / "m.db"
    shutil.copy(src, db)
    Path(str(db) + "-wal").write_bytes(wal[: 32 + int((len(wal) - 32) * frac)])  # 32: the WAL header
    with MemoryStore(db) as s:
        assert s.check() == []
        ids = {m.id for m in s}
        assert set(base) <= ids  # everything checkpointed before is there
        batch = sum(i.startswith("wb") for i in ids)
        assert batch in (0, 30), batch  # a transaction is kept whole or not at all
        got = [k for k in ORDER if (batch == 30 if k == "batch" else k in ids)]
        assert got == ORDER[: len(got)], got  # a prefix of the commits, no gaps
        if frac == 1.0:
            assert got == ORDER
        if frac == 0.0:
            assert got == []
        for i in ids - set(base):
            assert s.search(s.get(i).title, k=1)[0][0].id == i


# ------------------------------------------------------------------------------------------ old versions

def _old(tmp_path, name) -> Path:
    db = tmp_path / "memories.db"
    shutil.copy(OLD_STORES / name, db)
    return db


def _meta(db: Path) -> dict:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT key, value FROM meta"))
    finally:
        con.close()


OLD = ["store_format1.db", "store_format2_schema1.db"]


def _assert_old_items(s):
    "The three memories the old version wrote, every field as it wrote it; the deleted one stays deleted."
    by_id = {m.id: m for m in s}
    ft.test_eq(sorted(by_id), ["old-failure", "old-seed", "old-success"])
    m = by_id["old-success"]
    ft.test_eq((m.title, m.tags, m.domain, m.confidence, m.use_count, m.success_count, m.failure_count),
               ("Run the test suite before committing", ["git", "tests"], "code", 0.3, 1, 1, 0))
    ft.test_eq(m.content, "1. Run pytest -x\n2. Fix the first failure\n3. Commit")
    ft.test_eq((m.created_at, m.last_used_at), ("2026-01-02T03:04:05+00:00", "2026-01-03T00:00:00+00:00"))
    ft.test_eq(m.provenance, {"trajectory": "t1", "judge": "offline", "trust": "trusted"})
    f = by_id["old-failure"]
    ft.test_eq((f.source_type, f.domain, f.provenance["trust"]), ("failure", "web", "untrusted"))
    seed = by_id["old-seed"]
    ft.test_eq((seed.source_type, seed.access_count, seed.example_queries), ("seed", 1, ["find a red mug"]))
    ft.test_eq(seed.lineage, [{"title": "Search for it", "content": "type it"}])
    for m in by_id.values():
        ft.test_eq(m.status, "active")  # items from before quarantine existed are active
        ft.test_eq(m, MemoryItem.from_dict(m.to_dict()))  # and round-trip in the current schema


@pytest.mark.parametrize("name", OLD)
def test_old_store_reads_readonly_without_changing_a_byte(tmp_path, name):
    db = _old(tmp_path, name)
    before = _snapshot(tmp_path)
    with MemoryStore(db, readonly=True) as s:
        _assert_old_items(s)
        assert s.search("run the test suite", k=1)[0][0].id == "old-success"
    r = _cli("list", "--json", store=db)
    assert r.returncode == 0 and sorted(m["id"] for m in json.loads(r.stdout)) == ["old-failure", "old-seed", "old-success"]
    assert _cli("validate", store=db).returncode == 0
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("name", OLD)
def test_old_store_is_migrated_on_first_write(tmp_path, name):
    db = _old(tmp_path, name)
    old_meta = _meta(db)
    with MemoryStore(db) as s:
        _assert_old_items(s)
        assert s.check() == []
        kinds = [e["kind"] for e in s.events()]
        assert kinds[:8] == ["add"] * 4 + ["outcome", "retrieve", "delete", "update"]  # the old event log is kept
        s.add(MemoryItem("Read the error message first", "debugging", "1. read it\n2. search it", id="new"))
        s.record_outcome(["old-success"], True)
    meta = _meta(db)
    ft.test_eq(int(meta["format"]), STORE_FORMAT)
    ft.test_eq((meta["app"], meta["store_id"]), (old_meta["app"], old_meta["store_id"]))  # same store identity
    assert int(meta["rev"]) > int(old_meta["rev"])
    with MemoryStore(db) as s:
        assert s.get("old-success").success_count == 2 and "new" in s and s.check() == []
    assert validate_store(db)["ok"]


def test_format1_store_gets_format2_meaning_key(tmp_path):
    "Format 1 keyed a memory by fingerprint and polarity only: after migration the same text in another domain is new."
    db = _old(tmp_path, "store_format1.db")
    with MemoryStore(db) as s:
        old = s.get("old-success")
        other = s.add(MemoryItem(old.title, "", old.content, domain="web", id="same-text-web"))
        assert other.id == "same-text-web" and len(s) == 4  # a new memory, not a confirmation of the code one
        again = s.add(MemoryItem(old.title, "", old.content, domain="code", id="same-text-code"))
        assert again.id == "old-success" and len(s) == 4  # same domain: a confirmation
    assert validate_store(db)["ok"]


def test_old_store_fixture_is_really_old():
    "The fixtures were written by the old code (format and item schema in the file), not by today's."
    for name, fmt in (("store_format1.db", "1"), ("store_format2_schema1.db", "2")):
        con = sqlite3.connect(f"file:{OLD_STORES / name}?immutable=1", uri=True)
        try:
            assert dict(con.execute("SELECT key, value FROM meta"))["format"] == fmt
            for (data,) in con.execute("SELECT data FROM memories"):
                d = json.loads(data)
                assert d["schema_version"] == 1 and "status" not in d
        finally:
            con.close()


# ------------------------------------------------------------------------------------------ truncated exports

@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    "A real store's exports (the bootstrap pack and 6 seed memories) as .json and .jsonl."
    d = tmp_path_factory.mktemp("exports")
    with MemoryStore(d / "src.db") as s:
        from procmem.bootstrap import bootstrap_general_strategies
        s.add_many(bootstrap_general_strategies() + _base_items(0))
    out = {}
    for suffix in (".json", ".jsonl"):
        r = _cli("export", d / f"all{suffix}", store=d / "src.db")
        assert r.returncode == 0, r.stderr
        out[suffix] = (d / f"all{suffix}").read_bytes()
    return out


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
@pytest.mark.parametrize("frac", [0.05, 0.37, 0.5, 0.93, 0.999])
def test_truncated_export_is_refused_whole(exports, tmp_path, capsys, suffix, frac):
    """An export cut short (a copy interrupted, a full disk): `procmem import` refuses it with one line
    naming the file (exit 2) and the store is unchanged -- never half an item, never a traceback."""
    data = exports[suffix]
    p = tmp_path / f"cut{suffix}"
    p.write_bytes(data[: int(len(data) * frac)])
    db = tmp_path / "m.db"
    assert _main("bootstrap", store=db, capsys=capsys).returncode == 0
    with MemoryStore(db) as s:
        before = sorted(m.to_dict()["id"] for m in s.items(status=None))
    r = _main("import", p, store=db, capsys=capsys)
    assert r.returncode == 2 and str(p) in r.stderr, (r.returncode, r.stderr)
    _one_error_line(r)
    with MemoryStore(db) as s:
        assert sorted(m.id for m in s.items(status=None)) == before and s.check() == []
