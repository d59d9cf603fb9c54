"""Run every notebook in nbs/ as a pytest case, the way `nbdev_test` does.

`nbdev_test` exits 0 when it finds no notebooks, so a wrong path would pass silently; here the
notebooks are found relative to this file and their number is asserted. Each notebook runs with
`nbdev.test.test_nb` (cwd nbs/, the `tst_flags` of settings.ini skipped) in its own process, as
nbdev_test's workers do: notebook cells `@patch` library classes, and running them inside the
pytest process would leave those patches in place for the tests that follow."""
import configparser, json, subprocess, sys, textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
NOTEBOOKS = sorted(p for p in NBS.glob("*.ipynb") if not p.name.startswith(("_", ".")))

_RUNNER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from nbdev.test import test_nb
    fn, skip, force, base = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
    ok, elapsed = test_nb(fn, skip_flags=skip, force_flags=force, showerr=True, basepath=base)
    print(json.dumps({"ok": ok, "elapsed": elapsed}))
""")


def _skip_flags() -> list[str]:
    "The `tst_flags` of settings.ini: cells carrying these flags are skipped, as nbdev_test skips them."
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "settings.ini")
    return cfg["DEFAULT"].get("tst_flags", "").split()


def run_notebook(fn: Path, skip_flags=(), force_flags=(), cwd=NBS, timeout=600) -> tuple[bool, float, str]:
    "Run `fn` with nbdev's `test_nb` in a fresh interpreter whose cwd is `cwd`; (success, seconds, stderr)."
    r = subprocess.run([sys.executable, "-c", _RUNNER, str(fn), json.dumps(list(skip_flags)), json.dumps(list(force_flags)), str(ROOT)],
                       cwd=cwd, capture_output=True, text=True, timeout=timeout)
    try: res = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError): return False, 0.0, f"runner crashed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return res["ok"], res["elapsed"], r.stderr


def test_notebooks_found():
    assert NBS.is_dir(), f"no notebook directory at {NBS}"
    assert len(NOTEBOOKS) >= 6, f"expected at least 6 notebooks in {NBS}, found {[p.name for p in NOTEBOOKS]}"
    assert {"notest", "slow"} <= set(_skip_flags())


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(nb):
    ok, elapsed, err = run_notebook(nb, skip_flags=_skip_flags())
    assert ok, f"{nb.name} failed after {elapsed:.1f}s:\n{err[-6000:]}"


def test_landing_notebook_runs_and_matches_readme():
    "index.ipynb (the README's source) runs from the repository root, and README.md is its rendering."
    ok, elapsed, err = run_notebook(ROOT / "index.ipynb", skip_flags=_skip_flags(), cwd=ROOT)
    assert ok, f"index.ipynb failed after {elapsed:.1f}s:\n{err[-6000:]}"
    r = subprocess.run([sys.executable, str(ROOT / ".ci" / "make_readme.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _write_nb(path: Path, cells: list[str]) -> Path:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": src}
                    for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"display_name": "python3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def test_runner_reports_failures_and_respects_flags(tmp_path):
    "The runner used above really fails a failing notebook, skips cells flagged notest/slow, and runs from the notebook's folder."
    bad = _write_nb(tmp_path / "bad.ipynb", ["x = 1", "assert x == 2"])
    ok, _, err = run_notebook(bad, skip_flags=_skip_flags(), cwd=tmp_path)
    assert ok is False and "AssertionError" in err
    (tmp_path / "data.txt").write_text("here")
    flagged = _write_nb(tmp_path / "flagged.ipynb", ["x = 1", "#| notest\nassert False", "#| slow\nraise SystemError",
                                                     "assert open('data.txt').read() == 'here'"])
    assert run_notebook(flagged, skip_flags=_skip_flags(), cwd=tmp_path)[0] is True
    assert run_notebook(flagged, skip_flags=_skip_flags(), force_flags=["slow"], cwd=tmp_path)[0] is False
