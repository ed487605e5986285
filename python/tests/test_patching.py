"""Gradients at hook points, activation-patching sweeps and attribution
patching from Python: the gradient is the finite difference, attribution equals
patching where the metric is linear in the activation, and the errors name what
is wrong."""

import numpy as np
import pytest

import mechlab


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    # no final LayerNorm: the logits are linear in the last residual stream
    cfg = {"train.steps": 300, "model.normalization": "none", "model.dtype": "f64"}
    return mechlab.train(cfg, out=tmp_path_factory.mktemp("pp") / "run", quiet=True)


def _pair(seed=0):
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, 32, size=(8, 8))
    clean = np.concatenate([seg, seg], 1)
    corrupted = clean.copy()
    corrupted[:, 8:] = rng.integers(0, 32, size=(8, 8))
    return clean, corrupted


def test_gradients_at_hook_points_are_the_finite_difference(linear_run):
    m = linear_run.model()
    clean, _ = _pair()
    for metric in ["loss", mechlab.logit_diff(clean[:, 12], 0, pos=11)]:
        value = mechlab.Loss(clean) if metric == "loss" else metric
        _, cache = m.run_with_cache(clean, ["blocks.0.attn.hook_pattern", "hook_embed"], incl_bwd=True, metric=metric)
        for name, idx in [("blocks.0.attn.hook_pattern", (2, 1, 9, 3)), ("hook_embed", (5, 11, 7))]:
            eps = 1e-6

            def bump(sign):
                def f(a, hook):
                    a[idx] += sign * eps
                    return a

                return value(m.run_with_hooks(clean, fwd_hooks=[(name, f)]))

            fd = (bump(1) - bump(-1)) / (2 * eps)
            g = cache[name + "_grad"][idx]
            assert abs(fd - g) < 1e-6 * (1 + abs(g)), (name, fd, g)
            assert cache[name + "_grad"].shape == cache[name].shape


def test_attribution_equals_patching_where_the_metric_is_linear(linear_run):
    m = linear_run.model()
    clean, corrupted = _pair()
    metric = mechlab.logit_diff(clean[:, 12], corrupted[:, 12], pos=11)
    patched = m.patch(clean, corrupted, metric, kind="resid_post")
    estimated = m.attribute(clean, corrupted, metric, kind="resid_post")
    assert patched.values.shape == estimated.values.shape == (2, 16)
    assert patched.axes == ["layer", "pos"]
    # the last layer's residual stream enters the logits linearly
    assert np.abs(patched.values[-1] - estimated.values[-1]).max() < 1e-9
    # patching every position of the stream recovers the clean run (metric 1)
    assert abs(patched.values[-1].sum() - 1.0) < 1e-9
    heads = m.patch(clean, corrupted, metric, kind="head_out")
    est = m.attribute(clean, corrupted, metric, kind="head_out")
    assert heads.values.shape == (2, 4)
    assert np.corrcoef(heads.values.ravel(), est.values.ravel())[0, 1] > 0.99
    by_pos = m.attribute(clean, corrupted, metric, kind="head_out_by_pos")
    assert np.allclose(by_pos.values.sum(1), est.values)


def test_patching_errors_name_what_is_wrong(linear_run, induction_run):
    m = linear_run.model()
    clean, corrupted = _pair()
    with pytest.raises(mechlab.HookError, match=r"clean tokens \(8, 16\) and corrupted tokens \(8, 15\)"):
        m.patch(clean, corrupted[:, :15], "loss")
    with pytest.raises(mechlab.HookError, match="position 20 is past the sequence of 16"):
        m.attribute(clean, corrupted, mechlab.logit_diff(1, 2, pos=20))
    with pytest.raises(ValueError, match="kind 'heads'"):
        m.patch(clean, corrupted, "loss", kind="heads")
    with pytest.raises(mechlab.HookError, match="this model has no blocks.0.hook_mlp_out"):
        m.patch(clean, corrupted, "loss", kind="mlp_out")
    # a model without a backward at its hook points says so, naming the point
    paper = induction_run.model()
    x = np.zeros((2, 10), dtype=np.int64)
    with pytest.raises(mechlab.HookError, match=r"`blocks.0.attn.hook_pattern`: this model has no backward"):
        paper.run_with_cache(x, ["blocks.0.attn.hook_pattern"], incl_bwd=True, metric=mechlab.Metric())
