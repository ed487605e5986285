"""presets() and config(): resolution and the errors of bad overrides."""

import numpy as np
import pytest

import mechlab


def test_presets_lists_the_embedded_presets():
    p = mechlab.presets()
    assert p[0] == "induction-simplified"
    assert {"selection-synthetic", "topic-value", "induction-full"} <= set(p)
    assert len(p) == len(set(p))


def test_config_applies_typed_overrides():
    c = mechlab.config("induction-simplified", {"train.steps": 200, "model.n_heads": 2, "train.lr": 2})
    assert c["experiment"] == "induction"
    assert c["train"]["steps"] == 200 and c["model"]["n_heads"] == 2
    # An int where the default is a float is widened, as --set does.
    assert c["train"]["lr"] == 2.0 and isinstance(c["train"]["lr"], float)
    c = mechlab.config("induction-simplified", {"data.parents": [1, 3], "model.loss": "nll"})
    assert c["data"]["parents"] == [1, 3] and c["model"]["loss"] == "nll"
    # numpy scalars are config values too.
    c = mechlab.config("induction-simplified", {"train.steps": np.int64(7), "train.lr": np.float32(0.5)})
    assert c["train"]["steps"] == 7 and c["train"]["lr"] == 0.5


def test_config_from_a_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('experiment = "induction"\n[train]\nsteps = 3\n')
    assert mechlab.config(f)["train"]["steps"] == 3
    assert mechlab.config(str(f), {"train.steps": 4})["train"]["steps"] == 4


def test_unknown_key_names_the_closest():
    with pytest.raises(mechlab.ConfigError, match=r"unknown key `train.lrr`.*did you mean `train.lr`"):
        mechlab.config("induction-simplified", {"train.lrr": 1.0})


def test_wrong_type_names_key_and_types():
    with pytest.raises(ValueError, match=r"`train.steps` must be an integer, got a number"):
        mechlab.config("induction-simplified", {"train.steps": 0.5})
    with pytest.raises(mechlab.ConfigError, match=r"`model.n_heads` must be an integer, got a string"):
        mechlab.config("induction-simplified", {"model.n_heads": "three"})


def test_values_that_are_not_config_values():
    with pytest.raises(mechlab.ConfigError, match=r"override `train.lr`: a NoneType"):
        mechlab.config("induction-simplified", {"train.lr": None})
    with pytest.raises(mechlab.ConfigError, match=r"override `train`: a dict"):
        mechlab.config("induction-simplified", {"train": {"lr": 1.0}})
    with pytest.raises(mechlab.ConfigError, match=r"dotted strings"):
        mechlab.config("induction-simplified", {3: 1})


def test_invalid_enum_value_is_a_config_error():
    with pytest.raises(mechlab.ConfigError, match=r"optimizer|sgd"):
        mechlab.config("induction-simplified", {"train.optimizer": "sgdd"})


def test_unknown_preset_suggests_one():
    with pytest.raises(mechlab.ConfigError, match=r"no preset or config file named `induction-simplifed`.*induction-simplified"):
        mechlab.config("induction-simplifed")


def test_errors_are_mechlab_errors():
    assert issubclass(mechlab.ConfigError, mechlab.MechlabError)
    assert issubclass(mechlab.ConfigError, ValueError)
    assert issubclass(mechlab.RunFolderError, FileNotFoundError)
