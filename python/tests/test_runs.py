"""run(), load() and what a Run reads: config, summary, metrics, checkpoints."""

import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import mechlab
from mechlab import _native


def read_safetensors(path):
    """An independent reader of the safetensors format (header length, JSON
    header, little-endian data), to check the native arrays against."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = {"F64": "<f8", "F32": "<f4"}[info["dtype"]]
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=dt).reshape(info["shape"])
    return out


def test_run_returns_a_finished_run(induction_run):
    r = induction_run
    assert (r.dir / "report.html").is_file()
    assert r.config["train"]["steps"] == 50
    s = r.summary
    assert s["experiment"] == "induction" and s["seed"] == 2024
    assert np.isfinite(s["metrics"]["a"]) and s["metrics"]["a"] > 0.01  # a grew from a_init
    assert r.verdicts and {"claim", "prediction", "measured", "pass"} <= set(r.verdicts[0])
    # run.json records the Python call that made the run.
    made_by = " ".join(json.loads((r.dir / "run.json").read_text())["command"])
    assert "mechlab.run('induction-simplified'" in made_by and "'train.steps': 50" in made_by


def test_run_default_folder_and_seed():
    r = mechlab.run("selection-synthetic", seed=3)
    assert r.dir == Path("runs/selection-synthetic-s3")
    assert r.summary["seed"] == 3 and r.config["seed"] == 3
    r2 = mechlab.run("selection-synthetic", seed=3)
    assert r2.dir == Path("runs/selection-synthetic-s3-2")
    # Same seed, same results: determinism crosses the binding.
    assert r2.summary == r.summary


def test_run_from_a_file(tmp_path):
    f = tmp_path / "short.toml"
    f.write_text('experiment = "selection"\nseed = 1\n[synthetic]\nn_train = 64\nn_test = 64\n')
    r = mechlab.run(f, out=tmp_path / "short")
    assert r.config["synthetic"]["n_train"] == 64 and r.summary["seed"] == 1


def test_bad_override_fails_before_any_folder(tmp_path):
    out = tmp_path / "never"
    with pytest.raises(mechlab.ConfigError, match="train.stepz"):
        mechlab.run("induction-simplified", overrides={"train.stepz": 5}, out=out)
    assert not out.exists()


def test_run_into_an_existing_run_is_an_error(induction_run):
    with pytest.raises(mechlab.MechlabError, match="already holds a run"):
        mechlab.run("induction-simplified", overrides={"train.steps": 1}, out=induction_run.dir)


def test_metrics_as_a_dataframe(induction_run):
    pd = pytest.importorskip("pandas")
    df = induction_run.metrics()
    assert isinstance(df, pd.DataFrame)
    assert df["step"].dtype == np.int64 and list(df["step"][:3]) == [0, 10, 20]
    assert {"loss", "lr"} <= set(df.columns) and df["loss"].dtype == np.float64
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]
    probe = induction_run.metrics("probe")
    assert "share.{1,2}" in probe.columns and probe["step"].iloc[-1] == 50
    # The probe's last share is the summary's.
    assert probe["share.{1,2}"].iloc[-1] == pytest.approx(induction_run.summary["metrics"]["share.{1,2}"])


def test_metrics_without_pandas(induction_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    cols = induction_run.metrics("train")
    assert isinstance(cols, dict) and isinstance(cols["loss"], np.ndarray)
    assert len(cols["step"]) == len(cols["loss"]) == 5


def test_unknown_event_names_the_events(induction_run):
    with pytest.raises(mechlab.ConfigError, match=r"no `trian` records \(events: probe, train\)"):
        induction_run.metrics("trian")


def test_checkpoints_match_the_files(induction_run):
    r = induction_run
    steps = r.steps()
    assert steps[0] == 0 and steps[-1] == 50 and steps == sorted(steps)
    latest = r.checkpoint()
    on_disk = read_safetensors(r.dir / "checkpoints" / "step_000050.safetensors")
    assert set(latest) == {k for k in on_disk if not k.startswith("optim.")}
    for k, v in latest.items():
        assert v.dtype == np.float64 and v.shape == on_disk[k].shape
        np.testing.assert_array_equal(v, on_disk[k])
    first = r.checkpoint(step=0)
    assert any(not np.array_equal(first[k], latest[k]) for k in latest)
    # The array owns its buffer (handed over from Rust, not a view of a temporary).
    assert latest[next(iter(latest))].flags.writeable


def test_checkpoint_in_float32(selection_f32_run):
    ck = selection_f32_run.checkpoint()
    assert ck and all(v.dtype == np.float32 for v in ck.values())


def test_missing_step_lists_the_steps(induction_run):
    with pytest.raises(mechlab.CheckpointError, match=r"no checkpoint at step 3 \(steps: 0, 1, 2, 4"):
        induction_run.checkpoint(step=3)


def test_corrupt_checkpoint_is_an_exception(induction_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(induction_run.dir, copy)
    ck = copy / "checkpoints" / "step_000050.safetensors"
    ck.write_bytes(ck.read_bytes()[:100])  # truncated
    r = mechlab.load(copy)
    with pytest.raises(mechlab.CheckpointError, match=r"step_000050.safetensors: not a readable checkpoint"):
        r.checkpoint()
    ck.write_bytes(b"\xff" * 64)  # garbage
    with pytest.raises(mechlab.CheckpointError, match="corrupt"):
        r.checkpoint(step=50)
    # The other checkpoints still read.
    assert r.checkpoint(step=32)


def test_missing_run_folder(tmp_path):
    with pytest.raises(mechlab.RunFolderError, match="no such run folder"):
        mechlab.load(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        mechlab.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(mechlab.RunFolderError, match=r"not a run folder \(no config.toml\)"):
        mechlab.load(tmp_path / "empty")
    with pytest.raises(mechlab.RunFolderError):
        _native.steps(tmp_path / "empty")


def test_corrupt_config_and_summary(induction_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(induction_run.dir, copy)
    (copy / "summary.json").write_text("{not json")
    r = mechlab.load(copy)
    with pytest.raises(mechlab.MechlabError, match=r"summary.json: malformed summary"):
        r.summary
    (copy / "config.toml").write_text("[train\nsteps = 1\n")
    with pytest.raises(mechlab.ConfigError, match=r"config.toml: .*line 1"):
        mechlab.load(copy)


def test_corrupt_metrics_line(induction_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(induction_run.dir, copy)
    with open(copy / "metrics.jsonl", "a") as f:
        f.write("{truncated\n")
    with pytest.raises(mechlab.MechlabError, match=r"metrics.jsonl: line \d+: not a JSON object"):
        mechlab.load(copy).metrics()
