"""The markers' machinery of tests/conftest.py: `pytest -n` (pytest-xdist) is refused unless `-m` leaves out the
`dag` tests (each worker would otherwise make a whole-DAG run of its own)."""

from __future__ import annotations

from types import SimpleNamespace

import conftest
import pytest


def _config(markexpr: str, n: int | None = 2):
    return SimpleNamespace(option=SimpleNamespace(numprocesses=n, markexpr=markexpr))


@pytest.mark.parametrize("markexpr", ["", "dag", "not slow", "not dag or slow", "slow or dag"])
def test_parallel_runs_that_select_dag_tests_are_refused(markexpr, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    with pytest.raises(pytest.UsageError, match="add -m 'not dag'"):
        conftest.pytest_configure(_config(markexpr))


@pytest.mark.parametrize("markexpr", ["not dag", "not dag and not slow", "slow and not dag", "not (dag or slow)"])
def test_parallel_unit_test_runs_and_serial_runs_pass(markexpr, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    conftest.pytest_configure(_config(markexpr))
    conftest.pytest_configure(_config("", n=None))  # no -n: anything goes
    conftest.pytest_configure(_config("dag", n=0))
