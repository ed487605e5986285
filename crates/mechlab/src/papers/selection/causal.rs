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

/// The flips of [`token_ablation`], with the reviews on which only one of the
/// two removals flips the prediction (the discordant pairs a paired test reads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flips {
    pub reviews: usize,
    pub top: usize,
    pub random: usize,
    pub top_only: usize,
    pub random_only: usize,
}

impl Flips {
    /// The one-sided exact sign test (McNemar's, exact) of "removing the top
    /// token flips more often": `P(X ≥ top_only)` for `X ~ Bin(top_only +
    /// random_only, ½)`, the chance of so lopsided a split if both removals
    /// flipped alike.
    pub fn p_value(&self) -> f64 {
        let n = (self.top_only + self.random_only) as u64;
        let ln_fact = |m: u64| (1..=m).map(|i| (i as f64).ln()).sum::<f64>();
        (self.top_only as u64..=n)
            .map(|x| (ln_fact(n) - ln_fact(x) - ln_fact(n - x) - n as f64 * 2f64.ln()).exp())
            .sum::<f64>()
            .min(1.0)
    }
}

/// Flips when each review's top-scoring token is removed, and when a random
/// other token is removed, over the first `n` reviews of `data` with at least
/// two tokens.
///
/// ```
/// use mechlab::papers::selection::causal::Flips;
/// let f = Flips { reviews: 100, top: 12, random: 2, top_only: 10, random_only: 0 };
/// assert!((f.p_value() - 0.5f64.powi(10)).abs() < 1e-12);
/// let tie = Flips { top_only: 5, random_only: 5, ..f };
/// assert!(tie.p_value() > 0.5);
/// ```
pub fn token_ablation(
    m: &mut dyn HookedModel,
    data: &SeqData,
    n: usize,
) -> Result<Flips, HookError> {
    let t = data.n_ctx;
    let ks: Vec<usize> = (0..data.n.min(n)).filter(|&k| data.lens[k] >= 2).collect();
    let mut out = Flips {
        reviews: ks.len(),
        ..Flips::default()
    };
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
        let mut flipped = [Vec::new(), Vec::new()];
        for (patch, fl) in [top, rnd].into_iter().zip(flipped.iter_mut()) {
            let hook = Hook {
                name: names[0].into(),
                ablation: Ablation::patch(patch),
                heads: None,
                positions: None,
            };
            let g = m.run_with_hooks(&batch, &[hook])?;
            *fl = f
                .data
                .iter()
                .zip(&g.data)
                .map(|(a, b)| (*a > 0.0) != (*b > 0.0))
                .collect();
        }
        for (&a, &b) in flipped[0].iter().zip(&flipped[1]) {
            out.top += usize::from(a);
            out.random += usize::from(b);
            out.top_only += usize::from(a && !b);
            out.random_only += usize::from(b && !a);
        }
    }
    Ok(out)
}
