"""Helpers shared by the benchmark scripts (run as `python bench/<script>.py`, so this folder is on sys.path)."""
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    "The short commit the benchmark ran on, noting uncommitted changes in procmem/."
    try:
        h = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "procmem"], capture_output=True, text=True).stdout.strip()
        return h + (" + uncommitted changes in procmem/" if dirty else "")
    except OSError: return "unknown"
