"""procmem ranking quality and relevance floor on public data (WebArena tasks, long task texts).

Usage: python bench/quality.py [--out bench/results/quality.md] [--ood 300] [--no-ranking]
       python bench/quality.py --learned   (retrieval of learned memories: bench/results/quality_learned.md)

Data (read-only, `<repo>/../shared/data`): `webarena/tasks_dev.json` (423 tasks, 96 intent
templates), HotpotQA questions from `reflexion/hotpotqa_react_reflexion_100q_5trials.txt`, texts
from `injection/benchmark_dev.jsonl`; long task texts are built from them by `bench/long_tasks.py`.

Each WebArena task becomes one memory:
  title = the task's `intent` (cut at a word boundary to the 200-character title limit),
  description = content = the `intent_template` with its `{{placeholders}}` removed (the generic
  procedure, without the instance's specifics). A second variant, "intent only" (description empty,
  content = intent), checks that the conclusions do not hinge on that choice.
Nine tasks repeat another task's intent word for word; procmem stores identical memories once, so
they are dropped: 414 tasks, 96 templates.

Ranking (leave-one-out): every task whose template has another task is a query; the store holds the
413 OTHER tasks (rebuilt for each query); relevant = tasks of the same `intent_template_id`.
Engines: procmem `MemoryStore.search`; rank-bm25 `BM25Okapi` on the same tokens; procmem's
`BM25Index` on unstemmed tokens.

Relevance floor: see FLOOR_INTRO below (it is printed into the report).
"""
from __future__ import annotations
import argparse, json, math, random, re, statistics, time, zlib
from collections import defaultdict
from pathlib import Path

from _common import REPO, git_commit
DATA = REPO.parent / "shared" / "data"
FLOORS = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6]
OLD_FLOOR = 0.25  # the floor before issue 6 (score / task IDF mass)

from procmem import MemoryItem, MemoryStore, BM25Index, retrieve_memories, tokenize
from procmem.index import memory_text
from procmem.retrieval import idf_mass
from procmem.retrieval import DEFAULT_MIN_RELEVANCE, DEFAULT_CANDIDATES
from procmem.retrieval import memory_side_share, _idf_lookup
from long_tasks import long_tasks, split_of, unrelated_texts
from rank_bm25 import BM25Okapi

_PH = re.compile(r"\{\{[^}]*\}\}")

def load_tasks():
    "The WebArena tasks, without the 9 that repeat an earlier task's intent verbatim (they differ only in start page)."
    seen, out = set(), []
    for t in json.loads((DATA / "webarena" / "tasks_dev.json").read_text()):
        if t["intent"] not in seen:
            seen.add(t["intent"])
            out.append(t)
    return out

def generic(template: str) -> str:
    "The template with its placeholders (and the quotes around them) removed."
    t = _PH.sub(" ", template)
    return re.sub(r"\s+", " ", re.sub(r"[\"']\s*[\"']", " ", t)).strip()

def short_title(text: str, limit: int = 200) -> str:
    "`text` cut at a word boundary to fit MemoryItem's title limit (6 of the 423 intents are longer)."
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0]

def task_memory(t: dict, variant: str) -> MemoryItem:
    title = short_title(t["intent"])
    if variant == "intent+template":
        g = generic(t["intent_template"])
        return MemoryItem(title=title, description=g, content=g, id=f"t{t['task_id']}")
    return MemoryItem(title=title, description="", content=t["intent"], id=f"t{t['task_id']}")

# ---------------------------------------------------------------- metrics

def metrics(ranked: list[str], rel: set[str]) -> dict:
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in rel)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(rel), 10)))
    rr = next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in rel), 0.0)
    return dict(mrr10=rr, ndcg10=dcg / idcg, recall3=len(set(ranked[:3]) & rel) / min(3, len(rel)),
                hit1=float(bool(ranked[:1]) and ranked[0] in rel))

def mean_metrics(ms: list[dict]) -> dict:
    return {k: statistics.fmean(m[k] for m in ms) for k in ms[0]}

# ---------------------------------------------------------------- engines (leave-one-out: docs exclude the query)

def build_store(mems: list[MemoryItem]) -> MemoryStore:
    s = MemoryStore()
    s.add_many(mems)
    s.sync_index(flush=True)
    return s

def rank_store(mems, query, k=10):
    s = build_store(mems)
    try:
        return [m.id for m, _ in s.search(query, k)]
    finally:
        s.close()

def rank_bm25okapi(mems, query, k=10, stem=True, **params):
    toks = [tokenize(memory_text(m), stem=stem) for m in mems]
    sc = BM25Okapi(toks, **params).get_scores(tokenize(query, stem=stem))
    order = sorted(range(len(mems)), key=lambda i: (-sc[i], mems[i].id))
    return [mems[i].id for i in order[:k] if sc[i] > 0]

def rank_index(mems, query, k=10, stem=True):
    ix = BM25Index()
    ix.add_many((m.id, tokenize(memory_text(m), stem=stem)) for m in mems)
    ix.flush()
    return [i for i, _ in ix.search(tokenize(query, stem=stem), k)]

ENGINES = {
    "procmem MemoryStore.search (stemmed)": rank_store,
    "procmem BM25Index, no stemming": lambda m, q: rank_index(m, q, stem=False),
    "rank-bm25 BM25Okapi (same stemmed tokens)": rank_bm25okapi,
    "rank-bm25 BM25Okapi, no stemming": lambda m, q: rank_bm25okapi(m, q, stem=False),
    "rank-bm25 BM25Okapi with procmem's k1 = 1.2 (stemmed)": lambda m, q: rank_bm25okapi(m, q, k1=1.2, b=0.75),
}

def ranking_eval(tasks, variant):
    mems = [task_memory(t, variant) for t in tasks]
    by_tpl = defaultdict(set)
    for t, m in zip(tasks, mems): by_tpl[t["intent_template_id"]].add(m.id)
    out = {}
    for name, fn in ENGINES.items():
        ms = []
        for i, t in enumerate(tasks):
            rel = by_tpl[t["intent_template_id"]] - {mems[i].id}
            if not rel: continue
            ms.append(metrics(fn(mems[:i] + mems[i + 1:], t["intent"]), rel))
        out[name] = dict(mean_metrics(ms), n=len(ms))
    return out

# ---------------------------------------------------------------- relevance floor

def short_unrelated(n: int, seed: int = 0) -> dict[str, list[str]]:
    "Short out-of-domain queries by source: HotpotQA questions, benign and injection texts (200 chars)."
    rows = [json.loads(l) for l in (DATA / "injection" / "benchmark_dev.jsonl").open() if l.strip()]
    rnd = random.Random(seed)
    benign = [r["text"][:200] for r in rows if r["label"] == 0 and r["text"].strip()]
    inj = [r["text"][:200] for r in rows if r["label"] == 1 and r["text"].strip()]
    return {"HotpotQA questions": unrelated_texts(DATA)["hotpotqa"],
            "benign texts": rnd.sample(benign, min(n, len(benign))),
            "injection texts": rnd.sample(inj, min(n, len(inj)))}


def old_floor(store, task: str, floor: float = OLD_FLOOR) -> list[str]:
    "The floor before issue 6: top-3 BM25 hits whose score / the task's IDF mass is >= 0.25."
    mass = idf_mass(store._index(), task)
    return [m.id for m, s in store.search(task, 3) if mass and s / mass >= floor]


def prev_floor(store, task: str, floor: float = 0.4, k: int = 3) -> list[str]:
    "Engineer C's floor (commit 47dab25): max(score / task mass / 0.85, whole-text share) >= 0.4."
    idf = _idf_lookup(store._index())
    tokens = tokenize(task)
    mass = sum(idf(t) for t in tokens)
    out = []
    for m, score in store.search(task, 20):
        share, n = memory_side_share(m, tokens, idf)
        rel = max(score / mass / 0.85 if mass else 0.0, share if n >= 3 else 0.0)
        if rel >= floor:
            out.append(m.id)
    return out[:k]


def _got(row: dict, floor) -> list[str]:
    "What a query returned at `floor` (a float; 'old' and 'prev' for the earlier floors)."
    return row[floor] if floor in ("old", "prev") else kept(row["hits"], floor)


def scored_hits(store, task: str) -> list[tuple[str, float]]:
    "(id, relevance) of the BM25 candidates `retrieve_memories` looks at, in its order."
    got = retrieve_memories(store, task, k=DEFAULT_CANDIDATES, min_relevance=0, record=False,
                            with_scores=True)
    return [(m.id, r) for m, r in got]


def kept(hits: list, floor: float, k: int = 3) -> list[str]:
    "What `retrieve_memories(k=k, min_relevance=floor)` returns, from `scored_hits`."
    return [i for i, r in hits if r >= floor][:k]


def _query_row(store, task: str, group: str, source: str, split: str, rel: set) -> dict:
    "One query's candidates with relevances, and what the old floor returned."
    hits = scored_hits(store, task)
    direct = [m.id for m in retrieve_memories(store, task, k=3, record=False)]
    assert direct == kept(hits, DEFAULT_MIN_RELEVANCE), "kept() must reproduce retrieve_memories"
    return dict(group=group, source=source, split=split, rel=rel, hits=hits,
                old=old_floor(store, task), prev=prev_floor(store, task))


def in_domain_rows(tasks, mems, long_rows) -> list[dict]:
    "Short (the intent) and long (intent in a paragraph) queries of each task, leave-one-out store."
    by_tpl = defaultdict(set)
    for t, m in zip(tasks, mems):
        by_tpl[t["intent_template_id"]].add(m.id)
    wrapped = defaultdict(list)
    for r in long_rows:
        wrapped[r["task_id"]].append(r)
    out = []
    for i, t in enumerate(tasks):
        rel = by_tpl[t["intent_template_id"]] - {mems[i].id}
        if not rel:
            continue
        s = build_store(mems[:i] + mems[i + 1:])
        split = split_of(t["intent_template_id"])
        out.append(_query_row(s, t["intent"], "short task", "webarena", split, rel))
        for r in wrapped[t["task_id"]]:
            out.append(_query_row(s, r["query"], "long task", r["wrapper"], r["split"], rel))
        s.close()
    return out


def unrelated_rows(mems, long_rows, n_short: int) -> list[dict]:
    "Unrelated short and long queries against the store of all tasks."
    s = build_store(mems)
    out = []
    for src, qs in short_unrelated(n_short).items():
        out += [_query_row(s, q, "short unrelated", src, split_of(src), set()) for q in qs]
    for r in long_rows:
        out.append(_query_row(s, r["query"], "long unrelated", r["source"], r["split"], set()))
    s.close()
    return out


def success(row: dict, got: list[str]) -> bool:
    "A relevant query succeeds when a same-template memory is returned, an unrelated one on []."
    return bool(set(got) & row["rel"]) if row["rel"] else not got


GROUPS = ["long task", "long unrelated", "short task", "short unrelated"]
TARGETS = {"long task": 0.9, "long unrelated": 0.95, "short task": 0.9, "short unrelated": 0.95}


def rates(rows: list[dict], split: str, floor) -> dict:
    "Success rate per group on `split` ('all' for both) at `floor` ('old' for the old floor)."
    out = {}
    for g in GROUPS:
        rs = [r for r in rows if r["group"] == g and split in ("all", r["split"])]
        got = [(r, _got(r, floor)) for r in rs]
        out[g] = statistics.fmean(success(r, x) for r, x in got) if got else float("nan")
    return out


def tuned_floor(rows: list[dict]) -> float:
    "The floor of `FLOORS` whose worst ratio to the targets is highest on the tune split."
    def worst(f):
        r = rates(rows, "tune", f)
        return min(r[g] / TARGETS[g] for g in GROUPS)
    return max(FLOORS, key=lambda f: (round(worst(f), 4), -f))


def per_source(rows: list[dict], floor) -> dict:
    "Success rate per (group, source) at `floor`, both splits."
    out = defaultdict(list)
    for r in rows:
        out[(r["group"], r["source"], r["split"])].append(
            success(r, _got(r, floor)))
    return {k: (statistics.fmean(v), len(v)) for k, v in sorted(out.items())}


def floor_eval(tasks, variant: str, n_short: int) -> dict:
    "Rows of every query of the floor evaluation for one document variant, and the check of them."
    mems = [task_memory(t, variant) for t in tasks]
    lt = long_tasks(DATA, tasks)
    rows = in_domain_rows(tasks, mems, [r for r in lt if r["kind"] == "relevant"])
    rows += unrelated_rows(mems, [r for r in lt if r["kind"] == "unrelated"], n_short)
    return rows


# ---------------------------------------------------------------- report

def md_ranking(res: dict, variant: str) -> list[str]:
    n = next(iter(res.values()))["n"]
    L = [f"### Documents: {variant} ({n} leave-one-out queries)", "",
         "| engine | MRR@10 | nDCG@10 | recall@3 | hit@1 |", "|---|---|---|---|---|"]
    for name, m in res.items():
        L.append(f"| {name} | {m['mrr10']:.3f} | {m['ndcg10']:.3f} | {m['recall3']:.3f} "
                 f"| {m['hit1']:.3f} |")
    return L + [""]


def _counts(rows: list[dict], split: str) -> str:
    return ", ".join(f"{g} {sum(r['group'] == g and split in ('all', r['split']) for r in rows)}"
                     for g in GROUPS)


def md_summary(rows: list[dict], variant: str, best: float) -> list[str]:
    "Old floor against the default (and the floor tuned on this variant) on both splits."
    cols = [("old floor (0.25 of task mass)", "old"), ("C's floor (47dab25)", "prev"),
            (f"default {DEFAULT_MIN_RELEVANCE:g}", DEFAULT_MIN_RELEVANCE)]
    if best != DEFAULT_MIN_RELEVANCE:
        cols.append((f"best on tune {best:g}", best))
    L = [f"### Documents: {variant}", "",
         f"Queries: tune split ({_counts(rows, 'tune')}); held-out split "
         f"({_counts(rows, 'heldout')}).", "",
         "| query group (success = ...) | target | " + " | ".join(
             f"{c} tune | {c} held-out" for c, _ in cols) + " |",
         "|---|---|" + "---|---|" * len(cols)]
    what = {"long task": "same-template memory returned", "short task": "same-template memory returned",
            "long unrelated": "→ []", "short unrelated": "→ []"}
    res = {(f, s): rates(rows, s, f) for _, f in cols for s in ("tune", "heldout")}
    for g in GROUPS:
        cells = " | ".join(f"{res[(f, 'tune')][g]:.3f} | {res[(f, 'heldout')][g]:.3f}"
                           for _, f in cols)
        L.append(f"| {g} ({what[g]}) | ≥ {TARGETS[g]:g} | {cells} |")
    return L + [""]


def md_sweep(rows: list[dict], split: str) -> list[str]:
    L = [f"Sweep of `min_relevance`, {split} split:", "",
         "| min_relevance | " + " | ".join(GROUPS) + " |", "|---|" + "---|" * len(GROUPS)]
    for f in FLOORS:
        r = rates(rows, split, f)
        mark = " (default)" if f == DEFAULT_MIN_RELEVANCE else ""
        L.append(f"| {f:g}{mark} | " + " | ".join(f"{r[g]:.3f}" for g in GROUPS) + " |")
    return L + [""]


def md_sources(rows: list[dict]) -> list[str]:
    L = ["Per source at the default floor (long tasks: by wrapper):", "",
         "| group | source | split | n | old floor | C's floor | default |",
         "|---|---|---|---|---|---|---|"]
    old, prev = per_source(rows, "old"), per_source(rows, "prev")
    for (g, src, sp), (v, n) in per_source(rows, DEFAULT_MIN_RELEVANCE).items():
        key = (g, src, sp)
        L.append(f"| {g} | {src} | {sp} | {n} | {old[key][0]:.3f} | {prev[key][0]:.3f} | {v:.3f} |")
    return L + [""]


def md_examples(tasks) -> list[str]:
    lt = long_tasks(DATA, tasks)
    rel = next(r for r in lt if r["kind"] == "relevant")
    unr = next(r for r in lt if r["source"] == "hotpotqa")
    return ["Examples of long texts (`bench/long_tasks.py`):", "",
            f"- long task (wrapper {rel['wrapper']}): " + rel["query"].replace("\n", " "),
            f"- long unrelated (wrapper {unr['wrapper']}): " + unr["query"].replace("\n", " "), ""]


FLOOR_INTRO = """\
`retrieve_memories(store, task, k=3, min_relevance=x, record=False)`: a hit's relevance (in
[0, 1]) is the larger of the task side (BM25 score ÷ the task's IDF mass ÷ 0.68) and the memory
side: the best IDF share, among the memory's whole indexed text, its title and its description, of
that part's terms found close together in the task (within 3 tokens per term), counted from 3
shared terms on or when all of a part of at least 2 terms is found; the first k of the top 20 BM25
hits that clear the floor are returned (see `nbs/04_retrieval.ipynb`). The old floor is the one
before issue 6: the top-3 BM25 hits whose score ÷ the task's IDF mass is ≥ 0.25. C's floor
(commit 47dab25) is the first version of issue 6: the same, with the memory side taken over the
whole memory text only, a task-side scale of 0.85 and the floor 0.4 (`prev_floor` below).

Query groups: **short task** = a WebArena intent; **long task** = the same intent inside one of 12
paragraph wrappers (chat request with background, ticket, agent-harness prompt, manager e-mail,
hand-over note, ...; 50-160 words) naming the task's site (`bench/long_tasks.py`); both against the
store of the OTHER tasks (leave-one-out), success when a task of the same template is returned.
**short unrelated** = HotpotQA questions, benign and injection texts (first 200 characters);
**long unrelated** = HotpotQA questions, AgentDojo user tasks, ASB agent tasks and Spikee benign
questions inside the same wrappers (naming a random WebArena site), and BIPIA e-mails, Stack Exchange
answers, AgentDojo tool outputs and CPython docstrings as they are; against the store of all tasks,
success on `[]`.

Held out honestly: WebArena templates, wrappers and unrelated sources are each hashed to "tune" or
"heldout" (`long_tasks.split_of`); a held-out long task has a held-out template AND a held-out
wrapper. Every choice was made on the tune split of the intent+template documents, looking at tune
numbers only: the parts (title and description on their own, each whole part of 2+ terms
counting), the default floor 0.5 (highest worst ratio to the targets; 0.5, 0.55 and 0.6 tied, the
lowest wins; "best on tune" below is that choice per variant), the task-side scale 0.68 (keeps
C's task-side threshold, 0.34 of the task's mass, at the new floor) and 20 candidates (30 and 50
were no better on tune). A score gap to the background (top score ÷ the median of hits 4-20) and
re-ranking the kept hits by relevance were measured on tune and did not help (see the notebook).
"""

def ranking_section(tasks, variants) -> list[str]:
    L = ["## Ranking", ""]
    out = {}
    for v in variants:
        out[v] = ranking_eval(tasks, v)
        L += md_ranking(out[v], v)
        print("\n".join(md_ranking(out[v], v)), flush=True)
    return L, out


def floor_section(tasks, variants, n_short) -> tuple[list[str], dict]:
    L = ["## Relevance floor of `retrieve_memories` (k = 3)", "", FLOOR_INTRO]
    out = {}
    for v in variants:
        rows = floor_eval(tasks, v, n_short)
        best = tuned_floor(rows)
        part = md_summary(rows, v, best) + md_sweep(rows, "tune") + md_sweep(rows, "heldout")
        part += md_sources(rows)
        print("\n".join(part), flush=True)
        L += part
        out[v] = dict(best_on_tune=best, default=DEFAULT_MIN_RELEVANCE,
                      **{f"{s}@{f}": rates(rows, s, f) for s in ("tune", "heldout", "all")
                         for f in ["old", "prev", DEFAULT_MIN_RELEVANCE, best]})
    return L + md_examples(tasks), out


# ---------------------------------------------------------------- retrieval of what was learned (issue 7)

LEARNED_INTRO = """\
After learning from a set of runs, does a run's own task retrieve a memory learned from it, and
does a *sibling* task (another task of the same kind, whose own runs were never learned) retrieve
one? Learning is procmem's own pipeline, `learn_from_trajectory(run, store)`: the judge (here the
ground truth the log carries, as `procmem learn` uses labels), the offline extractor
(`offline:rule-induction`) and the gates (leak, vacuity, dedup: merge, replace, skip). Retrieval is
`retrieve_memories(store, task, k=3)` at its default relevance floor (what an agent gets), and, to
show the ranking alone, with `min_relevance=0` (the top 3 BM25 hits, whatever their score).

**Question forms.** Every memory learned from a short question carries its form as a tag
(`procmem.retrieval.question_form`: the kind of answer the question asks for, read from its
grammar: yes/no, a choice between the options it names, a time, place, person, number or reason,
or the head noun after what/which; none for first- or second-person questions and for anything
that is not one short question), and the offline extractor names it ("For questions asking for a
time or date (when, what year):"). When no memory clears the floor by its words,
`retrieve_memories` falls back to memories of the task's form at relevance 0.5
(`FORM_RELEVANCE`). The column *words only* is retrieval without that fallback (`by_form=False`:
the issue-6 floor alone, as before this change). `question_form` shares no code or table with
`QUESTION_FAMILIES` (unchanged). It is not blind to these questions: its parsing was corrected
once after reading its output on the 100 HotpotQA questions (a relative "who" inside the
sentence, names inside the noun phrase, "what is the X of"), with the families printed alongside;
no rule was added to follow a family (it has no "in common" rule, and "name", "director" are not
mapped to a person). Two rules were added after looking at unrelated queries it matched
(first/second person, "Can you ...?" requests), so the unrelated numbers below are not held out.

**Runs.** Reflexion HotpotQA (`shared/data/reflexion/hotpotqa_react_reflexion_100q_5trials.txt`,
MIT): 100 questions x 5 trials, 326 distinct ReAct runs labelled correct / incorrect / halted (the
log re-lists every agent solved in an earlier trial with its old steps; those copies are read once). No WebArena
runs exist in the public data here (`webarena/tasks_dev.json` holds tasks, not trajectories), so
WebArena siblings are measured only on a task-text proxy, below, and labelled as such.

**Question families (siblings).** HotpotQA has no templates; a family is the kind of answer a
question asks for, read from its wording by a fixed table of rules (`QUESTION_FAMILIES` in
`bench/quality.py`, first match wins), written before any retrieval was measured and not tuned
since: yes/no about two entities, which of two, an attribute two entities share, a year or date, a
place, a person. Questions no rule matches (about half) have no family and are never sibling
queries. Two questions of one family are siblings.

**Protocol.** Questions are split in two halves by a stable hash; fold A learns every run of half 1
and queries with half 2, fold B the reverse. *Own task*: every learned run whose learning stored
(added or merged into) at least one memory queries the store with its own task; success when a
memory it stored is returned. *Sibling*: every question of the other half that has a family with a
learned question queries the store; success when a memory stored by a run of a same-family learned
question is returned. The sibling's own runs are never in the store. *Chance*: the share of sibling
queries for which 3 memories drawn at random from the store include a same-family one (the
expected rate of a retriever that ignores the text).
"""

QUESTION_FAMILIES = [  # (family, pattern on the case-folded question); first match wins
    ("yes/no about two", r"^(are|is|were|was|do|does|did)\b.*\b(both|and|or)\b"),
    ("which of two", r"\b(first|more|further|older|earlier|later)\b.*\bor\b|\bwhich of\b.*\band\b"
                     r"|^which\b[^,]*,[^,]+\bor\b"),
    ("shared attribute", r"\bin common\b|\bboth\b|\bwhat kind of\b"),
    ("year or date", r"\bwhat year\b|\bwhen (?:was|did|is|were)\b|\bwhat date\b|\bbirthday\b"),
    ("place", r"\bwhere\b|\bwhat (?:\w+ )?(?:state|city|county|country|airport|town)\b"),
    ("person", r"^who\b|\bwho\?|\bdirected by\b|\bdirector\b|\bname of\b|\bfirst name\b"
               r"|\bgiven name\b"),
]


def question_family(q: str) -> str | None:
    "The family of a HotpotQA question by QUESTION_FAMILIES, or None."
    s = " ".join(q.casefold().split())
    return next((f for f, rx in QUESTION_FAMILIES if re.search(rx, s)), None)


def _truth_judge(artifact, llm=None):
    "The ground truth the run carries (Reflexion labels); the offline judge when there is none."
    from procmem.judge import ground_truth_judgment, judge_trajectory
    return ground_truth_judgment(artifact) or judge_trajectory(artifact, llm=llm)


def learn_runs(runs) -> tuple[MemoryStore, dict]:
    "A fresh store holding what procmem learned from `runs`, and run id -> ids it stored."
    from procmem.loop import learn_from_trajectory
    store, stored = MemoryStore(), {}
    for t in runs:
        r = learn_from_trajectory(t, store, judge=_truth_judge, log=False)
        stored[t.id] = {m.id for m in r.stored}
    store.sync_index(flush=True)
    return store, stored


def _returned(store, task: str, floor) -> set:
    "Ids `retrieve_memories(k=3)` returns (floor None: the default; 'words': without the form fallback)."
    if floor == "words":  # what the words alone clear at the default floor (issue 6's retrieval)
        return {m.id for m in retrieve_memories(store, task, k=3, record=False, by_form=False)}
    kw = {} if floor is None else {"min_relevance": floor}
    return {m.id for m in retrieve_memories(store, task, k=3, record=False, **kw)}


def unrelated_queries(domain: str, per_source: int = 100, seed: int = 0) -> dict[str, list[str]]:
    """Queries no memory of `domain`'s store should answer, by source: the other domain's tasks
    (WebArena intents for Reflexion, HotpotQA questions for WebArena) and the public requests and
    texts of `long_tasks.unrelated_texts` (AgentDojo, ASB, Spikee, BIPIA, docstrings), at most
    `per_source` each, first 300 characters."""
    rnd = random.Random(seed)
    texts = unrelated_texts(DATA)
    other = ([t["intent"] for t in load_tasks()] if domain == "reflexion" else texts["hotpotqa"])
    out = {"WebArena intents" if domain == "reflexion" else "HotpotQA questions": other}
    out |= {src: ts for src, ts in texts.items() if src != "hotpotqa"}
    return {src: [t[:300] for t in rnd.sample(ts, min(per_source, len(ts)))] for src, ts in out.items()}


def _chance(n_rel: int, n: int, k: int = 3) -> float:
    "P(k memories drawn at random from n include one of n_rel)."
    return 1 - math.comb(n - n_rel, k) / math.comb(n, k) if n >= k else float(n_rel > 0)


def fold_rows(runs, family, learn_q: set, query_q: set, unrelated: dict | None = None) -> tuple:
    """(own-task rows, sibling rows, store stats, unrelated rows) of one fold: learn runs of `learn_q`,
    query `query_q`, and the `unrelated` queries (source -> texts; success: nothing returned)."""
    store, stored = learn_runs([t for t in runs if t.task in learn_q])
    n_mem = len(list(store))
    own = [dict(run=t.id, floor=bool(_returned(store, t.task, None) & stored[t.id]),
                words=bool(_returned(store, t.task, "words") & stored[t.id]),
                top3=bool(_returned(store, t.task, 0) & stored[t.id]))
           for t in runs if stored.get(t.id)]
    by_fam = defaultdict(set)
    for t in runs:
        if t.task in learn_q and family(t.task):
            by_fam[family(t.task)] |= stored[t.id]
    sib = []
    for q in sorted(query_q):
        rel = by_fam.get(family(q)) if family(q) else None
        if rel:
            sib.append(dict(question=q, family=family(q), floor=bool(_returned(store, q, None) & rel),
                            words=bool(_returned(store, q, "words") & rel),
                            top3=bool(_returned(store, q, 0) & rel), chance=_chance(len(rel), n_mem)))
    stats = dict(learned_runs=sum(t.task in learn_q for t in runs), runs_storing=len(own), memories=n_mem)
    unrel = [dict(source=src, floor=not _returned(store, q, None), words=not _returned(store, q, "words"))
             for src, qs in (unrelated or {}).items() for q in qs]
    store.close()
    return own, sib, stats, unrel


def reflexion_learned() -> dict:
    "Own-task and sibling retrieval after learning Reflexion HotpotQA runs, two folds."
    from procmem.research_logs import from_reflexion_log
    runs = from_reflexion_log(DATA / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt",
                              keep_relisted=False)  # 326 distinct runs: no re-listed copies of solved ones
    qs = sorted({t.task for t in runs})
    half = {q: zlib.crc32(q.encode()) % 2 for q in qs}
    out = {"own": [], "sibling": [], "folds": [], "unrelated": []}
    unrelated = unrelated_queries("reflexion")
    for h in (0, 1):
        own, sib, stats, unrel = fold_rows(runs, question_family, {q for q in qs if half[q] == h},
                                           {q for q in qs if half[q] != h}, unrelated)
        out["own"] += own
        out["sibling"] += sib
        out["folds"].append(stats)
        out["unrelated"] += unrel
    out["families"] = {f: sorted(q for q in qs if question_family(q) == f)
                       for f, _ in QUESTION_FAMILIES}
    return out


WEBARENA_PROXY_INTRO = """\
**WebArena, task-text proxy (synthetic runs).** There are no WebArena trajectories here, so this
table does not measure learning from real WebArena runs. Each task of `webarena/tasks_dev.json`
(414 after dropping 9 verbatim repeats) becomes a minimal synthetic successful run: the real task
text, then two fixed steps (`goto(start page)`, `stop(answer)`) that are the same for every task.
What it measures is the task-derived part of learning: the kind of task the offline extractor
names in the title and description (a question's form, else the goal read from the task's verb and
object words, e.g. "tasks to tell total cost"; never the task itself), the task query, the gates'
merges (runs of one kind merge into one memory; its tasks stay indexed as `example_queries`, at
most 5), and retrieval. Tasks are split in two halves by a
stable hash of their id (two folds); a sibling is a task of the same `intent_template_id` in the
other half.
"""


def webarena_proxy() -> dict:
    "Own-task and same-template sibling retrieval for synthetic one-task runs of the WebArena tasks."
    from procmem.judge import Judgment
    from procmem.trajectory import Step, Trajectory
    tasks = load_tasks()
    tpl = {t["intent"]: t["intent_template_id"] for t in tasks}
    runs = [Trajectory(t["intent"], [Step("goto(start page)", "the start page"), Step("stop(answer)", "")],
                       "answer", id=f"webarena-{t['task_id']}", source="web", outcome={"success": True})
            for t in tasks]
    half = {t["intent"]: zlib.crc32(str(t["task_id"]).encode()) % 2 for t in tasks}
    out = {"own": [], "sibling": [], "folds": [], "unrelated": []}
    unrelated = unrelated_queries("webarena")
    for h in (0, 1):
        own, sib, stats, unrel = fold_rows(runs, tpl.get, {q for q in tpl if half[q] == h},
                                           {q for q in tpl if half[q] != h}, unrelated)
        out["own"] += own
        out["sibling"] += sib
        out["folds"].append(stats)
        out["unrelated"] += unrel
    return out


UNRELATED_INTRO = """\
**Unrelated queries → `[]`.** Each fold's store is also queried with texts it has no memory for:
the other benchmark's tasks (WebArena intents against what was learned from HotpotQA, HotpotQA
questions against the WebArena proxy) and the public requests and texts of `bench/long_tasks.py`
(AgentDojo user tasks and tool outputs, ASB agent tasks, Spikee benign questions, BIPIA e-mails and
code answers, CPython docstrings; at most 100 per source, first 300 characters, both folds). Success:
nothing returned. "Words only" is retrieval without the question-form fallback (the issue-6 floor
alone), to show what the fallback costs.
"""


READING = """\
**Reading the numbers.** A run's own task finds what was learned from it ({own} on Reflexion,
{wa_own} on the WebArena proxy; target 0.8). A WebArena sibling (same template, so most words
shared) finds it by its words ({wa_sib} on the proxy; target 0.7). A Reflexion sibling finds one
through its question form ({sib} at the default floor; target 0.7): by words alone it does not
({words}), because two HotpotQA questions of one family share one or two content words and
nothing else (the words that carry the family, "who", "where", "when", "which", "both", are
stopwords), and the floor rejects such weak matches. The family that stays below target is
"shared attribute": its questions ask for a profession, a city, an occupation, a kind of magazine,
so their forms (head nouns) differ, and `question_form` has no "in common" rule. The cost is on
unrelated questions of the same form from another domain (a "How long does it take to walk ...?"
WebArena intent gets a HotpotQA "how many" memory): see the unrelated table, where "words only"
is what the issue-6 floor alone returns. Non-question texts (e-mails, code, docstrings, tool
outputs) are unaffected. The issue-6 numbers of `python bench/quality.py` (hand-made WebArena
memories, which carry no form) are identical before and after. Few questions per family (6-12):
one query is 8-17 points of a family's rate.

Before question forms (commit 9cce93d, same protocol): Reflexion own task 0.886, sibling 0.038 at
the floor (0.500 top 3, chance 0.388); WebArena proxy own task 0.933, sibling 0.863.

**Titles without the task (issue 7).** Until commit 7ff4727 a learned title and description quoted
the task, masked ("Answer “Look up the release year of the film Up” before the step budget runs
out"); they now name the kind of task and the key action or what went wrong ("For tasks to look up
release year, answer before the step budget runs out", "Search <entity>, then finish with <answer>
for questions asking for a person"); the task itself is indexed through `task_query` and
`example_queries`. Generic titles alone made the gates merge runs of every kind into a few memories
(a merge keeps the last 5 tasks as example queries), and own-task retrieval fell to 0.669
(Reflexion) and 0.278 (WebArena proxy) in a first try; procedures and answer pitfalls now open
their content with "For <kind>:" so the gates' topic-word rule keeps kinds apart, and a question
whose form is unknown is "questions of any kind", not a bare "questions" that every other
question's title contains. Same protocol, before (7ff4727) → after: Reflexion own task 0.921 (n
318) → {own}, sibling 0.865 → {sib}; WebArena proxy own task 0.948 (n 382) → {wa_own}, sibling
0.875 → {wa_sib}; memories per fold 54/52 → 61/71 (Reflexion), 53/52 → 82/87 (proxy). More runs
store a memory now (326 and 406 queries): fewer candidates are skipped as restating another
run's. Unrelated queries → `[]` before: Reflexion store 0.910 WebArena intents, 0.966 AgentDojo
tasks, 0.989 ASB, 0.974 Spikee, 1.000 BIPIA e-mails, 1.000 BIPIA code, 0.990 AgentDojo texts,
1.000 docstrings; WebArena proxy store 0.855 HotpotQA, 0.890 AgentDojo tasks, 1.000 ASB, 0.727
Spikee, 1.000 BIPIA e-mails, 0.993 BIPIA code, 0.950 AgentDojo texts, 0.945 docstrings. The
clearest cost is AgentDojo user tasks on the proxy store (0.890 → see the table): a request such
as "Please show me my unread emails" now matches "… for tasks to show email address" by the
words of its kind. Not held out: the wrong-answer title says "verify the answer against the
observations" (not "check the answer matches what is asked") after BIPIA bank e-mails ("company",
"checking account", "questions") matched "For questions asking for a company, check …" (0.849 →
1.000 on that row).
"""


def _rate(rows, key) -> str:
    return f"{statistics.fmean(r[key] for r in rows):.3f}" if rows else "–"


def md_learned(ref: dict, wa: dict) -> list[str]:
    "The report of the learned-retrieval measurement."
    L = ["# Retrieval of what was learned (issue 7)", "", LEARNED_INTRO,
         "| runs | query | n | target | default floor | words only (no form fallback) "
         "| top 3, no floor | chance (3 random) |", "|---|---|---|---|---|---|---|---|"]
    for name, d in (("Reflexion HotpotQA", ref), ("WebArena task-text proxy (synthetic runs)", wa)):
        L.append(f"| {name} | own task | {len(d['own'])} | ≥ 0.8 | {_rate(d['own'], 'floor')} "
                 f"| {_rate(d['own'], 'words')} | {_rate(d['own'], 'top3')} | |")
        L.append(f"| {name} | sibling | {len(d['sibling'])} | ≥ 0.7 | {_rate(d['sibling'], 'floor')} "
                 f"| {_rate(d['sibling'], 'words')} | {_rate(d['sibling'], 'top3')} "
                 f"| {_rate(d['sibling'], 'chance')} |")
    L += ["", UNRELATED_INTRO, "| store learned from | unrelated queries | n | → [] (default) "
          "| → [] (words only) |", "|---|---|---|---|---|"]
    for name, d in (("Reflexion HotpotQA", ref), ("WebArena proxy", wa)):
        for src in dict.fromkeys(r["source"] for r in d["unrelated"]):
            rows = [r for r in d["unrelated"] if r["source"] == src]
            L.append(f"| {name} | {src} | {len(rows)} | {_rate(rows, 'floor')} | {_rate(rows, 'words')} |")
    L += ["", READING.format(own=_rate(ref["own"], "floor"), sib=_rate(ref["sibling"], "floor"),
                             words=_rate(ref["sibling"], "words"),
                             top=_rate(ref["sibling"], "top3"), chance=_rate(ref["sibling"], "chance"),
                             wa_own=_rate(wa["own"], "floor"), wa_sib=_rate(wa["sibling"], "floor"))]
    L += ["", "Learning, per fold (runs learned, runs that stored a memory, memories in the store):", ""]
    for name, d in (("Reflexion", ref), ("WebArena proxy", wa)):
        L.append(f"- {name}: " + "; ".join(
            f"{f['learned_runs']} runs, {f['runs_storing']} stored, {f['memories']} memories" for f in d["folds"]))
    L += ["", "Reflexion siblings per family:", "", "| family | questions | sibling queries | default floor "
          "| words only | top 3, no floor | chance |", "|---|---|---|---|---|---|---|"]
    for f, qs in ref["families"].items():
        rows = [r for r in ref["sibling"] if r["family"] == f]
        L.append(f"| {f} | {len(qs)} | {len(rows)} | {_rate(rows, 'floor')} | {_rate(rows, 'words')} "
                 f"| {_rate(rows, 'top3')} | {_rate(rows, 'chance')} |")
    L += ["", WEBARENA_PROXY_INTRO, "Questions per Reflexion family:", ""]
    L += [f"- **{f}**: " + " / ".join(q[:70] for q in qs) for f, qs in ref["families"].items()]
    return L + [""]


def learned_section(out: str):
    "Run the learned-retrieval measurement and write `out` (.md) and its .json."
    t0 = time.time()
    ref, wa = reflexion_learned(), webarena_proxy()
    L = md_learned(ref, wa)
    L.insert(1, f"\nRun {time.strftime('%Y-%m-%d %H:%M')} with `python bench/quality.py --learned` on "
                f"procmem commit {git_commit()} ({time.time() - t0:.0f} s; 2 shared cores, machine "
                "loaded by other work).")
    print("\n".join(L))
    Path(out).write_text("\n".join(L) + "\n")
    summary = {name: {k: {"n": len(d[k]), "default_floor": statistics.fmean(r["floor"] for r in d[k]),
                          "words_only": statistics.fmean(r["words"] for r in d[k]),
                          "top3_no_floor": statistics.fmean(r["top3"] for r in d[k])}
                      for k in ("own", "sibling") if d[k]}
                     | {"unrelated_empty": {"n": len(d["unrelated"]),
                                            "default_floor": statistics.fmean(r["floor"] for r in d["unrelated"]),
                                            "words_only": statistics.fmean(r["words"] for r in d["unrelated"])},
                        "folds": d["folds"]}
               for name, d in (("reflexion_hotpotqa", ref), ("webarena_task_text_proxy", wa))}
    Path(out).with_suffix(".json").write_text(json.dumps(summary, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "quality.md"))
    ap.add_argument("--ood", type=int, default=300, help="benign and injection texts sampled (each)")
    ap.add_argument("--no-ranking", action="store_true", help="only the relevance floor")
    ap.add_argument("--learned", action="store_true",
                    help="only the retrieval of learned memories (bench/results/quality_learned.md)")
    a = ap.parse_args()
    if a.learned:
        return learned_section(str(REPO / "bench" / "results" / "quality_learned.md"))
    t0 = time.time()
    tasks = load_tasks()
    variants = ["intent+template", "intent only"]
    L = ["# Ranking quality and relevance floor (WebArena tasks, long task texts)", "",
         f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python bench/quality.py` on procmem commit "
         f"{git_commit()}. Memories: one per WebArena task (`shared/data/webarena/tasks_dev.json`: "
         "423 tasks, of which 9 repeat another's intent verbatim and are dropped: 414 tasks, 96 "
         "templates). Document variants: **intent+template** = title: the intent; description and "
         "content: the intent template with its placeholders removed; **intent only** = title: the "
         "intent, no description. The store indexes title, description, tags and task query.", ""]
    results = {}
    if not a.no_ranking:
        part, results["ranking"] = ranking_section(tasks, variants)
        L += part
    part, results["floors"] = floor_section(tasks, variants, a.ood)
    L += part
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(L) + "\n")
    Path(a.out).with_suffix(".json").write_text(json.dumps(results, indent=1))
    print(f"written to {a.out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
