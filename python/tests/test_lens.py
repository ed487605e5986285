"""The Python model as TransformerLens users know it: a short TransformerLens
workflow, its calls unchanged (hook functions, the hooks context,
``cache["pattern", l]``, ``model.W_Q``, ``model(tokens, return_type="loss")``,
the cache helpers), against mechlab's own calls and the run's logged numbers."""

import numpy as np
import pytest

import mechlab


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 12, size=(600, 17))
    held = rng.integers(0, 12, size=(8, 17))
    cfg = {"train.steps": 40, "run.probe_every": 20, "model.attn_only": False, "model.d_mlp": 64}
    run = mechlab.train(cfg, tokens=x, heldout=held, out=tmp_path_factory.mktemp("lens") / "run", quiet=True)
    return run, held


def _ln(x, w, b, eps):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc**2).mean(-1, keepdims=True) + eps) * w + b


def test_a_transformer_lens_workflow_runs_unchanged(trained):
    run, held = trained
    model = run.model()
    tokens = held[:, :16]

    # --- TransformerLens's calls, as a TransformerLens user writes them ---
    logits, cache = model.run_with_cache(tokens)
    loss = model(tokens, return_type="loss")
    pattern = cache["pattern", 0]
    W_Q, b_Q = model.W_Q, model.b_Q

    def ablate_head(z, hook):
        z[:, :, 1, :] = 0.0
        return z

    ablated = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", ablate_head)])
    with model.hooks(fwd_hooks=[(lambda name: name.endswith("hook_z"), ablate_head)]):
        every_layer = model(tokens)
    # --- the same through mechlab's own calls ---
    ours_logits, ours = model.run_with_cache(tokens, ["blocks.0.attn.hook_pattern", "blocks.0.attn.hook_q",
                                                      "blocks.0.hook_resid_pre"])
    assert np.array_equal(logits, ours_logits) and np.array_equal(logits, model(tokens))
    assert np.array_equal(pattern, ours["blocks.0.attn.hook_pattern"])
    assert pattern.shape == (8, model.cfg.n_heads, 16, 16)
    zero = model.run_with_hooks(tokens, [mechlab.Hook("blocks.0.attn.hook_z", heads=[1])])
    assert np.array_equal(ablated, zero)
    both = model.run_with_hooks(
        tokens, [mechlab.Hook(f"blocks.{l}.attn.hook_z", heads=[1]) for l in range(model.cfg.n_layers)]
    )
    assert np.array_equal(every_layer, both)
    assert np.array_equal(model(tokens), logits), "the context's hooks end with it"
    # the loss is the mean next-token cross-entropy of the logits
    lp = logits[:, :-1] - np.log(np.exp(logits[:, :-1]).sum(-1, keepdims=True))
    want = -np.take_along_axis(lp, tokens[:, 1:, None], -1).mean()
    assert abs(loss - want) < 1e-6
    assert model(tokens, return_type="loss", loss_per_token=True).shape == (8, 15)
    # the weights in TransformerLens's shapes give the cached queries
    cfg = model.cfg
    assert W_Q.shape == (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head)
    assert model.W_O.shape == (cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_model)
    assert model.W_in.shape == (cfg.n_layers, cfg.d_model, cfg.d_mlp)
    sd = model.state_dict()
    x = _ln(ours["blocks.0.hook_resid_pre"].astype(np.float64), sd["blocks.0.ln1.w"], sd["blocks.0.ln1.b"], cfg.eps)
    q = np.einsum("bpd,hde->bphe", x, W_Q[0]) + b_Q[0]
    assert np.abs(q - ours["blocks.0.attn.hook_q"]).max() < 1e-4


def test_cache_helpers_decompose_the_stream_and_give_the_logged_attribution(trained):
    run, held = trained
    model = run.model()
    tokens, targets = held[:, :16], held[:, 1:]
    _, cache = model.run_with_cache(tokens)
    final = cache["resid_post", -1]
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels[:2] == ["embed", "pos_embed"] and labels[-1] == f"{model.cfg.n_layers - 1}_mlp_out"
    assert np.abs(parts.sum(0) - final).max() < 1e-4
    assert cache.stack_activation("pattern").shape == (model.cfg.n_layers, 8, model.cfg.n_heads, 16, 16)
    assert np.array_equal(cache.stack_activation("pattern")[1], cache["blocks.1.attn.hook_pattern"])
    assert cache.accumulated_resid().shape[0] == model.cfg.n_layers + 1
    # direct logit attribution per head, as TransformerLens computes it on a
    # model loaded with fold_ln (its default): the probe's logged dla.l.h
    heads, names = cache.stack_head_results(apply_ln=True, return_labels=True)
    attrs = cache.logit_attrs(heads, targets)  # [head, batch, pos]
    row = run.metrics("probe").iloc[-1]
    for i, name in enumerate(names):
        l, h = int(name[1]), int(name[3])
        assert abs(attrs[i].mean() - row[f"dla.l{l}.h{h}"]) < 2e-6 * (1 + abs(row[f"dla.l{l}.h{h}"])), name
    with pytest.raises(KeyError, match="blocks.0.attn.hook_q"):
        _, small = model.run_with_cache(tokens, "blocks.0.attn.hook_z")
        small["q", 0]


def test_hook_function_errors_name_the_hook(trained):
    run, held = trained
    model = run.model()
    tokens = held[:, :16]
    with pytest.raises(mechlab.HookError, match=r"(?s)hook `blocks.0.attn.hook_z`: the hook function raised.*ZeroDivisionError"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: 1 / 0)])
    with pytest.raises(mechlab.HookError, match=r"hook `blocks.0.attn.hook_z`: the hook function returned shape \(8, 2, 4, 16\)"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: z[:, :2])])
    with pytest.raises(mechlab.HookError, match="unknown hook point `blocks.0.attn.hook_nothing`"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_nothing", lambda z, hook: z)])
    seen = []
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_resid_pre", lambda a, hook: seen.append(hook.name))])
    assert seen == ["blocks.1.hook_resid_pre"]


def test_the_attention_view_shows_the_cached_pattern_inline(trained):
    import json
    import re

    run, held = trained
    model = run.model()
    _, cache = model.run_with_cache(held[:, :16], "blocks.1.attn.hook_pattern")
    view = cache.attention_view(layer=1, batch=2)
    html = view._repr_html_()
    data = json.loads(re.search(r'class="attn-data">(.*?)</script>', html, flags=re.S).group(1))
    pat = cache["pattern", 1][2]
    assert np.array_equal(np.array(data["pattern"]).reshape(pat.shape), pat.astype(np.float64))
    assert data["tokens"] == [str(t) for t in held[2, :16]]
    assert [h["name"] for h in data["heads"]] == [f"L1H{h}" for h in range(pat.shape[0])]
    # offline: styles and script inline, nothing fetched; a second view on the
    # same page gets its own anchor and leaves the first alone
    assert "<style>" in html and "<script>" in html and "src=" not in html and "data-started" in html
    other = mechlab.attention_view(pat, title="again")._repr_html_()
    anchors = lambda h: re.findall(r'<figure id="([^"]+)"', h)
    assert anchors(html) != anchors(other)
    with pytest.raises(ValueError, match=r"tokens: 3 labels for 16 positions"):
        mechlab.attention_view(pat, ["a", "b", "c"])


def test_to_tokens_and_to_str_tokens_use_the_runs_tokenizer(tmp_path, trained):
    text = "the cat sat on the mat. the dog sat on the hat.\n" * 80
    (tmp_path / "t.txt").write_text(text)
    base = {"train.steps": 5, "data.file": str(tmp_path / "t.txt"), "data.seq_len": 16}
    bpe = mechlab.train({**base, "data.tokenizer": "bpe", "data.bpe_vocab": 300}, out=tmp_path / "bpe", quiet=True)
    m = bpe.model()
    ids = m.to_tokens("the cat sat")
    assert ids.shape[0] == 1 and ids.dtype == np.int64 and ids.max() < m.cfg.d_vocab
    assert "Ġcat" in m.to_str_tokens("the cat sat")
    assert m.to_str_tokens(ids[0]) == m.to_str_tokens("the cat sat")
    assert m.to_string(ids[0]).strip() == "the cat sat"
    logits, cache = m.run_with_cache(m.to_tokens(["the cat sat on", "the dog sat on"]))
    assert logits.shape[:2] == cache["pattern", 0].shape[:1] + (logits.shape[1],)
    by = mechlab.train(base, out=tmp_path / "bytes", quiet=True).model()
    assert by.to_tokens("hi\n").tolist() == [[104, 105, 10]]
    assert by.to_str_tokens("hi\n") == ["h", "i", "\\n"]
    assert by.to_string([104, 105]) == "hi"
    with pytest.raises(mechlab.HookError, match="one batch needs one length"):
        by.to_tokens(["a", "bb"])
    run, _ = trained  # token arrays: no tokenizer
    with pytest.raises(mechlab.HookError, match="has no tokenizer"):
        run.model().to_tokens("x")
