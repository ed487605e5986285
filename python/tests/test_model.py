"""Run.model(): hook points, run_with_cache, run_with_hooks, bad input."""

import shutil

import numpy as np
import pytest

import mechlab


@pytest.fixture(scope="module")
def tokens():
    # induction-simplified has a 3-token vocabulary.
    return np.random.default_rng(0).integers(0, 3, size=(2, 20))


def test_hook_points_and_cache(induction_run, tokens):
    m = induction_run.model()
    assert m.step == induction_run.steps()[-1]
    names = [p["name"] for p in m.hook_points()]
    assert "blocks.0.attn.hook_pattern" in names
    out, cache = m.run_with_cache(tokens)
    assert out.shape[0] == 2 and out.dtype == np.float64
    assert set(cache) == set(names)
    pat = cache["blocks.0.attn.hook_pattern"]
    assert pat.ndim == 4 and pat.shape[0] == 2
    only, one = m.run_with_cache(tokens, ["blocks.1.attn.hook_pattern"])
    assert list(one) == ["blocks.1.attn.hook_pattern"]
    np.testing.assert_array_equal(only, out)
    # A single sequence is a batch of one.
    single, _ = m.run_with_cache(tokens[0], [])
    np.testing.assert_allclose(single[0], out[0])


def test_names_filter_and_transformerlens_names(induction_run, tokens):
    m = induction_run.model()
    _, every = m.run_with_cache(tokens)
    # names_filter as TransformerLens takes it: a predicate, a name, or a list.
    _, pats = m.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    assert sorted(pats) == sorted(n for n in every if n.endswith("hook_pattern")) and len(pats) >= 2
    _, one = m.run_with_cache(tokens, names_filter="blocks.0.attn.hook_pattern")
    assert list(one) == ["blocks.0.attn.hook_pattern"]
    _, same = m.run_with_cache(tokens, names=["blocks.0.attn.hook_pattern"])
    np.testing.assert_array_equal(same["blocks.0.attn.hook_pattern"], one["blocks.0.attn.hook_pattern"])
    with pytest.raises(TypeError, match="not both"):
        m.run_with_cache(tokens, "hook_embed", names=["hook_embed"])
    # HookedEncoder's `embed.hook_embed` is our `hook_embed`, returned under the name asked.
    _, tl = m.run_with_cache(tokens, ["embed.hook_embed"])
    np.testing.assert_array_equal(tl["embed.hook_embed"], every["hook_embed"])
    out, _ = m.run_with_cache(tokens, [])
    patched = m.run_with_hooks(tokens, [{"name": "embed.hook_embed", "ablation": "zero"}])
    ours = m.run_with_hooks(tokens, [{"name": "hook_embed", "ablation": "zero"}])
    np.testing.assert_array_equal(patched, ours)
    assert np.abs(ours - out).max() > 0


def test_an_f32_run_gives_float32_activations(selection_f32_run, tokens):
    m = selection_f32_run.model()
    out, cache = m.run_with_cache(tokens)
    assert out.dtype == np.float32 and cache and all(a.dtype == np.float32 for a in cache.values())
    assert m.run_with_hooks(tokens, [mechlab.Hook("hook_embed")]).dtype == np.float32


def test_hooks_change_the_output(induction_run, tokens):
    m = induction_run.model()
    out, _ = m.run_with_cache(tokens, [])
    zeroed = m.run_with_hooks(tokens, [mechlab.Hook("blocks.1.attn.hook_pattern")])
    assert np.abs(zeroed - out).max() > 1e-3
    as_dict = m.run_with_hooks(tokens, [{"name": "blocks.1.attn.hook_pattern", "ablation": "zero"}])
    np.testing.assert_array_equal(as_dict, zeroed)
    assert np.array_equal(m.run_with_hooks(tokens, []), out)


def test_earlier_checkpoint(induction_run, tokens):
    a, _ = induction_run.model(step=0).run_with_cache(tokens, [])
    b, _ = induction_run.model().run_with_cache(tokens, [])
    assert not np.allclose(a, b)


def test_bad_hooks_and_inputs(induction_run, tokens):
    m = induction_run.model()
    with pytest.raises(mechlab.HookError, match=r"unknown hook point `blocks.0.attn.hook_patern`"):
        m.run_with_cache(tokens, ["blocks.0.attn.hook_patern"])
    with pytest.raises(ValueError, match=r"token id -1 at \[0, 0\]"):
        m.run_with_cache(np.full((1, 5), -1))
    with pytest.raises(mechlab.HookError, match="integer token ids"):
        m.run_with_cache(np.zeros((1, 5)))
    with pytest.raises(mechlab.HookError, match=r"ablation `half`"):
        m.run_with_hooks(tokens, [{"name": "blocks.1.attn.hook_pattern", "ablation": "half"}])
    with pytest.raises(mechlab.HookError, match="needs a `name`"):
        m.run_with_hooks(tokens, [{"ablation": "zero"}])
    with pytest.raises(mechlab.CheckpointError, match=r"no checkpoint at step 3"):
        induction_run.model(step=3)


def test_model_of_a_corrupt_checkpoint(induction_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(induction_run.dir, copy)
    ck = copy / "checkpoints" / "step_000050.safetensors"
    ck.write_bytes(ck.read_bytes()[:64])
    with pytest.raises(mechlab.CheckpointError, match="step_000050.safetensors"):
        mechlab.load(copy).model()


def test_an_attention_svm_run_loads_as_its_hooked_head(tmp_path):
    # Its inputs are vectors: ids index the run's tokens (i*T + t), then its queries
    # (n*T + i); a row is a query id followed by T token ids.
    r = mechlab.run("attention-svm-w", out=tmp_path / "svm")
    m = r.model()
    n, t = 6, 8
    rows = np.array([[n * t + i] + [i * t + k for k in range(t)] for i in range(n)])
    f, cache = m.run_with_cache(rows, ["blocks.0.attn.hook_pattern", "hook_embed"])
    assert f.shape == (n,)
    pat = cache["blocks.0.attn.hook_pattern"]
    assert pat.shape == (n, 1, 1, t + 1) and np.allclose(pat.sum(-1), 1.0)
    assert np.all(pat[..., 0] == 0.0)
    assert cache["hook_embed"].shape == (n, t + 1, 10)
    # The trained head selects one token per sequence; zeroing the pattern zeroes f.
    assert pat.max(-1).min() > 0.9
    assert np.all(m.run_with_hooks(rows, [mechlab.Hook("blocks.0.attn.hook_pattern")]) == 0.0)


def test_a_run_inspect_cannot_rebuild_is_not_a_checkpoint_error(tmp_path):
    # A double-double run is a precision check: analysis loads f32 and f64 runs.
    r = mechlab.run("attention-svm-w", out=tmp_path / "svm", overrides={"model.dtype": "f64x2", "train.steps": 20})
    with pytest.raises(mechlab.MechlabError, match="f64x2") as e:
        r.model()
    assert not isinstance(e.value, mechlab.CheckpointError)


def test_intervene_answers_the_papers_causal_question_with_its_control(tmp_path):
    r = mechlab.run("attention-svm-w", out=tmp_path / "svm")
    out = r.intervene()
    (e,) = [x for x in out["effects"] if x["id"] == "replace-selected"]
    # Replacing each sequence's selected token moves the margin; replacing
    # another token moves it far less.
    assert abs(e["intervened"] - e["clean"]) > 4 * abs(e["control"] - e["clean"])
    assert (tmp_path / "svm" / "intervene.json").is_file()
    assert "## Interventions" in (tmp_path / "svm" / "report.md").read_text()
    # Induction's flags are refused by a paper with a fixed suite, naming the flag.
    with pytest.raises(mechlab.ConfigError, match="--patch"):
        r.intervene(patch=True)


def test_the_general_transformer_loads_with_transformerlens_hooks(tmp_path):
    # lm-induction's model: 2 layers of 4 heads (d_head 16) over 64 random tokens.
    r = mechlab.run(
        "lm-induction-repeated",
        out=tmp_path / "lm",
        overrides={"train.steps": 30, "run.probe_every": 10, "data.batch": 8},
    )
    m = r.model()
    ids = np.tile(np.arange(16) % 64, (2, 1))
    logits, cache = m.run_with_cache(
        ids, ["blocks.1.attn.hook_pattern", "blocks.0.attn.hook_z", "blocks.1.hook_resid_post"]
    )
    assert logits.shape == (2, 16, 64)
    pat = cache["blocks.1.attn.hook_pattern"]
    assert pat.shape == (2, 4, 16, 16) and np.allclose(pat.sum(-1), 1.0)
    assert np.all(np.triu(pat[0, 0], 1) == 0.0)  # causal
    assert cache["blocks.0.attn.hook_z"].shape == (2, 16, 4, 16)
    assert cache["blocks.1.hook_resid_post"].shape == (2, 16, 64)
    ablated = m.run_with_hooks(ids, [mechlab.Hook("blocks.1.attn.hook_z", heads=[0, 1, 2, 3])])
    assert not np.allclose(ablated, logits)


def test_birth_runs_load_and_intervene(tmp_path):
    # Bietti et al.'s simplified model: one head of width d per layer.
    r = mechlab.run(
        "birth-2l",
        out=tmp_path / "birth",
        overrides={"train.steps": 30, "run.probe_every": 10, "data.seq_len": 32, "model.d_model": 32},
    )
    m = r.model()
    ids = np.arange(32)[None, :] % 100
    logits, cache = m.run_with_cache(ids, ["blocks.0.attn.hook_pattern"])
    assert logits.shape == (1, 32, 125)  # the WikiText-2 test bytes that occur
    assert cache["blocks.0.attn.hook_pattern"].shape == (1, 1, 32, 32)
    out = r.intervene()
    (e,) = out["effects"]
    assert e["id"] == "previous-token-copy" and 0.0 <= e["clean"] <= 1.0


def test_icl_regression_loads_and_intervenes(tmp_path):
    # One linear self-attention layer over vector tokens [x; y]: the ids index
    # the run's held-out prompts (prompt p's token i is p * (N + 1) + i).
    r = mechlab.run(
        "icl-regression-zfb",
        out=tmp_path / "icl",
        overrides={"train.steps": 300, "data.batch": 256, "probe.risk_prompts": 200},
    )
    m = r.model()
    ids = np.arange(42).reshape(2, 21)
    y, cache = m.run_with_cache(ids, ["hook_embed", "blocks.0.hook_attn_out"])
    assert y.shape == (2,)
    assert cache["hook_embed"].shape == (2, 21, 6)
    assert cache["blocks.0.hook_attn_out"].shape == (2, 21, 6)
    out = r.intervene()
    (e,) = out["effects"]
    assert e["id"] == "relabel-context" and e["intervened"] > e["clean"]
    assert abs(e["control"] - e["clean"]) < 1e-9


def test_causal_structure_loads_and_intervenes(tmp_path):
    # The CatFormer of Nichani, Damian & Lee: one-hot tokens and positions
    # concatenated, heads' outputs concatenated to the stream; logits at every
    # position, the loss reads the last.
    r = mechlab.run(
        "causal-structure-chain",
        out=tmp_path / "cs",
        overrides={
            "train.steps": 600,
            "data.eval_seqs": 2000,
            "probe.mi_pis": 4,
            "probe.start_seqs": 2000,
        },
    )
    m = r.model()
    ids = np.arange(40).reshape(2, 20) % 10
    y, cache = m.run_with_cache(ids, ["hook_embed", "blocks.0.attn.hook_pattern"])
    assert y.shape == (2, 20, 10)
    assert cache["hook_embed"].shape == (2, 20, 30)
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (2, 1, 20, 20)
    assert np.allclose(pattern.sum(-1), 1.0) and np.all(np.triu(pattern[0, 0], 1) == 0)
    out = r.intervene()
    e = {x["id"]: x for x in out["effects"]}
    assert set(e) == {"parent-keys", "induction-keys"}
    assert e["parent-keys"]["intervened"] > e["parent-keys"]["clean"]

