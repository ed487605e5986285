"""Bad arguments from Python: a wrong type raises TypeError and a bad value
ConfigError, each naming the argument, before any work starts."""

import numpy as np
import pytest

import mechlab

SMALL = {"synthetic.n_train": 64, "synthetic.n_test": 32, "train.steps": 2}


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"seed": -1}, mechlab.ConfigError, r"seed -1: expected an integer from 0"),
        ({"seed": 2**64}, mechlab.ConfigError, r"seed 18446744073709551616"),
        ({"seed": "3"}, TypeError, r"seed: expected an int, got str '3'"),
        ({"seed": 1.5}, TypeError, r"seed: expected an int, got float"),
        ({"overrides": [("train.lr", 1)]}, TypeError, r"overrides: expected a dict"),
        ({"out": 3}, TypeError, r"out: expected a path"),
    ],
)
def test_run_arguments(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        mechlab.run("selection-synthetic", **kwargs)
    assert not (tmp_path / "runs").exists()


def test_run_source_must_be_a_name_or_path():
    with pytest.raises(TypeError, match=r"preset_or_path: expected a preset name or a path, got int"):
        mechlab.run(3)  # type: ignore[arg-type]


def test_override_values_are_named_precisely():
    # An integer too large for the config is not "a number".
    with pytest.raises(mechlab.ConfigError, match=r"override `train.steps`: 1180591620717411303424 does not fit"):
        mechlab.config("selection-synthetic", {"train.steps": 2**70})
    # numpy scalars are what they say they are: a numpy bool is a bool.
    c = mechlab.config("selection-synthetic", {"probe.swap_selected": np.bool_(True), "train.steps": np.int64(7)})
    assert c["probe"]["swap_selected"] is True and c["train"]["steps"] == 7


@pytest.mark.parametrize(
    "grid, kwargs, error, message",
    [
        ({"model.d_model": 16}, {}, TypeError, r"grid\['model.d_model'\]: expected a list of values, got int 16"),
        ({"model.d_model": "16"}, {}, TypeError, r"grid\['model.d_model'\]: expected a list"),
        ([("model.d_model", [16])], {}, TypeError, r"grid: expected a dict"),
        ({"model.d_model": [16]}, {"seeds": [0, -2]}, mechlab.ConfigError, r"seeds -2"),
        ({"model.d_model": [16]}, {"seeds": 3}, TypeError, r"seeds: expected 'a..b'"),
        ({"model.d_model": [16]}, {"jobs": 0}, mechlab.ConfigError, r"jobs 0: expected at least 1"),
        ({"model.d_model": [16]}, {"shard": 1}, TypeError, r"shard: expected a pair"),
        ({"model.d_model": [16]}, {"overrides": ["x"]}, TypeError, r"overrides: expected a dict"),
    ],
)
def test_sweep_arguments(tmp_path, grid, kwargs, error, message):
    with pytest.raises(error, match=message):
        mechlab.sweep("selection-synthetic", grid, out=tmp_path / "sw", **kwargs)
    assert not (tmp_path / "sw").exists()


def test_a_numpy_array_is_a_list_of_grid_values(tmp_path):
    s = mechlab.sweep(
        "selection-synthetic", {"model.d_model": np.array([8])}, seeds=[0], overrides=SMALL, out=tmp_path / "sw"
    )
    assert list(s.index()["grid:model.d_model"]) == [8]


def test_a_config_without_an_experiment_key_says_so(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text("seed = 1\n")
    with pytest.raises(mechlab.ConfigError, match=r"mine.toml: no `experiment` key.*one of: .*selection"):
        mechlab.config(f)
    f.write_text("experiment = 3\n")
    with pytest.raises(mechlab.ConfigError, match=r"`experiment` must be a paper's name in quotes"):
        mechlab.config(f)


def test_reproduce_papers_must_be_names():
    with pytest.raises(TypeError, match=r"papers: expected paper names \(str\), got int 1"):
        mechlab.reproduce([1])  # type: ignore[list-item]
    with pytest.raises(mechlab.ConfigError, match=r"jobs 0: expected at least 1"):
        mechlab.reproduce(["selection"], jobs=0)
    with pytest.raises(mechlab.ConfigError, match="seeds 0"):
        mechlab.reproduce(["selection"], seeds=0)
