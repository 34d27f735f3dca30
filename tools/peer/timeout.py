"""A pytest plugin: each test's call gets ``EMBER_PEER_TIMEOUT`` seconds (default 120) on the main thread's
SIGALRM, so one hanging test fails alone instead of stopping the file. Used by compare.py for both engines."""
from __future__ import annotations

import os
import signal

import pytest


class PeerTimeout(BaseException):
    """Raised in a test that ran past its limit (a BaseException, so the test cannot swallow it)."""


def _alarm(signum, frame):
    raise PeerTimeout(f"test ran past EMBER_PEER_TIMEOUT={os.environ.get('EMBER_PEER_TIMEOUT', '120')} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(os.environ.get("EMBER_PEER_TIMEOUT", "120")))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
