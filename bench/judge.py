"""How good is the offline judge on labelled public runs of several kinds? (labels hidden from the judge)

    python bench/judge.py [--mirrors /work/.mirror] [--out bench/results/judge.json]
    ANTHROPIC_API_KEY=... python bench/judge.py --llm claude [--per-source 100]   # the LLM judge on the same runs

Sources (each one is skipped, with the reason recorded, when its file is absent):
- qa, Reflexion HotpotQA ReAct runs (../shared/data/reflexion/, MIT): split BY QUESTION (sha1 of the question
  text, even = dev, odd = held out); the QA cut-offs were chosen on dev only. Re-listed solved agents are read
  once (procmem.research_logs.from_reflexion_log).
- qa, the same project's ReAct runs without reflexion (noahshinn/reflexion hotpotqa_runs/root/ReAct/base/
  100_questions_5_trials.txt, a fetched mirror): another agent on the same 100 questions, never tuned on;
  reported on the same question split.
- tool, tau-bench historical trajectories gpt-4o-airline.json (sierra-research/tau-bench, MIT), reward 1.0 =
  success: split BY TASK (sha1 of task_id, even = dev, odd = held out; the trials of one task stay on one side);
  the tool rules' cut-offs were chosen on dev. Step budget 30 (tau-bench's default max_num_steps).
- coding, mini-SWE-agent v1.15 with Gemini 3 Pro on SWE-bench Verified (gruckion/mini-swe-agent, MIT,
  swebench_results/20251118_gemini-3-pro-74pct: 500 .traj.json + results_summary.json `resolved`): held out.
- coding, Reflexion programming runs (noahshinn/reflexion programming_runs/root, MIT; `is_solved`): the
  MBPP runs (Python, Rust) are dev, the HumanEval (Python, Rust) and LeetCodeHard runs are held-out sources.
  The published files carry the final solution and the reflections, not the internal test results.
For every source, `signals` lists the candidate signs tried (fired n times; share of labelled failures among
them, against the source's base rate): what a rule could use, and why most were not used.
The mirrors are bare git repositories brought by the `fetch` tool (read with `git show`); nothing of them
is committed. Trajectories are read with procmem's own adapters, then `hide_outcome`.
Metrics (procmem.judge.agreement_metrics): coverage = share of runs decided (not abstained); accuracy and
balanced accuracy among decided runs; false-success rate = labelled failures judged success / all labelled
failures.
"""
import argparse, hashlib, json, math, os, re, subprocess, sys, tempfile, time
from collections import Counter
from pathlib import Path

from _common import REPO, git_commit

sys.path.insert(0, str(REPO))
from procmem.agent_logs import from_minisweagent  # noqa: E402
from procmem.ingest import read_logs, read_trajectories  # noqa: E402
from procmem.judge import _cut_off, _last_tests, _patch_of, _run_of, agreement_metrics, judge_trajectory, offline_judge  # noqa: E402
from procmem.research_logs import from_reflexion_log  # noqa: E402
from procmem.trajectory import hide_outcome  # noqa: E402

HOTPOTQA = REPO.parent / "shared" / "data" / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt"
TAU = ("sierra-research+tau-bench", "historical_trajectories/gpt-4o-airline.json")
MSA = ("gruckion+mini-swe-agent", "swebench_results/20251118_gemini-3-pro-74pct")
BASE = ("noahshinn+reflexion", "hotpotqa_runs/root/ReAct/base/100_questions_5_trials.txt")
PROG = "programming_runs/root"
PROG_DEV = ("reflexion_mbpp_py/mbpp-py._reflexion_5_gpt-4_pass_at_k_1_py.jsonl",
            "reflexion_mbpp_rs/mbpp-rs._reflexion_5_gpt-4_pass_at_k_1_rs.jsonl")
PROG_HELD = ("reflexion_humaneval_py_pass_at_1/reflexion_humaneval_py_pass_at_1.jsonl",
             "reflexion_humaneval_rs_hard50/humaneval-rs._reflexion_5_gpt-4_pass_at_k_1_rs.jsonl",
             "reflexion_leetcode_python3_gpt4/leetcode-hard-py-40-uncontaminated._reflexion_5_gpt-4_pass_at_k_1_py.jsonl")
UNREADABLE = {}  # Reflexion programming file -> records procmem could not read (no code logged)
STEP_BUDGET = {"qa": 6, "tool": 30}  # ReAct's configured limit; tau-bench's max_num_steps


def question_split(task: str) -> str:
    "'dev' or 'held out', by the question's text (or a task id): retries of one question stay on one side."
    return "dev" if int(hashlib.sha1(task.encode()).hexdigest(), 16) % 2 == 0 else "held out"


def _git_show(mirror: Path, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(mirror), "show", f"HEAD:{path}"], capture_output=True, check=True).stdout


def _git_ls(mirror: Path, path: str) -> list:
    out = subprocess.run(["git", "--git-dir", str(mirror), "ls-tree", "-r", "--name-only", "HEAD", path],
                         capture_output=True, check=True, text=True).stdout
    return out.split()


def hotpotqa_runs():
    "(split, kind, hidden trajectory, truth) for every HotpotQA run."
    if not HOTPOTQA.exists():
        raise FileNotFoundError(f"{HOTPOTQA} not found (the shared Reflexion log)")
    for t in from_reflexion_log(HOTPOTQA):
        if "relisted_from_trial" in t.metadata:
            continue  # a solved agent listed again in a later trial with its old steps: the same run
        yield question_split(t.task), hide_outcome(t), t.outcome["success"]


def hotpotqa_base_runs(mirrors: Path):
    "(split, hidden trajectory, truth) for the ReAct runs WITHOUT reflexion (another agent; never tuned on)."
    mirror = mirrors / BASE[0] / "repo"
    if not mirror.exists():
        raise FileNotFoundError(f"{mirror} not found (fetch github:noahshinn/reflexion)")
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "100_questions_5_trials.txt"
        p.write_bytes(_git_show(mirror, BASE[1]))
        runs = from_reflexion_log(p, check_counts=False)  # its trial-3 summary is off by one halted agent
    for t in runs:
        if "relisted_from_trial" not in t.metadata:
            yield question_split(t.task), hide_outcome(t), t.outcome["success"]


def tau_runs(mirrors: Path):
    "(split, hidden trajectory, truth) for the tau-bench airline runs, read by procmem's own reader."
    mirror = mirrors / TAU[0] / "repo"
    if not mirror.exists():
        raise FileNotFoundError(f"{mirror} not found (fetch github:sierra-research/tau-bench)")
    records = json.loads(_git_show(mirror, TAU[1]))
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "gpt-4o-airline.json"
        p.write_text(json.dumps(records))
        trajs = read_trajectories(p)
    truth = {(str(r["task_id"]), r["trial"]): r["reward"] == 1.0 for r in records}
    if len(trajs) != len(records):
        raise ValueError(f"procmem read {len(trajs)} of {len(records)} tau-bench runs")
    for t, r in zip(trajs, records):
        assert t.outcome and t.outcome["success"] == (r["reward"] > 0), (t.id, t.outcome)  # the adapter's label
        yield question_split(str(r["task_id"])), hide_outcome(t), truth[(str(r["task_id"]), r["trial"])]


def msa_runs(mirrors: Path, limit: int | None = None):
    "(split, hidden trajectory, truth) for the mini-SWE-agent SWE-bench Verified runs."
    mirror = mirrors / MSA[0] / "repo"
    if not mirror.exists():
        raise FileNotFoundError(f"{mirror} not found (fetch github:gruckion/mini-swe-agent)")
    resolved = {x["instance_id"]: x["resolved"] for x in json.loads(_git_show(mirror, f"{MSA[1]}/results_summary.json"))["instances"]}
    paths = sorted(p for p in _git_ls(mirror, f"{MSA[1]}/trajs") if p.endswith(".traj.json"))[:limit]
    for path in paths:
        t = from_minisweagent(json.loads(_git_show(mirror, path)))
        yield "held out", hide_outcome(t), resolved[t.id]


def programming_runs(mirrors: Path):
    "(split, hidden trajectory, truth) for Reflexion programming runs, read by procmem's own reader."
    mirror = mirrors / BASE[0] / "repo"
    if not mirror.exists():
        raise FileNotFoundError(f"{mirror} not found (fetch github:noahshinn/reflexion)")
    for split, files in (("dev", PROG_DEV), ("held out", PROG_HELD)):
        for f in files:
            with tempfile.TemporaryDirectory() as tmp:
                p = Path(tmp) / Path(f).name
                p.write_bytes(_git_show(mirror, f"{PROG}/{f}"))
                report = read_logs(p)  # a record with no code at all is reported and skipped, not judged
            UNREADABLE[f] = len(report.files[0].skipped)
            for t in report.trajectories:
                yield split, hide_outcome(t), t.outcome["success"]


_CANNOT = re.compile(r"\b(?:unable to|cannot|can't|not able to|unfortunately|not possible)\b", re.I)
_WRITE = re.compile(r"^(?:book|cancel|update|send|modify|exchange|return)_")


def _coding_signals(t, run) -> list:
    "The candidate signs of a coding run's outcome (for the signals table)."
    patch, n_err = _patch_of(run) or "", sum(1 for s in run.steps if s["error"])
    out = [f"last test run: {_last_tests(run) or 'none seen'}"] if run.steps else []
    if "reflections" in t.metadata:  # Reflexion reflects only after its own tests failed
        k = len(t.metadata["reflections"])
        out.append("Reflexion: no reflection (its own tests passed at once)" if k == 0 else
                   "Reflexion: 4+ reflections (own tests failing until the last try)" if k >= 4 else
                   "Reflexion: 1-3 reflections (own tests passed after retries)")
    return out + [name for name, hit in (("≥ 60 steps", run.steps_total >= 60), ("patch ≥ 100 lines", len(patch.splitlines()) >= 100),
                                         ("the patch adds a file", "\nnew file mode" in patch), ("≥ 5 failed commands", n_err >= 5)) if hit]


def _tool_signals(t, run, budget) -> list:
    "The candidate signs of a tool run's outcome (for the signals table)."
    names = [s["name"] or "" for s in run.steps]
    n_err = sum(1 for s in run.steps if s["error"])
    said = [s["action"] for s in run.steps if s["name"] == "respond"]
    last_obs = run.steps[-1]["observation"] if run.steps else ""
    return [name for name, hit in (
        ("handed off to a human", any("transfer" in n for n in names)), ("the agent's last message says it cannot / is unable",
         bool(said) and bool(_CANNOT.search(said[-1]))), ("the user ended it (###STOP###)", "###STOP###" in last_obs),
        ("≥ 1 failed tool call", n_err >= 1), ("≥ 3 failed tool calls", n_err >= 3),
        ("≥ 80% of the step budget", bool(budget) and run.steps_total >= 0.8 * budget), ("cut off after a tool call", bool(_cut_off(run))),
        ("made a change (book/cancel/update/send...)", any(_WRITE.match(n) for n in names))) if hit]


def candidate_signals(kind: str, t, budget) -> list:
    "Names of the candidate signals that fire on hidden trajectory `t` (none for QA: the notebook analyses those)."
    run = _run_of(t)
    return _coding_signals(t, run) if kind == "coding" else _tool_signals(t, run, budget) if kind == "tool" else []


def signal_table(counts: Counter) -> list:
    "Rows (split, signal, n, failures, failure share) from the counts of (split, signal, truth)."
    rows = []
    for split, name in sorted({(sp, nm) for sp, nm, _ in counts}):
        ok, bad = counts[(split, name, True)], counts[(split, name, False)]
        rows.append(dict(split=split, signal=name, n=ok + bad, failures=bad, failure_share=round(bad / (ok + bad), 3)))
    return rows


def _round(m: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 3) if isinstance(v, float) else v) for k, v in m.items()}


def evaluate(source: str, runs, signals: dict, llm=None, per_source=None) -> list:
    """One row per split of a source: its kinds, the agreement metrics, the reasons it abstained most.
    `llm`: judge with procmem's LLM judge instead of the offline one; `per_source`: at most this many runs."""
    by_split, kind = {}, source.split(":")[0]
    for i, (split, t, truth) in enumerate(runs):
        if per_source is not None and i >= per_source:
            break
        j = offline_judge(t, step_budget=STEP_BUDGET.get(kind)) if llm is None else judge_trajectory(t, llm)
        by_split.setdefault(split, []).append((j, truth))
        for name in candidate_signals(kind, t, STEP_BUDGET.get(kind)):
            signals.setdefault(source, Counter())[(split, name, truth)] += 1
        signals.setdefault(source, Counter())[(split, "(all runs: the base rate)", truth)] += 1
    rows = []
    for split, pairs in sorted(by_split.items()):
        js, ys = [j for j, _ in pairs], [y for _, y in pairs]
        kinds = Counter(j.kind for j in js)
        top = Counter(j.reason.split(":")[0][:90] for j in js if j.is_success is None).most_common(3)
        rows.append(dict(source=source, split=split, kinds=dict(kinds), successes=sum(ys), failures=len(ys) - sum(ys),
                         **_round(agreement_metrics(js, ys)), abstained_because=dict(top)))
    return rows


def _pooled(rows: list, name: str) -> dict:
    "The metrics pooled over rows (sums of counts)."
    c = Counter()
    for r in rows:
        c.update({k: r[k] for k in ("tp", "fn", "fp", "tn", "abstained", "n")})
    dec = c["n"] - c["abstained"]

    def rate(a, b):
        return round(a / b, 3) if b else None

    bal = None if not (c["tp"] + c["fn"] and c["tn"] + c["fp"]) else round((c["tp"] / (c["tp"] + c["fn"]) + c["tn"] / (c["tn"] + c["fp"])) / 2, 3)
    return dict(source=name, split="all", n=c["n"], coverage=rate(dec, c["n"]), accuracy=rate(c["tp"] + c["tn"], dec),
                balanced_accuracy=bal, false_success_rate=rate(c["fp"], sum(r["failures"] for r in rows)),
                **{k: c[k] for k in ("tp", "fn", "fp", "tn", "abstained")})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", default=os.environ.get("PROCMEM_MIRRORS", "/work/.mirror"))
    ap.add_argument("--limit", type=int, default=None, help="at most this many coding runs")
    ap.add_argument("--out", default=None, help="default: bench/results/judge.json (judge-llm.json with --llm)")
    ap.add_argument("--llm", choices=("claude",), default=None,
                    help="measure procmem's LLM judge (needs ANTHROPIC_API_KEY and network) instead of the offline one")
    ap.add_argument("--model", default=None, help="the Claude model for --llm (default: procmem.llm.resolve_model())")
    ap.add_argument("--per-source", type=int, default=None, help="at most this many runs per source (cost control)")
    a = ap.parse_args()
    llm = None
    if a.llm:
        if not os.environ.get("ANTHROPIC_API_KEY"):
            sys.exit("bench/judge.py: --llm claude needs ANTHROPIC_API_KEY")
        from procmem.llm import AnthropicLLM
        llm = AnthropicLLM(model=a.model)
    a.out = a.out or str(REPO / "bench" / "results" / ("judge-llm.json" if llm else "judge.json"))
    mirrors, rows, skipped, t0 = Path(a.mirrors), [], {}, time.perf_counter()
    sources = {"qa: Reflexion HotpotQA (ReAct + reflexion)": hotpotqa_runs,
               "qa: Reflexion HotpotQA (ReAct, no reflexion)": lambda: hotpotqa_base_runs(mirrors),
               "tool: tau-bench gpt-4o airline": lambda: tau_runs(mirrors),
               "coding: mini-SWE-agent Gemini 3 Pro, SWE-bench Verified": lambda: msa_runs(mirrors, a.limit),
               "coding: Reflexion programming (MBPP dev; HumanEval, LeetCodeHard held out)": lambda: programming_runs(mirrors)}
    signals = {}
    for name, runs in sources.items():
        try:
            rows += evaluate(name, runs(), signals, llm, a.per_source)
        except (FileNotFoundError, subprocess.CalledProcessError) as e:
            skipped[name] = str(e)
            print(f"skipped {name}: {e}")
    held = [r for r in rows if r["split"] == "held out"]
    rows += [_pooled(rows, "all sources, all splits"), _pooled(held, "all sources, held out only")]
    out = dict(commit=git_commit(), judge="offline-rules-v3" if llm is None else f"llm: {llm.model}", seconds=round(time.perf_counter() - t0, 1), rows=rows, skipped=skipped,
               unreadable_records=UNREADABLE, signals={src: signal_table(c) for src, c in signals.items()},
               note="machine shared with other jobs (2 cores); timings indicative only")
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"{r['source'][:52]:<52} {r['split']:<9} n={r['n']:<4} coverage={r['coverage']} accuracy={r['accuracy']} "
              f"balanced={r['balanced_accuracy']} false_success={r['false_success_rate']}")
    for src, table in out["signals"].items():
        print(f"signals, {src}:")
        for r in table:
            print(f"  {r['split']:<9} {r['signal'][:62]:<62} n={r['n']:<4} failures={r['failures']:<4} share={r['failure_share']}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
