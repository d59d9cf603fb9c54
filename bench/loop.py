"""Per-task overhead of procmem's closed loop, excluding LLM and agent time.

Usage: python bench/loop.py [--size 10000] [--tasks 200] [--out bench/results/loop.md]

A store of `size` synthetic memories (shared/bench/gen_corpus.py, the corpus every retrieval benchmark
uses) is built once; then `run_with_memory` runs `tasks` tasks with memory on and the offline judge
and extractor (no LLM, so model time is zero) around a scripted agent that returns a 6-step
trajectory at once. The loop's own `timings["overhead"]` (total minus agent minus model time) is
reported, with its stages. Target (DESIGN.md): overhead <= 20 ms per task at 10k memories.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

def corpus(n:int) -> Path:
    out = ROOT / "bench" / "data" / f"corpus-{n}"  # gen_corpus.py writes queries per N: one folder per size
    f = out / f"items_{n}.jsonl"
    if not f.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(SHARED / "bench" / "gen_corpus.py"), str(n), str(out)], check=True, stdout=subprocess.DEVNULL)
    return f

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=10_000); ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "loop.md"))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from procmem import MemoryItem, MemoryStore, run_with_memory
    items = [json.loads(l) for l in open(corpus(a.size))][: a.size]
    queries = [json.loads(l)["text"] for l in open(corpus(a.size).parent / "queries.jsonl")]
    d = Path(tempfile.mkdtemp(prefix="procmem-bench-loop-"))
    store = MemoryStore(d / "m.db")
    store.add_many(MemoryItem(it["title"], it["description"], content=it["description"], tags=it["tags"], id=f"m{it['id']}") for it in items)
    store.sync_index(flush=True)

    def agent(task, block):  # a scripted agent: instant, a plausible 6-step run that succeeds
        steps = [dict(action=f'search("{task.split()[0]}")', observation="12 results"), dict(action="open_result(1)", observation="a page"),
                 dict(action='lookup("price")', observation="$12"), dict(action="add_to_cart(quantity=1)", observation="Cart: 1 item"),
                 dict(action="view_cart()", observation="Cart total $12"), dict(action="place_order()", observation="Order placed")]
        return dict(task=task, answer="Order placed", steps=steps, outcome={"success": True})

    rows = []
    for i in range(a.tasks):
        r = run_with_memory(queries[i % len(queries)] + f" variant {i}", agent, store)
        rows.append(r.timings)
    def p(key, q): v = sorted(t.get(key, 0.0) for t in rows); return v[min(len(v) - 1, int(q * len(v)))]
    stages = ["retrieve", "artifact", "judge", "extract", "gates", "overhead", "total"]
    lines = [f"# Loop overhead benchmark", "",
             f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python bench/loop.py --size {a.size} --tasks {a.tasks}`: {a.size:,} memories, "
             f"offline judge and extractor, a scripted agent; {len(store):,} memories at the end.", "",
             "| stage | p50 ms | p95 ms |", "|---|---|---|"]
    lines += [f"| {k} | {p(k, .5):.2f} | {p(k, .95):.2f} |" for k in stages]
    ok = p("overhead", .5) <= 20
    lines += ["", f"Target: overhead ≤ 20 ms per task at 10k memories → p50 {p('overhead', .5):.1f} ms: {'PASS' if ok else 'FAIL'}"]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(text)

if __name__ == "__main__": main()
