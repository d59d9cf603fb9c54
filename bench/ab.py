"""The offline A/B example of nbs/18_eval.ipynb, with more repeats — a SIMULATION, not a real agent.

Usage: python bench/ab.py [--repeats 20] [--passes 6] [--seed 0] [--n-boot 4000] [--out bench/results/ab.json]

procmem.simulation's 8 task families (3 tasks each; a helpful and a harmful memory per family, a
scripted agent that succeeds with p = 0.85 / 0.15 / 0.5 when its block shows the helpful / harmful /
neither memory first, the ground truth as judge, nothing extracted). Cross-fitted: in fold i the bank
is trained online (`--passes` passes of run_with_memory, k = 1) on the other two tasks of every
family, then procmem.eval.ab_test runs the held-out task of every family in four arms (none; memory
frozen; the same bank frozen but ranked by relevance alone, use_utility=False; memory+learn), paired by
per-(task, repeat) seeds; the 3 folds give 24 held-out tasks.
The same held-out runs are repeated with the UNTRAINED bank (both memories tie; the harmful one was
stored first): negative transfer, which the harness must report. summarize_ab: success rate per arm,
paired difference vs none with a 95% bootstrap CI over tasks, exact sign test (McNemar with one
repeat), tasks helped / harmed.
"""
import argparse, json, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_commit  # noqa: E402

sys.path.insert(0, str(REPO))
from procmem.eval import _simulated_ab, summarize_ab  # noqa: E402

ARMS = ("none", "memory", dict(name="memory, relevance only", use_utility=False), "memory+learn")
COLS = ["arm", "n", "n_tasks", "success_rate", "success_ci_low", "success_ci_high", "diff", "diff_ci_low",
        "diff_ci_high", "p_value", "helped", "harmed", "mean_steps"]


def _clean(k, v):
    "JSON-ready: NaN -> None, numpy scalars -> Python, rates to 4 places (p-values exact)."
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float):
        return None if v != v else float(f"{v:.3g}") if k == "p_value" else round(v, 4)
    return v


def run(bank: str, passes: int, a) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="procmem-bench-ab-") as d:
        df = _simulated_ab(d, passes=passes, repeats=a.repeats, seed=a.seed, arms=ARMS)
    secs = time.perf_counter() - t0
    s = summarize_ab(df, n_boot=a.n_boot, seed=a.seed)
    print(f"\n{bank} bank ({passes} training passes): {len(df)} runs in {secs:.1f} s")
    shown = s[COLS].round(3).assign(p_value=s.p_value.map(lambda p: "-" if p != p else f"{p:.2g}"))
    print(shown.to_string(index=False))
    rows = [{k: _clean(k, v) for k, v in r.items()} for r in s[COLS].to_dict("records")]
    return dict(bank=bank, training_passes=passes, runs=len(df), seconds=round(secs, 1), arms=rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-boot", type=int, default=4000)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "ab.json"))
    a = ap.parse_args()
    print("SIMULATION (procmem.simulation's scripted agent and task families), cross-fitted over 3 folds")
    results = [run("trained", a.passes, a), run("untrained", 0, a)]
    out = dict(simulation=True, commit=git_commit(), repeats=a.repeats, training_passes=a.passes, seed=a.seed,
               n_boot=a.n_boot, ci=0.95, held_out_tasks=24, folds=3,
               design="cross-fitted: train on 2 tasks per family, test the third; arms paired by seed",
               arms=[a if isinstance(a, str) else a["name"] for a in ARMS],
               agent="ScriptedAgent: p_success 0.85 helpful first, 0.15 harmful first, 0.5 neither",
               results=results)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
