"""Fixtures of the capture tests: ``fresh_ember`` resets ember around a test, ``counter`` is a fresh
``CountingBackend`` (see harness.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.capture.harness import CountingBackend  # noqa: E402


@pytest.fixture
def fresh_ember():
    import ember

    ember.reset()
    yield
    ember.reset()


@pytest.fixture
def counter(fresh_ember):
    return CountingBackend()
