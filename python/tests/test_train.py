"""``mechlab.train``: the docs' example of a task of one's own runs as written,
the same task from a .npy file and a TOML config gives the same numbers bit for
bit, and bad arrays and generators get errors naming them."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

import mechlab

REPO = Path(__file__).resolve().parents[2]


def _example() -> str:
    md = (REPO / "docs/transformer.md").read_text()
    return re.findall(r"```python\n(.*?)```", md, flags=re.S)[0]


def test_the_docs_example_runs_and_the_cli_route_matches_it_bit_for_bit(tmp_path):
    code = _example()
    assert len(code.strip().splitlines()) <= 25
    scope: dict = {}
    exec(compile(code, "docs/transformer.md", "exec"), scope)
    run = scope["run"]
    d = Path(run.dir)
    for f in ["metrics.jsonl", "summary.json", "report.html", "figures/heads_induction.json",
              "figures/heads_previous_token.json", "figures/pairs_comp_k.json", "inputs/tokens.npy"]:
        assert (d / f).exists(), f
    assert any((d / "checkpoints").iterdir())
    probe = run.metrics("probe")
    last = probe.iloc[-1]
    # the circuit the task needs: a previous-token head feeding an induction head
    assert last["previous_token.l0.h0"] > 0.5 and last["induction.l1.h0"] > 0.3, last
    assert scope["model"].step == 800
    # the same task from a .npy file and a TOML config, as the CLI runs it
    np.save(tmp_path / "tokens.npy", scope["tokens"])
    toml = (d / "config.toml").read_text()
    toml = toml.replace('inputs = "arrays"', 'inputs = "config"')
    toml = re.sub(r'(?m)^file = ""', f'file = "{tmp_path / "tokens.npy"}"', toml)
    (tmp_path / "cli.toml").write_text(toml)
    cli = mechlab.run(tmp_path / "cli.toml", out=tmp_path / "cli", quiet=True)
    assert cli.summary["metrics"] == run.summary["metrics"]
    a = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (Path(cli.dir) / "metrics.jsonl").read_text().splitlines()]
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("time", "seconds", "elapsed")} for r in rs]
    assert strip(a) == strip(b)


def _lookup(n, rng, L=9):
    x = rng.integers(0, 10, size=(n, L))
    x[:, -1] = x[:, 0]
    m = np.zeros_like(x, dtype=bool)
    m[:, -1] = True
    return x, m


def test_a_loss_mask_makes_a_classification_task():
    x, m = _lookup(2000, np.random.default_rng(1))
    r = mechlab.train({"train.steps": 300, "train.lr": 3e-3}, tokens=x, loss_mask=m, out="runs/lookup", quiet=True)
    assert r.summary["metrics"]["heldout_accuracy"] > 0.9
    assert "loss_mask.npy" in {p.name for p in (Path(r.dir) / "inputs").iterdir()}


def test_generators_are_seeded_per_step_and_their_errors_name_the_step():
    def gen(step, rng):
        return _lookup(16, rng)

    cfg = {"model.d_vocab": 10, "train.steps": 30, "data.batch": 16, "run.probe_every": 10}
    a = mechlab.train(cfg, generator=gen, out="runs/g1", quiet=True)
    b = mechlab.train(cfg, generator=gen, out="runs/g2", quiet=True)
    assert a.summary == b.summary

    def raises(step, rng):
        if step == 7:
            raise ValueError("no batch today")
        return _lookup(16, rng)

    with pytest.raises(mechlab.MechlabError, match=r"(?s)step 7.*ValueError: no batch today"):
        mechlab.train(cfg, generator=raises, out="runs/g3", quiet=True)
    assert not (Path("runs/g3") / "summary.json").exists()

    def floats(step, rng):
        return rng.random((16, 9))

    with pytest.raises(mechlab.MechlabError, match=r"step -1.*dtype float64"):
        mechlab.train(cfg, generator=floats, out="runs/g4", quiet=True)

    def short(step, rng):
        return _lookup(4 if step == 3 else 16, rng)

    with pytest.raises(mechlab.MechlabError, match=r"step 3.*\[4, 9\], expected \[16, 9\]"):
        mechlab.train(cfg, generator=short, out="runs/g5", quiet=True)
    with pytest.raises(mechlab.MechlabError, match=r"model.d_vocab"):
        mechlab.train({"train.steps": 5}, generator=gen, out="runs/g6", quiet=True)


def test_bad_arrays_name_the_array():
    x, m = _lookup(100, np.random.default_rng(2))
    with pytest.raises(mechlab.ConfigError, match=r"tokens: dtype float64"):
        mechlab.train(tokens=x.astype(float), out="runs/b1", quiet=True)
    with pytest.raises(mechlab.ConfigError, match=r"tokens: token -1 at \[0, 0\]"):
        y = x.copy()
        y[0, 0] = -1
        mechlab.train(tokens=y, out="runs/b2", quiet=True)
    with pytest.raises(mechlab.ConfigError, match=r"loss_mask: shape \(9, 100\)"):
        mechlab.train(tokens=x, loss_mask=m.T, out="runs/b3", quiet=True)
    with pytest.raises(mechlab.MechlabError, match=r"tokens = .*: token \d at \[0, 0\] is at or past model.d_vocab = 5"):
        mechlab.train({"model.d_vocab": 5}, tokens=x, out="runs/b4", quiet=True)
    with pytest.raises(mechlab.MechlabError, match=r"loss_mask.*marks no token"):
        mechlab.train(tokens=x, loss_mask=np.zeros_like(m), out="runs/b5", quiet=True)


def test_an_export_imports_back_to_the_same_model():
    x, m = _lookup(1000, np.random.default_rng(3))
    cfg = {"train.steps": 60, "model.d_mlp": 16, "model.attn_only": False, "model.act_fn": "relu"}
    a = mechlab.train(cfg, tokens=x, loss_mask=m, out="runs/e1", quiet=True)
    folder = a.export_transformer_lens()
    assert folder == Path(a.dir) / "export" / "transformer_lens"
    tl = json.loads((folder / "config.json").read_text())
    assert (tl["act_fn"], tl["d_mlp"], tl["n_ctx"], tl["d_vocab"]) == ("relu", 16, 9, 10)
    # init_from sets the model keys from the export's config.json
    b = mechlab.train({"train.steps": 0}, tokens=x, loss_mask=m, init_from=folder, out="runs/e2", quiet=True)
    for k in ("heldout_loss", "heldout_accuracy", "best_induction"):
        assert a.summary["metrics"][k] == b.summary["metrics"][k], k
    tokens = x[:4, :8]
    out_a, _ = a.model().run_with_cache(tokens, names=[])
    out_b, _ = b.model().run_with_cache(tokens, names=[])
    assert np.array_equal(out_a, out_b)
    with pytest.raises(mechlab.MechlabError, match=r"n_heads = 4, the config says 2"):
        mechlab.train({"train.steps": 0}, tokens=x, init_from=folder, overrides={"model.n_heads": 2, "model.d_head": 32},
                      out="runs/e3", quiet=True)


def test_a_nanogpt_shaped_run_exports_to_nanogpt_and_back():
    x, m = _lookup(1000, np.random.default_rng(4))
    cfg = {"train.steps": 40, "model": {"d_model": 32, "n_heads": 4, "d_head": 8, "d_mlp": 128, "attn_only": False,
                                        "act_fn": "gelu", "tied_embeddings": True, "unembed_bias": False}}
    a = mechlab.train(cfg, tokens=x, out="runs/n1", quiet=True)
    assert not a.checkpoint()["unembed.b_U"].any()  # never trained: nanoGPT has no lm_head bias
    folder = a.export_nanogpt()
    ng = json.loads((folder / "config.json").read_text())
    assert (ng["n_layer"], ng["n_head"], ng["n_embd"], ng["block_size"], ng["vocab_size"]) == (2, 4, 32, 9, 10)
    b = mechlab.train({"train.steps": 0}, tokens=x, init_from=folder, out="runs/n2", quiet=True)
    assert a.summary["metrics"]["heldout_loss"] == b.summary["metrics"]["heldout_loss"]
    # a model nanoGPT cannot hold is refused, naming what differs
    c = mechlab.train({"train.steps": 5}, tokens=x, out="runs/n3", quiet=True)
    with pytest.raises(mechlab.MechlabError, match=r"nanoGPT's model has LayerNorm|MLPs of 4"):
        c.export_nanogpt()


def test_measure_recomputes_a_logged_probe():
    x, m = _lookup(500, np.random.default_rng(5))
    r = mechlab.train({"train.steps": 16, "run.probe_every": 8}, tokens=x, loss_mask=m, out="runs/m1", quiet=True)
    got = r.measure(step=16)
    row = r.metrics("probe").set_index("step").loc[16]
    assert got["loss"] == row["loss"] and got["dla.l1.h0"] == row["dla.l1.h0"]
    assert set(got) == {c for c in row.index if not np.isnan(row[c])}


def test_detect_head_is_the_logged_detector_and_takes_a_function():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 12, size=(600, 17))
    held = rng.integers(0, 12, size=(8, 17))
    r = mechlab.train({"train.steps": 20, "run.probe_every": 10}, tokens=x, heldout=held, out="runs/d1", quiet=True)
    row = r.metrics("probe").iloc[-1]
    model = r.model()
    inputs = held[:, :16]  # what the probe reads
    for name in ["previous_token", "duplicate_token", "induction"]:
        got = mechlab.detect_head(model, inputs, name)
        want = np.array([[row[f"{name}.l{l}.h{h}"] for h in range(4)] for l in range(2)])
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12), name
    prev = mechlab.detect_head(model, inputs, "previous_token")
    assert np.allclose(mechlab.detect_head(model, inputs, np.eye(16, k=-1)), prev)
    assert np.allclose(mechlab.detect_head(model, inputs, lambda t: np.eye(len(t), k=-1)), prev)
    with pytest.raises(ValueError, match=r"\[T, T\] = \[16, 16\]"):
        mechlab.detect_head(model, inputs, np.eye(5))


def test_a_pattern_function_is_scored_during_training_and_kept_with_the_run():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 12, size=(600, 17))
    held = rng.integers(0, 12, size=(8, 17))

    def after_copy(t: np.ndarray) -> np.ndarray:
        # attention to the token after an earlier copy (the induction pattern), by hand
        n = len(t)
        p = np.zeros((n, n))
        for q in range(n):
            for k in range(1, q + 1):
                p[q, k] = float(t[k - 1] == t[q])
        return p

    cfg = {"train.steps": 20, "run.probe_every": 10}
    r = mechlab.train(cfg, tokens=x, heldout=held, patterns={"prev": lambda t: np.eye(len(t), k=-1),
                      "ind": after_copy}, out="runs/p1", quiet=True)
    probe = r.metrics("probe")
    for _, row in probe.iterrows():
        for lh in ("l0.h0", "l1.h3"):
            assert abs(row[f"custom_prev.{lh}"] - row[f"previous_token.{lh}"]) < 1e-12
            assert abs(row[f"custom_ind.{lh}"] - row[f"induction.{lh}"]) < 1e-12
    assert (Path(r.dir) / "figures/heads_custom_ind.json").exists()
    assert r.measure(step=20)["custom_ind.l1.h2"] == probe.set_index("step").loc[20, "custom_ind.l1.h2"]
    with pytest.raises(mechlab.MechlabError, match=r"patterns\['bad'\], held-out window 0: shape \(3,\)"):
        mechlab.train(cfg, tokens=x, patterns={"bad": lambda t: np.zeros(3)}, out="runs/p2", quiet=True)
    assert not (Path("runs/p2") / "summary.json").exists()
    with pytest.raises(mechlab.ConfigError, match="a Python identifier"):
        mechlab.train(cfg, tokens=x, patterns={"a-b": lambda t: t}, out="runs/p3", quiet=True)
