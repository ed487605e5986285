"""Long calls: progress, Ctrl-C and resume, sweep(), reproduce()."""

import _thread
import json
import signal
import threading
import time

import numpy as np
import pytest

import mechlab
from mechlab import _native


def test_progress_reaches_the_total(tmp_path):
    seen = []
    _native.run(
        "induction-simplified",
        overrides={"train.steps": 30},
        out=tmp_path / "p",
        on_progress=lambda done, total, phase: seen.append((done, total, phase)),
    )
    assert seen[-1] == (30, 30, "done")
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)
    # The phases come in their order (a fast one may fall between two polls).
    order = ["data and model", "training", "probes and verdicts", "figures and report", "done"]
    phases = [p for i, (_, _, p) in enumerate(seen) if i == 0 or seen[i - 1][2] != p]
    assert phases == sorted(phases, key=order.index) and len(set(phases)) == len(phases)


def test_quiet_prints_nothing_and_not_quiet_draws_a_bar(tmp_path, capfd):
    pytest.importorskip("tqdm")
    mechlab.run("selection-synthetic", out=tmp_path / "q", quiet=True)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    # The default draws only for someone watching: not into a captured pipe.
    mechlab.run("selection-synthetic", out=tmp_path / "default")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    mechlab.run("selection-synthetic", out=tmp_path / "loud", quiet=False)
    _, err = capfd.readouterr()
    assert "selection-synthetic" in err and "2001/2001" in err
    assert "selection-synthetic: done" in err


def test_a_failing_progress_callback_stops_the_run(tmp_path):
    def boom(done, total, phase):
        raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        _native.run("induction-simplified", overrides={"train.steps": 200}, out=tmp_path / "b", on_progress=boom)
    # The stop flag was lowered again: the next run completes.
    r = mechlab.run("selection-synthetic", out=tmp_path / "after")
    assert r.finished and r.summary


def test_ctrl_c_checkpoints_and_resume_is_bit_identical(tmp_path):
    # A shell starts background jobs with SIGINT ignored, and then Python neither
    # installs its handler nor lets interrupt_main() simulate one: install it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_then_resume(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_then_resume(tmp_path):
    steps = 120
    full = mechlab.run("induction-simplified", overrides={"train.steps": steps}, out=tmp_path / "full")
    # Ctrl-C as the terminal sends it, once training is under way (the step-4
    # checkpoint exists), whatever the machine's load.
    def interrupt_when_training():
        mark = tmp_path / "cut" / "checkpoints" / "step_000004.safetensors"
        deadline = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        _thread.interrupt_main()

    watcher = threading.Thread(target=interrupt_when_training)
    watcher.start()
    with pytest.raises(KeyboardInterrupt, match=r"interrupted at step \d+; checkpoint .*step_\d+\.safetensors written"):
        mechlab.run("induction-simplified", overrides={"train.steps": steps}, out=tmp_path / "cut")
    watcher.join()
    cut = mechlab.load(tmp_path / "cut")
    assert not cut.finished and cut.verdicts == []
    with pytest.raises(mechlab.RunFolderError, match=r"no summary.json, the run has not finished .*mechlab.resume"):
        cut.summary
    stopped_at = cut.steps()[-1]
    assert 0 < stopped_at < steps
    seen = []
    _native.resume(cut.dir, on_progress=lambda d, t, p: seen.append((d, t, p)))
    done = mechlab.load(cut.dir)
    # The resumed run's progress starts where it stopped, not at 0.
    assert all(d >= stopped_at for d, t, _ in seen if t) and seen[-1] == (steps, steps, "done")
    assert done.steps()[-1] == steps
    a, b = full.checkpoint(), done.checkpoint()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert done.summary == full.summary


def test_sweep_runs_the_grid_times_the_seeds(tmp_path):
    pd = pytest.importorskip("pandas")
    s = mechlab.sweep(
        "selection-synthetic",
        {"model.d_model": [16, 32]},
        seeds=[0, 1],
        overrides={"synthetic.n_train": 128},
        out=tmp_path / "sw",
        jobs=2,
    )
    index = s.index()
    assert isinstance(index, pd.DataFrame) and len(index) == 4
    assert list(index["status"]) == ["ok"] * 4
    assert sorted(index["grid:model.d_model"]) == [16, 16, 32, 32]
    summary = s.summary()
    # Two seeds per point (a metric a run could not measure counts fewer).
    assert summary["n"].max() == 2 and set(summary["grid:model.d_model"]) == {16, 32}
    runs = s.runs()
    assert len(runs) == 4 and runs[0].config["synthetic"]["n_train"] == 128


def test_sweep_default_folder_seed_ranges_and_shards():
    s = mechlab.sweep("selection-synthetic", {"synthetic.n_train": [64]}, seeds="0..3", shard=(1, 2))
    assert str(s.dir) == "sweeps/selection-synthetic"
    # Runs 0, 1, 2 of the plan; shard 1 of 2 takes run 1 only.
    assert [r.dir.name for r in s.runs()] == ["p0-s1"]


def test_sweep_again_continues_and_another_sweep_is_refused(tmp_path):
    small = {"synthetic.n_train": 128, "synthetic.n_test": 64}
    out = tmp_path / "sw"
    s = mechlab.sweep("selection-synthetic", {"model.d_model": [16]}, seeds=[0, 1], overrides=small, out=out)
    index = (out / "index.csv").read_text()
    finished = out / "runs" / "p0-s0" / "metrics.jsonl"
    stamp = finished.stat().st_mtime_ns
    (out / "mine.txt").write_text("a user's note")
    (out / "runs" / "p0-s1" / "summary.json").unlink()
    # The same sweep again: the finished run is read, the cut-short one finished.
    s = mechlab.sweep("selection-synthetic", {"model.d_model": [16]}, seeds=[0, 1], overrides=small, out=out)
    assert (out / "index.csv").read_text() == index
    assert finished.stat().st_mtime_ns == stamp
    assert [r.dir.name for r in s.runs()] == ["p0-s0", "p0-s1"]
    # Another sweep is refused before anything is touched, each difference named.
    with pytest.raises(mechlab.SweepFolderError, match=r"--grid was `model.d_model=16`, now `model.d_model=32`"):
        mechlab.sweep("selection-synthetic", {"model.d_model": [32]}, seeds=[0, 1], overrides=small, out=out)
    with pytest.raises(FileExistsError, match="sweep.json"):
        mechlab.sweep("selection-synthetic", {"model.d_model": [16]}, seeds=[0, 1, 2], overrides=small, out=out)
    assert (out / "index.csv").read_text() == index and not (out / "runs" / "p0-s2").exists()
    # replace=True starts over; a user's file beside the results stays.
    s = mechlab.sweep(
        "selection-synthetic", {"model.d_model": [32]}, seeds=[2], overrides=small, out=out, replace=True
    )
    assert [r.dir.name for r in s.runs()] == ["p0-s2"] and (out / "mine.txt").is_file()
    assert not (out / "runs" / "p0-s0").exists()


def test_sweep_bad_input():
    with pytest.raises(mechlab.ConfigError, match="model.d_modl"):
        mechlab.sweep("selection-synthetic", {"model.d_modl": [1, 2]}, seeds=[0])
    with pytest.raises(mechlab.ConfigError, match="no values"):
        mechlab.sweep("selection-synthetic", {"model.d_model": []}, seeds=[0])
    with pytest.raises(mechlab.ConfigError, match="expected 'a..b'"):
        mechlab.sweep("selection-synthetic", {"model.d_model": [8]}, seeds="3..1")
    with pytest.raises(mechlab.ConfigError, match=r"shard \(2, 2\)"):
        mechlab.sweep("selection-synthetic", {"model.d_model": [8]}, seeds=[0], shard=(2, 2))


def test_reproduce_one_paper(tmp_path):
    res = mechlab.reproduce(["selection"], check=True, out=tmp_path / "rep", jobs=2)
    assert [r["paper"] for r in res] == ["selection"] * len(res) and res
    r = res[0]
    assert r["error"] is None and r["summary"]["verdicts"] and r["seconds"] > 0
    assert r["known_findings"] == []
    assert all(v["id"] and v["source"] for v in r["summary"]["verdicts"])
    assert isinstance(r["run"], mechlab.Run) and r["run"].summary == r["summary"]
    assert (tmp_path / "rep" / "report.html").is_file()


def test_reproduce_judges_claims_over_seeds(tmp_path):
    res = mechlab.reproduce(["selection"], check=True, out=tmp_path / "rep", seeds=2)
    assert [(r["setting"], r["seed"]) for r in res] == [("selection-synthetic", 0), ("selection-synthetic", 1)]
    assert res[1]["name"] == "selection-synthetic+seed=1"
    claims = json.loads((tmp_path / "rep" / "summary.json").read_text())["claims"]
    assert {c["status"] for c in claims} == {"held"}
    assert all(c["seeds"] == 2 and len(c["per_seed"]) == 2 for c in claims)


def test_reproduce_unknown_paper():
    # A mistyped paper is a config mistake, like a mistyped preset.
    with pytest.raises(mechlab.ConfigError, match=r"no experiment named `inductoin` \(did you mean `induction`\?\)"):
        mechlab.reproduce(["inductoin"])
