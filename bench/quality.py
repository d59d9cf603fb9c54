"""procmem ranking quality and relevance-floor calibration on public data (WebArena tasks).

Usage: python bench/quality.py [--out bench/results/quality.md] [--ood 300]

Data (read-only, `<repo>/../shared/data`): `webarena/tasks_dev.json` (423 tasks, 96 intent templates),
HotpotQA questions from `reflexion/hotpotqa_react_reflexion_100q_5trials.txt`, and texts from
`injection/benchmark_dev.jsonl`.

Each WebArena task becomes one memory:
  title = the task's `intent` (what a memory learned from that task is named after; the 6 intents longer
          than the 200-character title limit are cut at a word boundary),
  description = content = the `intent_template` with its `{{placeholders}}` removed (the generic
  procedure the task is an instance of, without the specifics a generalised memory must not hold).
A second document variant, "intent only" (description empty, content = intent), checks that the
conclusions do not hinge on that choice.

Nine tasks repeat another task's intent word for word (they differ only in their start page). procmem
stores identical memories once (same fingerprint = title + content: the second add confirms the first),
so they are dropped before the evaluation: 414 tasks, 96 templates.

Ranking (leave-one-out): every task whose template has at least one other task is a query; the store
holds the 413 OTHER tasks (rebuilt from scratch for each query, so no statistics leak); relevant =
tasks with the same `intent_template_id`. Metrics at cut-off 10/3/1 with binary relevance; recall@3 is
of min(3, #relevant), so 1.0 is reachable.

Engines: procmem `MemoryStore.search` (tantivy + Lucene BM25, stemmed tokens); rank-bm25 `BM25Okapi`
(stock parameters and Okapi IDF) on the same tokens; procmem's `BM25Index` on unstemmed tokens
(`tokenize(..., stem=False)`).

Relevance floor: `retrieve_memories(store, task, k=3, min_relevance=x, record=False)` for in-domain
queries (leave-one-out as above) and out-of-domain queries (HotpotQA questions; benign and injection
texts, first 200 characters) against the store of all 414 tasks.
"""
from __future__ import annotations
import argparse, json, math, random, re, statistics, subprocess, sys, time
from collections import defaultdict
from pathlib import Path

from _common import REPO, git_commit
DATA = REPO.parent / "shared" / "data"
FLOORS = [0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5]

from procmem import MemoryItem, MemoryStore, BM25Index, retrieve_memories, tokenize
from procmem.index import memory_text
from procmem.retrieval import DEFAULT_MIN_RELEVANCE
from rank_bm25 import BM25Okapi

_PH = re.compile(r"\{\{[^}]*\}\}")

def load_tasks():
    "The WebArena tasks, without the 9 that repeat an earlier task's intent verbatim (they differ only in start page)."
    seen, out = set(), []
    for t in json.loads((DATA / "webarena" / "tasks_dev.json").read_text()):
        if t["intent"] not in seen: seen.add(t["intent"]); out.append(t)
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

def mean_metrics(ms: list[dict]) -> dict: return {k: statistics.fmean(m[k] for m in ms) for k in ms[0]}

# ---------------------------------------------------------------- engines (leave-one-out: docs exclude the query)

def build_store(mems: list[MemoryItem]) -> MemoryStore:
    s = MemoryStore(); s.add_many(mems); s.sync_index(flush=True); return s

def rank_store(mems, query, k=10):
    s = build_store(mems)
    try: return [m.id for m, _ in s.search(query, k)]
    finally: s.close()

def rank_bm25okapi(mems, query, k=10, stem=True, **params):
    toks = [tokenize(memory_text(m), stem=stem) for m in mems]
    sc = BM25Okapi(toks, **params).get_scores(tokenize(query, stem=stem))
    order = sorted(range(len(mems)), key=lambda i: (-sc[i], mems[i].id))
    return [mems[i].id for i in order[:k] if sc[i] > 0]

def rank_index(mems, query, k=10, stem=True):
    ix = BM25Index()
    ix.add_many((m.id, tokenize(memory_text(m), stem=stem)) for m in mems); ix.flush()
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

def ood_queries(n_inj: int, seed: int = 0) -> dict[str, list[str]]:
    hq = []
    for line in (DATA / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt").read_text().splitlines():
        if line.startswith("Question:"):
            q = line.split(":", 1)[1].strip()
            if q and q not in hq: hq.append(q)
    rows = [json.loads(l) for l in (DATA / "injection" / "benchmark_dev.jsonl").read_text().splitlines() if l.strip()]
    rnd = random.Random(seed)
    benign = [r["text"][:200] for r in rows if r["label"] == 0 and r["text"].strip()]
    inj = [r["text"][:200] for r in rows if r["label"] == 1 and r["text"].strip()]
    return {"HotpotQA questions": hq, "benign texts": rnd.sample(benign, min(n_inj, len(benign))),
            "injection texts": rnd.sample(inj, min(n_inj, len(inj)))}

def floor_eval(tasks, variant, ood: dict[str, list[str]]):
    mems = [task_memory(t, variant) for t in tasks]
    tpl = {m.id: t["intent_template_id"] for t, m in zip(tasks, mems)}
    by_tpl = defaultdict(set)
    for m in mems: by_tpl[tpl[m.id]].add(m.id)
    ind = {f: dict(recall3=[], any_rel=[], empty=[], prec=[]) for f in FLOORS}
    for i, t in enumerate(tasks):
        rel = by_tpl[t["intent_template_id"]] - {mems[i].id}
        if not rel: continue
        s = build_store(mems[:i] + mems[i + 1:])
        for f in FLOORS:
            got = [m.id for m in retrieve_memories(s, t["intent"], k=3, min_relevance=f, record=False)]
            r = ind[f]
            r["recall3"].append(len(set(got) & rel) / min(3, len(rel)))
            r["any_rel"].append(float(bool(set(got) & rel)))
            r["empty"].append(float(not got))
            if got: r["prec"].append(len(set(got) & rel) / len(got))
        s.close()
    s = build_store(mems)
    oo = {g: {f: [] for f in FLOORS} for g in ood}
    for g, qs in ood.items():
        for q in qs:
            for f in FLOORS: oo[g][f].append(float(not retrieve_memories(s, q, k=3, min_relevance=f, record=False)))
    s.close()
    table = []
    for f in FLOORS:
        row = dict(floor=f, **{k: statistics.fmean(v) if v else float("nan") for k, v in ind[f].items()})
        for g in ood: row[g] = statistics.fmean(oo[g][f])
        row["ood_all"] = statistics.fmean(x for g in ood for x in oo[g][f])
        table.append(row)
    return table, {g: len(q) for g, q in ood.items()}, len(ind[0]["recall3"]), len(mems)

# ---------------------------------------------------------------- report

def md_ranking(res: dict, variant: str) -> list[str]:
    n = next(iter(res.values()))["n"]
    L = [f"### Documents: {variant} ({n} leave-one-out queries)", "",
         "| engine | MRR@10 | nDCG@10 | recall@3 | hit@1 |", "|---|---|---|---|---|"]
    for name, m in res.items():
        L.append(f"| {name} | {m['mrr10']:.3f} | {m['ndcg10']:.3f} | {m['recall3']:.3f} | {m['hit1']:.3f} |")
    return L + [""]

def md_floor(table, sizes, n_in, n_all, variant) -> list[str]:
    groups = list(sizes)
    L = [f"### Documents: {variant}", "",
         f"In-domain: {n_in} WebArena intents (leave-one-out store). Out-of-domain against the store of all {n_all} tasks: "
         + ", ".join(f"{g} ({sizes[g]})" for g in groups) + ".", "",
         "| min_relevance | OOD → [] (all) | " + " | ".join(f"{g} → []" for g in groups)
         + " | in-domain recall@3 | in-domain ≥1 same-template | in-domain → [] | precision of returned | balanced |",
         "|---|---|" + "---|" * len(groups) + "---|---|---|---|---|"]
    bal = {r["floor"]: (r["ood_all"] + r["any_rel"]) / 2 for r in table}
    for r in table:
        mark = " (current default)" if r["floor"] == DEFAULT_MIN_RELEVANCE else ""
        L.append(f"| {r['floor']:g}{mark} | {r['ood_all']:.3f} | " + " | ".join(f"{r[g]:.3f}" for g in groups)
                 + f" | {r['recall3']:.3f} | {r['any_rel']:.3f} | {r['empty']:.3f} | {r['prec']:.3f} | {bal[r['floor']]:.3f} |")
    best = max(bal, key=lambda f: (round(bal[f], 3), -f))
    return L + ["", f"balanced = mean of \"OOD → [] (all)\" and \"in-domain ≥1 same-template\"; highest at min_relevance = {best:g}.", ""]

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "quality.md"))
    ap.add_argument("--ood", type=int, default=300, help="benign and injection texts sampled (each)")
    a = ap.parse_args()
    t0 = time.time()
    tasks = load_tasks()
    ood = ood_queries(a.ood)
    variants = ["intent+template", "intent only"]
    L = ["# Ranking quality and relevance floor (WebArena tasks)", "",
         f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python bench/quality.py` on procmem commit {git_commit()}. "
         "Memories: one per WebArena task (`shared/data/webarena/tasks_dev.json`: 423 tasks, of which 9 repeat another's "
         "intent verbatim and are dropped, as procmem would merge them: 414 tasks, 96 templates). "
         "Document variants: **intent+template** = title: the intent; description and content: the intent template "
         "with its placeholders removed (the generic procedure, without the instance's specifics); "
         "**intent only** = title: the intent, no description. The store indexes title, description, tags "
         "and task query (content is not indexed). Relevant = other tasks of the same `intent_template_id`; "
         "leave-one-out (the query's own task is not in the store; templates with a single task are not queries).", "",
         "## Ranking", ""]
    results = {}
    for v in variants:
        results[v] = ranking_eval(tasks, v); L += md_ranking(results[v], v)
        print("\n".join(md_ranking(results[v], v)), flush=True)
    L += ["## Relevance floor of `retrieve_memories` (k = 3)", "",
          "`min_relevance` keeps a hit whose BM25 score ÷ the query's IDF mass is at least the floor. "
          "Want: out-of-domain queries → [] (high), in-domain recall@3 and ≥1 same-template hit (high). "
          "recall@3 is of min(3, #same-template tasks); precision is over queries that returned something.", ""]
    floors = {}
    for v in variants:
        table, sizes, n_in, n_all = floor_eval(tasks, v, ood); floors[v] = table
        L += md_floor(table, sizes, n_in, n_all, v)
        print("\n".join(md_floor(table, sizes, n_in, n_all, v)), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(L) + "\n")
    Path(a.out).with_suffix(".json").write_text(json.dumps(dict(ranking=results, floors=floors), indent=1))
    print(f"written to {a.out} in {time.time() - t0:.0f} s")

if __name__ == "__main__":
    main()
