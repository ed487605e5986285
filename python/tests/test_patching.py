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
    # the native estimate is (clean − corrupted) · gradient from the cache,
    # summed over the batch and the last axis
    for kind, leaf in (("resid_post", "hook_resid_post"), ("head_out_by_pos", "attn.hook_z"),
                       ("head_pattern_by_pos", "attn.hook_pattern"), ("head_v", "attn.hook_v")):
        native = m.attribute(clean, corrupted, metric, kind=kind).values
        names = [f"blocks.{l}.{leaf}" for l in range(2)]
        y, c = m.run_with_cache(clean, names)
        yx, x = m.run_with_cache(corrupted, names, incl_bwd=True, metric=metric)
        rows = []
        for n in names:
            d = (c[n].astype(np.float64) - x[n]) * x[n + "_grad"]
            rows.append(d.sum(axis=(0, 3)).T if leaf.endswith("pattern") else d.sum(axis=(0, d.ndim - 1)))
        want = np.stack(rows) / (metric(y) - metric(yx))
        if kind == "head_v":
            want = want.sum(1)
        assert native.shape == want.shape, kind
        assert np.allclose(native, want, rtol=1e-6, atol=1e-9), kind
    with m.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda act, hook: None)]):
        with pytest.raises(mechlab.HookError, match="attribute inside hooks"):
            m.attribute(clean, corrupted, metric, kind="head_out")


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


def _write_safetensors(path, tensors):
    import json
    import struct

    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _induction_circuit(folder, V=8, T=16, c=200.0):
    """A two-layer induction circuit set by hand (TransformerLens layout, no
    LayerNorm): layer 0's head attends to the previous position and writes the
    previous token into a subspace of its own; layer 1's head matches the
    query's token against that subspace through its key alone, and copies the
    attended position's token to the logits. `c` makes both patterns one-hot
    to rounding (scores are divided by √d_head: at c = 200 a row leaks e^-50)."""
    import json

    d, dh = 2 * V + T, max(V, T)
    tok, pos, prev = np.arange(V), V + np.arange(T), V + T + np.arange(V)
    W_E = np.zeros((V, d)); W_E[tok, tok] = 1
    W_pos = np.zeros((T, d)); W_pos[np.arange(T), pos] = 1
    z = lambda *s: np.zeros(s)
    q0, k0, v0, o0 = z(1, d, dh), z(1, d, dh), z(1, d, dh), z(1, dh, d)
    q0[0, pos, np.arange(T)] = c                    # position p asks for ...
    k0[0, pos[:-1], np.arange(1, T)] = 1            # ... the key at p − 1
    v0[0, tok, np.arange(V)] = 1                    # its token
    o0[0, np.arange(V), prev] = 1                   # into the previous-token subspace
    q1, k1, v1, o1 = z(1, d, dh), z(1, d, dh), z(1, d, dh), z(1, dh, d)
    q1[0, tok, np.arange(V)] = c                    # the query's own token ...
    k1[0, prev, np.arange(V)] = 1                   # ... against the key's previous token
    v1[0, tok, np.arange(V)] = 1                    # copy the key's token
    o1[0, np.arange(V), tok] = 10.0
    W_U = np.zeros((d, V)); W_U[tok, tok] = 1
    state = {"embed.W_E": W_E, "pos_embed.W_pos": W_pos, "unembed.W_U": W_U, "unembed.b_U": z(V)}
    for l, (q, k, v, o) in enumerate([(q0, k0, v0, o0), (q1, k1, v1, o1)]):
        for n, w in [("W_Q", q), ("W_K", k), ("W_V", v), ("W_O", o)]:
            state[f"blocks.{l}.attn.{n}"] = w
        for n in ["b_Q", "b_K", "b_V"]:
            state[f"blocks.{l}.attn.{n}"] = z(1, dh)
        state[f"blocks.{l}.attn.b_O"] = z(d)
    folder.mkdir()
    _write_safetensors(folder / "model.safetensors", state)
    cfg = {"n_layers": 2, "d_model": d, "n_ctx": T, "d_head": dh, "n_heads": 1, "d_mlp": None, "d_vocab": V,
           "act_fn": None, "attn_only": True, "normalization_type": None, "positional_embedding_type": "standard"}
    (folder / "config.json").write_text(json.dumps(cfg))


def test_path_patching_finds_the_key_path_of_a_hand_built_induction_circuit(tmp_path):
    _induction_circuit(tmp_path / "circuit")
    run = mechlab.train({"train.steps": 0, "task.vocab": 8, "data.seq_len": 15, "model.dtype": "f64"},
                        init_from=tmp_path / "circuit", out=tmp_path / "run", quiet=True)
    m = run.model()
    rng = np.random.default_rng(3)
    clean = np.stack([np.tile(rng.permutation(8), 2) for _ in range(6)])  # a segment and its repeat
    corrupted = clean.copy()
    # change the tokens before the odd positions of the first half: each
    # odd-position token keeps its value but loses the predecessor it had
    corrupted[:, 0:8:2] = (clean[:, 0:8:2] + 4) % 8
    # at a second-half position holding an even-position token, predict its successor
    pos = 8 + 2 * rng.integers(0, 4, size=6)
    metric = mechlab.logit_diff(clean[np.arange(6), pos + 1], (clean[np.arange(6), pos + 1] + 1) % 8, pos=pos)
    assert metric(m(clean)) > 5 and abs(metric(m(corrupted))) < 1
    key = m.path_patch(clean, corrupted, metric, sender=(0, 0), receiver=(1, 0, "k"))
    query = m.path_patch(clean, corrupted, metric, sender=(0, 0), receiver=(1, 0, "q"))
    value = m.path_patch(clean, corrupted, metric, sender=(0, 0), receiver=(1, 0, "v"))
    direct = m.path_patch(clean, corrupted, metric, sender=(0, 0), receiver="logits")
    assert abs(key - 1) < 1e-9, key
    assert abs(query) < 1e-9 and abs(value) < 1e-9 and abs(direct) < 1e-9, (query, value, direct)
    # direct logit attribution, set by construction: the induction head writes
    # 10 times its attention on each key into that key's token logit (position 0,
    # with no predecessor, reads as its own), the previous-token head only into
    # its own subspace
    _, cache = m.run_with_cache(clean)
    heads, labels = cache.stack_head_results(return_labels=True)
    rows = np.arange(6)
    correct, incorrect = clean[rows, pos + 1], (clean[rows, pos + 1] + 1) % 8
    dla = cache.logit_attrs(heads[:, rows, pos], correct, incorrect)
    attn = cache["pattern", 1][rows, 0, pos]  # [batch, key]
    want = 10 * ((attn * (clean == correct[:, None])).sum(1) - (attn * (clean == incorrect[:, None])).sum(1))
    assert labels == ["L0H0", "L1H0"]
    assert np.abs(dla[0]).max() < 1e-12 and np.abs(dla[1] - want).max() < 1e-9, (dla, want)
    assert (np.abs(want - 10) < 1e-9).sum() >= 3, want
    with pytest.raises(mechlab.HookError, match="a later layer than every sender"):
        m.path_patch(clean, corrupted, metric, sender=(1, 0), receiver=(1, 0, "k"))


def test_the_trained_induction_circuit_runs_through_the_key_path(tmp_path):
    """lm-induction-repeated: patching the layer-0 heads' clean output into the
    induction heads' keys alone recovers more than half of what patching the
    induction heads' outputs does; into their queries or values, or straight to
    the logits, it does not (the corruption keeps each attended token and
    changes the token before it, so only the key side can tell them apart)."""
    run = mechlab.run("lm-induction-repeated", out=tmp_path / "lmr")
    m = run.model()
    rng = np.random.default_rng(0)
    seg = rng.integers(0, 64, size=(16, 32))
    clean = np.concatenate([seg, seg], 1)
    corrupted = clean.copy()
    corrupted[:, 0:32:2] = rng.integers(0, 64, size=(16, 16))
    metric = mechlab.Loss(clean, positions=32 + np.arange(0, 31, 2))
    heads = m.patch(clean, corrupted, metric, kind="head_out")
    ind = [h for h in range(4) if heads.values[1, h] > 0.2]
    assert len(ind) >= 2, heads.values
    z = m.run_with_cache(clean, "blocks.1.attn.hook_z")[1]["blocks.1.attn.hook_z"].astype(np.float64)
    both = m.run_with_hooks(corrupted, [mechlab.Hook("blocks.1.attn.hook_z", z, heads=ind)])
    effect = (metric(both) - heads.corrupted) / (heads.clean - heads.corrupted)
    senders = [(0, h) for h in range(4)]
    path = {w: m.path_patch(clean, corrupted, metric, senders, [(1, h, w) for h in ind]) for w in "qkv"}
    path["logits"] = m.path_patch(clean, corrupted, metric, senders, "logits")
    assert path["k"] > 0.5 * effect, (path, effect)
    assert max(abs(path[w]) for w in ("q", "v", "logits")) < 0.1, path
    est = m.attribute(clean, corrupted, metric, kind="head_out")
    assert np.corrcoef(heads.values.ravel(), est.values.ravel())[0, 1] > 0.9
