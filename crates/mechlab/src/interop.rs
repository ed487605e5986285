//! Weights in and out of TransformerLens: the engine's general transformer
//! ([`mechlab_engine::gpt`]) as a `HookedTransformer` state dict
//! (`model.safetensors`, TransformerLens's parameter names and layouts) beside a
//! `config.json` that `HookedTransformerConfig(**cfg)` accepts, and back.
//!
//! Only the layouts differ: mechlab stores linear maps as PyTorch's `nn.Linear`
//! does, `[out, in]`; TransformerLens per head and `x @ W`:
//!
//! | mechlab | TransformerLens |
//! |---|---|
//! | `blocks.l.attn.W_Q` `[H·d_head, d_model]` (also `W_K`, `W_V`) | `[H, d_model, d_head]`, `W_Q[h][i][c] = ours[h·d_head + c][i]` |
//! | `blocks.l.attn.b_Q` `[H·d_head]` | `[H, d_head]` |
//! | `blocks.l.attn.W_O` `[d_model, H·d_head]` | `[H, d_head, d_model]` |
//! | `blocks.l.mlp.W_in` `[d_mlp, d_model]`, `W_out` `[d_model, d_mlp]` | transposed |
//! | `unembed.W_U` `[d_vocab, d_model]` (or `embed.W_E` when tied) | `[d_model, d_vocab]` |
//! | `embed.W_E`, `pos_embed.W_pos`, biases `b_O`, `b_in`, `b_out`, `b_U`, LayerNorm `w`, `b` | the same |
//!
//! Values keep their dtype (an f32 run exports f32), so export then import is
//! bit-exact. TransformerLens has no learned relative-position bias, so an
//! `"rpe"` model does not export; a tied unembedding exports as its own copy of
//! `W_Eᵀ` (TransformerLens has no tying) and imports untied.
//!
//! ```
//! use mechlab::interop::{from_transformer_lens, to_transformer_lens};
//! use mechlab_engine::gpt::{Gpt, GptConfig};
//! use rand::SeedableRng;
//! let cfg = GptConfig { n_layers: 1, d_model: 4, n_heads: 2, d_head: 2, n_ctx: 3, d_vocab: 5, ..GptConfig::default() };
//! let m = Gpt::<f32>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0)).unwrap();
//! let (tensors, json) = to_transformer_lens(&m).unwrap();
//! assert_eq!(tensors.iter().find(|t| t.0 == "blocks.0.attn.W_Q").unwrap().1, vec![2, 4, 2]);
//! let back = from_transformer_lens::<f32>(&json, &tensors).unwrap();
//! assert_eq!(back.param("blocks.0.attn.W_Q").unwrap().value(), m.param("blocks.0.attn.W_Q").unwrap().value());
//! ```

use mechlab_engine::gpt::{ActFn, Gpt, GptConfig, Normalization, PositionalEmbedding};
use mechlab_engine::Float;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// One tensor: name, shape, row-major values.
pub type Named<T> = (String, Vec<usize>, Vec<T>);

/// The state-dict file and the config file of an export folder.
pub const STATE: &str = "model.safetensors";
pub const CONFIG: &str = "config.json";

fn value<T: Float>(m: &Gpt<T>, name: &str) -> Result<Vec<T>, String> {
    m.param(name)
        .map(|p| p.value().to_vec())
        .ok_or_else(|| format!("the model has no {name}"))
}

/// `[H·dh, d]` rows per head → `[H, d, dh]`.
fn heads_in<T: Float>(w: &[T], h: usize, dh: usize, d: usize) -> Vec<T> {
    let mut o = vec![T::zero(); w.len()];
    for hh in 0..h {
        for c in 0..dh {
            for i in 0..d {
                o[(hh * d + i) * dh + c] = w[(hh * dh + c) * d + i];
            }
        }
    }
    o
}

/// `[H, d, dh]` → `[H·dh, d]`.
fn heads_in_back<T: Float>(w: &[T], h: usize, dh: usize, d: usize) -> Vec<T> {
    let mut o = vec![T::zero(); w.len()];
    for hh in 0..h {
        for c in 0..dh {
            for i in 0..d {
                o[(hh * dh + c) * d + i] = w[(hh * d + i) * dh + c];
            }
        }
    }
    o
}

/// `[d, H·dh]` → `[H, dh, d]`.
fn heads_out<T: Float>(w: &[T], h: usize, dh: usize, d: usize) -> Vec<T> {
    let mut o = vec![T::zero(); w.len()];
    for hh in 0..h {
        for c in 0..dh {
            for i in 0..d {
                o[(hh * dh + c) * d + i] = w[i * h * dh + hh * dh + c];
            }
        }
    }
    o
}

/// `[H, dh, d]` → `[d, H·dh]`.
fn heads_out_back<T: Float>(w: &[T], h: usize, dh: usize, d: usize) -> Vec<T> {
    let mut o = vec![T::zero(); w.len()];
    for hh in 0..h {
        for c in 0..dh {
            for i in 0..d {
                o[i * h * dh + hh * dh + c] = w[(hh * dh + c) * d + i];
            }
        }
    }
    o
}

/// `[r, c]` → `[c, r]`.
fn transpose<T: Float>(w: &[T], r: usize, c: usize) -> Vec<T> {
    let mut o = vec![T::zero(); w.len()];
    for i in 0..r {
        for j in 0..c {
            o[j * r + i] = w[i * c + j];
        }
    }
    o
}

/// The model as a TransformerLens state dict and its `HookedTransformerConfig` keys.
pub fn to_transformer_lens<T: Float>(m: &Gpt<T>) -> Result<(Vec<Named<T>>, Value), String> {
    let c = &m.cfg;
    if c.positional_embedding_type == PositionalEmbedding::Rpe {
        return Err("positional_embedding_type = \"rpe\": TransformerLens has no learned relative-position bias to hold it".into());
    }
    let (d, h, dh, v, mlp) = (c.d_model, c.n_heads, c.d_head, c.d_vocab, c.d_mlp);
    let ln = c.normalization == Normalization::LN;
    let mut out: Vec<Named<T>> = vec![
        ("embed.W_E".into(), vec![v, d], value(m, "embed.W_E")?),
        (
            "pos_embed.W_pos".into(),
            vec![c.n_ctx, d],
            value(m, "pos_embed.W_pos")?,
        ),
    ];
    for l in 0..c.n_layers {
        let b = format!("blocks.{l}");
        if ln {
            for p in ["ln1.w", "ln1.b"] {
                out.push((format!("{b}.{p}"), vec![d], value(m, &format!("{b}.{p}"))?));
            }
        }
        for x in ["Q", "K", "V"] {
            let w = value(m, &format!("{b}.attn.W_{x}"))?;
            out.push((
                format!("{b}.attn.W_{x}"),
                vec![h, d, dh],
                heads_in(&w, h, dh, d),
            ));
            out.push((
                format!("{b}.attn.b_{x}"),
                vec![h, dh],
                value(m, &format!("{b}.attn.b_{x}"))?,
            ));
        }
        let wo = value(m, &format!("{b}.attn.W_O"))?;
        out.push((
            format!("{b}.attn.W_O"),
            vec![h, dh, d],
            heads_out(&wo, h, dh, d),
        ));
        out.push((
            format!("{b}.attn.b_O"),
            vec![d],
            value(m, &format!("{b}.attn.b_O"))?,
        ));
        if mlp > 0 {
            if ln {
                for p in ["ln2.w", "ln2.b"] {
                    out.push((format!("{b}.{p}"), vec![d], value(m, &format!("{b}.{p}"))?));
                }
            }
            let wi = value(m, &format!("{b}.mlp.W_in"))?;
            out.push((
                format!("{b}.mlp.W_in"),
                vec![d, mlp],
                transpose(&wi, mlp, d),
            ));
            out.push((
                format!("{b}.mlp.b_in"),
                vec![mlp],
                value(m, &format!("{b}.mlp.b_in"))?,
            ));
            let wo = value(m, &format!("{b}.mlp.W_out"))?;
            out.push((
                format!("{b}.mlp.W_out"),
                vec![mlp, d],
                transpose(&wo, d, mlp),
            ));
            out.push((
                format!("{b}.mlp.b_out"),
                vec![d],
                value(m, &format!("{b}.mlp.b_out"))?,
            ));
        }
    }
    if ln {
        out.push(("ln_final.w".into(), vec![d], value(m, "ln_final.w")?));
        out.push(("ln_final.b".into(), vec![d], value(m, "ln_final.b")?));
    }
    let wu = m
        .param("unembed.W_U")
        .or_else(|| m.param("embed.W_E"))
        .map(|p| p.value().to_vec())
        .ok_or("the model has no unembedding")?;
    out.push(("unembed.W_U".into(), vec![d, v], transpose(&wu, v, d)));
    out.push(("unembed.b_U".into(), vec![v], value(m, "unembed.b_U")?));
    let cfg = json!({
        "n_layers": c.n_layers,
        "d_model": d,
        "n_ctx": c.n_ctx,
        "d_head": dh,
        "n_heads": h,
        "d_mlp": if mlp > 0 { json!(mlp) } else { Value::Null },
        "d_vocab": v,
        "act_fn": match (mlp > 0, c.act_fn) {
            (false, _) => Value::Null,
            (true, ActFn::GeluNew) => json!("gelu_new"),
            (true, ActFn::Relu) => json!("relu"),
            (true, ActFn::Gelu) => json!("gelu"),
        },
        "attn_only": mlp == 0,
        "normalization_type": if ln { json!("LN") } else { Value::Null },
        "positional_embedding_type": "standard",
        "default_prepend_bos": false,
    });
    Ok((out, cfg))
}

/// The engine's config from `HookedTransformerConfig` keys; what mechlab's
/// model cannot hold is an error naming the key.
pub fn gpt_config(cfg: &Value) -> Result<GptConfig, String> {
    let num = |k: &str| -> Result<usize, String> {
        cfg.get(k)
            .and_then(Value::as_u64)
            .map(|x| x as usize)
            .ok_or_else(|| format!("config.json: `{k}` is missing or not a whole number"))
    };
    let s = |k: &str| cfg.get(k).and_then(Value::as_str);
    let attn_only = cfg
        .get("attn_only")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let d_mlp = if attn_only { 0 } else { num("d_mlp")? };
    let act_fn = match (attn_only, s("act_fn")) {
        (true, _) => ActFn::GeluNew,
        (false, Some("gelu_new")) => ActFn::GeluNew,
        (false, Some("relu")) => ActFn::Relu,
        (false, other) => {
            return Err(format!(
            "config.json: act_fn = {other:?}: mechlab's transformer has \"gelu_new\" and \"relu\""
        ))
        }
    };
    let normalization = match s("normalization_type") {
        Some("LN") => Normalization::LN,
        None => Normalization::None,
        Some(o) => {
            return Err(format!(
                "config.json: normalization_type = {o:?}: mechlab has \"LN\" and none"
            ))
        }
    };
    match s("positional_embedding_type") {
        None | Some("standard") => {}
        Some(o) => {
            return Err(format!(
                "config.json: positional_embedding_type = {o:?}: mechlab imports \"standard\""
            ))
        }
    }
    let d_vocab = num("d_vocab")?;
    if let Some(out) = cfg.get("d_vocab_out").and_then(Value::as_i64) {
        if out != -1 && out as usize != d_vocab {
            return Err(format!(
                "config.json: d_vocab_out = {out}: mechlab's unembedding has d_vocab outputs"
            ));
        }
    }
    let g = GptConfig {
        n_layers: num("n_layers")?,
        d_model: num("d_model")?,
        n_heads: num("n_heads")?,
        d_head: num("d_head")?,
        d_mlp,
        attn_only,
        act_fn,
        n_ctx: num("n_ctx")?,
        d_vocab,
        normalization,
        positional_embedding_type: PositionalEmbedding::Standard,
        tied_embeddings: false,
        init_range: 0.02,
    };
    g.validate().map_err(|e| format!("config.json: {e}"))?;
    Ok(g)
}

/// A model from a TransformerLens state dict (TransformerLens's buffers, such
/// as `blocks.l.attn.mask`, are ignored); a missing or misshapen parameter is
/// an error naming it.
pub fn from_transformer_lens<T: Float>(
    cfg: &Value,
    tensors: &[Named<T>],
) -> Result<Gpt<T>, String> {
    let g = gpt_config(cfg)?;
    let (d, h, dh, v, mlp) = (g.d_model, g.n_heads, g.d_head, g.d_vocab, g.d_mlp);
    let by: BTreeMap<&str, (&Vec<usize>, &Vec<T>)> = tensors
        .iter()
        .map(|(n, s, x)| (n.as_str(), (s, x)))
        .collect();
    let get = |name: &str, shape: &[usize]| -> Result<&Vec<T>, String> {
        match by.get(name) {
            None => Err(format!("the state dict has no {name}")),
            Some((s, _)) if s.as_slice() != shape => Err(format!(
                "{name} has shape {s:?}, expected {shape:?} from config.json"
            )),
            Some((_, x)) => Ok(x),
        }
    };
    let mut m = Gpt::<T>::new(&g, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
    let set = |m: &mut Gpt<T>, ours: &str, x: Vec<T>| {
        m.param_mut(ours)
            .expect("the model has what its config makes")
            .value_mut()
            .copy_from_slice(&x)
    };
    set(&mut m, "embed.W_E", get("embed.W_E", &[v, d])?.clone());
    set(
        &mut m,
        "pos_embed.W_pos",
        get("pos_embed.W_pos", &[g.n_ctx, d])?.clone(),
    );
    let ln = g.normalization == Normalization::LN;
    for l in 0..g.n_layers {
        let b = format!("blocks.{l}");
        let mut plain: Vec<(String, Vec<usize>)> = Vec::new();
        if ln {
            plain.push((format!("{b}.ln1.w"), vec![d]));
            plain.push((format!("{b}.ln1.b"), vec![d]));
        }
        for x in ["Q", "K", "V"] {
            let n = format!("{b}.attn.W_{x}");
            let w = heads_in_back(get(&n, &[h, d, dh])?, h, dh, d);
            set(&mut m, &n, w);
            let bn = format!("{b}.attn.b_{x}");
            set(&mut m, &bn, get(&bn, &[h, dh])?.clone());
        }
        let n = format!("{b}.attn.W_O");
        let w = heads_out_back(get(&n, &[h, dh, d])?, h, dh, d);
        set(&mut m, &n, w);
        plain.push((format!("{b}.attn.b_O"), vec![d]));
        if mlp > 0 {
            if ln {
                plain.push((format!("{b}.ln2.w"), vec![d]));
                plain.push((format!("{b}.ln2.b"), vec![d]));
            }
            let n = format!("{b}.mlp.W_in");
            let w = transpose(get(&n, &[d, mlp])?, d, mlp);
            set(&mut m, &n, w);
            let n = format!("{b}.mlp.W_out");
            let w = transpose(get(&n, &[mlp, d])?, mlp, d);
            set(&mut m, &n, w);
            plain.push((format!("{b}.mlp.b_in"), vec![mlp]));
            plain.push((format!("{b}.mlp.b_out"), vec![d]));
        }
        for (n, s) in plain {
            let x = get(&n, &s)?.clone();
            set(&mut m, &n, x);
        }
    }
    if ln {
        for n in ["ln_final.w", "ln_final.b"] {
            let x = get(n, &[d])?.clone();
            set(&mut m, n, x);
        }
    }
    let wu = transpose(get("unembed.W_U", &[d, v])?, d, v);
    set(&mut m, "unembed.W_U", wu);
    set(&mut m, "unembed.b_U", get("unembed.b_U", &[v])?.clone());
    Ok(m)
}

/// Writes `model.safetensors` and `config.json` into `dir`.
pub fn write<T: Float>(dir: &Path, tensors: &[Named<T>], cfg: &Value) -> Result<(), String> {
    let bad = |e: String| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| bad(e.to_string()))?;
    let dtype = if T::BYTES == 4 {
        safetensors::Dtype::F32
    } else {
        safetensors::Dtype::F64
    };
    if T::DTYPE == "f64x2" {
        return Err("a double-double model does not export".into());
    }
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, x)| {
            let mut b = Vec::with_capacity(x.len() * T::BYTES);
            x.iter().for_each(|v| v.write_le(&mut b));
            b
        })
        .collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            safetensors::tensor::TensorView::new(dtype, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let data = safetensors::serialize(views, None).map_err(|e| bad(e.to_string()))?;
    crate::run::atomic::write(&dir.join(STATE), &data).map_err(|e| bad(e.to_string()))?;
    let text = serde_json::to_string_pretty(cfg).expect("JSON serialises");
    crate::run::atomic::write(&dir.join(CONFIG), text.as_bytes()).map_err(|e| bad(e.to_string()))
}

/// Reads an export folder: its config and its tensors in `T` (f32 or f64 files).
pub fn read<T: Float>(dir: &Path) -> Result<(Value, Vec<Named<T>>), String> {
    let cp = dir.join(CONFIG);
    let bad = |p: &Path, e: String| format!("{}: {e}", p.display());
    let text = std::fs::read_to_string(&cp).map_err(|e| bad(&cp, e.to_string()))?;
    let cfg: Value = serde_json::from_str(&text).map_err(|e| bad(&cp, e.to_string()))?;
    let sp = dir.join(STATE);
    let bytes = std::fs::read(&sp).map_err(|e| bad(&sp, e.to_string()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(&sp, e.to_string()))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        let data: Vec<T> = match view.dtype() {
            safetensors::Dtype::F32 => view
                .data()
                .chunks_exact(4)
                .map(|c| T::of(f32::from_le_bytes(c.try_into().expect("4")) as f64))
                .collect(),
            safetensors::Dtype::F64 => view
                .data()
                .chunks_exact(8)
                .map(|c| T::of(f64::from_le_bytes(c.try_into().expect("8"))))
                .collect(),
            // TransformerLens's boolean mask buffers and the like
            _ => continue,
        };
        out.push((name, view.shape().to_vec(), data));
    }
    Ok((cfg, out))
}

/// Whether an export folder's `config.json` is nanoGPT's (`GPTConfig` keys).
pub fn is_nanogpt(cfg: &Value) -> bool {
    cfg.get("n_layer").is_some()
}

/// The model as a nanoGPT state dict (karpathy/nanoGPT `model.py`, `bias =
/// True`) and its `GPTConfig` keys. nanoGPT's model is narrower than
/// mechlab's: LayerNorm, `d_mlp = 4·d_model`, `n_heads·d_head = d_model`, the
/// exact GELU, learned positions, an unembedding tied to the embedding and no
/// unembedding bias; a model outside that is an error naming what differs.
pub fn to_nanogpt<T: Float>(m: &Gpt<T>) -> Result<(Vec<Named<T>>, Value), String> {
    let c = &m.cfg;
    let (d, v) = (c.d_model, c.d_vocab);
    let need = |ok: bool, why: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("nanoGPT's model has {why}"))
        }
    };
    need(
        c.normalization == Normalization::LN,
        "LayerNorm (normalization = \"LN\")",
    )?;
    need(
        c.d_mlp == 4 * d,
        "MLPs of 4·d_model (d_mlp = 4·d_model, attn_only = false)",
    )?;
    need(c.n_heads * c.d_head == d, "n_heads·d_head = d_model")?;
    need(
        c.act_fn == ActFn::Gelu,
        "the exact GELU (act_fn = \"gelu\")",
    )?;
    need(
        c.positional_embedding_type == PositionalEmbedding::Standard,
        "learned absolute positions",
    )?;
    let we = value(m, "embed.W_E")?;
    if let Some(wu) = m.param("unembed.W_U") {
        need(
            wu.value() == &we[..],
            "its unembedding tied to the embedding (tied_embeddings = true)",
        )?;
    }
    need(
        value(m, "unembed.b_U")?.iter().all(|x| *x == T::zero()),
        "no unembedding bias (unembed.b_U is not zero)",
    )?;
    let mut out: Vec<Named<T>> = vec![
        ("transformer.wte.weight".into(), vec![v, d], we.clone()),
        (
            "transformer.wpe.weight".into(),
            vec![c.n_ctx, d],
            value(m, "pos_embed.W_pos")?,
        ),
    ];
    for l in 0..c.n_layers {
        let (b, n) = (format!("blocks.{l}"), format!("transformer.h.{l}"));
        let mut qkv = value(m, &format!("{b}.attn.W_Q"))?;
        qkv.extend(value(m, &format!("{b}.attn.W_K"))?);
        qkv.extend(value(m, &format!("{b}.attn.W_V"))?);
        let mut qkv_b = value(m, &format!("{b}.attn.b_Q"))?;
        qkv_b.extend(value(m, &format!("{b}.attn.b_K"))?);
        qkv_b.extend(value(m, &format!("{b}.attn.b_V"))?);
        for (ours, theirs, shape) in [
            ("ln1.w", "ln_1.weight", vec![d]),
            ("ln1.b", "ln_1.bias", vec![d]),
            ("attn.W_O", "attn.c_proj.weight", vec![d, d]),
            ("attn.b_O", "attn.c_proj.bias", vec![d]),
            ("ln2.w", "ln_2.weight", vec![d]),
            ("ln2.b", "ln_2.bias", vec![d]),
            ("mlp.W_in", "mlp.c_fc.weight", vec![4 * d, d]),
            ("mlp.b_in", "mlp.c_fc.bias", vec![4 * d]),
            ("mlp.W_out", "mlp.c_proj.weight", vec![d, 4 * d]),
            ("mlp.b_out", "mlp.c_proj.bias", vec![d]),
        ] {
            out.push((
                format!("{n}.{theirs}"),
                shape,
                value(m, &format!("{b}.{ours}"))?,
            ));
        }
        out.push((format!("{n}.attn.c_attn.weight"), vec![3 * d, d], qkv));
        out.push((format!("{n}.attn.c_attn.bias"), vec![3 * d], qkv_b));
    }
    out.push((
        "transformer.ln_f.weight".into(),
        vec![d],
        value(m, "ln_final.w")?,
    ));
    out.push((
        "transformer.ln_f.bias".into(),
        vec![d],
        value(m, "ln_final.b")?,
    ));
    out.push(("lm_head.weight".into(), vec![v, d], we));
    let cfg = json!({
        "block_size": c.n_ctx,
        "vocab_size": v,
        "n_layer": c.n_layers,
        "n_head": c.n_heads,
        "n_embd": d,
        "dropout": 0.0,
        "bias": true,
    });
    Ok((out, cfg))
}

/// The engine's config of a nanoGPT `GPTConfig` (tied, exact GELU, MLPs of 4·n_embd).
pub fn nanogpt_config(cfg: &Value) -> Result<GptConfig, String> {
    let num = |k: &str| -> Result<usize, String> {
        cfg.get(k)
            .and_then(Value::as_u64)
            .map(|x| x as usize)
            .ok_or_else(|| format!("config.json: `{k}` is missing or not a whole number"))
    };
    let (d, h) = (num("n_embd")?, num("n_head")?);
    if h == 0 || d % h != 0 {
        return Err(format!(
            "config.json: n_head = {h} does not divide n_embd = {d}"
        ));
    }
    let g = GptConfig {
        n_layers: num("n_layer")?,
        d_model: d,
        n_heads: h,
        d_head: d / h,
        d_mlp: 4 * d,
        attn_only: false,
        act_fn: ActFn::Gelu,
        n_ctx: num("block_size")?,
        d_vocab: num("vocab_size")?,
        normalization: Normalization::LN,
        positional_embedding_type: PositionalEmbedding::Standard,
        tied_embeddings: true,
        init_range: 0.02,
    };
    g.validate().map_err(|e| format!("config.json: {e}"))?;
    Ok(g)
}

/// A model from a nanoGPT state dict; with `bias = false` the biases stay zero.
/// An `lm_head.weight` that differs from `transformer.wte.weight` is an error
/// (mechlab imports nanoGPT's tied unembedding).
pub fn from_nanogpt<T: Float>(cfg: &Value, tensors: &[Named<T>]) -> Result<Gpt<T>, String> {
    let g = nanogpt_config(cfg)?;
    let bias = cfg.get("bias").and_then(Value::as_bool).unwrap_or(true);
    let d = g.d_model;
    let by: BTreeMap<&str, (&Vec<usize>, &Vec<T>)> = tensors
        .iter()
        .map(|(n, s, x)| (n.as_str(), (s, x)))
        .collect();
    let get = |name: &str, shape: &[usize]| -> Result<&Vec<T>, String> {
        match by.get(name) {
            None => Err(format!("the state dict has no {name}")),
            Some((s, _)) if s.as_slice() != shape => Err(format!(
                "{name} has shape {s:?}, expected {shape:?} from config.json"
            )),
            Some((_, x)) => Ok(x),
        }
    };
    let mut m = Gpt::<T>::new(&g, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
    for p in m.params.iter_mut() {
        p.value_mut().iter_mut().for_each(|x| *x = T::zero());
    }
    let set = |m: &mut Gpt<T>, ours: &str, x: &[T]| {
        m.param_mut(ours)
            .expect("the model has what its config makes")
            .value_mut()
            .copy_from_slice(x)
    };
    let wte = get("transformer.wte.weight", &[g.d_vocab, d])?;
    if let Some((_, head)) = by.get("lm_head.weight") {
        if head.as_slice() != wte.as_slice() {
            return Err("lm_head.weight differs from transformer.wte.weight: mechlab imports nanoGPT's tied unembedding".into());
        }
    }
    set(&mut m, "embed.W_E", wte);
    set(
        &mut m,
        "pos_embed.W_pos",
        get("transformer.wpe.weight", &[g.n_ctx, d])?,
    );
    for l in 0..g.n_layers {
        let (b, n) = (format!("blocks.{l}"), format!("transformer.h.{l}"));
        let qkv = get(&format!("{n}.attn.c_attn.weight"), &[3 * d, d])?;
        for (i, x) in ["Q", "K", "V"].iter().enumerate() {
            set(
                &mut m,
                &format!("{b}.attn.W_{x}"),
                &qkv[i * d * d..(i + 1) * d * d],
            );
        }
        let mut pairs: Vec<(&str, String, Vec<usize>)> = vec![
            ("ln1.w", "ln_1.weight".into(), vec![d]),
            ("attn.W_O", "attn.c_proj.weight".into(), vec![d, d]),
            ("ln2.w", "ln_2.weight".into(), vec![d]),
            ("mlp.W_in", "mlp.c_fc.weight".into(), vec![4 * d, d]),
            ("mlp.W_out", "mlp.c_proj.weight".into(), vec![d, 4 * d]),
        ];
        if bias {
            let qb = get(&format!("{n}.attn.c_attn.bias"), &[3 * d])?;
            for (i, x) in ["Q", "K", "V"].iter().enumerate() {
                set(&mut m, &format!("{b}.attn.b_{x}"), &qb[i * d..(i + 1) * d]);
            }
            pairs.extend([
                ("ln1.b", "ln_1.bias".into(), vec![d]),
                ("attn.b_O", "attn.c_proj.bias".into(), vec![d]),
                ("ln2.b", "ln_2.bias".into(), vec![d]),
                ("mlp.b_in", "mlp.c_fc.bias".into(), vec![4 * d]),
                ("mlp.b_out", "mlp.c_proj.bias".into(), vec![d]),
            ]);
        }
        for (ours, theirs, shape) in pairs {
            let x = get(&format!("{n}.{theirs}"), &shape)?;
            set(&mut m, &format!("{b}.{ours}"), x);
        }
    }
    set(&mut m, "ln_final.w", get("transformer.ln_f.weight", &[d])?);
    if bias {
        set(&mut m, "ln_final.b", get("transformer.ln_f.bias", &[d])?);
    }
    Ok(m)
}

/// A model from an export folder's config and tensors, TransformerLens's or nanoGPT's.
pub fn from_export<T: Float>(cfg: &Value, tensors: &[Named<T>]) -> Result<Gpt<T>, String> {
    if is_nanogpt(cfg) {
        from_nanogpt(cfg, tensors)
    } else {
        from_transformer_lens(cfg, tensors)
    }
}

/// The engine's config of a checkpoint that holds a [`Gpt`]: every size from
/// the tensors' shapes, the head count and activation (which shapes cannot
/// tell) given.
pub fn config_from_shapes<T>(
    tensors: &BTreeMap<String, (Vec<usize>, Vec<T>)>,
    n_heads: usize,
    act_fn: ActFn,
) -> Result<GptConfig, String> {
    let shape = |n: &str| tensors.get(n).map(|(s, _)| s.clone());
    let we = shape("embed.W_E").ok_or("the checkpoint has no embed.W_E: not a transformer")?;
    let (d_vocab, d_model) = (we[0], we[1]);
    let n_layers = (0..)
        .take_while(|l| tensors.contains_key(&format!("blocks.{l}.attn.W_Q")))
        .count();
    let hd = shape("blocks.0.attn.W_Q")
        .map(|s| s[0])
        .ok_or("the checkpoint has no blocks.0.attn.W_Q")?;
    if n_heads == 0 || hd % n_heads != 0 {
        return Err(format!(
            "model.n_heads = {n_heads} does not divide the {hd} query rows of blocks.0.attn.W_Q"
        ));
    }
    let d_mlp = shape("blocks.0.mlp.W_in").map_or(0, |s| s[0]);
    let (n_ctx, pos) = match (shape("pos_embed.W_pos"), shape("blocks.0.attn.rpe")) {
        (Some(s), _) => (s[0], PositionalEmbedding::Standard),
        (None, Some(s)) => (s[1], PositionalEmbedding::Rpe),
        (None, None) => {
            return Err("the checkpoint has no positions (pos_embed.W_pos or an rpe table)".into())
        }
    };
    Ok(GptConfig {
        n_layers,
        d_model,
        n_heads,
        d_head: hd / n_heads,
        d_mlp,
        attn_only: d_mlp == 0,
        act_fn,
        n_ctx,
        d_vocab,
        normalization: if tensors.contains_key("ln_final.w") {
            Normalization::LN
        } else {
            Normalization::None
        },
        positional_embedding_type: pos,
        tied_embeddings: !tensors.contains_key("unembed.W_U"),
        init_range: 0.02,
    })
}

/// The [`Gpt`] a checkpoint's tensors hold (see [`config_from_shapes`]).
pub fn gpt_from_tensors<T: Float>(
    tensors: &BTreeMap<String, (Vec<usize>, Vec<T>)>,
    n_heads: usize,
    act_fn: ActFn,
) -> Result<Gpt<T>, String> {
    let g = config_from_shapes(tensors, n_heads, act_fn)?;
    let mut m = Gpt::<T>::new(&g, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
    for p in m.params.iter_mut() {
        match tensors.get(p.name()) {
            Some((s, x)) if s.as_slice() == p.shape() => p.value_mut().copy_from_slice(x),
            Some((s, _)) => {
                return Err(format!(
                    "{} has shape {s:?}, the model {:?}",
                    p.name(),
                    p.shape()
                ))
            }
            None => return Err(format!("the checkpoint has no {}", p.name())),
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model<T: Float>(cfg: &GptConfig) -> Gpt<T> {
        let mut m = Gpt::<T>::new(cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(4)).unwrap();
        // nonzero biases and gains, so a swapped layout cannot pass
        let mut k = 0.0;
        for p in m.params.iter_mut() {
            for x in p.value_mut() {
                k += 1.0;
                *x += T::of((k * 0.37f64).sin() * 0.1);
            }
        }
        m
    }

    #[test]
    fn export_then_import_is_bit_exact_and_computes_the_same_logits() {
        use mechlab_engine::hooks::{Batch, HookedModel};
        for (mlp, act, ln) in [
            (0, ActFn::GeluNew, true),
            (7, ActFn::Relu, false),
            (7, ActFn::GeluNew, true),
        ] {
            let cfg = GptConfig {
                n_layers: 2,
                d_model: 6,
                n_heads: 2,
                d_head: 3,
                d_mlp: mlp,
                attn_only: mlp == 0,
                act_fn: act,
                n_ctx: 5,
                d_vocab: 7,
                normalization: if ln {
                    Normalization::LN
                } else {
                    Normalization::None
                },
                ..GptConfig::default()
            };
            let mut m = model::<f32>(&cfg);
            let (t, j) = to_transformer_lens(&m).unwrap();
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), &t, &j).unwrap();
            let (j2, t2) = read::<f32>(dir.path()).unwrap();
            let mut back = from_transformer_lens(&j2, &t2).unwrap();
            for (a, b) in m.params.iter().zip(&back.params) {
                assert_eq!(a.name(), b.name());
                assert!(
                    a.value()
                        .iter()
                        .zip(b.value())
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{}",
                    a.name()
                );
            }
            let batch = Batch::new(vec![1, 3, 0, 6, 2], 1, 5);
            assert_eq!(
                m.run_with_cache(&batch, &[]).unwrap().0,
                back.run_with_cache(&batch, &[]).unwrap().0
            );
            // and from a checkpoint's tensors (shapes plus the head count)
            let map: BTreeMap<String, (Vec<usize>, Vec<f32>)> = m
                .params
                .iter()
                .map(|p| {
                    (
                        p.name().to_string(),
                        (p.shape().to_vec(), p.value().to_vec()),
                    )
                })
                .collect();
            let g = gpt_from_tensors(&map, 2, act).unwrap();
            assert_eq!(g.cfg, cfg);
        }
    }

    #[test]
    fn nanogpt_round_trips_bit_for_bit_and_names_what_it_cannot_hold() {
        use mechlab_engine::hooks::{Batch, HookedModel};
        let cfg = GptConfig {
            n_layers: 2,
            d_model: 8,
            n_heads: 2,
            d_head: 4,
            d_mlp: 32,
            attn_only: false,
            act_fn: ActFn::Gelu,
            n_ctx: 5,
            d_vocab: 7,
            tied_embeddings: true,
            ..GptConfig::default()
        };
        let mut m = model::<f32>(&cfg);
        m.param_mut("unembed.b_U")
            .unwrap()
            .value_mut()
            .iter_mut()
            .for_each(|x| *x = 0.0);
        let (t, j) = to_nanogpt(&m).unwrap();
        assert_eq!(j["n_layer"], 2);
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &t, &j).unwrap();
        let (j2, t2) = read::<f32>(dir.path()).unwrap();
        let mut back = from_export(&j2, &t2).unwrap();
        assert_eq!(back.cfg, cfg);
        for (a, b) in m.params.iter().zip(&back.params) {
            assert!(
                a.value()
                    .iter()
                    .zip(b.value())
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{}",
                a.name()
            );
        }
        let batch = Batch::new(vec![1, 3, 0, 6, 2], 1, 5);
        assert_eq!(
            m.run_with_cache(&batch, &[]).unwrap().0,
            back.run_with_cache(&batch, &[]).unwrap().0
        );
        // what nanoGPT cannot hold
        let relu = GptConfig {
            act_fn: ActFn::Relu,
            ..cfg.clone()
        };
        assert!(to_nanogpt(&model::<f32>(&relu))
            .unwrap_err()
            .contains("exact GELU"));
        let b_u = model::<f32>(&cfg);
        assert!(to_nanogpt(&b_u).unwrap_err().contains("unembed.b_U"));
    }

    /// The per-head layouts by hand: TransformerLens's `W_Q[h][i][c]` is our
    /// row `h·d_head + c`, column `i`; `W_O[h][c][i]` our row `i`, column `h·d_head + c`.
    #[test]
    fn per_head_layouts_are_transformer_lens_s() {
        let cfg = GptConfig {
            n_layers: 1,
            d_model: 4,
            n_heads: 2,
            d_head: 3,
            n_ctx: 2,
            d_vocab: 3,
            ..GptConfig::default()
        };
        let m = model::<f64>(&cfg);
        let (t, j) = to_transformer_lens(&m).unwrap();
        let get = |n: &str| t.iter().find(|x| x.0 == n).unwrap().2.clone();
        let (wq, wo) = (
            m.param("blocks.0.attn.W_Q").unwrap().value(),
            m.param("blocks.0.attn.W_O").unwrap().value(),
        );
        let (tq, to) = (get("blocks.0.attn.W_Q"), get("blocks.0.attn.W_O"));
        for h in 0..2 {
            for c in 0..3 {
                for i in 0..4 {
                    assert_eq!(tq[(h * 4 + i) * 3 + c], wq[(h * 3 + c) * 4 + i]);
                    assert_eq!(to[(h * 3 + c) * 4 + i], wo[i * 6 + h * 3 + c]);
                }
            }
        }
        assert_eq!(j["attn_only"], true);
        assert_eq!(j["d_mlp"], Value::Null);
        let rpe = GptConfig {
            positional_embedding_type: PositionalEmbedding::Rpe,
            ..cfg
        };
        assert!(to_transformer_lens(&model::<f64>(&rpe))
            .unwrap_err()
            .contains("rpe"));
        let mut bad = j.clone();
        bad["act_fn"] = json!("silu");
        bad["attn_only"] = json!(false);
        bad["d_mlp"] = json!(8);
        assert!(gpt_config(&bad).unwrap_err().contains("act_fn"));
    }
}
