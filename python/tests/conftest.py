"""Shared fixtures: small runs made once per session, in temporary folders."""

import pytest

import mechlab


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    # Default folders (runs/, sweeps/) land in the test's own folder.
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def induction_run(tmp_path_factory):
    """induction-simplified, 50 steps (f64): about a second."""
    out = tmp_path_factory.mktemp("runs") / "induction"
    return mechlab.run("induction-simplified", overrides={"train.steps": 50}, out=out)


@pytest.fixture(scope="session")
def selection_f32_run(tmp_path_factory):
    """selection-synthetic in f32, shortened."""
    out = tmp_path_factory.mktemp("runs") / "selection32"
    return mechlab.run(
        "selection-synthetic",
        overrides={"model.dtype": "f32"},
        out=out,
    )
