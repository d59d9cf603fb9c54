"""Several PROCESSES writing one store at once through the agent-facing write paths of issue 10:
`procmem.tools.record`, `procmem.notes.memory_action`, Claude's memory tool (`ProcmemMemoryTool`),
`Session.reflect` and MCP servers. Exact counts, nothing acknowledged lost, no duplicates (also per
tenant), per-target character budgets never exceeded when adds race for the last of it, replace racing
remove consistent with what each side was told, concurrent edits of one memory file never losing an
acknowledged edit, an old (format 4) store opened by several tenants at once migrated once; SIGKILL in
the middle of memory-tool writes, of budgeted notes and of the migration leaving a store that opens with
every acknowledged write. Children fork from one forkserver that imported procmem once (short runs)."""
import contextlib, json, multiprocessing as mp, os, random, re, signal, subprocess, sys, textwrap, threading, time
from pathlib import Path

import fastcore.test as ft
import pytest

from procmem.core import MemoryItem
from procmem.store import MemoryStore

CTX = mp.get_context("forkserver")  # one clean server process imports procmem once; children fork from it
CTX.set_forkserver_preload(["procmem.store", "procmem.tools", "procmem.notes", "procmem.memory_tool", "procmem.session"])
ROOT = Path(__file__).resolve().parents[1]


def _words(n: int, seed: int = 0) -> list[str]:
    "n distinct made-up words (three syllables): items built from them share no meaning words."
    rng, out = random.Random(seed), set()
    while len(out) < n:
        out.add("".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)))
    return sorted(out)


W = _words(2000)  # [0:600] record items, [600:1500] facts, [1500:] valves, [1600:] learnings


def _proc(w: int, i: int) -> dict:
    "The record arguments of item i of worker w: three words no other item uses."
    a, b, c = W[3 * (w * 40 + i): 3 * (w * 40 + i) + 3]
    return dict(title=f"Calibrate the {a} {b} gauge", description=f"When the {c} reading drifts.",
                content=f"1. Open the {a} panel\n2. Check the {b} dial against the {c} scale\n3. Save the calibration report")


def _run(procs, timeout=120):
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    for p in procs:
        p.join(max(1, deadline - time.time()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, f"{len(alive)} processes still running after {timeout}s"
    ft.test_eq([p.exitcode for p in procs], [0] * len(procs))


def _out(path, data):
    Path(path).write_text(json.dumps(data))


# ---- tools.record from 4 processes
def _recorder(db, w, n, barrier, out):
    from procmem.tools import record
    s = MemoryStore(db)
    barrier.wait(timeout=60)
    acks = []
    for i in range(n):
        r = record(s, **_proc(w, i), tags=[f"w{w}"], by=f"worker{w}")
        acks.append([r.action, r.item.id if r.item is not None else None])
    same = record(s, **_proc(4, 39), by=f"worker{w}")  # the same procedure from every process, last
    _out(out, dict(acks=acks, same=[same.action, same.item.id if same.item is not None else None]))


def test_record_from_four_processes_loses_and_duplicates_nothing(tmp_path):
    """4 processes x 15 distinct procedures, then the same procedure from all 4: every distinct one
    stored once with the id each was told, the shared one stored once and everyone told its id."""
    db, n_w, n = tmp_path / "r.db", 4, 12
    MemoryStore(db).close()
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"o{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_recorder, args=(str(db), w, n, barrier, str(outs[w]))) for w in range(n_w)])
    res = [json.loads(o.read_text()) for o in outs]
    acks = [a for r in res for a in r["acks"]]
    ft.test_eq({a for a, _ in acks}, {"add"})  # distinct procedures: each one stored
    s = MemoryStore(db)
    items = [m for m in s.items() if m.title != _proc(4, 39)["title"]]
    ft.test_eq(len(items), n_w * n)
    ft.test_eq({m.id for m in items}, {i for _, i in acks})
    ft.test_eq(len({m.fingerprint for m in items}), n_w * n)
    (same,) = [m for m in s.items() if m.title == _proc(4, 39)["title"]]
    ft.test_eq({r["same"][1] for r in res}, {same.id})  # everyone was told the one id
    assert {r["same"][0] for r in res} <= {"add", "merge", "skip"}, res  # (a racing twin may say 'add')
    ft.test_eq(s.check(), [])
    for w in range(n_w):  # each worker's texts are there, word for word
        mine = {m.title for m in items if m.provenance.get("by") == f"worker{w}"}
        ft.test_eq(mine, {_proc(w, i)["title"] for i in range(n)})
    ft.test_eq(len(s.events(kind="tool.record")), n_w * (n + 1))


def _tenant_recorder(db, ns, barrier, out):
    from procmem.tools import record
    s = MemoryStore(db, namespace=ns)
    barrier.wait(timeout=60)
    r = record(s, **_proc(4, 38), by=f"{ns}-{os.getpid()}")
    _out(out, [r.action, r.item.id if r.item is not None else None])


def test_the_same_record_racing_in_two_tenants_is_stored_once_in_each(tmp_path):
    "2 processes per tenant record one procedure at once: one copy per tenant, each told its own tenant's id."
    db = tmp_path / "ten.db"
    MemoryStore(db).close()
    tenants = ["alice", "alice", "bob", "bob"]
    barrier = CTX.Barrier(len(tenants))
    outs = [tmp_path / f"t{j}.json" for j in range(len(tenants))]
    _run([CTX.Process(target=_tenant_recorder, args=(str(db), ns, barrier, str(outs[j])))
          for j, ns in enumerate(tenants)])
    told = [json.loads(o.read_text())[1] for o in outs]
    for ns in ("alice", "bob"):
        (m,) = list(MemoryStore(db, namespace=ns).items())
        ft.test_eq({t for t, n in zip(told, tenants) if n == ns}, {m.id})
    ft.test_eq(len(set(told)), 2)


# ---- memory_action: adds racing for the last of a target's budget
FACTS = [f"The {a} team reviews the {b} sheet every {c} morning." for a, b, c in zip(W[600:900], W[900:1200], W[1200:1500])]


def _adder(db, w, barrier, out, targets):
    from procmem.notes import memory_action
    s = MemoryStore(db)
    answers = []
    for r, target in enumerate(targets):
        barrier.wait(timeout=60)
        answers.append(memory_action(s, "add", target=target, content=FACTS[100 + r * 10 + w]))
        barrier.wait(timeout=60)
    _out(out, answers)


def _chars(s, domain) -> int:
    return sum(len(m.content) for m in s.items() if m.domain == domain)


def test_adds_racing_for_the_last_budget(tmp_path):
    """Each target is filled to within one fact of its budget; 3 processes add one fact each at the
    same instant (a round per target): exactly one is stored, the budget holds, the others are told
    'refused'."""
    from procmem.notes import memory_action, MEMORY_TARGETS, TARGET_BUDGETS
    db, n_w, targets = tmp_path / "b.db", 3, ["user", "memory"]
    s = MemoryStore(db)
    size = len(FACTS[100])
    k = 0
    for target in targets:
        budget, domain = TARGET_BUDGETS[target], MEMORY_TARGETS[target]
        while _chars(s, domain) + len(FACTS[k]) <= budget - size:
            assert memory_action(s, "add", target=target, content=FACTS[k]).startswith("added"), FACTS[k]
            k += 1
        assert size <= budget - _chars(s, domain) < 2 * size, (target, budget - _chars(s, domain), size)
    assert k < 100
    start = {m.id for m in s.items()}
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"a{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_adder, args=(str(db), w, barrier, str(outs[w]), targets)) for w in range(n_w)])
    answers = [json.loads(o.read_text()) for o in outs]
    for r, target in enumerate(targets):
        domain = MEMORY_TARGETS[target]
        told = [a[r] for a in answers]
        new = [m for m in s.items() if m.id not in start and m.domain == domain]
        assert _chars(s, domain) <= TARGET_BUDGETS[target], (target, _chars(s, domain))
        ft.test_eq(len(new), 1)
        ft.test_eq(sum(a.startswith("added") for a in told), 1)
        assert all(a.startswith(("added", "refused")) for a in told), told
    ft.test_eq(s.check(), [])


# ---- replace racing remove on one entry
def _answer(fn, *args, **kw) -> str:
    "The answer, or 'conflict: ...' when the entry changed under the call (nothing was written)."
    from procmem.store import StoreConflictError
    try:
        return fn(*args, **kw)
    except StoreConflictError as e:
        return f"conflict: {e}"


def _replacer(db, barrier, out, rounds):
    from procmem.notes import memory_action
    s = MemoryStore(db)
    got = []
    for r in range(rounds):
        barrier.wait(timeout=60)
        got.append(_answer(memory_action, s, "replace", old_text=FACTS[r], content=FACTS[200 + r]))
        barrier.wait(timeout=60)
    _out(out, got)


def _remover(db, barrier, out, rounds):
    from procmem.notes import memory_action
    s = MemoryStore(db)
    got = []
    for r in range(rounds):
        barrier.wait(timeout=60)
        got.append(_answer(memory_action, s, "remove", old_text=FACTS[r], reason="race"))
        barrier.wait(timeout=60)
    _out(out, got)


def test_replace_racing_remove_is_consistent_with_what_each_was_told(tmp_path):
    from procmem.notes import memory_action
    db, rounds = tmp_path / "rr.db", 8
    s = MemoryStore(db)
    for r in range(rounds):
        assert memory_action(s, "add", content=FACTS[r]).startswith("added")
    barrier = CTX.Barrier(2)
    _run([CTX.Process(target=_replacer, args=(str(db), barrier, str(tmp_path / "rep.json"), rounds)),
          CTX.Process(target=_remover, args=(str(db), barrier, str(tmp_path / "rem.json"), rounds))])
    rep = json.loads((tmp_path / "rep.json").read_text())
    rem = json.loads((tmp_path / "rem.json").read_text())
    active = [m.content for m in s.items()]
    archived = [m.content for m in s.items("archived")]
    print("replace/remove race:", [(a[:9], b[:9]) for a, b in zip(rep, rem)])
    for r in range(rounds):
        replaced, removed = rep[r].startswith("replaced"), rem[r].startswith("removed")
        assert replaced != removed, (r, rep[r], rem[r])  # exactly one of them wins
        if replaced:
            assert FACTS[200 + r] in active and FACTS[r] not in active, r
        else:
            assert FACTS[r] in archived and FACTS[200 + r] not in active and FACTS[r] not in active, r
    ft.test_eq(s.check(), [])


# ---- Claude's memory tool: concurrent creates and edits of one file
SHARED = "/memories/plant/valves.md"


def _valve_file(n_w: int, k: int) -> str:
    lines = [f"{j + 1}. Set the {W[1500 + j]} valve: open" for j in range(n_w * k)]
    return "# Check every valve of the cooling loop\nAt each shift change.\n\n## Steps\n" + "\n".join(lines) + "\n"


def _mt_worker(db, w, n_w, k, n_files, barrier, out):
    from anthropic.lib.tools import ToolError
    from procmem.memory_tool import ProcmemMemoryTool
    s = MemoryStore(db)
    tool = ProcmemMemoryTool(s)
    barrier.wait(timeout=60)
    created, edited, errors = [], [], []
    for i in range(n_files):
        p = _proc(w, i)
        path = f"/memories/plant/w{w}-{i}.md"
        try:
            tool.call(dict(command="create", path=path, file_text=f"# {p['title']}\n{p['description']}\n\n"
                                                                      f"## Steps\n{p['content']}\n"))
            created.append(path)
        except ToolError as e:
            errors.append(str(e)[:200])
        j = w * k + i if i < k else None
        for _ in range(20 if j is not None else 0):  # edit my own line of the shared file, retrying a conflict
            try:
                tool.call(dict(command="str_replace", path=SHARED, old_str=f"Set the {W[1500 + j]} valve: open",
                               new_str=f"Set the {W[1500 + j]} valve: closed"))
                edited.append(j)
                break
            except ToolError as e:
                if "changed meanwhile" not in str(e) and "did not appear" not in str(e):
                    errors.append(str(e)[:200])
                    break
    _out(out, dict(created=created, edited=edited, errors=errors))


def test_memory_tool_from_three_processes(tmp_path):
    """3 processes create 6 files each and edit their own lines of ONE shared file at the same time
    (every edit is a read-modify-write of the whole memory): every acknowledged create is listed,
    every acknowledged edit is in the file, no line another process owned was touched."""
    from procmem.memory_tool import ProcmemMemoryTool
    db, n_w, k, n_files = tmp_path / "mt.db", 3, 4, 6
    tool = ProcmemMemoryTool(MemoryStore(db))
    tool.call(dict(command="create", path=SHARED, file_text=_valve_file(n_w, k)))
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"m{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_mt_worker, args=(str(db), w, n_w, k, n_files, barrier, str(outs[w])))
          for w in range(n_w)])
    res = [json.loads(o.read_text()) for o in outs]
    ft.test_eq([r["errors"] for r in res], [[]] * n_w)
    fresh = ProcmemMemoryTool(MemoryStore(db))
    listing = fresh.call(dict(command="view", path="/memories/plant"))
    for r in res:
        ft.test_eq(len(r["created"]), n_files)
        for path in r["created"]:
            assert path in listing, path
        ft.test_eq(sorted(r["edited"]), sorted(set(r["edited"])))
    text = fresh.call(dict(command="view", path=SHARED))
    done = {j for r in res for j in r["edited"]}
    ft.test_eq(done, set(range(n_w * k)))  # with retries, every edit lands
    for j in range(n_w * k):
        assert f"Set the {W[1500 + j]} valve: closed" in text, (j, text)
    ft.test_eq(len(MemoryStore(db)), 1 + n_w * n_files)
    ft.test_eq(MemoryStore(db).check(), [])


def _mt_racer(db, role, rounds, barrier, out):
    from anthropic.lib.tools import ToolError
    from procmem.memory_tool import ProcmemMemoryTool
    tool = ProcmemMemoryTool(MemoryStore(db))
    got = []
    for r in range(rounds):
        barrier.wait(timeout=60)
        try:
            if role == "rename":
                tool.call(dict(command="rename", old_path=f"/memories/plant/f{r}.md", new_path=f"/memories/plant/g{r}.md"))
            else:
                tool.call(dict(command="str_replace", path=f"/memories/plant/f{r}.md", old_str="Save the calibration",
                               new_str="Sign the calibration"))
            got.append("ok")
        except ToolError as e:
            got.append("error: " + str(e)[:120])
        barrier.wait(timeout=60)
    _out(out, got)


def _interleaved(db, first: dict, between: dict):
    """Run `first` with tool B, and `between` with tool A at the moment B has read and gated its memory
    but not written it yet (the window two processes can hit): (B's answer, A's answer)."""
    from procmem.memory_tool import ProcmemMemoryTool
    a, b = ProcmemMemoryTool(MemoryStore(db)), ProcmemMemoryTool(MemoryStore(db))
    told = {}
    gate = b._gate_edit

    def gate_then_other(*args, **kw):
        out = gate(*args, **kw)
        told["A"] = a.call(between)
        return out
    b._gate_edit = gate_then_other
    told["B"] = b.call(first)
    return told


def test_an_edit_never_undoes_a_rename_it_raced(tmp_path):
    from procmem.memory_tool import ProcmemMemoryTool
    db = tmp_path / "il.db"
    p = _proc(3, 30)
    ProcmemMemoryTool(MemoryStore(db)).call(dict(command="create", path="/memories/plant/f.md",
                                                 file_text=f"# {p['title']}\n{p['description']}\n\n## Steps\n{p['content']}\n"))
    told = _interleaved(db, dict(command="str_replace", path="/memories/plant/f.md", old_str="Save the calibration",
                                 new_str="Sign the calibration"),
                        dict(command="rename", old_path="/memories/plant/f.md", new_path="/memories/plant/g.md"))
    assert told["A"].startswith("Successfully renamed"), told
    listing = ProcmemMemoryTool(MemoryStore(db)).call(dict(command="view", path="/memories/plant"))
    assert "/memories/plant/g.md" in listing and "/memories/plant/f.md" not in listing, (told, listing)


def test_memory_tool_rename_racing_an_edit(tmp_path):
    "Each round one process renames f.md -> g.md while another edits f.md: what each was told is what the bank holds."
    from procmem.memory_tool import ProcmemMemoryTool
    db, rounds = tmp_path / "rn.db", 8
    tool = ProcmemMemoryTool(MemoryStore(db))
    for r in range(rounds):
        p = _proc(3, r)
        tool.call(dict(command="create", path=f"/memories/plant/f{r}.md",
                       file_text=f"# {p['title']}\n{p['description']}\n\n## Steps\n{p['content']}\n"))
    barrier = CTX.Barrier(2)
    _run([CTX.Process(target=_mt_racer, args=(str(db), role, rounds, barrier, str(tmp_path / f"{role}.json")))
          for role in ("rename", "edit")])
    ren = json.loads((tmp_path / "rename.json").read_text())
    edi = json.loads((tmp_path / "edit.json").read_text())
    fresh = ProcmemMemoryTool(MemoryStore(db))
    listing = fresh.call(dict(command="view", path="/memories/plant"))
    for r in range(rounds):
        where = f"/memories/plant/g{r}.md" if ren[r] == "ok" else f"/memories/plant/f{r}.md"
        other = f"/memories/plant/f{r}.md" if ren[r] == "ok" else f"/memories/plant/g{r}.md"
        assert where in listing and other not in listing, (r, ren[r], edi[r])
        text = fresh.call(dict(command="view", path=where))
        ft.test_eq((r, edi[r] == "ok"), (r, "Sign the calibration" in text))  # an acknowledged edit is there
    ft.test_eq(len(MemoryStore(db)), rounds)
    print("rename/edit race:", list(zip([x[:5] for x in ren], [x[:5] for x in edi])))


# ---- Session.reflect from 3 processes
def _reflector(db, w, barrier, out):
    from procmem.session import Session
    s = Session(MemoryStore(db), domain="plant", by=f"session{w}", task=f"Shift {w} checklist")
    for t in _learnings(w):
        s.learn(t)
    barrier.wait(timeout=60)
    res = s.reflect()
    _out(out, [[r.action, r.stored.id if r.stored is not None else None] for r in res])


def _learnings(w: int) -> list[str]:
    shared = [f"Before restarting the {W[1600 + j]} pump, bleed the {W[1610 + j]} line and check the {W[1620 + j]} "
              "seal." for j in range(3)]
    mine = [f"When the {W[1630 + w * 3 + j]} alarm sounds, read the {W[1650 + w * 3 + j]} meter and log the "
            f"{W[1670 + w * 3 + j]} value." for j in range(3)]
    return shared + mine


def test_session_reflect_from_three_processes_stores_each_learning_once(tmp_path):
    db, n_w = tmp_path / "ses.db", 3
    MemoryStore(db).close()
    barrier = CTX.Barrier(n_w)
    outs = [tmp_path / f"r{w}.json" for w in range(n_w)]
    _run([CTX.Process(target=_reflector, args=(str(db), w, barrier, str(outs[w]))) for w in range(n_w)])
    s = MemoryStore(db)
    contents = [m.content for m in s.items()]
    wanted = sorted({t for w in range(n_w) for t in _learnings(w)})
    ft.test_eq(sorted(contents), wanted)  # each learning once: the shared ones not duplicated
    acks = [i for o in outs for _, i in json.loads(o.read_text()) if i]
    assert set(acks) <= {m.id for m in s.items()}, acks
    ft.test_eq(s.check(), [])


# ---- SIGKILL in the middle of memory-tool writes
WRITER = textwrap.dedent("""
    import sys
    from procmem.store import MemoryStore
    from procmem.memory_tool import ProcmemMemoryTool
    words = sys.argv[2].split(",")
    tool = ProcmemMemoryTool(MemoryStore(sys.argv[1]))
    i = 0
    while True:
        a, b, c = words[(3 * i) % len(words)], words[(3 * i + 1) % len(words)], words[(3 * i + 2) % len(words)]
        path = f"/memories/crash/f{i}.md"
        tool.call(dict(command="create", path=path, file_text=f"# Calibrate the {a} {b} gauge {i}\\nWhen the {c} "
                       f"reading drifts.\\n\\n## Steps\\n1. Open the {a} panel\\n2. Check the {b} dial\\n3. Log the {c} value\\n"))
        print("C", path, flush=True)
        if i:
            prev = f"/memories/crash/f{i - 1}.md"
            tool.call(dict(command="str_replace", path=prev, old_str="3. Log the", new_str="3. Write down the"))
            print("E", prev, flush=True)
        i += 1
""")


def test_sigkill_during_memory_tool_writes_keeps_every_acknowledged_write(tmp_path):
    from procmem.memory_tool import ProcmemMemoryTool
    db = tmp_path / "k.db"
    MemoryStore(db).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    lines = []
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db), ",".join(W[:300])], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        got = []
        t = threading.Thread(target=lambda: got.extend(line.strip() for line in proc.stdout), daemon=True)
        t.start()
        deadline = time.time() + 60
        want = random.Random(round_).randrange(5, 25)
        while len(got) < want and time.time() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(random.Random(round_).random() * 0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        t.join(10)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-500:]
        assert got, proc.stderr.read()[-500:]
        lines = got
        s = MemoryStore(db)  # opens cleanly after the kill
        ft.test_eq(s.check(), [])
        tool = ProcmemMemoryTool(s)
        for line in lines:
            kind, path = line.split(" ", 1)
            text = tool.call(dict(command="view", path=path))
            if kind == "E":
                assert "Write down the" in text, (path, text)
        s.close()
        # the next round's writer starts at f0 again: files exist -> create refuses; move them aside
        MemoryStore(db).close()
        os.replace(db, tmp_path / f"k{round_}.db")
        for ext in ("-wal", "-shm"):
            if Path(str(db) + ext).exists():
                os.replace(str(db) + ext, str(tmp_path / f"k{round_}.db") + ext)
        MemoryStore(db).close()


# ---- an old store (format 4, before namespaces) opened by several tenants' processes at once
def _old_store_writer(db, ns, w, barrier, out):
    from procmem.tools import record
    barrier.wait(timeout=60)
    s = MemoryStore(db, namespace=ns)  # the first open migrates the file; the others must wait for it
    r = record(s, **_proc(w, 0), by=f"w{w}")
    _out(out, [r.action, r.item.id if r.item is not None else None, s.namespace, len(s)])


def test_old_store_migrated_once_while_four_tenants_open_it(tmp_path):
    import shutil
    fixture = ROOT / "tests" / "fixtures" / "stores" / "store_format4.db"
    if not fixture.exists():
        pytest.skip(f"{fixture} not found")
    db = tmp_path / "old.db"
    shutil.copy(fixture, db)
    old = {}
    import sqlite3
    with sqlite3.connect(db) as c:
        old = dict(c.execute("SELECT id, status FROM memories").fetchall())
    tenants = ["default", "alice", "bob", "default"]
    barrier = CTX.Barrier(len(tenants))
    outs = [tmp_path / f"o{j}.json" for j in range(len(tenants))]
    _run([CTX.Process(target=_old_store_writer, args=(str(db), ns, j, barrier, str(outs[j])))
          for j, ns in enumerate(tenants)])
    res = [json.loads(o.read_text()) for o in outs]
    ft.test_eq([r[0] for r in res], ["add"] * 4)
    s = MemoryStore(db)
    ft.test_eq(s.check(), [])
    for i, st in old.items():  # every old memory kept, in the default namespace, with its status
        ft.test_eq((i, s.get(i).status, s.get(i).namespace), (i, st, "default"))
    ft.test_eq(len(s), sum(v == "active" for v in old.values()) + 2)
    ft.test_eq(len(MemoryStore(db, namespace="alice")), 1)
    ft.test_eq(len(MemoryStore(db, namespace="bob")), 1)


# ---- two MCP servers (two processes) recording into one store at once
def test_two_mcp_servers_record_concurrently_and_lose_nothing(tmp_path):
    import asyncio
    mcp = pytest.importorskip("mcp")
    db = tmp_path / "mcp.db"
    MemoryStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCMEM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])

    def params(ns):
        return mcp.StdioServerParameters(command=sys.executable, env=env, cwd=str(ROOT),
                                         args=["-m", "procmem.mcp_server", "--store", str(db), "--namespace", ns])

    async def client(ns, w, n):
        async with mcp.Client(params(ns)) as c:
            calls = [c.call_tool("record", dict(**_proc(w, i), tags=[f"w{w}"])) for i in range(n)]
            return [("\n".join(x.text for x in r.content), r.is_error) for r in await asyncio.gather(*calls)]

    async def both():
        return await asyncio.gather(client("default", 0, 8), client("default", 1, 8), client("team", 2, 8))
    out = asyncio.run(asyncio.wait_for(both(), 120))
    ids = [re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", t)[0] for r in out for t, _ in r]
    ft.test_eq([e for r in out for _, e in r], [False] * 24)
    assert all(t.startswith("stored as") for r in out for t, _ in r), out
    d, t = MemoryStore(db), MemoryStore(db, namespace="team")
    ft.test_eq({m.id for m in d.items()}, set(ids[:16]))
    ft.test_eq({m.id for m in t.items()}, set(ids[16:]))
    ft.test_eq(d.check(), [])


NOTES_WRITER = textwrap.dedent("""
    import sys
    from procmem.store import MemoryStore
    from procmem.notes import memory_action
    words = sys.argv[2].split(",")
    s = MemoryStore(sys.argv[1])
    live, i = [], 0
    while True:
        a, b, c = words[(3 * i) % len(words)], words[(3 * i + 1) % len(words)], words[(3 * i + 2) % len(words)]
        text = f"The {a} team reviews the {b} sheet every {c} morning, entry {i}."
        out = memory_action(s, "add", target="user", content=text)
        if out.startswith("added"):
            print("A", text, flush=True)
            live.append(text)
        elif len(live) > 2:
            old = live.pop(0)
            if memory_action(s, "remove", target="user", old_text=old).startswith("removed"):
                print("R", old, flush=True)
            new = live[0].replace("morning", "evening")
            if memory_action(s, "replace", target="user", old_text=live[0], content=new).startswith("replaced"):
                print("P", live[0], "=>", new, flush=True)
                live[0] = new
        i += 1
""")


def test_sigkill_during_budgeted_notes_keeps_every_acknowledged_change_and_the_budget(tmp_path):
    from procmem.notes import TARGET_BUDGETS
    db = tmp_path / "n.db"
    MemoryStore(db).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", NOTES_WRITER, str(db), ",".join(W[:300])], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    got = []
    t = threading.Thread(target=lambda: got.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    t.start()
    deadline = time.time() + 60
    while sum(x.startswith("R") for x in got) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(random.Random(7).random() * 0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    t.join(10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-500:]
    live = []
    for line in list(got):
        kind, text = line.split(" ", 1)
        if kind == "A":
            live.append(text)
        elif kind == "R":
            live.remove(text)
        else:
            old, new = text.split(" => ")
            live[live.index(old)] = new
    s = MemoryStore(db)
    ft.test_eq(s.check(), [])
    now = [m.content for m in s.items() if m.domain == "user"]
    missing, extra = set(live) - set(now), set(now) - set(live)
    # every acknowledged change is there, but for the ONE change in flight when the kill came (done,
    # not yet printed): an add (one extra), a remove (one missing) or a replace (one of each, same entry)
    assert len(missing) <= 1 and len(extra) <= 1, (missing, extra)
    for m in missing:
        assert not extra or {m.replace("morning", "evening")} == extra, (missing, extra)
    assert sum(map(len, now)) <= TARGET_BUDGETS["user"]
    assert sum(x.startswith("R") for x in got) >= 3 and sum(x.startswith("P") for x in got) >= 1, got[-5:]


# ---- SIGKILL in the middle of migrating an old store (format 4 -> namespaces)
def _old_big_store(src: Path, dst: Path, n: int) -> None:
    "The format-4 fixture with n more memories inserted as that format stored them (rows written with sqlite3)."
    import shutil, sqlite3
    shutil.copy(src, dst)
    with contextlib.closing(sqlite3.connect(dst)) as c:
        tmpl = json.loads(c.execute("SELECT data FROM memories WHERE status='active' LIMIT 1").fetchone()[0])
        rows = []
        for i in range(n):
            d = dict(tmpl, id=f"big-{i}", title=f"{tmpl['title']} {i}", content=f"{tmpl['content']}\\n4. Note case {i}")
            rows.append((d["id"], 100 + i, MemoryItem.from_dict(d).fingerprint, d["source_type"],
                         d["domain"], d["created_at"], json.dumps(d), "active"))
        c.executemany("INSERT INTO memories VALUES (?,?,?,?,?,?,?,?)", rows)
        c.execute("UPDATE meta SET value=? WHERE key='rev'", (str(100 + n),))
        c.commit()


def _opener(db, started):
    started.set()
    s = MemoryStore(db)  # migrates
    s.add(MemoryItem("Opened after the migration", "x", "1. open the store\\n2. add one"))
    time.sleep(30)  # killed long before


def test_sigkill_during_the_migration_of_an_old_store_loses_nothing(tmp_path):
    import sqlite3
    fixture = ROOT / "tests" / "fixtures" / "stores" / "store_format4.db"
    if not fixture.exists():
        pytest.skip(f"{fixture} not found")
    template = tmp_path / "template.db"
    _old_big_store(fixture, template, 40000)
    with contextlib.closing(sqlite3.connect(template)) as c:
        statuses = dict(c.execute("SELECT id, status FROM memories").fetchall())
    rng, seen = random.Random(11), []
    for trial in range(4):
        db = tmp_path / f"old{trial}.db"
        import shutil
        shutil.copy(template, db)
        started = CTX.Event()
        p = CTX.Process(target=_opener, args=(str(db), started))
        p.start()
        assert started.wait(30)
        time.sleep(0.03 * trial + rng.random() * 0.03)  # before, inside (~0.1 s here) or after the migration
        p.kill()
        p.join(30)
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            seen.append(c.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0])
        s = MemoryStore(db)  # opens (migrating now if the kill came first)
        ft.test_eq(s.check(), [])
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            extra = c.execute("SELECT count(*) FROM memories WHERE id NOT IN (SELECT value FROM json_each(?))",
                              (json.dumps(list(statuses)),)).fetchone()[0]
        assert extra <= 1, extra  # at most the add the child made after migrating
        for status in ("active", "archived", "quarantined"):
            want = sum(v == status for v in statuses.values()) + (status == "active") * extra
            ft.test_eq((trial, status, s.count(status)), (trial, status, want))
        s.close()
    print("format found after each kill:", seen)
    ft.test_eq(MemoryStore(db).get("big-32345").namespace, "default")


def _bootstrapper(db, ns, barrier, out):
    from procmem.bootstrap import bootstrap_general_strategies
    s = MemoryStore(db, namespace=ns)
    barrier.wait(timeout=60)
    got = s.add_many(bootstrap_general_strategies())
    _out(out, [ns, len(s), str(got)[:200]])


def test_tenants_bootstrapping_at_once_each_get_the_pack_once(tmp_path):
    "2 processes per tenant add the bootstrap pack (fixed ids) at the same instant: 7 per tenant, no error."
    db = tmp_path / "boot.db"
    MemoryStore(db).close()
    tenants = ["alice", "alice", "bob", "bob"]
    barrier = CTX.Barrier(len(tenants))
    outs = [tmp_path / f"b{j}.json" for j in range(len(tenants))]
    _run([CTX.Process(target=_bootstrapper, args=(str(db), ns, barrier, str(outs[j]))) for j, ns in enumerate(tenants)])
    for ns in ("alice", "bob"):
        s = MemoryStore(db, namespace=ns)
        ft.test_eq(len(s), 7)
        ft.test_eq(len({m.id for m in s.items()}), 7)
    ft.test_eq(MemoryStore(db).check(), [])
