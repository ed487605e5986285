//! A causal check of token selection on the trained model, through its hook
//! points: removing each review's top-scoring token (its embedding row zeroed at
//! `hook_embed`, so it adds no value and scores 0) against removing a random
//! other token of the same review, counting the predictions (the sign of the
//! logit) that flip.
//!
//! ```
//! use mechlab::papers::selection::causal::other_position;
//! assert_ne!(other_position(7, 5, 2), 2);
//! assert!(other_position(7, 5, 2) < 5);
//! ```

use super::data::SeqData;
use super::hooks::PAD;
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookedModel};

/// Reviews per forward (bounds the `[batch, T, d_model]` embedding tensor).
const CHUNK: usize = 64;

/// A position of a review of length `len` other than `top`, fixed by `k`
/// (a multiplicative hash: deterministic, no random stream consumed).
pub fn other_position(k: usize, len: usize, top: usize) -> usize {
    let h = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    let r = (h % (len as u64 - 1)) as usize;
    if r >= top {
        r + 1
    } else {
        r
    }
}

/// Flips when each review's top-scoring token is removed, and when a random
/// other token is removed: `(reviews, flips top, flips random)` over the first
/// `n` reviews of `data` with at least two tokens.
pub fn token_ablation(
    m: &mut dyn HookedModel,
    data: &SeqData,
    n: usize,
) -> Result<(usize, usize, usize), HookError> {
    let t = data.n_ctx;
    let ks: Vec<usize> = (0..data.n.min(n)).filter(|&k| data.lens[k] >= 2).collect();
    let (mut top_flips, mut rand_flips) = (0, 0);
    for chunk in ks.chunks(CHUNK) {
        let mut tokens = Vec::with_capacity(chunk.len() * t);
        for &k in chunk {
            let toks = data.tokens(k);
            tokens.extend_from_slice(toks);
            tokens.extend(std::iter::repeat_n(PAD, t - toks.len()));
        }
        let batch = Batch::new(tokens, chunk.len(), t);
        let names = ["hook_embed", "blocks.0.attn.hook_attn_scores"];
        let (f, cache) = m.run_with_cache(&batch, &names)?;
        let (emb, sc) = (&cache[names[0]], &cache[names[1]]);
        let d = emb.shape[2];
        let (mut top, mut rnd) = (emb.clone(), emb.clone());
        for (b, &k) in chunk.iter().enumerate() {
            let len = data.lens[k] as usize;
            let row = &sc.data[b * t..b * t + len];
            let best = (0..len)
                .max_by(|&i, &j| row[i].total_cmp(&row[j]))
                .unwrap_or(0);
            let other = other_position(k, len, best);
            top.data[(b * t + best) * d..][..d].fill(0.0);
            rnd.data[(b * t + other) * d..][..d].fill(0.0);
        }
        for (patch, flips) in [(top, &mut top_flips), (rnd, &mut rand_flips)] {
            let hook = Hook {
                name: names[0].into(),
                ablation: Ablation::patch(patch),
                heads: None,
                positions: None,
            };
            let g = m.run_with_hooks(&batch, &[hook])?;
            *flips += f
                .data
                .iter()
                .zip(&g.data)
                .filter(|(a, b)| (**a > 0.0) != (**b > 0.0))
                .count();
        }
    }
    Ok((ks.len(), top_flips, rand_flips))
}
