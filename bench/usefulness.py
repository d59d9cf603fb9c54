"""The usefulness SIMULATION of `procmem.simulation` over several seeds (issue 9).

Usage: python bench/usefulness.py [--seeds 10] [--uses 20] [--out bench/results/usefulness.json]

A SIMULATION, not an evaluation on real agents: 8 task families, each with a helpful and a harmful
memory of exactly the same words in another order (same BM25 score; the harmful one wins the tie),
a scripted agent that succeeds with p 0.85 when it follows the helpful memory, 0.15 the harmful one,
0.5 neither; `run_with_memory(k=1)` with the ground-truth judge and no extraction, families in turn.
Both rankings (utility on / relevance alone) run on the same seeds, so on the same draws; once with
the loop's demotion of harmful memories (the default) and once without (ranking alone).
N = uses of a family after which its harmful memory ranks below the helpful one for good.
Prints a markdown table and writes the numbers (per arm, and per seed and family) as JSON.
"""
from __future__ import annotations
import argparse, json, statistics, sys, time
from pathlib import Path

from _common import REPO, git_commit

sys.path.insert(0, str(REPO))
from procmem.simulation import usefulness_simulation  # noqa: E402


def n_stats(conv, arm: str) -> dict:
    "N over (seed, family) of one arm: mean, median, max of the converged ones, and how many."
    n = [int(x) for x in conv[conv.arm == arm]["N"].dropna()]
    total = int((conv.arm == arm).sum())
    return dict(N_mean=round(statistics.mean(n), 2) if n else None,
                N_median=statistics.median(n) if n else None, N_max=max(n) if n else None,
                converged=len(n), pairs=total)


def demotion_stats(report, arm: str) -> dict:
    "Harmful memories demoted in one arm, and after how many uses of their family."
    d = report.demotions()
    d = d[d.arm == arm]
    harmful = d[d["id"].str.endswith("-harmful")]
    return dict(harmful_demoted=len(harmful), helpful_demoted=int(d["id"].str.endswith("-helpful").sum()),
                demoted_after_uses_mean=round(float(harmful["use"].mean()), 2) if len(harmful) else None,
                demoted_after_uses_max=int(harmful["use"].max()) if len(harmful) else None)


def run(seeds: list, uses: int, demote: bool) -> dict:
    t0 = time.perf_counter()
    r = usefulness_simulation(uses=uses, seed=seeds, demote=demote)
    summ, conv = r.summary(), r.convergence()
    arms = {}
    for arm in summ.index:
        row = summ.loc[arm]
        arms[arm] = dict(success_rate=float(row["success_rate"]), shown_helpful=float(row["shown_helpful"]),
                         shown_harmful=float(row["shown_harmful"]), **n_stats(conv, arm),
                         **demotion_stats(r, arm))
    conv = conv.astype(object).where(conv.notna(), None)
    return dict(demote=demote, seconds=round(time.perf_counter() - t0, 1), arms=arms,
                per_seed_family=conv.to_dict(orient="records"))


def table(results: list) -> str:
    head = ("| demotion | ranking | success rate | runs shown the harmful memory | N mean | N median | N max "
            "| converged | harmful demoted (after uses, mean / max) | helpful demoted |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for arm, a in res["arms"].items():
            dem = (f"{a['harmful_demoted']} ({a['demoted_after_uses_mean']} / {a['demoted_after_uses_max']})"
                   if a["harmful_demoted"] else "0")
            lines.append(f"| {'on' if res['demote'] else 'off'} | {arm} | {a['success_rate']:.3f} | "
                         f"{a['shown_harmful']:.3f} | {a['N_mean']} | {a['N_median']} | {a['N_max']} | "
                         f"{a['converged']}/{a['pairs']} | {dem} | {a['helpful_demoted']} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--uses", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "usefulness.json"))
    a = ap.parse_args()
    seeds = list(range(a.seeds))
    results = [run(seeds, a.uses, demote) for demote in (True, False)]
    out = dict(simulation=True, commit=git_commit(), run_at=time.strftime("%Y-%m-%d %H:%M"),
               command=f"python bench/usefulness.py --seeds {a.seeds} --uses {a.uses}",
               settings=dict(families=8, uses=a.uses, seeds=seeds, k=1, p_helpful=0.85, p_harmful=0.15,
                             p_none=0.5),
               results=results)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"Usefulness SIMULATION, {a.seeds} seeds x 8 families x {a.uses} uses per arm "
          f"(commit {out['commit']}, {out['run_at']}):\n")
    print(table(results))


if __name__ == "__main__":
    main()
