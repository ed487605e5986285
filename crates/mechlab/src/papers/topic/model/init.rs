//! Building a [`TopicMlm`](super::TopicMlm): its parameters drawn from the seed's
//! Init stream in the authors' order, the [`Plan`] of what trains and which paths
//! the kernels take, and one chunk's [`Work`] buffers (allocated here, once, so a
//! training step allocates nothing).

use super::{
    AttnKind, DecoderKind, EmbedKind, InitKind, Plan, TopicMlmConfig, ValueKind, Work, B_K, B_Q,
    B_U, B_V, EMB_LN_B, EMB_LN_W, LN_B, LN_W, N_SLOTS, TOKEN_TYPE, W_E, W_K, W_Q, W_U, W_V,
};
use crate::rng::{stream, Stream};
use mechlab_engine::{param, Float, Param};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// The parameters in checkpoint order, initialised from `seed`'s Init stream (the
/// draws in the order the authors' code makes them: W_E, Q, K, V, then W_U).
pub(super) fn init_params<T: Float>(
    cfg: &TopicMlmConfig,
    d: usize,
    v: usize,
    topic_of_token: &[usize],
    seed: u64,
) -> [Param<T>; N_SLOTS] {
    let onehot_e = cfg.embedding == EmbedKind::OneHot;
    let mut rng = stream(seed, Stream::Init);
    let nz = cfg.init == InitKind::NearZero;
    let mut lin = |n: usize, fan_in: usize, near_zero: bool| -> Vec<T> {
        let b = 1.0 / (fan_in as f64).sqrt();
        (0..n)
            .map(|_| {
                let u: f64 = rng.random();
                T::of(if near_zero {
                    cfg.init_noise * u
                } else {
                    (2.0 * u - 1.0) * b
                })
            })
            .collect()
    };
    let eye = |n: usize| -> Vec<T> {
        (0..n * n)
            .map(|i| if i / n == i % n { T::one() } else { T::zero() })
            .collect()
    };
    let w_e = if onehot_e {
        eye(v)
    } else if nz {
        lin(v * d, 1, true)
    } else {
        let mut r = stream(seed ^ 0xE, Stream::Init);
        (0..v * d)
            .map(|_| T::of(StandardNormal.sample(&mut r)))
            .collect()
    };
    let token_type: Vec<T> = {
        let mut r = stream(seed ^ 0x7, Stream::Init);
        (0..d)
            .map(|_| T::of(StandardNormal.sample(&mut r)))
            .collect()
    };
    let attn_trained = cfg.attention == AttnKind::Trained;
    // A trained projection's weight and bias (the bias zero under near-zero init),
    // or zeros for a frozen one; each call draws in the order W then b.
    let mut projection = |trained: bool| {
        if !trained {
            return (vec![T::zero(); d * d], vec![T::zero(); d]);
        }
        let w = lin(d * d, d, nz);
        let b = if nz {
            vec![T::zero(); d]
        } else {
            lin(d, d, false)
        };
        (w, b)
    };
    let (w_q, b_q) = projection(attn_trained);
    let (w_k, b_k) = projection(attn_trained);
    let (w_v, b_v) = match cfg.value {
        ValueKind::Trained => projection(true),
        ValueKind::Identity => (eye(d), vec![T::zero(); d]),
        ValueKind::Blocks => {
            let blocks = (0..d * d)
                .map(|ij| {
                    let (a, b) = (topic_of_token[ij / d], topic_of_token[ij % d]);
                    if a != usize::MAX && a == b {
                        T::one()
                    } else {
                        T::zero()
                    }
                })
                .collect();
            (blocks, vec![T::zero(); d])
        }
    };
    let (w_u, b_u) = match cfg.decoder {
        DecoderKind::Trained => (lin(d * v, d, false), vec![T::zero(); v]),
        _ => (
            if d == v {
                eye(d)
            } else {
                vec![T::zero(); d * v]
            },
            vec![T::zero(); v],
        ),
    };
    [
        param("embed.W_E", "embed", &[v, d], w_e),
        param("embed.token_type", "embed_ln", &[d], token_type),
        param("embed.ln.w", "embed_ln", &[d], vec![T::one(); d]),
        param("embed.ln.b", "embed_ln", &[d], vec![T::zero(); d]),
        param("blocks.0.attn.W_Q", "attn_qk", &[d, d], w_q),
        param("blocks.0.attn.b_Q", "attn_qk", &[d], b_q),
        param("blocks.0.attn.W_K", "attn_qk", &[d, d], w_k),
        param("blocks.0.attn.b_K", "attn_qk", &[d], b_k),
        param("blocks.0.attn.W_V", "attn_v", &[d, d], w_v),
        param("blocks.0.attn.b_V", "attn_v", &[d], b_v),
        param("blocks.0.ln.w", "ln", &[d], vec![T::one(); d]),
        param("blocks.0.ln.b", "ln", &[d], vec![T::zero(); d]),
        param("unembed.W_U", "unembed", &[d, v], w_u),
        param("unembed.b_U", "unembed", &[v], b_u),
    ]
}

impl Plan {
    /// Which slots train and which paths the kernels take, from the config.
    pub(super) fn of(cfg: &TopicMlmConfig, d: usize, v: usize) -> Self {
        let onehot_e = cfg.embedding == EmbedKind::OneHot;
        let attn_trained = cfg.attention == AttnKind::Trained;
        let mut train = [false; N_SLOTS];
        train[W_E] = !onehot_e;
        for s in [TOKEN_TYPE, EMB_LN_W, EMB_LN_B] {
            train[s] = cfg.bert_embedding_ln;
        }
        for s in [W_Q, B_Q, W_K, B_K] {
            train[s] = attn_trained;
        }
        train[W_V] = cfg.value == ValueKind::Trained;
        train[B_V] = train[W_V];
        train[LN_W] = cfg.layer_norm;
        train[LN_B] = cfg.layer_norm;
        train[W_U] = cfg.decoder == DecoderKind::Trained;
        train[B_U] = train[W_U];
        let onehot = onehot_e && !cfg.bert_embedding_ln;
        Plan {
            d,
            v,
            onehot,
            need_dh0: train[W_E] || cfg.bert_embedding_ln,
            uniform: !attn_trained,
            shared: !attn_trained && !cfg.residual,
            cfg_value: cfg.value,
            decoder: cfg.decoder,
            residual: cfg.residual,
            layer_norm: cfg.layer_norm,
            bert_ln: cfg.bert_embedding_ln,
            loss: cfg.loss,
            train,
        }
    }

    /// Whether a trained head's backward forms `dv = Pᵀ dz`: only `W_V`'s
    /// gradient and `dh0` read it (topic-attention, `W_V` frozen with one-hot
    /// inputs, has neither).
    pub(super) fn reads_dv(&self) -> bool {
        self.train[W_V] || self.need_dh0
    }
}

impl<T: Float> Work<T> {
    /// One chunk's buffers for documents of up to `l` tokens.
    pub(super) fn new(l: usize, d: usize, v: usize, plan: &Plan, p: &[Param<T>; N_SLOTS]) -> Self {
        let train = plan.train;
        let z = |n: usize| vec![T::zero(); n];
        Work {
            hook_embed: z(l * d),
            emb_pre: Vec::new(),
            emb_mean: Vec::new(),
            emb_rstd: Vec::new(),
            hq: z(l * d),
            hook_q: z(l * d),
            hook_k: z(l * d),
            hook_v: z(l * d),
            hook_pattern: z(l * l),
            hook_z: z(l * d),
            resid: z(l * d),
            ln_mean: z(l),
            ln_rstd: z(l),
            y: z(l * d),
            logits: z(l * v),
            d_logits: z(l * v),
            d_y: z(l * d),
            d_resid: z(l * d),
            d_pattern: z(l * l),
            d_q: z(l * d),
            d_k: z(l * d),
            d_v: z(l * d),
            d_h0: z(l * d),
            d_hq: z(l * d),
            hbar: z(d),
            d_table: if plan.need_dh0 { z(v * d) } else { Vec::new() },
            qpos: Vec::with_capacity(l),
            row_top: vec![0; l],
            row_l1p: z(l),
            grads: std::array::from_fn(|s| {
                if train[s] {
                    z(p[s].numel())
                } else {
                    Vec::new()
                }
            }),
            loss: 0.0,
        }
    }
}
