"""Tenants are a PARTITION (issue 10): one store file holds several namespaces, drawn at random
(seeded: PROCMEM_LEAK_SEED; names include a case variant, an extension and a LIKE '_' pair) with
identical, overlapping and unique texts built from the WebArena tasks of the shared data (written by
others; a bank built from the bootstrap pack when absent), plus a hypothesis test over any valid names.
Through every entry point — store.search/get/get_many/changes_since/items/to_df/events/export/import,
retrieve_memories (and its question-form fallback), run_with_memory's block and learning, the tools'
recall and SDK toolkit, memory_action, the memory tool's view and every command on a foreign path,
Session seed/reflect, skills export/import, MCP recall/list/show/remove (real subprocesses), the CLI's
--namespace / $PROCMEM_NAMESPACE on list/search/show/export/skills/stats and on writes, ClaudeAgent in
both modes — nothing of another namespace ever appears, top-k is filtered before ranking, and a write
by id into another namespace is refused with the store unchanged (and no existence oracle)."""
import asyncio, contextlib, dataclasses, importlib, io, json, os, random, re, sqlite3, string, sys
from pathlib import Path

import fastcore.test as ft
import pytest

from procmem.core import MemoryItem
from procmem.store import MemoryStore

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT.parent / "shared" / "data" / "webarena" / "tasks_dev.json"
SEED = int(os.environ.get("PROCMEM_LEAK_SEED", "20261124"))
N_NS = 5  # random namespaces besides the default one
STEPS = "1. Open the {site} page for the request\n2. Search for {what} with the filter box\n" \
        "3. Read the matching rows and count them\n4. Check the total against the summary view"


def _need(module: str):
    "The module, or a skip naming it while its owner has not landed it yet."
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} not available yet: {e}")


def _ns_names(rng: random.Random, n: int) -> list[str]:
    "n distinct random tenant names in the documented rule's alphabet (letters, digits, '-', '_')."
    from procmem.core import DEFAULT_NAMESPACE
    out = []
    while len(out) < n:
        head = rng.choice(string.ascii_letters)
        tail = "".join(rng.choices(string.ascii_letters + string.digits + "-_.@", k=rng.randrange(0, 12)))
        name = head + tail
        if name not in out and name != DEFAULT_NAMESPACE:
            out.append(name)
    # where a LIKE, prefix or case-folding filter would leak: a name and its extension, its case
    # variant, and '_' (LIKE's any-character) against a letter in the same place
    out[1] = out[0] + "x"
    out[2] = out[0].swapcase() if out[0].swapcase() != out[0] else out[0] + "X"
    if n > 3:
        out[3] = "a_" + out[0]
    if n > 4:
        out[4] = "ab" + out[0]
    return out


def _templates() -> list[tuple[str, str, list[str]]]:
    "(template, site, instances) from the WebArena tasks, or from the bootstrap pack without them."
    if TASKS.exists():
        by = {}
        for t in json.loads(TASKS.read_text()):
            by.setdefault(t["intent_template"], (t["sites"][0], []))[1].append(t["intent"])
        return [(k, s, v) for k, (s, v) in sorted(by.items()) if len(v) >= 2]
    from procmem.bootstrap import bootstrap_general_strategies
    return [(m.title, "ontology", [m.description, m.title + " quickly"]) for m in bootstrap_general_strategies()]


def _item(title: str, desc: str, site: str, what: str, ns: str, **kw) -> MemoryItem:
    return MemoryItem(title[:200], desc[:1000], STEPS.format(site=site, what=what), tags=[site], namespace=ns, **kw)


def _need_tasks(why: str) -> None:
    "Skip, naming the file, when the shared WebArena tasks are absent (the bootstrap fallback is too small)."
    if not TASKS.exists():
        pytest.skip(f"needs {TASKS} ({why})")


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    """A store with the default namespace and N_NS random ones: the same items in every namespace
    (identical texts), the same template with another instance (overlapping), and unique items."""
    from procmem.core import DEFAULT_NAMESPACE
    rng = random.Random(SEED)
    names = [DEFAULT_NAMESPACE] + _ns_names(rng, N_NS)
    tmpl = _templates()
    rng.shuffle(tmpl)
    shared, rest = tmpl[:4], tmpl[4:]
    path = tmp_path_factory.mktemp("leak") / "bank.db"
    ids = {ns: set() for ns in names}
    texts = {ns: [] for ns in names}  # the unique titles of each namespace
    for j, ns in enumerate(names):
        s = MemoryStore(path, namespace=ns)
        for t, site, inst in shared:  # identical in every namespace
            ids[ns].add(s.add(_item(t, inst[0], site, "the records", ns)).id)
        for t, site, inst in shared[:2]:  # overlapping: another instance of the same template
            ids[ns].add(s.add(_item(t + f" ({inst[1][:40]})", inst[1], site, "the rows", ns)).id)
        for t, site, inst in rest[j * 5:(j + 1) * 5]:  # unique to this namespace
            it = s.add(_item(t, inst[0], site, f"the {ns} entries", ns))
            ids[ns].add(it.id)
            texts[ns].append(it.title)
        s.close()
    queries = [t for t, _, inst in tmpl[: 4 + 5 * len(names)]] + [inst[0] for _, _, inst in tmpl[:12]]
    return dict(path=path, names=names, ids=ids, titles=texts, queries=queries, shared=shared)


def _rows(path) -> list[tuple]:
    """Every memory row as stored (namespace, id, rev, status, data), ordered: a write refused must leave
    these as they were. (Ids are unique per namespace: a row is named by both.)"""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return c.execute("SELECT namespace, id, rev, status, data FROM memories ORDER BY namespace, id").fetchall()


def _tenant_rows(path, ns) -> list[tuple]:
    "The rows of namespace `ns` only."
    return [r for r in _rows(path) if r[0] == ns]


def _others(bank, ns) -> set:
    return set().union(*(v for k, v in bank["ids"].items() if k != ns))


def _foreign_titles(bank, ns) -> list:
    return [t for k, v in bank["titles"].items() if k != ns for t in v]


def test_bank_is_a_partition(bank):
    "The fixture itself: every namespace holds its own copy of the identical items (dedup never crosses)."
    all_ids = [i for v in bank["ids"].values() for i in v]
    ft.test_eq(len(all_ids), len(set(all_ids)))
    for ns in bank["names"]:
        s = MemoryStore(bank["path"], namespace=ns)
        ft.test_eq(s.namespace, ns)
        ft.test_eq({m.id for m in s.items()}, bank["ids"][ns])
        ft.test_eq(len(s), len(bank["ids"][ns]))
        ft.test_eq(s.count(), len(bank["ids"][ns]))
        assert all(m.namespace == ns for m in s.items())
        s.close()
    s = MemoryStore(bank["path"])
    ft.test_eq(s.namespaces(), {ns: len(v) for ns, v in bank["ids"].items()})


def test_search_and_get_never_cross(bank):
    for ns in bank["names"]:
        s = MemoryStore(bank["path"], namespace=ns)
        for q in bank["queries"]:
            for k in (1, 5, 50):
                hits = s.search(q, k=k)
                got = {m.id for m, _ in hits}
                assert got <= bank["ids"][ns], (ns, q, got - bank["ids"][ns])
                assert all(m.namespace == ns for m, _ in hits)
        for t in bank["titles"][ns]:  # its own unique items are found (the partition is not empty)
            assert any(m.title == t for m, _ in s.search(t, k=3)), (ns, t)
        for oid in sorted(_others(bank, ns))[:10]:
            with pytest.raises(KeyError):  # MemoryNotFoundError is a KeyError/StoreError
                s.get(oid)
        s.close()


def test_top_k_is_filtered_before_ranking(bank, tmp_path):
    """Rank-safety: 40 strong matches in another namespace and one weak match here; k=1 here must
    return the weak match (a post-filter of a global top-k returns nothing)."""
    path = tmp_path / "rank.db"
    loud = MemoryStore(path, namespace="loud")
    for i in range(40):
        loud.add(MemoryItem(f"Export the quarterly invoice ledger {i}", "Export invoices from the ledger page.",
                            f"1. Open the invoice ledger\n2. Export quarterly invoices as CSV batch {i}",
                            tags=["invoice", "ledger"]))
    quiet = MemoryStore(path, namespace="quiet")
    mine = quiet.add(MemoryItem("Reconcile a bank statement", "Match statement lines with the invoice list.",
                                "1. Download the statement\n2. Match each line to an open invoice\n3. Flag the rest"))
    hits = quiet.search("export quarterly invoice ledger invoices", k=1)
    ft.test_eq([m.id for m, _ in hits], [mine.id])
    from procmem.retrieval import retrieve_memories
    got = retrieve_memories(quiet, "Export the quarterly invoice ledger as CSV", k=3, record=False, min_relevance=0.0)
    assert {m.id for m in got} <= {mine.id}, got


def test_retrieve_memories_and_question_fallback(bank):
    from procmem.retrieval import retrieve_memories
    for ns in bank["names"]:
        s = MemoryStore(bank["path"], namespace=ns)
        tasks = bank["queries"] + [f"How do I {t[0].lower() + t[1:]}?" for t in _foreign_titles(bank, ns)]
        for q in tasks:
            for by_form in (True, False):
                got = retrieve_memories(s, q, k=5, record=False, by_form=by_form, min_relevance=0.0)
                assert {m.id for m in got} <= bank["ids"][ns], (ns, q)
        s.close()


def test_retrieval_counters_stay_in_their_namespace(bank, tmp_path):
    "Recording a retrieval in one namespace never bumps another namespace's copy of the same text."
    import shutil
    p = tmp_path / "copy.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    before = {m.id: m for m in MemoryStore(p, namespace=b).items()}
    from procmem.retrieval import retrieve_memories
    got = retrieve_memories(MemoryStore(p, namespace=a), bank["shared"][0][0], k=3, record=True)
    assert got
    after = {m.id: m for m in MemoryStore(p, namespace=b).items()}
    ft.test_eq({i: m.to_dict() for i, m in after.items()}, {i: m.to_dict() for i, m in before.items()})


def test_run_with_memory_block_holds_only_its_namespace(bank, tmp_path):
    import shutil
    from procmem.loop import run_with_memory
    from procmem.trajectory import Trajectory
    p = tmp_path / "loop.db"
    shutil.copy(bank["path"], p)
    for ns in bank["names"][:3]:
        s = MemoryStore(p, namespace=ns)
        seen = []

        def agent(task, memory_block):
            seen.append(memory_block)
            return Trajectory(task=task, steps=[], answer="done")
        shown = 0
        for q in bank["queries"][:6] + _foreign_titles(bank, ns)[:4]:
            r = run_with_memory(q, agent, s, learn=False)
            ids = {m.id for m in r.injected}
            assert ids <= bank["ids"][ns], (ns, q)
            shown += len(ids)
        assert shown, ns  # the agent was given memories (its own)
        block = "\n".join(seen)
        for t in _foreign_titles(bank, ns):
            assert t not in block, (ns, t)
        s.close()


def test_to_df_and_events_df(bank):
    for ns in bank["names"]:
        s = MemoryStore(bank["path"], namespace=ns)
        df = s.to_df()
        ft.test_eq(set(df["id"]), bank["ids"][ns])
        ev = s.events_df(expand=True)
        foreign = _others(bank, ns)
        for ids in ev.get("ids", []):
            assert not (set(ids if isinstance(ids, list) else [ids]) & foreign), (ns, ids)
        for e in s.events():
            assert not (set(e["ids"]) & foreign), (ns, e)
        s.close()


def test_store_export_never_crosses(bank, tmp_path):
    for ns in bank["names"]:
        s = MemoryStore(bank["path"], namespace=ns)
        out = tmp_path / f"{ns}.jsonl"
        ft.test_eq(s.export(out), len(bank["ids"][ns]))
        got = [json.loads(line) for line in out.read_text().splitlines()]
        ft.test_eq({d["id"] for d in got}, bank["ids"][ns])
        s.close()


WRITES = {
    "update": lambda s, m: s.update(m),
    "archive": lambda s, m: s.archive([m.id], ["leak test"]),
    "quarantine": lambda s, m: s.quarantine([m.id], ["leak test"]),
    "delete": lambda s, m: s.delete(m.id, reason="leak test"),
    "modify": lambda s, m: s.modify(m.id, lambda x: x),
}
COUNTERS = {  # counter calls skip an unknown id (as they always did): the row must not move either
    "record_access": lambda s, m: s.record_access([m.id]),
    "record_outcome": lambda s, m: s.record_outcome([m.id], True),
    "record_retrieval": lambda s, m: s.record_retrieval([m.id], [m.id]),
    "record_injection": lambda s, m: s.record_injection([m.id]),
}


def _events_naming(path, id) -> list:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return c.execute("SELECT seq, kind, ids FROM events WHERE ids LIKE ?", (f"%{id}%",)).fetchall()


@pytest.mark.parametrize("op", sorted(WRITES))
def test_write_by_id_into_another_namespace_is_refused(bank, tmp_path, op):
    import shutil
    from procmem.store import StoreError
    p = tmp_path / "w.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    victim = sorted(MemoryStore(p, namespace=b).items(), key=lambda m: m.id)[0]
    before = _rows(p)
    sa = MemoryStore(p, namespace=a)
    with pytest.raises((KeyError, StoreError)) as foreign:
        WRITES[op](sa, victim)
    ghost = dataclasses.replace(victim, id="00000000-0000-4000-8000-000000000000")
    with pytest.raises((KeyError, StoreError)) as missing:  # no existence oracle: as for an id nobody has
        WRITES[op](sa, ghost)
    ft.test_eq(type(foreign.value), type(missing.value))
    ft.test_eq(str(foreign.value).replace(victim.id, "ID"), str(missing.value).replace(ghost.id, "ID"))
    sa.close()
    ft.test_eq(_rows(p), before)


@pytest.mark.parametrize("op", sorted(COUNTERS))
def test_counters_by_id_of_another_namespace_change_nothing(bank, tmp_path, op):
    import shutil
    p = tmp_path / "c.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    victim = sorted(MemoryStore(p, namespace=b).items(), key=lambda m: m.id)[0]
    sb = MemoryStore(p, namespace=b)
    before, ev = _rows(p), sb.events()
    sa = MemoryStore(p, namespace=a)
    try:
        COUNTERS[op](sa, victim)
    except (KeyError, ValueError):
        pass
    sa.close()
    ft.test_eq(_rows(p), before)
    ft.test_eq(sb.events(), ev)  # the other tenant's history does not move either


def test_merge_across_namespaces_is_refused(bank, tmp_path):
    import shutil
    from procmem.store import StoreError
    p = tmp_path / "m.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    mine = sorted(bank["ids"][a])[0]
    theirs = sorted(bank["ids"][b])[0]
    before = _rows(p)
    with pytest.raises((KeyError, StoreError)):
        MemoryStore(p, namespace=a).merge([mine, theirs])
    ft.test_eq(_rows(p), before)


def test_add_with_another_namespaces_id_never_touches_it(bank, tmp_path):
    "An add carrying a foreign id (or a foreign namespace field) cannot overwrite or re-home the other item."
    import shutil
    from procmem.store import StoreError
    p = tmp_path / "a.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    victim = sorted(MemoryStore(p, namespace=b).items(), key=lambda m: m.id)[0]
    theirs = _tenant_rows(p, b)
    sa = MemoryStore(p, namespace=a)
    evil = MemoryItem("Overwrite by id", "An add that reuses another tenant's id.",
                      "1. Reuse the id\n2. Hope the row is replaced\n3. Read it back elsewhere", id=victim.id)
    try:  # ids are per namespace: a's own memory (whatever id it gets), or a refusal
        got = sa.add(evil)
        ft.test_eq((got.namespace, got.title), (a, "Overwrite by id"))
        ft.test_eq(sa.get(got.id).title, "Overwrite by id")
    except (KeyError, ValueError, StoreError):
        pass
    ft.test_eq(_tenant_rows(p, b), theirs)
    # an item that says it belongs to b, added through a's store, lands in a (or is refused)
    other = MemoryItem("Re-home into another tenant", "An add naming another namespace.",
                       "1. Name the other namespace\n2. Add through this one\n3. Check where it went", namespace=b)
    try:
        got = sa.add(other)
        ft.test_eq(got.namespace, a)
        assert got.id not in {m.id for m in MemoryStore(p, namespace=b).items()}
    except (ValueError, StoreError):
        pass
    ft.test_eq(_tenant_rows(p, b), theirs)


# ---- the agent-facing entry points of issue 10
def _foreign_hits(text: str, bank, ns) -> list:
    "The other namespaces' unique titles and ids that appear in `text`."
    return [t for t in _foreign_titles(bank, ns) if t in text] + [i for i in _others(bank, ns) if i in text]


def test_tools_recall_and_the_toolkit_never_cross(bank, tmp_path):
    import shutil
    tools = _need("procmem.tools")
    p = tmp_path / "t.db"
    shutil.copy(bank["path"], p)
    base = MemoryStore(p)  # bound to the default namespace: the toolkit rebinds it
    for ns in bank["names"]:
        kit = tools.memory_tools(base, namespace=ns, k=10, max_chars=20000)
        ft.test_eq(kit.store.namespace, ns)
        recall_tool = next(t for t in kit if t.name == "recall_memory")
        for q in bank["queries"][:10] + _foreign_titles(bank, ns)[:6]:
            r = tools.recall(MemoryStore(p, namespace=ns), q, k=10, max_chars=20000)
            assert set(r.ids) <= bank["ids"][ns], (ns, q)
            ft.test_eq(_foreign_hits(r.text, bank, ns), [])
            text = str(recall_tool.call({"query": q}))
            ft.test_eq(_foreign_hits(text, bank, ns), [])
        assert set(kit.recalled_ids) <= bank["ids"][ns]
        assert kit.recalled_ids, ns  # it did recall its own


def test_toolkit_writes_by_foreign_id_are_refused(bank, tmp_path):
    import shutil
    tools = _need("procmem.tools")
    notes = _need("procmem.notes")
    p = tmp_path / "w.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    victim = sorted(MemoryStore(p, namespace=b).items(), key=lambda m: m.id)[0]
    before = _rows(p)
    sa = MemoryStore(p, namespace=a)
    for target in ("memory", "user"):
        for action, kw in (("remove", {}), ("replace", {"content": "Reports are due on the first working day."})):
            answer = notes.memory_action(sa, action, target=target, id=victim.id, **kw)
            assert answer.startswith("refused"), answer
            answer = notes.memory_action(sa, action, target=target, old_text=victim.content, **kw)
            assert answer.startswith("refused"), answer
            assert victim.title not in answer and victim.content[:30] not in answer, answer
    ft.test_eq(_rows(p), before)


def _view_or_withheld(tool, path) -> str:
    "The file's view, or '' when procmem's read check withholds it (a WebArena task can read as an instruction)."
    from anthropic.lib.tools import ToolError
    try:
        return tool.call(dict(command="view", path=path))
    except ToolError as e:
        assert "withheld" in str(e), str(e)
        return ""


def test_memory_tool_view_never_crosses(bank, tmp_path):
    import shutil
    mt = _need("procmem.memory_tool")
    from anthropic.lib.tools import ToolError
    p = tmp_path / "v.db"
    shutil.copy(bank["path"], p)
    paths = {}
    for ns in bank["names"]:
        tool = mt.ProcmemMemoryTool(MemoryStore(p), namespace=ns)
        listing = tool.call(dict(command="view", path="/memories"))
        paths[ns] = re.findall(r"\t(/memories/\S+\.md)$", listing, re.M)
        ft.test_eq(len(paths[ns]), len(bank["ids"][ns]))
        shown = "\n".join([listing] + [_view_or_withheld(tool, x) for x in paths[ns]])
        ft.test_eq(_foreign_hits(shown, bank, ns), [])
        assert set(tool.recalled_ids) <= bank["ids"][ns]
    before = _rows(p)
    a, b = bank["names"][1], bank["names"][2]
    tool = mt.ProcmemMemoryTool(MemoryStore(p), namespace=a)
    only_b = [x for x in paths[b] if x not in paths[a]]
    assert only_b
    for x in only_b:  # a path only the other tenant has: not found, and nothing moves
        for cmd in (dict(command="view", path=x), dict(command="delete", path=x),
                    dict(command="str_replace", path=x, old_str="Open", new_str="Close"),
                    dict(command="insert", path=x, insert_line=1, insert_text="5. again"),
                    dict(command="rename", old_path=x, new_path="/memories/general/stolen.md")):
            with pytest.raises(ToolError):
                tool.call(cmd)
    ft.test_eq(_rows(p), before)


def test_session_seed_and_reflect_stay_in_their_namespace(bank, tmp_path):
    _need_tasks("unique titles in every tenant")
    import shutil
    session = _need("procmem.session")
    p = tmp_path / "s.db"
    shutil.copy(bank["path"], p)
    a = bank["names"][3]
    domains = {m.domain for m in MemoryStore(p, namespace=a).items()}
    for d in domains:
        s = session.Session.resume(MemoryStore(p), domain=d, namespace=a)
        assert {m.id for m in s.seeded} <= bank["ids"][a]
        ft.test_eq(_foreign_hits(s.seed_text(), bank, a), [])
    s = session.Session(MemoryStore(p), namespace=a, domain="shopping")
    s.learn(bank["titles"][bank["names"][4]][0] + ": open the report page, filter by the month, then export the rows.")
    s.reflect()
    other = {m.id: m for m in MemoryStore(p, namespace=bank["names"][4]).items()}
    ft.test_eq(set(other), bank["ids"][bank["names"][4]])  # nothing merged into or confirmed in the other tenant


def test_skills_export_never_crosses(bank, tmp_path):
    skills = _need("procmem.skills")
    for ns in bank["names"]:
        out = tmp_path / f"skills-{ns}"
        store = MemoryStore(bank["path"], namespace=ns)
        from procmem.trust import read_check
        paths = skills.export_skills(store, out, min_confirmations=0)
        ft.test_eq(len(paths), sum(not read_check(m, "", 0)[0] for m in store.items()))
        assert paths, ns
        text = "\n".join(x.read_text() for x in paths)
        ft.test_eq(_foreign_hits(text, bank, ns), [])


def test_skills_import_into_a_namespace_never_touches_another(bank, tmp_path):
    "Skills exported from tenant b (ids and all) imported into tenant a: a gets copies, b is untouched."
    _need_tasks("unique memories in every tenant")
    import shutil
    skills = _need("procmem.skills")
    p = tmp_path / "i.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    out = tmp_path / "from-b"
    skills.export_skills(MemoryStore(p, namespace=b), out)
    theirs = _tenant_rows(p, b)
    skills.import_skills(out, MemoryStore(p, namespace=a))
    ft.test_eq(_tenant_rows(p, b), theirs)
    mine = list(MemoryStore(p, namespace=a).items())
    assert all(m.namespace == a for m in mine)
    assert len(mine) > len(bank["ids"][a]), "a got copies"  # (they may keep b's ids: ids are per namespace)


def _mcp_session(db, ns, steps, *extra):
    "Start `python -m procmem.mcp_server --store db --namespace ns`, run `await steps(client)`, stop it."
    mcp = pytest.importorskip("mcp")
    _need("procmem.mcp_server")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCMEM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    params = mcp.StdioServerParameters(command=sys.executable, env=env, cwd=str(ROOT),
                                       args=["-m", "procmem.mcp_server", "--store", str(db), "--namespace", ns, *extra])

    async def run():
        async with mcp.Client(params) as client:
            return await steps(client)
    return asyncio.run(asyncio.wait_for(run(), 90))


def _mcp_text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def test_mcp_recall_list_show_remove_never_cross(bank, tmp_path):
    import shutil
    p = tmp_path / "mcp.db"
    shutil.copy(bank["path"], p)
    for ns in bank["names"][1:3]:
        foreign = sorted(_others(bank, ns))[:8]
        queries = bank["queries"][:6] + _foreign_titles(bank, ns)[:4]

        async def steps(c):
            out = {"recall": [_mcp_text(await c.call_tool("recall", dict(query=q, k=20))) for q in queries]}
            out["list"] = [_mcp_text(await c.call_tool("list", dict(limit=5, offset=o))) for o in range(0, 40, 5)]
            out["show"] = [await c.call_tool("show", dict(id=i)) for i in foreign]
            out["remove"] = [await c.call_tool("remove", dict(id=i, reason="leak test")) for i in foreign]
            return out
        before = _rows(p)
        out = _mcp_session(p, ns, steps, "--allow-remove")
        for text in out["recall"] + out["list"]:
            ft.test_eq(_foreign_hits(text, bank, ns), [])
        listed = set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "\n".join(out["list"])))
        from procmem.trust import read_check
        clean = {m.id for m in MemoryStore(p, namespace=ns).items() if not read_check(m, "", 0)[0]}
        ft.test_eq(listed, clean)  # pages cover exactly this tenant (what the read check does not withhold)
        for r, i in zip(out["show"] + out["remove"], foreign + foreign):
            assert r.is_error, _mcp_text(r)  # the error names the id asked for, nothing of the other tenant
            ft.test_eq(_foreign_hits(_mcp_text(r).replace(i, ""), bank, ns), [])
        ft.test_eq([x for x in _rows(p) if x[0] != ns], [x for x in before if x[0] != ns])


def test_namespace_names_outside_the_rule_are_refused(tmp_path):
    from procmem.core import MemoryValidationError
    p = tmp_path / "n.db"
    MemoryStore(p).close()
    for bad in ["", " ", "../x", "a/b", "a b", ".hidden", "x" * 65, "café", "a\x00b", "a;drop", "a%", "a*", "аlice",
                "a\nb", None, 3, b"alice"]:
        with pytest.raises((MemoryValidationError, ValueError, TypeError)):
            MemoryStore(p, namespace=bad)
        with pytest.raises((MemoryValidationError, ValueError, TypeError)):
            MemoryStore(p).in_namespace(bad)
    ft.test_eq(MemoryStore(p).namespaces(), {})


def test_admin_paths_stay_in_their_namespace(bank, tmp_path):
    "prune (archives), merge and history through one tenant never touch or show another's memories."
    import shutil
    import procmem.lifecycle  # noqa: F401 (adds MemoryStore.prune)
    import procmem.editing  # noqa: F401 (adds MemoryStore.history)
    p = tmp_path / "adm.db"
    shutil.copy(bank["path"], p)
    a = bank["names"][1]
    rest = [r for r in _rows(p) if r[0] != a]
    sa = MemoryStore(p, namespace=a)
    shared = [m for m in sa.items() if m.title == bank["shared"][0][0] or m.title.startswith(bank["shared"][0][0] + " (")]
    assert len(shared) == 2, shared  # the identical item and its overlapping variant: mergeable
    sa.merge([m.id for m in shared], by="leak test")
    sa.prune(dry_run=False, max_items=1, by="leak test")
    for i in sorted(_others(bank, a))[:5]:
        with pytest.raises((KeyError, Exception)):
            sa.history(i)
    ft.test_eq([r for r in _rows(p) if r[0] != a], rest)
    ft.test_eq(len(MemoryStore(p, namespace=a)), 1)
    assert all(m.namespace == a for m in MemoryStore(p, namespace=a).items("archived"))


def test_jsonl_import_into_a_namespace_never_touches_another(bank, tmp_path):
    import shutil
    p = tmp_path / "imp.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][2]
    out = tmp_path / "b.jsonl"
    MemoryStore(p, namespace=b).export(out)
    theirs = _tenant_rows(p, b)
    before = _rows(p)
    from procmem.store import StoreError
    try:  # copies in a, or refused whole (ids are unique file-wide): never b's rows
        MemoryStore(p, namespace=a).import_file(out, update=True)
    except StoreError:
        ft.test_eq(_rows(p), before)
    ft.test_eq(_tenant_rows(p, b), theirs)
    assert all(m.namespace == a for m in MemoryStore(p, namespace=a).items())


def test_every_tenant_can_bootstrap_and_sees_only_its_copy(tmp_path):
    from procmem.bootstrap import bootstrap_general_strategies
    p = tmp_path / "boot.db"
    names = ["alice", "bob", "team.ops"]
    for ns in names:
        MemoryStore(p, namespace=ns).add_many(bootstrap_general_strategies())
    for ns in names:
        s = MemoryStore(p, namespace=ns)
        ft.test_eq(len(s), 7)
        hits = s.search("find subclasses of a class", k=10)
        assert hits and all(m.namespace == ns for m, _ in hits)


# ---- the command line: --namespace and $PROCMEM_NAMESPACE on every command that reads or writes
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _cli(*argv) -> tuple[int, str]:
    "(exit status, stdout + stderr) of `procmem argv...`, run in this process."
    from procmem.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:
            rc = e.code
    return rc, buf.getvalue()


def test_cli_namespace_reads_never_cross(bank, tmp_path, monkeypatch):
    import shutil
    p = tmp_path / "cli.db"
    shutil.copy(bank["path"], p)
    monkeypatch.delenv("PROCMEM_NAMESPACE", raising=False)
    for ns in bank["names"][1:4]:
        for how in ("flag", "env"):
            if how == "env":
                monkeypatch.setenv("PROCMEM_NAMESPACE", ns)
            pre = ["--store", p] + (["--namespace", ns] if how == "flag" else [])
            rc, out = _cli(*pre, "list", "--limit", 1000)
            ft.test_eq(rc, 0)
            ft.test_eq(set(UUID.findall(out)), bank["ids"][ns])
            for q in bank["queries"][:5] + _foreign_titles(bank, ns)[:3]:
                rc, out = _cli(*pre, "search", q, "-k", 20, "--json")
                ft.test_eq(rc, 0)
                assert set(UUID.findall(out)) <= bank["ids"][ns], (ns, q)
                echo = out.replace(json.dumps(q)[1:-1], "").replace(q, "")  # the query itself is echoed
                ft.test_eq(_foreign_hits(echo, bank, ns), [])
            for oid in sorted(_others(bank, ns))[:3]:
                rc, out = _cli(*pre, "show", oid)
                assert rc != 0, out
                ft.test_eq(_foreign_hits(out.replace(oid, ""), bank, ns), [])
            rc, out = _cli(*pre, "export", tmp_path / f"{ns}-{how}.jsonl")
            ft.test_eq(rc, 0)
            got = [json.loads(x)["id"] for x in (tmp_path / f"{ns}-{how}.jsonl").read_text().splitlines()]
            ft.test_eq(set(got), bank["ids"][ns])
            rc, out = _cli(*pre, "export", "--format", "skills", tmp_path / f"skills-{ns}-{how}")
            ft.test_eq(rc, 0)
            text = "\n".join(x.read_text() for x in (tmp_path / f"skills-{ns}-{how}").glob("*/SKILL.md"))
            ft.test_eq(_foreign_hits(text, bank, ns), [])
            rc, out = _cli(*pre, "stats")
            assert ns in out, out
            monkeypatch.delenv("PROCMEM_NAMESPACE", raising=False)
        rc, out = _cli("--store", p, "--namespace", ns, "list", "--quarantined")
        ft.test_eq(rc, 0)
        assert set(UUID.findall(out)) <= bank["ids"][ns]
        other = bank["names"][(bank["names"].index(ns) % (len(bank["names"]) - 1)) + 1]
        monkeypatch.setenv("PROCMEM_NAMESPACE", other)  # the flag wins over the environment
        rc, out = _cli("--store", p, "--namespace", ns, "list", "--limit", 1000)
        ft.test_eq(set(UUID.findall(out)), bank["ids"][ns])
        monkeypatch.delenv("PROCMEM_NAMESPACE")


def test_cli_namespace_writes_by_foreign_id_change_nothing(bank, tmp_path, monkeypatch):
    import shutil
    p = tmp_path / "cliw.db"
    shutil.copy(bank["path"], p)
    monkeypatch.delenv("PROCMEM_NAMESPACE", raising=False)
    a, b = bank["names"][1], bank["names"][2]
    victims = sorted(bank["ids"][b])[:2]
    before = _rows(p)
    pre = ["--store", p, "--namespace", a]
    mine = sorted(bank["ids"][a])[0]
    control = tmp_path / "control.db"
    shutil.copy(bank["path"], control)
    for argv in (["quarantine", "ID", "--reason", "leak"], ["release", "ID", "--reason", "leak"],
                 ["edit", "ID", "--title", "Taken over by another tenant"], ["rm", "ID", "--yes", "--reason", "leak"],
                 ["restore", "ID"], ["rm", "ID", "--purge", "--yes"]):
        rc, out = _cli("--store", control, "--namespace", a, *[mine if x == "ID" else x for x in argv])
        ft.test_eq((argv, rc), (argv, 0))  # the command itself is right: it works on the tenant's own memory
        rc, out = _cli(*pre, *[victims[0] if x == "ID" else x for x in argv])
        assert rc != 0, (argv, out)
        ft.test_eq(_foreign_hits(out.replace(victims[0], ""), bank, a), [])
    ft.test_eq(_rows(p), before)


def test_claude_agent_in_both_modes_sees_only_its_tenant(bank, tmp_path):
    """run_with_memory(task, ClaudeAgent(...), store bound to a tenant) on the scripted fake server:
    in 'inject' mode the system prompt, in 'tool' mode every recall_memory result the model gets back
    (it asks for the other tenants' titles too) holds nothing of another tenant."""
    import shutil
    _need("procmem.agent")
    from procmem.agent import ClaudeAgent
    from procmem.judge import Judgment
    from procmem.loop import run_with_memory
    from procmem.testing import scripted_anthropic, text_reply, tool_use_reply
    p = tmp_path / "agent.db"
    shutil.copy(bank["path"], p)
    ns = bank["names"][2]
    store = MemoryStore(p, namespace=ns)
    asks = bank["queries"][:2] + _foreign_titles(bank, ns)[:3]

    def judge(artifact, llm=None):
        return Judgment(False, "not judged here", 0.5, failure_class="intrinsic")

    def extractor(artifact, judgment, llm=None, domain=None):
        return []
    for mode in ("inject", "tool"):
        script = ([tool_use_reply(*[("recall_memory", {"query": q}) for q in asks])] if mode == "tool" else []) \
            + [text_reply("done")]
        with scripted_anthropic(script) as fake:
            agent = ClaudeAgent(model="claude-haiku-5-5", mode=mode, client=fake.client(), max_tool_rounds=3)
            r = run_with_memory(bank["queries"][0], agent, store, judge=judge, extractor=extractor)
        seen = json.dumps([q["body"] for q in fake.requests])
        for q in asks:  # the model's own queries are in the requests: not a leak
            seen = seen.replace(json.dumps(q)[1:-1], "")
        ft.test_eq(_foreign_hits(seen, bank, ns), [])
        assert {m.id for m in r.injected + r.recalled} <= bank["ids"][ns], mode
        assert (r.injected if mode == "inject" else r.recalled), mode  # it was given memories, its own


def test_sync_and_status_reads_never_cross(tmp_path):
    "changes_since (ids and tombstones), get_many, archived/quarantined listings and to_df(status=None)."
    p = tmp_path / "sync.db"
    a, b = MemoryStore(p, namespace="alice"), MemoryStore(p, namespace="bob")
    mine = a.add(MemoryItem("Reconcile a bank statement", "Month end.", "1. Download the statement\n2. Match each line"))
    theirs = [b.add(MemoryItem(f"Bob procedure {w}", "For bob.", f"1. Open the {w} page\n2. Check the {w} rows"))
              for w in ("walnut", "hazel", "acorn", "chestnut")]
    b.archive([theirs[0].id], ["leak test"])
    b.quarantine([theirs[1].id], ["leak test"])
    b.delete(theirs[2].id, reason="leak test")
    rev, items, gone = a.changes_since(0)
    ft.test_eq(([m.id for m in items], gone), ([mine.id], []))
    ft.test_eq([m.id for m in a.get_many([t.id for t in theirs] + [mine.id])], [mine.id])
    for status in ("active", "archived", "quarantined"):
        assert not {m.id for m in a.items(status)} & {t.id for t in theirs}, status
    ft.test_eq(set(a.to_df(status=None)["id"]), {mine.id})
    ft.test_eq(a.count("archived") + a.count("quarantined"), 0)
    a.delete(mine.id, reason="leak test")
    rev2, items, gone = b.changes_since(0)  # bob's sync never hears of alice's deletion
    assert mine.id not in gone and mine.id not in {m.id for m in items}


def test_learning_in_one_tenant_never_confirms_or_changes_another(bank, tmp_path):
    "run_with_memory(learn=True) in tenant a teaches a lesson identical to tenant b's memory: a learns it, b is untouched."
    _need_tasks("unique memories in every tenant")
    import shutil
    from procmem.loop import run_with_memory
    from procmem.judge import Judgment
    from procmem.trajectory import Trajectory, Step
    p = tmp_path / "learn.db"
    shutil.copy(bank["path"], p)
    a, b = bank["names"][1], bank["names"][3]
    twin = next(m for m in MemoryStore(p, namespace=b).items() if m.title in bank["titles"][b])
    theirs = _tenant_rows(p, b)

    def judge(artifact, llm=None):
        return Judgment(True, "the rows were counted", 0.9)

    def extractor(artifact, judgment, llm=None, domain=None):
        return [MemoryItem(twin.title, twin.description, twin.content, tags=list(twin.tags))]

    def agent(task, memory_block):
        return Trajectory(task=task, steps=[Step(action="open the report", observation="12 rows")], answer="12")
    for k in range(3):  # three runs of different tasks: whatever happens to a's copy, b's never moves
        run_with_memory(f"Count the rows of the {['monthly', 'weekly', 'daily'][k]} report page", agent,
                        MemoryStore(p, namespace=a), judge=judge,
                        extractor=extractor)
    ft.test_eq(_tenant_rows(p, b), theirs)
    for ns in (a, b):  # no event of either tenant quotes the other (gate reasons name the closest memory)
        text = json.dumps(MemoryStore(p, namespace=ns).events(), default=str)
        ft.test_eq(_foreign_hits(text.replace(json.dumps(twin.title)[1:-1], ""), bank, ns), [])
    learned = [m for m in MemoryStore(p, namespace=a).items() if m.title == twin.title]
    assert len(learned) == 1 and learned[0].id != twin.id and learned[0].namespace == a, learned


def test_partition_holds_for_any_names_and_texts(tmp_path_factory):
    "Hypothesis: any two valid tenant names (the documented alphabet) and any shared/own texts never leak."
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies
    name = st.from_regex(r"[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,20}", fullmatch=True)
    word = st.sampled_from(["invoice", "ledger", "export", "report", "filter", "archive", "order", "refund", "page",
                            "review", "total", "month", "region", "sales", "column", "login", "repo", "issue"])
    text = st.lists(word, min_size=3, max_size=8).map(" ".join)

    @hyp.settings(max_examples=25, deadline=None, suppress_health_check=list(hyp.HealthCheck))
    @hyp.given(a=name, b=name, shared=st.lists(text, min_size=1, max_size=3), own=st.lists(text, min_size=1, max_size=3),
               query=text)
    def check(a, b, shared, own, query):
        hyp.assume(a != b)
        p = tmp_path_factory.mktemp("hyp") / "h.db"
        sa, sb = MemoryStore(p, namespace=a), MemoryStore(p, namespace=b)
        ids = {a: set(), b: set()}
        for s, ns in ((sa, a), (sb, b)):
            for t in shared + (own if ns == a else []):
                m = s.add(MemoryItem(t.capitalize(), "When " + t + ".", "1. " + t + "\n2. check the " + t))
                ids[ns].add(m.id)
        for s, ns in ((sa, a), (sb, b)):
            got = {m.id for m, _ in s.search(query, k=50)} | {m.id for m, _ in s.search(shared[0], k=1)}
            assert got <= ids[ns], (ns, query)
            ft.test_eq({m.id for m in s.items()}, ids[ns])
        assert sb.search(shared[0], k=1), "the shared text is found in b too"
    check()


def test_the_same_id_in_two_tenants_is_two_memories(tmp_path):
    """Ids are unique per namespace: b's export imported into a gives a copies under the SAME ids. Every
    id-keyed call through a (counters, update, archive, delete, history, search, index, tombstones)
    touches and shows a's copy only."""
    import dataclasses as dc
    import procmem.editing  # noqa: F401 (adds MemoryStore.history)
    p = tmp_path / "same.db"
    a, b = MemoryStore(p, namespace="alice"), MemoryStore(p, namespace="bob")
    items = [b.add(MemoryItem(f"Reconcile the {w} ledger", f"At month end, for the {w} ledger.",
                              f"1. Export the {w} ledger\n2. Match each {w} line\n3. Flag the rest"))
             for w in ("walnut", "hazel", "acorn", "chestnut")]
    b.export(tmp_path / "bob.jsonl")
    a.import_file(tmp_path / "bob.jsonl")
    shared = [m.id for m in items if m.id in {x.id for x in a.items()}]
    assert len(shared) == 4, shared  # the same ids, now in both tenants
    bobs = _tenant_rows(p, "bob")
    bob_events = b.events()
    a.record_access(shared[:1])
    a.record_outcome(shared[:1], False)
    a.record_retrieval(shared[:2], shared[:1])
    a.record_injection(shared[:1])
    a.update(dc.replace(a.get(shared[1]), title="Reconcile the hazel ledger twice"))
    a.archive([shared[2]], ["leak test"])
    a.delete(shared[3], reason="leak test")
    ft.test_eq(_tenant_rows(p, "bob"), bobs)
    ft.test_eq(b.events(), bob_events)
    ft.test_eq([m.title for m in b.items()], [m.title for m in items])  # b's four, as they were
    ft.test_eq([len(b.history(i)) for i in shared], [1] * 4)  # a's edit made no new version of b's copy
    rev, got, gone = b.changes_since(0)
    assert shared[3] not in gone and {m.id for m in got} == set(shared)
    hits = b.search("hazel ledger twice", k=5)
    assert all(m.title != "Reconcile the hazel ledger twice" for m, _ in hits), hits
    ft.test_eq(b.search("chestnut ledger", k=1)[0][0].id, shared[3])  # a's deletion left b's index entry
    assert not a.search("chestnut ledger", k=5) or a.search("chestnut ledger", k=5)[0][0].id != shared[3]


def test_skills_update_by_a_shared_id_changes_only_the_importing_tenant(tmp_path):
    "a holds copies of b's memories under the same ids; a skills export of b, edited, imported into a with update=True."
    skills = _need("procmem.skills")
    p = tmp_path / "upd.db"
    a, b = MemoryStore(p, namespace="alice"), MemoryStore(p, namespace="bob")
    for w in ("walnut", "hazel"):
        b.add(MemoryItem(f"Reconcile the {w} ledger", f"At month end, for the {w} ledger.",
                         f"1. Export the {w} ledger\n2. Match each {w} line\n3. Flag the rest"))
    b.export(tmp_path / "bob.jsonl")
    a.import_file(tmp_path / "bob.jsonl")
    out = tmp_path / "bob-skills"
    skills.export_skills(b, out)
    for f in out.glob("*/SKILL.md"):  # an edit of the steps, as a person would make it
        f.write_text(f.read_text().replace("Flag the rest", "Flag the rest and note who checked them"))
    bobs = _tenant_rows(p, "bob")
    counts = skills.import_skills(out, a, update=True)
    ft.test_eq(counts["updated"], 2)
    ft.test_eq(_tenant_rows(p, "bob"), bobs)
    assert all("note who checked" in m.content for m in a.items())
    assert not any("note who checked" in m.content for m in b.items())
