"""The poisoning simulation of `procmem.security` on the whole held-out split (issue 8).

Usage: python bench/poisoning.py [--label current|baseline] [--split held_out|tune]
                                 [--out bench/results/poisoning.json] [--no-copy-check]

Every held-out injection (label 1) of `../shared/data/injection/benchmark_dev.jsonl` (the team's split:
sha1 of the text, odd = held out) is planted in a web page or tool result of a successful run, copied
by a fooled extractor in each of the three copy modes, and learned through `learn_from_trajectory`
into a fresh store (the bootstrap pack as seeds); the benign side is every real tool/web run of
`tests/fixtures/trajectories` plus the Reflexion HotpotQA and mini-SWE-agent runs of the shared data.
The result is stored under `--label` in the output file (other labels are kept), so the baseline
measured before the issue-8 layers stays next to the current numbers.
"""
from __future__ import annotations
import argparse, inspect, json, sys, tempfile, time
from datetime import datetime, timezone

from _common import REPO, git_commit
from procmem.retrieval import retrieve_memories
from procmem.security import (
    injection_rows, poisoning_simulation, security_scenarios, _real_runs, _sim_tasks,
)

DATA = REPO.parent / "shared" / "data"


def measure(split: str, strict_too: bool = True) -> dict:
    "The simulation's numbers on `split`, with its scenarios (and with min_confirmations=1)."
    rows = injection_rows(DATA / "injection" / "benchmark_dev.jsonl", split)
    runs = _real_runs(REPO / "tests" / "fixtures" / "trajectories", DATA)
    t0 = time.perf_counter()
    rep = poisoning_simulation(rows, _sim_tasks(DATA), runs)
    secs = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        scenarios = security_scenarios(d)
    strict = None
    if strict_too and "min_confirmations" in inspect.signature(retrieve_memories).parameters:
        rep1 = poisoning_simulation(rows, _sim_tasks(DATA), runs, read=dict(min_confirmations=1))
        strict = dict(summary=rep1.summary(), by_layer=rep1.by_layer(),
                      by_standalone={str(k): v for k, v in rep1.by("standalone").items()})
    lost = [b for b in rep.benign if b["fate"] not in ("quality", "retrievable")]
    return dict(
        commit=git_commit(), date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        split=split, seconds=round(secs, 1), summary=rep.summary(), by_layer=rep.by_layer(),
        by_mode=rep.by("mode"), by_run_source=rep.by("run_source"), by_source=rep.by("source"),
        by_standalone={str(k): v for k, v in rep.by("standalone").items()},
        benign_by_format=rep.by("format", benign=True),
        benign_by_run_source=rep.by("run_source", benign=True),
        retrievable_examples=[dict(id=r["id"], mode=r["mode"], task=r["task"][:80])
                              for r in rep.poisoned if r["fate"] == "retrievable"][:10],
        benign_lost=[dict(run=b["run"], title=b["title"], layers=b["layers"], reasons=b["reasons"])
                     for b in lost][:20],
        scenarios=scenarios,
        min_confirmations_1=strict,  # the stricter read side, when retrieval has it
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="current")
    ap.add_argument("--split", default="held_out", choices=["held_out", "tune"])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "poisoning.json"))
    ap.add_argument("--no-copy-check", action="store_true",
                    help="switch the gates' copy check off (procmem.gates.COPY_MIN_WORDS huge)")
    a = ap.parse_args(argv)
    if a.no_copy_check:
        import procmem.gates
        procmem.gates.COPY_MIN_WORDS = 10**9
    if not (DATA / "injection" / "benchmark_dev.jsonl").exists():
        print(f"skipped: {DATA / 'injection' / 'benchmark_dev.jsonl'} not found", file=sys.stderr)
        return 1
    res = measure(a.split, strict_too=not a.no_copy_check)
    try:
        with open(a.out) as f:
            out = json.load(f)
    except FileNotFoundError:
        out = {}
    out[a.label if a.split == "held_out" else f"{a.label}-{a.split}"] = res
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(json.dumps(dict(summary=res["summary"], by_layer=res["by_layer"],
                          scenarios=res["scenarios"]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
