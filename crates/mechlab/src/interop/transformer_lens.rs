//! TransformerLens's `HookedTransformer` layouts (the table in [`super`]).

use super::{value, Dict, Named};

use mechlab_engine::gpt::{ActFn, Gpt, GptConfig, Normalization, PositionalEmbedding};
use mechlab_engine::Float;
use rand::SeedableRng;
use serde_json::{json, Value};

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
    let dict = Dict::new(tensors);
    let get = |name: &str, shape: &[usize]| dict.get(name, shape);
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
