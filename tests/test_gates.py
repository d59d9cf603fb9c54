"""Cross-module tests for the gates: WebArena leak checks with the tasks' own instantiation values, the
subclass/superclass non-merge, echo rejection of injected memories, and the store's state after each
dedup action."""
import copy, dataclasses, json, re, sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree
from procmem.core import MemoryItem
from procmem.text import STOPWORDS
from procmem.store import MemoryStore
from procmem.bootstrap import bootstrap_general_strategies
from procmem.inject import INJECT_HEADING, format_memories_for_injection, strip_injected_memories
from procmem.gates import (DedupDecision, GateResult, apply_dedup, apply_gate, check_memory_deduplication,
                           check_vacuity, compare_memories, find_task_leaks, is_echo_of, run_gates, score_generalization,
                           task_specifics)

ROOT = Path(__file__).resolve().parents[1]
WEBARENA = ROOT.parent / "shared" / "data" / "webarena" / "tasks_dev.json"


@pytest.fixture(scope="module")
def webarena():
    if not WEBARENA.exists(): pytest.skip(f"shared data file not found: {WEBARENA} (expected beside the repository, see shared/data/README.md)")
    return json.loads(WEBARENA.read_text(encoding="utf-8"))


@pytest.fixture
def pack(): return bootstrap_general_strategies()


@pytest.fixture
def store(pack):
    s = MemoryStore()
    s.add_many(pack)
    yield s
    s.close()


def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)): yield from _flat(v)
        else: yield str(v)


def _words(s): return re.findall(r"[^\W_]+", s.casefold())


# ---------------------------------------------------------------- WebArena: leaks and task_specifics

def test_copied_intent_is_rejected_for_leaks(webarena):
    "A memory built by copying a task's intent leaks its instantiation values and is rejected, naming them."
    empty = MemoryStore()
    checked = 0
    for t in webarena:
        values = [v for v in _flat(t["instantiation_dict"].values())  # one character or only stopwords ('most') is no evidence
                  if len("".join(_words(v))) >= 2 and not all(w in STOPWORDS for w in _words(v))]
        if not values: continue
        copied = MemoryItem("How to do this task", content=f"1. {t['intent']}\n2. Open the right page and act on it.\n3. Check the result.")
        r = run_gates(copied, empty, task_values=t["instantiation_dict"])
        assert r.action == "reject", (t["task_id"], r)
        leaks = [x for x in r.reasons if x.startswith("reject: leaks task value ")]
        assert leaks and all(x.endswith(" in content") for x in leaks), (t["task_id"], r.reasons)
        checked += 1
    assert checked > 350  # nearly every dev task has a non-trivial value


def test_generic_memory_for_the_same_template_passes(webarena):
    "A memory written from the template, with placeholders instead of values, leaks nothing."
    empty, flagged = MemoryStore(), []
    for t in webarena:
        tmpl = re.sub(r"\{\{(\w+)[^}]*\}\}", lambda m: "the requested " + m.group(1).replace("_", " ").lower(), t["intent_template"])
        generic = MemoryItem("Procedure for tasks of this kind", content=f"1. Restate the goal: {tmpl}\n2. Open the right page and act on it.\n3. Check the result.")
        assert find_task_leaks(generic, t["instantiation_dict"]) == [], (t["task_id"], tmpl)
        r = run_gates(generic, empty, task_values=t["instantiation_dict"])
        if r.action == "quarantine":  # the classifier may misread benign text: the issue allows <= 2%
            assert {f.layer for f in r.findings} == {"classifier"}, (t["task_id"], r.reasons)
            flagged.append(t["task_id"])
        else:
            assert r.action == "add", (t["task_id"], r.reasons)
    assert len(flagged) <= 0.02 * len(webarena), flagged


def test_hand_written_generic_memories_pass_with_the_task_text(webarena, store):
    "Real procedures for two templates pass every gate even when the task text is also given."
    notify = next(t for t in webarena if t["intent_template_id"] == 280)
    rate = next(t for t in webarena if t["intent_template_id"] == 194)
    memories = {
        notify["task_id"]: MemoryItem("Message a customer about their latest pending order", "Use when a task asks to notify a customer through an order.",
                                      "1. In the admin panel open the orders grid and filter by the customer's name.\n2. Sort by purchase date and open the "
                                      "newest order whose status is pending.\n3. In the comments section type the requested message exactly, tick the "
                                      "notify-by-email box and submit.\n4. Check that the comment appears in the order history.", domain="web"),
        rate["task_id"]: MemoryItem("Review a purchased product with a given rating", "Use when a task asks to rate something the user bought.",
                                    "1. Open the account's order history and find the product among past orders.\n2. Follow the product link and open the "
                                    "review form.\n3. Pick the requested number of stars, fill in the nickname field as asked, add a short summary and "
                                    "text.\n4. Submit and confirm the review is pending moderation.", domain="web"),
    }
    for t in (notify, rate):
        m = memories[t["task_id"]]
        r = run_gates(m, store, task=t["intent"], task_values=t["instantiation_dict"])
        assert r.action == "add", r
        assert r.generalization == 1.0
        copied = dataclasses.replace(m, content=m.content + f"\n5. For example: {t['intent']}")
        assert run_gates(copied, store, task=t["intent"], task_values=t["instantiation_dict"]).action == "reject"


def test_task_specifics_recall_on_instantiation_values(webarena):
    "task_specifics catches most instantiation values from the intent alone (ground truth: instantiation_dict)."
    caught = total = 0
    for t in webarena:
        specifics = [_words(s) for s in task_specifics(t["intent"])]
        for v in _flat(t["instantiation_dict"].values()):
            vw = _words(v)
            if not vw or v.casefold() not in t["intent"].casefold(): continue
            total += 1
            caught += any(s and any(vw[i:i + len(s)] == s for i in range(len(vw) - len(s) + 1)) for s in specifics)
    assert total > 600
    assert caught / total > 0.6, caught / total


def test_leaks_are_whole_words_and_tags_may_be_none():
    m = MemoryItem("Start the chart", content="1. Start the app\n2. Open the charts page\n3. Export the smart art table", tags=["start"])
    assert find_task_leaks(m, ["art"]) == ["'art' in content"]
    assert find_task_leaks(m, ["tar", "char", "mart"]) == []
    m.tags = None
    assert find_task_leaks(m, ["start"]) == ["'start' in title", "'start' in content"]
    assert score_generalization(m) == 1.0
    assert find_task_leaks(m, {"n": 2, "k": "the"}) == []  # one character or stopwords only: no evidence


# ---------------------------------------------------------------- dedup: subclass vs superclass

def test_subclass_and_superclass_are_not_merged(pack):
    sub, sup = pack[1], pack[2]
    s = MemoryStore(); s.add(sub)
    d = check_memory_deduplication(sup, s)
    assert d.action == "add" and d.target is None, d
    apply_dedup(d, sup, s)
    assert sorted(m.title for m in s) == ["Find Subclasses Using GraphMeta", "Find Superclasses Using GraphMeta"]
    assert s.get(sub.id).confidence == 0.1  # not confirmed by its opposite


def test_reworded_near_copy_is_merged(store, pack):
    sup = pack[2]
    reworded = MemoryItem("Finding Superclasses with GraphMeta",
                          "For tasks asking what a class is a kind of: the meta index's superclass map answers first; walking links is the fallback.",
                          "1. Resolve the class to a URI using search_entity.\n2. Look that URI up in the {ontology}_meta superclass map to get its "
                          "direct parents.\n3. Name every parent using the label map.\n4. When the map has nothing for the class, call "
                          "probe_relationships and follow outgoing subClassOf links; their objects are superclasses.\n5. Repeat on the parents only "
                          "if the task wants the whole chain up to the roots.", domain=sup.domain)
    d = check_memory_deduplication(reworded, store)
    assert (d.action, d.target.id) == ("merge", sup.id), d
    assert run_gates(reworded, store).action == "merge"


def test_pitfall_never_merges_with_strategy(store, pack):
    pit = dataclasses.replace(pack[1], id="pitfall-1", source_type="failure", title=pack[1].title + " fails",
                              tags=[], provenance={})
    d = check_memory_deduplication(pit, store)
    assert d.action == "add" and "no stored pitfall" in d.reason


# ---------------------------------------------------------------- the feedback-loop guard

def test_pasted_injection_block_is_rejected(store, pack):
    injected = [pack[1], pack[0]]
    block = format_memories_for_injection(injected)
    cand = MemoryItem("What worked in this run", "Notes from the run.", f"The agent followed these notes:\n{block}\nand answered.")
    r = run_gates(cand, store, injected=injected)
    assert r.action == "reject"
    assert any("injection marker" in x for x in r.reasons), r.reasons
    assert any(x.startswith("reject: restates injected memory") for x in r.reasons), r.reasons
    assert apply_gate(r, cand, store) is None and len(store) == 7
    # the same block with nothing recorded as injected is still refused on its markers
    assert run_gates(cand, store).action == "reject"


def test_paraphrased_injected_memory_is_rejected_but_not_a_new_one(store, pack):
    injected = [pack[1]]
    para = MemoryItem("Listing subclasses with the GraphMeta index", "What kinds of X exist: read the subclass map of the meta index.",
                      "1. Resolve the class name to a URI with search_entity unless the URI is given.\n2. Look the URI up in the {ontology}_meta "
                      "subclass map for its direct subclasses.\n3. Name each one from the label map.\n4. With no map entry, use probe_relationships "
                      "and keep incoming subClassOf links.\n5. Report direct subclasses; go deeper only if asked.")
    assert is_echo_of(para, injected) is pack[1]
    assert run_gates(para, store, injected=injected).action == "reject"
    assert is_echo_of(pack[2], injected) is None  # the superclass strategy is a different memory


def test_strip_injected_memories_in_a_trajectory(pack):
    block = format_memories_for_injection(pack[:3])
    step = f"System prompt.\n{block}\nTask: list the subclasses of Agent."
    out = strip_injected_memories(step)
    assert out == "System prompt.\n\nTask: list the subclasses of Agent."
    assert strip_injected_memories(f"a\n{block[:len(block) // 2]}") == "a\n"  # truncated block: removed to the end
    assert INJECT_HEADING not in out and "procmem-memories" not in out


_plain = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<#"), max_size=60)

@settings(max_examples=100, deadline=None)
@given(_plain, _plain, st.integers(0, 3))
def test_strip_leaves_other_text_alone(before, after, n):
    block = format_memories_for_injection(bootstrap_general_strategies()[:n]) if n else ""
    if "the items below are notes from earlier tasks" in (before + after).casefold(): return
    assert strip_injected_memories(before + block + after) == before + after
    assert strip_injected_memories(before + after) == before + after


# ---------------------------------------------------------------- store state after apply

def test_merge_raises_confidence_only_for_an_independent_confirmation(store, pack):
    twin = copy.deepcopy(pack[3]); twin.id = "another-id"  # same title, content and task: re-learned, not confirmed
    r = run_gates(twin, store)
    assert (r.action, r.target.id) == ("merge", pack[3].id)
    stored = apply_gate(r, twin, store)
    assert stored.id == pack[3].id and store.get(pack[3].id).confidence == 0.1
    other = dataclasses.replace(copy.deepcopy(pack[3]), id="other-task", task_query="Which properties have Person as domain?")
    stored = apply_gate(run_gates(other, store), other, store)  # learned from another task: +0.1
    assert stored.id == pack[3].id and store.get(pack[3].id).confidence == 0.2
    assert store.get(pack[3].id).provenance["confirmations"] == 1
    assert "another-id" not in store and "other-task" not in store and len(store) == 7


def _refined(item, n=0, task="Group the search hits of a big ontology by type"):
    "A refinement of `item`: the same title, its content plus new steps (`n` varies the wording)."
    return MemoryItem(item.title, item.description, item.content +
                      f"\n6. Group the hits by their rdf type before describing them (pass {n}), and describe one "
                      "representative per group first.\n7. Note which fields matched, so a later query can be narrowed."
                      "\n8. Cache hits between related questions within one session.",
                      tags=["pattern", "grouping"], provenance={"trajectory_id": f"t-{n}"}, domain=item.domain,
                      task_query=f"{task} {n}")


def test_replace_starts_the_new_text_fresh_and_keeps_the_old_in_lineage(store, pack):
    "Issue 6 point 13: a replace does not carry the old text's record over to the new text."
    for ok in (True, True, True, True, False):
        store.record_outcome([pack[4].id], ok)
    for n in range(2):  # learned twice more, from other tasks: the store confirms it (+0.1 confidence each)
        store.add(dataclasses.replace(copy.deepcopy(pack[4]), id=f"again-{n}", task_query=f"another task {n}"))
    old = store.get(pack[4].id)
    assert (old.use_count, old.success_count, old.failure_count, old.confidence) == (5, 4, 1, 0.3)
    refined = _refined(pack[4])
    r = run_gates(refined, store)
    assert (r.action, r.target.id) == ("replace", pack[4].id), r
    stored = apply_gate(r, refined, store)
    got = store.get(pack[4].id)
    assert stored == got and got.content == refined.content and got.created_at == pack[4].created_at
    assert (got.use_count, got.success_count, got.failure_count, got.access_count, got.last_used_at,
            got.confidence) == (0, 0, 0, 0, None, 0.1)  # the new text starts fresh
    [v] = got.lineage  # the old version, with its record
    assert (v["content"], v["use_count"], v["success_count"], v["failure_count"], v["confidence"],
            v["fingerprint"]) == (pack[4].content, 5, 4, 1, 0.3, pack[4].fingerprint)
    assert got.tags == ["universal", "search", "pattern", "multiple", "grouping"]
    assert got.provenance["trajectory_id"] == "t-0" and got.provenance["supersedes"] == pack[4].fingerprint
    assert refined.id not in store and len(store) == 7
    assert [e["kind"] for e in store.events()][-1] == "modify"


def test_lineage_keeps_the_last_three_versions(store, pack):
    contents = [pack[4].content]
    for n in range(1, 5):  # four replaces in a row (the decision is given: this tests what a replace writes)
        new = _refined(pack[4], n)
        apply_dedup(DedupDecision("replace", store.get(pack[4].id), 1.0, 1.0, "test"), new, store)
        contents.append(new.content)
    got = store.get(pack[4].id)
    assert got.content == contents[-1]
    assert [v["content"] for v in got.lineage] == contents[-4:-1]  # the last 3 earlier versions, oldest first


def test_merge_keeps_the_candidates_task_as_an_example_query(store, pack):
    "Issue 6 point 13: a merged memory is still found by the task that produced the merged candidate."
    task = "Which savanna herbivores appear in the wildlife catalogue?"
    assert all(m.id != pack[1].id for m, _ in store.search(task, 3))  # not found by that task before
    twin = dataclasses.replace(copy.deepcopy(pack[1]), id="twin", task_query=task)
    for ok in (True, False):
        store.record_outcome([pack[1].id], ok)
    r = run_gates(twin, store)
    assert (r.action, r.target.id) == ("merge", pack[1].id)
    got = apply_gate(r, twin, store)
    assert got.example_queries == [task] and got.confidence == 0.2
    assert (got.use_count, got.success_count, got.failure_count) == (2, 1, 1)  # a merge keeps the record
    assert store.search(task, 1)[0][0].id == pack[1].id  # now it is


def test_merge_example_queries_are_capped_at_five(store, pack):
    for n in range(7):
        twin = dataclasses.replace(copy.deepcopy(pack[1]), id=f"twin-{n}", task_query=f"list the subclasses of class {n}")
        apply_gate(run_gates(twin, store), twin, store)
    got = store.get(pack[1].id)
    assert got.example_queries == [f"list the subclasses of class {n}" for n in range(2, 7)]
    assert got.confidence == 0.8


def test_different_domains_are_never_merged(store, pack):
    reworded = dataclasses.replace(copy.deepcopy(pack[1]), id="web-copy", domain="web",
                                   content=pack[1].content + "\n6. Sort by label.")
    d = check_memory_deduplication(reworded, store)
    assert d.action == "add" and d.target is None, d
    assert run_gates(reworded, store).action == "add"
    assert compare_memories(reworded, pack[1]).reason.endswith("in domain ('web' vs 'ontology'): never merged")
    stored = apply_gate(run_gates(reworded, store), reworded, store)
    assert stored.id == "web-copy" and store.get(pack[1].id).confidence == 0.1 and len(store) == 8


def test_identical_text_in_another_domain_is_not_merged(store, pack):
    "The same words learned in another domain are a memory of that domain (the store keys meaning by domain too)."
    same = dataclasses.replace(copy.deepcopy(pack[1]), id="web-same", domain="web")
    stored = apply_gate(run_gates(same, store), same, store)
    assert stored.id == "web-same" and store.get(pack[1].id).confidence == 0.1


def test_skip_leaves_store_unchanged(store, pack):
    fragment = MemoryItem(pack[5].title, content="\n".join(pack[5].content.split("\n")[:3]), domain=pack[5].domain)
    r = run_gates(fragment, store)
    assert r.action == "skip" and r.target.id == pack[5].id
    before, rev, events = [m.to_dict() for m in store], store.rev, len(store.events())
    assert apply_gate(r, fragment, store) is None
    assert [m.to_dict() for m in store] == before and store.rev == rev and len(store.events()) == events


def test_rejects_list_every_problem(store):
    bad = MemoryItem("Sheffield order", content="Be careful with Sheffield: http://x.org")
    r = run_gates(bad, store, task_values=["Sheffield"])
    assert r.action == "reject" and r.target is None
    assert r.reasons[0].startswith("reject: vacuous")
    assert "reject: leaks task value 'Sheffield' in title" in r.reasons
    assert "reject: leaks task value 'Sheffield' in content" in r.reasons
    assert r.reasons[-1].startswith("reject: generalization 0.00 < 0.5")


def test_bootstrap_strategies_pass_every_gate(pack):
    empty = MemoryStore()
    for m in pack:
        assert check_vacuity(m) is None
        assert score_generalization(m) >= 0.9
        assert run_gates(m, empty, task=m.task_query).action == "add", m.title


# ---------------------------------------------------------------- argument errors

def test_wrong_types_raise_clear_errors(store, pack):
    m = pack[0]
    cases = [(lambda: run_gates(m.to_dict(), store), "run_gates: candidate must be a MemoryItem, got dict"),
             (lambda: run_gates(m, "memories.db"), "run_gates: store must be a MemoryStore, got str"),
             (lambda: run_gates(m, store, task_values="Sheffield"), "got a single str; wrap it in a list"),
             (lambda: run_gates(m, store, injected=m), "injected must be a list of MemoryItem, got a single MemoryItem"),
             (lambda: check_memory_deduplication(m, [m]), "store must be a MemoryStore, got list"),
             (lambda: apply_dedup("merge", m, store), "decision must be a DedupDecision, got str"),
             (lambda: apply_gate(None, m, store), "result must be a GateResult, got NoneType"),
             (lambda: find_task_leaks(m, 42), "task_values must be a list of strings (or a dict of them), got int"),
             (lambda: score_generalization(None), "item must be a MemoryItem, got NoneType"),
             (lambda: check_vacuity("be careful"), "check_vacuity: item must be a MemoryItem, got str"),
             (lambda: strip_injected_memories(b"bytes"), "text must be a string, got bytes"),
             (lambda: is_echo_of(m, [m, {}]), "injected[1] is a dict, not a MemoryItem"),
             (lambda: task_specifics(3), "task must be a string, got int")]
    for f, msg in cases:
        with pytest.raises(TypeError) as e: f()
        assert msg in str(e.value), (msg, str(e.value))
    with pytest.raises(ValueError, match="min_generalization must be a number in"): run_gates(m, store, min_generalization=-0.1)
    with pytest.raises(ValueError, match="action must be one of"): DedupDecision("drop")
    with pytest.raises(ValueError, match="action must be one of"): GateResult("drop")


# ---------------------------------------------------------------- merges never lose a concurrent outcome

def _record(path, mid, n):
    s = MemoryStore(path)
    for i in range(n):
        s.record_outcome([mid], i % 2 == 0)
    s.close()


def _merge(path, mid, n):
    s = MemoryStore(path)
    for i in range(n):
        twin = dataclasses.replace(copy.deepcopy(s.get(mid)), id=f"twin-{i}", task_query=f"list the subclasses {i}")
        r = run_gates(twin, s)
        assert r.action == "merge", r
        apply_gate(r, twin, s)
    s.close()


def test_merges_do_not_lose_concurrent_outcomes(tmp_path, pack):
    "Issue 6 points 1/13: a merge is one atomic read-modify-write, so outcomes recorded meanwhile all count."
    import multiprocessing as mp
    path = tmp_path / "m.db"
    s = MemoryStore(path)
    s.add_many(pack)
    s.close()
    mid, per = pack[1].id, 150
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_record, args=(path, mid, per)) for _ in range(2)]
    procs.append(ctx.Process(target=_merge, args=(path, mid, 40)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    got = MemoryStore(path).get(mid)
    assert (got.use_count, got.success_count, got.failure_count) == (2 * per, per, per)
    assert got.confidence == 1.0 and len(got.example_queries) == 5  # 40 confirmations, capped
