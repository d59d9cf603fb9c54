"""procmem.analysis on a bank nobody here wrote: memories learned offline from the real trajectories in
tests/fixtures/trajectories (other projects' files, licences in each folder's LICENSE-NOTICE.md), then
30 of those tasks replayed through `run_with_memory` so retrievals, scores and outcomes exist; and the
old-format store fixtures, opened read-only. Every expected number is recomputed from the store's own
API (`items`, `count`, `events`), not written down."""
import hashlib, math, os, shutil, struct
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
import pytest

pd = pytest.importorskip("pandas")
matplotlib = pytest.importorskip("matplotlib")
import fastcore.test as ft
from matplotlib.figure import Figure
import matplotlib.pyplot as plt

from procmem.analysis import _USAGE_COLUMNS as USAGE_COLUMNS, _UTILITY_BINS as UTILITY_BINS
from procmem.analysis import (
    EVENT_COLUMNS, ITEM_COLUMNS, REPORT_PLOTS, RUN_COLUMNS,
    plot_ab, plot_growth, plot_retrieval_scores, plot_usage, plot_utility, runs_df, write_report,
)
from procmem.core import MemoryItem, STATUSES
from procmem.ingest import read_logs
from procmem.loop import learn_from_trajectory, run_with_memory
from procmem.store import MemoryStore
import procmem.store_status  # noqa: F401  (store.archive)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PNG = b"\x89PNG\r\n\x1a\n"


def _replay(traj):
    "An agent that does again what the recorded run did."
    return lambda task, block: traj


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    "(store path, learn results, loop results) of a bank built from the real trajectories."
    trajs = read_logs(FIXTURES / "trajectories").trajectories
    assert len(trajs) >= 30, len(trajs)
    path = tmp_path_factory.mktemp("real") / "bank.db"
    with MemoryStore(path) as s:
        learned = [learn_from_trajectory(t, s) for t in trajs]
        runs = [run_with_memory(t.task, _replay(t), s) for t in trajs[:30]]
        bad = next(m for m in s.items() if m.failure_count or m.source_type == "failure")
        s.quarantine([bad.id], "looks harmful", by="test-reviewer")
    return path, learned, runs


@pytest.fixture
def ro(real):
    with MemoryStore(real[0], readonly=True) as s:
        yield s


def _digest(path: Path) -> dict:
    "sha256 of the store file and its -wal/-shm side files (None when absent)."
    side = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in side}


# --- to_df ---------------------------------------------------------------------------------------
def test_to_df_columns_dtypes_and_counters(ro):
    df = ro.to_df()
    assert list(df.columns) == list(ITEM_COLUMNS)
    assert {c: str(t) for c, t in df.dtypes.items()} == ITEM_COLUMNS
    items = {m.id: m for m in ro.items(status=None)}
    assert len(df) == ro.count(status=None) == len(items) > 10
    for row in df.itertuples():
        m = items[row.id]
        assert (row.retrieved, row.uses, row.successes, row.failures) == (
            m.access_count, m.use_count, m.success_count, m.failure_count)
        assert row.created_at == pd.Timestamp(m.created_at) and str(row.created_at.tz) == "UTC"
        assert (row.archived, row.quarantined) == (m.status == "archived", m.status == "quarantined")
    assert df.retrieved.sum() > 0 and df.uses.sum() > 0  # the replayed runs were counted
    assert df.utility.between(0, 1).all()


def test_to_df_status_filter(ro):
    for status in STATUSES:
        sub = ro.to_df(status=status)
        assert len(sub) == ro.count(status=status)
        assert set(sub.status) <= {status}
    assert ro.to_df(status="quarantined").quarantined.all() and ro.count(status="quarantined") >= 1
    assert len(ro.to_df(status=["active", "quarantined"])) == ro.count(status=None) - ro.count("archived")
    ft.test_fail(lambda: ro.to_df(status="gone"), contains="status must be one of")


def test_to_df_empty_store_same_columns_and_dtypes(ro):
    empty = MemoryStore().to_df()
    assert len(empty) == 0
    assert list(empty.columns) == list(ITEM_COLUMNS)
    assert dict(empty.dtypes) == dict(ro.to_df().dtypes)


def test_to_df_archived_items(tmp_path):
    s = MemoryStore(tmp_path / "a.db")
    keep = s.add(MemoryItem("Keep this one", content="1. keep"))
    gone = s.add(MemoryItem("Archive that one", content="1. archive me", source_type="failure"))
    s.archive([gone.id], "unused", by="test")
    df = s.to_df().set_index("id")
    assert df.loc[gone.id, ["status", "archived", "quarantined"]].tolist() == ["archived", True, False]
    assert list(s.to_df(status="active").id) == [keep.id]
    fig = plot_growth(s)  # the archived one counts until its archive event
    assert fig.axes[0].lines[-1].get_ydata()[-1] == 1
    assert "0 quarantined, 1 archived" in fig.axes[0].get_title()


def test_to_df_old_format_store_read_only(tmp_path):
    for name in ("store_format1.db", "store_format2_schema1.db"):
        copy = tmp_path / name
        shutil.copy(FIXTURES / "stores" / name, copy)
        before = _digest(copy)
        with MemoryStore(copy, readonly=True) as s:
            df = s.to_df()
            assert len(df) == s.count(status=None) and list(df.columns) == list(ITEM_COLUMNS)
            write_report(s, tmp_path / f"report-{name}")
        assert _digest(copy) == before


# --- events_df -----------------------------------------------------------------------------------
def test_events_df_matches_the_log(ro):
    raw = ro.events()
    ev = ro.events_df()
    assert list(ev.columns) == list(EVENT_COLUMNS)
    assert {c: str(t) for c, t in ev.dtypes.items()} == EVENT_COLUMNS
    assert ev.seq.tolist() == [e["seq"] for e in raw]
    assert ev.n_ids.tolist() == [len(e["ids"]) for e in raw]
    runs = [e["detail"]["trajectory_id"] for e in raw if e["detail"].get("trajectory_id")]
    assert ev.trajectory_id.dropna().tolist() == runs
    assert ev.by.dropna().tolist() == ["test-reviewer"]


def test_events_df_filters(ro):
    raw = ro.events()
    mid = raw[len(raw) // 2]["seq"]
    assert ro.events_df(since=mid).seq.tolist() == [e["seq"] for e in raw if e["seq"] > mid]
    kinds = ["loop.retrieve", "quarantine"]
    assert ro.events_df(kind=kinds).seq.tolist() == [e["seq"] for e in raw if e["kind"] in kinds]
    first = pd.Timestamp(raw[0]["at"])
    assert len(ro.events_df(since=first.to_pydatetime())) == len(raw)
    assert len(ro.events_df(since=first.isoformat())) == len(raw)
    assert len(ro.events_df(since=(first + pd.Timedelta(days=1)).tz_localize(None).isoformat())) == 0
    wide = ro.events_df(kind="loop.outcome", expand=True)
    assert {"attributed", "success", "verdict"} <= set(wide.columns)
    ft.test_fail(lambda: ro.events_df(since=True), contains="since must be a sequence number (int) or a time")
    ft.test_fail(lambda: ro.events_df(since="not a time"), contains="cannot read 'not a time' as a time")
    ft.test_fail(lambda: ro.events_df(kind=[""]), contains="kind must be an event kind")


# --- runs_df -------------------------------------------------------------------------------------
def test_runs_df_real_results(real):
    _, learned, runs = real
    df = runs_df(runs + learned)
    assert list(df.columns) == list(RUN_COLUMNS)
    assert {c: str(t) for c, t in df.dtypes.items()} == RUN_COLUMNS
    assert df.type.tolist() == ["loop"] * len(runs) + ["learn"] * len(learned)
    assert df.success.tolist()[: len(runs)] == [pd.NA if r.success is None else r.success for r in runs]
    assert df.n_injected.tolist()[: len(runs)] == [len(r.injected) for r in runs]
    assert df.steps.tolist() == [len(r.trajectory.steps) for r in runs + learned]
    assert df.n_stored.tolist()[len(runs):] == [len(r.stored) for r in learned]
    assert df.memory[: len(runs)].all() and df.memory[len(runs):].isna().all()
    assert (df.total_ms[: len(runs)] > 0).all() and df.total_ms[len(runs):].isna().all()


def test_runs_df_errors_and_empty():
    assert list(runs_df([]).columns) == list(RUN_COLUMNS)
    ft.test_fail(lambda: runs_df([1]), contains="result 0 is a int, expected a LoopResult or LearnResult")
    ft.test_fail(lambda: runs_df({"task": "x"}), contains="expected a list of LoopResult/LearnResult, got dict")
    ft.test_fail(lambda: runs_df(None), contains="got NoneType")


def test_runs_df_unjudged_run():
    def agent(task, block):
        return dict(task=task, steps=[dict(action="ls")], answer="ok")

    r = run_with_memory("list the files", agent, MemoryStore(), learn=False)
    row = runs_df([r]).iloc[0]
    assert row.success is pd.NA and row.verdict is pd.NA and row.steps == 1 and row.n_stored == 0


# --- plots ---------------------------------------------------------------------------------------
def test_plots_return_figures_and_leak_none(ro):
    before = plt.get_fignums()
    figs = [plot_growth(ro), plot_utility(ro), plot_usage(ro), plot_retrieval_scores(ro)]
    assert all(isinstance(f, Figure) for f in figs)
    assert plt.get_fignums() == before


def test_plot_growth_ends_at_the_active_count(ro):
    ax = plot_growth(ro).axes[0]
    present = {m.source_type for m in ro.items(status=None)}
    types = [t for t in ("success", "failure", "seed", "contrastive") if t in present]
    assert [l.get_label() for l in ax.lines] == types + ["all"]
    assert ax.lines[-1].get_ydata()[-1] == len(ro)  # the quarantined one left at its event


def test_plot_utility_bars_per_status(ro):
    ax = plot_utility(ro).axes[0]
    present = [s for s in STATUSES if ro.count(status=s)]
    assert len(ax.patches) == UTILITY_BINS * len(present)
    assert sum(p.get_height() for p in ax.patches) == ro.count(status=None)


def test_plot_usage_counts_active_memories(ro):
    axes = plot_usage(ro).axes
    assert len(axes) == len(USAGE_COLUMNS)
    for ax in axes:
        assert sum(p.get_height() for p in ax.patches) == len(ro)
    top = max(m.access_count for m in ro)
    assert len(axes[0].patches) == (top + 1 if top <= 20 else 20)


def test_plot_retrieval_scores_counts_every_retrieved_pair(ro):
    events = ro.events(kind="loop.retrieve")
    pairs = [(hit, hit[0] in e["ids"]) for e in events for hit in e["detail"]["retrieved"]]
    assert pairs, "the replayed runs retrieved nothing"
    ax = plot_retrieval_scores(ro).axes[0]
    assert len(ax.patches) == 40
    assert sum(p.get_height() for p in ax.patches) == len(pairs)
    assert sum(p.get_height() for p in ax.patches[:20]) == sum(inj for _, inj in pairs)
    empty = plot_retrieval_scores(MemoryStore()).axes[0]
    assert not empty.patches and "No retrieval scores yet" in empty.texts[0].get_text()


def test_plot_ab_from_summarize_ab():
    eval_mod = pytest.importorskip("procmem.eval")
    raw = pd.DataFrame(dict(
        task=[f"task {i}" for i in range(8)] * 2, task_id=[f"t{i}" for i in range(8)] * 2,
        arm=["none"] * 8 + ["memory"] * 8, repeat=0,
        success=[True, False, False, True, False, False, True, False]
        + [True, True, False, True, True, False, True, True],
        steps=3, tokens=0, cost=0.0, latency_ms=1.0, injected_ids=[[]] * 16))
    summary = eval_mod.summarize_ab(raw)
    for frame in (summary, raw):
        ax = plot_ab(frame).axes[0]
        assert [round(p.get_height(), 6) for p in ax.patches] == [0.375, 0.75]
        assert len(ax.texts) == 1 and ax.texts[0].get_text().startswith("+0.38")


def test_plot_ab_errors():
    no_ci = pd.DataFrame(dict(arm=["a"], success_rate=[0.5]))
    ft.test_fail(lambda: plot_ab(no_ci), contains="success_ci_low/success_ci_high or n")
    ft.test_fail(lambda: plot_ab(pd.DataFrame(dict(x=[1]))), contains="plot_ab: expected summarize_ab's frame")
    ft.test_fail(lambda: plot_ab({"arm": "a"}), contains="got dict")


# --- write_report --------------------------------------------------------------------------------
def test_write_report_read_only_leaves_the_store_untouched(real, tmp_path):
    path = real[0]
    before = _digest(path)
    with MemoryStore(path, readonly=True) as s:
        paths = write_report(s, tmp_path / "out" / "nested")
        n, counts = s.count(status=None), {st: s.count(status=st) for st in STATUSES}
    assert _digest(path) == before
    assert list(paths) == [*REPORT_PLOTS, "report"]
    for name in REPORT_PLOTS:
        data = paths[name].read_bytes()
        assert data[:8] == PNG and data[12:16] == b"IHDR"
        w, h = struct.unpack(">II", data[16:24])
        assert w > 300 and h > 200
    md = paths["report"].read_text(encoding="utf-8")
    line = (f"{n} memories ({counts['active']} active, {counts['quarantined']} quarantined,"
            f" {counts['archived']} archived)")
    assert line in md
    assert all(f"]({name}.png)" in md for name in REPORT_PLOTS)
    assert "test-reviewer" in md  # the quarantine is among the recent events


def test_write_report_writes_nothing_to_a_writable_store(real, tmp_path):
    copy = tmp_path / "copy.db"
    with MemoryStore(real[0], readonly=True) as s:
        s.export(tmp_path / "x.jsonl")
    with MemoryStore(copy) as s:
        s.import_file(tmp_path / "x.jsonl")
        rev, n_events = s.rev, len(s.events())
        write_report(s, tmp_path / "out")
        assert (s.rev, len(s.events())) == (rev, n_events)


def test_write_report_refuses_a_file_and_bad_arguments(real, tmp_path):
    with MemoryStore(real[0], readonly=True) as s:
        ft.test_fail(lambda: write_report(s, real[0]), contains="exists and is not a directory")
        target = tmp_path / "notes.txt"
        target.write_text("mine")
        ft.test_fail(lambda: write_report(s, target), contains=f"{target} exists and is not a directory")
        assert target.read_text() == "mine"
        ft.test_fail(lambda: write_report(s, tmp_path / "r", ab="table"), contains="got str")
        assert not (tmp_path / "r").exists()
    ft.test_fail(lambda: write_report(real[0], tmp_path / "r"), contains="store must be a MemoryStore")


def test_write_report_with_ab(ro, tmp_path):
    summary = pd.DataFrame(dict(arm=["none", "memory"], n=[20, 20], success_rate=[0.4, 0.6]))
    paths = write_report(ro, tmp_path, ab=summary)
    assert paths["ab"].read_bytes()[:8] == PNG
    md = paths["report"].read_text(encoding="utf-8")
    assert "## A/B comparison" in md and "| memory | 20 | 0.600 |" in md


def test_plots_take_a_filtered_frame(ro):
    df = ro.to_df()
    for domain in sorted(set(df.domain)):
        sub = df[df.domain == domain]
        ax = plot_utility(sub).axes[0]
        assert sum(p.get_height() for p in ax.patches) == len(sub)
        assert [sum(p.get_height() for p in a.patches) for a in plot_usage(sub).axes] == [len(sub)] * 3
    ft.test_fail(lambda: plot_utility(df[["id", "status"]]), contains="plot_utility: the frame has no column utility")


@pytest.mark.parametrize("status", [3, True, 1.5, pd.Timestamp("2026-01-01"), [3], ["active", ""], "\ud800"])
def test_to_df_bad_status_names_the_argument(ro, status):
    with pytest.raises((TypeError, ValueError), match="status must be"):
        ro.to_df(status=status)


def test_events_df_odd_arguments(ro):
    for kind in (3, 1.5, True, ["archive", 4], "\ud800", "a\nb"):
        with pytest.raises((TypeError, ValueError), match="kind must be an event kind"):
            ro.events_df(kind=kind)
    for since in ("", "NaT", "99999999999", "\ud800", 2.5):
        with pytest.raises((TypeError, ValueError), match="since"):
            ro.events_df(since=since)
    assert len(ro.events_df(since=2**70)) == 0
    assert len(ro.events_df(kind="no such kind")) == 0
    assert len(ro.events_df(since=pd.Timestamp("0001-01-01").to_pydatetime())) == len(ro.events())
