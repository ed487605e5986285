//! karpathy/nanoGPT's `GPT` (`model.py`): `transformer.wte`, `transformer.h.{l}`
//! with `attn.c_attn` (Q, K and V stacked, `[3·d, d]`), `lm_head` tied to `wte`.

use super::{value, Dict, Named};

use mechlab_engine::gpt::{ActFn, Gpt, GptConfig, Normalization, PositionalEmbedding};
use mechlab_engine::Float;
use rand::SeedableRng;
use serde_json::{json, Value};

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
    let dict = Dict::new(tensors);
    let get = |name: &str, shape: &[usize]| dict.get(name, shape);
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
    if let Some(head) = dict.find("lm_head.weight") {
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
