"""mechlab.load_pretrained: the shared encoder from Python gives Hugging Face's
activations (the golden file that bench/bert/compare.py took from
transformers.BertModel, which the Rust tests read too), used the way
TransformerLens's HookedEncoder is. Skipped when the shared model is absent."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
import pytest

import mechlab

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"
GOLDEN = REPO / "crates" / "engine" / "tests" / "data" / "bert_minilm_golden.safetensors"

pytestmark = pytest.mark.skipif(
    not (MODEL / "model.safetensors").is_file(), reason=f"{MODEL} is absent"
)


def golden() -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    raw = GOLDEN.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = {k: json.loads(v) for k, v in header.pop("__metadata__").items() if k != "source"}
    dtypes = {"F32": "<f4", "I64": "<i8"}
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=dtypes[info["dtype"]]).reshape(
            info["shape"]
        )
    return meta, out


@pytest.fixture(scope="module")
def bert() -> mechlab.Pretrained:
    return mechlab.load_pretrained(MODEL)


def test_tokens_are_hugging_faces(bert: mechlab.Pretrained) -> None:
    meta, g = golden()
    np.testing.assert_array_equal(bert.to_tokens(meta["texts"]), g["ids"])
    assert bert.to_str_tokens("Jazz is a music genre.") == [
        "[CLS]", "jazz", "is", "a", "music", "genre", ".", "[SEP]"
    ]
    assert bert.tokenizer.pad_token_id == 0 and bert.tokenizer.id_to_token(101) == "[CLS]"


def test_activations_are_hugging_faces(bert: mechlab.Pretrained) -> None:
    meta, g = golden()
    hidden = {0: "hook_full_embed", 3: "blocks.2.hook_normalized_resid_post", 6: "blocks.5.hook_normalized_resid_post"}
    names = [hidden[l] for l in meta["hidden_layers"]]
    names += [f"blocks.{l}.attn.hook_pattern" for l in meta["attn_layers"]]
    out, cache = bert.run_with_cache(meta["texts"], names_filter=names)
    assert list(cache) == names
    real = g["ids"] != 0  # [batch, pos]
    for k, name in enumerate(names[: len(meta["hidden_layers"])]):
        diff = np.abs(cache[name] - g["hidden"][k])[real]
        assert diff.max() < 1e-4, f"{name}: {diff.max():.2e}"
    for k, l in enumerate(meta["attn_layers"]):
        got = cache[f"blocks.{l}.attn.hook_pattern"]  # [batch, head, query_pos, key_pos]
        assert got.shape == g["attn"][k].shape
        diff = np.abs(got - g["attn"][k]).transpose(0, 2, 1, 3)[real]
        assert diff.max() < 1e-5, f"layer {l}: {diff.max():.2e}"
    np.testing.assert_array_equal(out, cache[names[len(meta["hidden_layers"]) - 1]])


def test_a_text_a_list_and_ids_agree(bert: mechlab.Pretrained) -> None:
    text = "The Roman Empire was the post-Republican state of ancient Rome."
    a, _ = bert.run_with_cache(text, names_filter=[])
    b, _ = bert.run_with_cache([text], names_filter=[])
    c, _ = bert.run_with_cache(bert.to_tokens(text), names_filter=[])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert a.dtype == np.float64 and a.shape == (1, 15, 384)


def test_hooks_change_the_output_and_a_clean_patch_does_not(bert: mechlab.Pretrained) -> None:
    text = "Photosynthesis converts light energy into chemical energy."
    clean, cache = bert.run_with_cache(text, "blocks.3.attn.hook_pattern")
    ablated = bert.run_with_hooks(text, [mechlab.Hook("blocks.3.attn.hook_pattern", heads=[0, 1, 2])])
    assert np.abs(ablated - clean).max() > 1e-3
    patched = bert.run_with_hooks(
        text, [{"name": "blocks.3.attn.hook_pattern", "ablation": cache["blocks.3.attn.hook_pattern"]}]
    )
    np.testing.assert_allclose(patched, clean, atol=1e-12)


def test_errors_name_the_path_the_argument_and_the_hook(bert: mechlab.Pretrained) -> None:
    with pytest.raises(mechlab.ConfigError, match="`nowhere/at-all` is not a folder"):
        mechlab.load_pretrained("nowhere/at-all")
    with pytest.raises(TypeError, match="path: expected a path"):
        mechlab.load_pretrained(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text: expected a str"):
        bert.to_tokens([1, 2])  # type: ignore[list-item]
    with pytest.raises(mechlab.HookError, match="blocks.0.attn.hook_pattern"):
        bert.run_with_cache("x", "blocks.0.attn.hook_patern")
    assert repr(bert).startswith("Pretrained(") and "all-MiniLM-L6-v2" in repr(bert)


def test_a_topic_bert_runs_model_is_its_pretrained_encoder(tmp_path: Path, bert: mechlab.Pretrained) -> None:
    # topic-bert trains nothing: Run.model() is the encoder at its model.path, step 0.
    short = {
        "wiki.n_words": 600,
        "wiki.lda_iterations": 30,
        "wiki.lda_burn_in": 15,
        "wiki.n_dev": 300,
        "probe.docs": 24,
        "probe.random_pairs": 2000,
        "probe.sentences": 1,
        "model.path": str(MODEL),
    }
    r = mechlab.run("topic-bert", overrides=short, out=tmp_path / "tb")
    m = r.model()
    assert m.step == 0
    ids = bert.to_tokens(["Jazz is a music genre.", "The Roman Empire"])
    a, _ = m.run_with_cache(ids, names_filter=[])
    b, _ = bert.run_with_cache(ids, names_filter=[])
    np.testing.assert_array_equal(a, b)
    with pytest.raises(mechlab.CheckpointError, match=r"no checkpoint for step 5 \(this run has steps \[0\]\)"):
        r.model(step=5)


def test_patching_and_attribution_run_on_the_pretrained_encoder(bert: mechlab.Pretrained) -> None:
    """Head patching on the shared encoder (a CLS-direction metric of the last
    block's output), and attribution patching through the encoder's own
    backward: they agree (r measured 0.96 over the 72 heads)."""
    clean = bert.to_tokens(["The cat sat on the mat.", "A bird flew over the house."])
    corrupted = bert.to_tokens(["The dog sat on the mat.", "A fish swam under the house."])
    direction = np.random.default_rng(0).standard_normal(384)

    class Cls(mechlab.Metric):
        def __call__(self, y: np.ndarray) -> float:
            return float((y[:, 0] @ direction).mean())

        def grad(self, y: np.ndarray) -> np.ndarray:
            g = np.zeros(y.shape)
            g[:, 0] = direction / y.shape[0]
            return g

    out, cache = bert.run_with_cache(clean, "blocks.3.attn.hook_z", incl_bwd=True, metric=Cls())
    assert cache["blocks.3.attn.hook_z_grad"].shape == cache["blocks.3.attn.hook_z"].shape == (2, 9, 12, 32)
    assert np.abs(out - bert.run_with_cache(clean, [])[0]).max() < 1e-4, "the f64 path is the fused forward"
    patched = bert.patch(clean, corrupted, Cls(), kind="head_out")
    estimated = bert.attribute(clean, corrupted, Cls(), kind="head_out")
    assert patched.values.shape == (6, 12)
    assert np.corrcoef(patched.values.ravel(), estimated.values.ravel())[0, 1] > 0.9
