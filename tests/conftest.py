"""Shared pytest configuration for procmem's plain tests."""
import socket, sys
from pathlib import Path

import pytest

try: import procmem  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a source tree


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: big stores or many processes (still run in CI; deselect with -m 'not slow')")


LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.fixture
def no_network(monkeypatch):
    "No network: only loopback connections; a dummy key; a stray default client points at a closed local port."
    from procmem.testing import DUMMY_API_KEY
    real_connect = socket.socket.connect
    def guarded_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise AssertionError(f"a test tried to reach the network: {address!r}")
        return real_connect(sock, address)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    for k in ("PROCMEM_MODEL", "PROCMEM_RECORD", "ANTHROPIC_AUTH_TOKEN"): monkeypatch.delenv(k, raising=False)
