"""Shared pytest configuration for procmem's plain tests."""
import sys
from pathlib import Path

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: big stores or many processes (still run in CI; deselect with -m 'not slow')")
