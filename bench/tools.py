"""Latency of the agent tools (procmem.tools / procmem.notes) on a file store of synthetic memories.

Usage: python bench/tools.py [--size 10000] [--calls 100] [--out bench/results/tools.md]

A store of `size` synthetic memories (shared/bench/gen_corpus.py, as bench/loop.py uses) is built
once; then `recall` answers `calls` queries (counters written, as the tool does), `record` stores
`calls` procedures through the gates, and `memory_action` adds notes to the user target (budget
read in the write transaction) and removes them again. p50/p95 per call, in ms.
"""
import argparse, json, statistics, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from loop import corpus  # noqa: E402  (the shared corpus builder)


def _pct(v: list, q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def _timed(fn, args_list) -> list:
    out = []
    for a in args_list:
        t = time.perf_counter()
        fn(*a)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "tools.md"))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from procmem import MemoryItem, MemoryStore
    from procmem.tools import recall, record
    from procmem.notes import memory_action

    items = [json.loads(l) for l in open(corpus(a.size))][: a.size]
    queries = [json.loads(l)["text"] for l in open(corpus(a.size).parent / "queries.jsonl")]
    store = MemoryStore(Path(tempfile.mkdtemp(prefix="procmem-bench-tools-")) / "m.db")
    store.add_many(
        MemoryItem(it["title"], it["description"], content=it["description"], tags=it["tags"],
                   id=f"m{it['id']}")
        for it in items
    )
    store.sync_index(flush=True)
    n = a.calls
    for q in queries[:5]:  # warm: the index reader, the tokenizer's caches, the classifier
        recall(store, q)
    rec = _timed(lambda q: recall(store, q), [(queries[i % len(queries)],) for i in range(n)])
    procs = [(store, f"Check the {w} settings before a release, case {i}",
              f"When a release touches the {w} settings.",
              f"1. Open the {w} settings file\n2. Compare it with the last release ({i})\n"
              f"3. Write down every changed key before shipping", None, "code")
             for i, w in enumerate(["cache", "proxy", "logging", "queue"] * (n // 4 + 1))][:n]
    wr = _timed(record, procs)
    notes = [f"The user configures tool number {i} and documents it in the shared team page."
             for i in range(12)]
    add = _timed(lambda t: memory_action(store, "add", "user", t, trust="user"), [(t,) for t in notes])
    rm = _timed(lambda t: memory_action(store, "remove", "user", old_text=t), [(t,) for t in notes])
    rows = [("recall", rec), ("record", wr), ("memory add", add), ("memory remove", rm)]
    lines = ["# Agent tools benchmark", "",
             f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python bench/tools.py --size {a.size} "
             f"--calls {n}`: a file store of {a.size:,} synthetic memories.", "",
             "| call | n | p50 ms | p95 ms |", "|---|---|---|---|"]
    lines += [f"| {k} | {len(v)} | {_pct(v, .5):.2f} | {_pct(v, .95):.2f} |" for k, v in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
