//! The model's gradients against finite differences (every option), at
//! saturation against the double-double, the hooked forward against training's,
//! and bit-identical steps for any thread count.

use super::*;
use crate::gradcheck::{check_params, DEFAULT_H};
use crate::precision::{assert_direction, MIN_COSINE};
use crate::F64x2;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub(super) fn tiny(
    mlp: bool,
    norm: Normalization,
    pos: PositionalEmbedding,
    tied: bool,
) -> GptConfig {
    GptConfig {
        n_layers: 2,
        d_model: 6,
        n_heads: 2,
        d_head: 3,
        d_mlp: if mlp { 5 } else { 0 },
        attn_only: !mlp,
        act_fn: ActFn::GeluNew,
        n_ctx: 5,
        d_vocab: 7,
        normalization: norm,
        positional_embedding_type: pos,
        tied_embeddings: tied,
        init_range: 0.5,
    }
}

pub(super) fn tokens(b: usize, len: usize, v: usize, seed: u64) -> Vec<u32> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    (0..b * len)
        .map(|_| rand::Rng::random_range(&mut r, 0..v as u32))
        .collect()
}

/// Nonzero biases and LN gains, so their gradients are tested away from the init.
pub(super) fn perturb<T: Float>(m: &mut Gpt<T>, seed: u64) {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    m.visit_mut(&mut |p| {
        for x in p.value_mut() {
            *x += T::of(rand::Rng::random_range(&mut r, -0.3..0.3));
        }
    });
}

fn split(tok: &[u32], b: usize, t: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for row in tok.chunks(t + 1).take(b) {
        x.extend_from_slice(&row[..t]);
        y.extend_from_slice(&row[1..]);
    }
    (x, y)
}

/// The test model of `cfg` (seed 7, perturbed) and a batch of 3 sequences of
/// 5 + 1 tokens.
fn model_and_batch(cfg: &GptConfig) -> (Gpt<f64>, Vec<u32>) {
    let mut m = Gpt::<f64>::new(cfg, &mut ChaCha8Rng::seed_from_u64(7)).unwrap();
    perturb(&mut m, 8);
    (m, tokens(3, 6, cfg.d_vocab, 9))
}

fn gradcheck(cfg: GptConfig, what: &str) {
    let (b, t) = (3, 5);
    let (mut m, tok) = model_and_batch(&cfg);
    let (x, y) = split(&tok, b, t);
    let mut ws = Workspace::new(&m, b, t);
    let mut eval_ws = Workspace::new(&m, b, t);
    let results = check_params(
        &mut m,
        |m: &Gpt<f64>| m.evaluate(&mut eval_ws, &x, Some(&y)),
        |m: &mut Gpt<f64>| {
            m.train_step(&mut ws, &tok);
        },
        DEFAULT_H,
    );
    assert!(!results.is_empty());
    for (name, r) in results {
        if name.ends_with("attn.b_K") {
            continue; // see key_bias_gradient_is_zero
        }
        r.assert_below(1e-6, &format!("{what}: {name}"));
    }
}

#[test]
fn gradcheck_attn_only_ln_absolute_untied() {
    gradcheck(
        tiny(
            false,
            Normalization::LN,
            PositionalEmbedding::Standard,
            false,
        ),
        "attn-only",
    );
}

#[test]
fn gradcheck_mlp_ln_rpe_tied() {
    gradcheck(
        tiny(true, Normalization::LN, PositionalEmbedding::Rpe, true),
        "mlp+rpe+tied",
    );
}

#[test]
fn gradcheck_without_layer_norm() {
    gradcheck(
        tiny(
            true,
            Normalization::None,
            PositionalEmbedding::Standard,
            false,
        ),
        "no-LN",
    );
}

/// ReLU MLPs (TransformerLens `act_fn = "relu"`): at this seed no
/// pre-activation lies within the finite difference's step of the kink.
#[test]
fn gradcheck_relu_mlp() {
    let cfg = GptConfig {
        act_fn: ActFn::Relu,
        ..tiny(
            true,
            Normalization::LN,
            PositionalEmbedding::Standard,
            false,
        )
    };
    gradcheck(cfg, "relu");
}

/// The exact GELU (nanoGPT's, TransformerLens `"gelu"`) through the model.
#[test]
fn gradcheck_exact_gelu_mlp() {
    let cfg = GptConfig {
        act_fn: ActFn::Gelu,
        ..tiny(true, Normalization::LN, PositionalEmbedding::Standard, true)
    };
    gradcheck(cfg, "gelu");
}

/// Targets given apart from the inputs: the next-token targets reproduce the
/// masked step bit for bit, and other targets (a shuffled control) are
/// gradient-checked against the loss they define.
#[test]
fn train_step_pairs_is_the_masked_step_and_gradchecks() {
    let cfg = tiny(
        true,
        Normalization::LN,
        PositionalEmbedding::Standard,
        false,
    );
    let (b, t) = (3, 5);
    let (mut m, tok) = model_and_batch(&cfg);
    let (x, y) = split(&tok, b, t);
    let mask: Vec<bool> = (0..b * t).map(|i| i % 2 == 0).collect();
    let mut ws = Workspace::new(&m, b, t);
    m.zero_grad();
    let l1 = m.train_step_masked(&mut ws, &tok, Some(&mask));
    let g1: Vec<Vec<f64>> = m.params.iter().map(|p| p.grad().to_vec()).collect();
    m.zero_grad();
    let l2 = m.train_step_pairs(&mut ws, &x, &y, Some(&mask));
    assert_eq!(l1.to_bits(), l2.to_bits());
    for (p, g) in m.params.iter().zip(&g1) {
        assert_eq!(p.grad(), &g[..], "{}", p.name());
    }
    // other targets: the rows' targets rolled by one sequence
    let y2: Vec<u32> = (0..b * t).map(|i| y[(i + t) % (b * t)]).collect();
    let mut eval_ws = Workspace::new(&m, b, t);
    m.zero_grad();
    let results = check_params(
        &mut m,
        |m: &Gpt<f64>| m.evaluate(&mut eval_ws, &x, Some(&y2)),
        |m: &mut Gpt<f64>| {
            m.train_step_pairs(&mut ws, &x, &y2, None);
        },
        DEFAULT_H,
    );
    for (name, r) in results {
        if name.ends_with("attn.b_K") {
            continue;
        }
        r.assert_below(1e-6, &format!("pairs: {name}"));
    }
}

/// The masked loss (Bietti et al.'s "loss on the outputs only") is the mean of
/// the selected positions' losses, and its gradient that mean's; a mask that
/// selects nothing returns 0 and leaves the gradients alone.
#[test]
fn gradcheck_masked_loss() {
    let cfg = tiny(
        false,
        Normalization::None,
        PositionalEmbedding::Standard,
        false,
    );
    let (b, t) = (3, 5);
    let (mut m, tok) = model_and_batch(&cfg);
    let (x, y) = split(&tok, b, t);
    let mask: Vec<bool> = (0..b * t).map(|i| i % 3 == 1 || i == 4).collect();
    let picked = mask.iter().filter(|&&k| k).count() as f64;
    let mut ws = Workspace::new(&m, b, t);
    let mut eval_ws = Workspace::new(&m, b, t);
    let masked_mean = |m: &Gpt<f64>, ws: &mut Workspace<f64>| {
        m.evaluate(ws, &x, Some(&y));
        let mut sum = 0.0;
        for s in 0..b {
            let (w, i) = ws.seq(s);
            for (p, l) in w.token_losses(i).iter().enumerate() {
                if mask[s * t + p] {
                    sum += l;
                }
            }
        }
        sum / picked
    };
    let loss = m.train_step_masked(&mut ws, &tok, Some(&mask));
    assert!((loss - masked_mean(&m, &mut eval_ws)).abs() < 1e-12);
    m.zero_grad();
    let results = check_params(
        &mut m,
        |m: &Gpt<f64>| masked_mean(m, &mut eval_ws),
        |m: &mut Gpt<f64>| {
            m.train_step_masked(&mut ws, &tok, Some(&mask));
        },
        DEFAULT_H,
    );
    for (name, r) in results {
        if name.ends_with("attn.b_K") {
            continue;
        }
        r.assert_below(1e-6, &format!("masked: {name}"));
    }
    m.zero_grad();
    let none = vec![false; b * t];
    assert_eq!(m.train_step_masked(&mut ws, &tok, Some(&none)), 0.0);
    m.visit(&mut |p| assert!(p.grad().iter().all(|&g| g == 0.0)));
}

/// Freezing forms no gradient for the frozen parameters and leaves every other
/// gradient bit-identical to the unfrozen model's.
#[test]
fn frozen_parameters_get_no_gradient_and_change_no_other() {
    let cfg = tiny(
        true,
        Normalization::LN,
        PositionalEmbedding::Standard,
        false,
    );
    let (b, t) = (3, 5);
    let (mut m, tok) = model_and_batch(&cfg);
    let mut ws = Workspace::new(&m, b, t);
    m.zero_grad();
    m.train_step(&mut ws, &tok);
    let full: Vec<Vec<f64>> = m.params.iter().map(|p| p.grad().to_vec()).collect();
    let frozen = [
        "embed.W_E",
        "pos_embed.W_pos",
        "blocks.0.attn.W_Q",
        "blocks.0.attn.b_Q",
        "blocks.1.attn.W_V",
        "blocks.1.attn.b_V",
        "blocks.1.mlp.W_in",
        "blocks.1.mlp.b_in",
        "unembed.W_U",
        "unembed.b_U",
        // one of a layer's pair alone: the weight, or the bias
        "blocks.0.attn.W_O",
        "blocks.0.mlp.b_out",
    ];
    for name in frozen {
        m.set_frozen(name, true).unwrap();
    }
    assert!(m.set_frozen("blocks.9.attn.W_Q", true).is_err());
    m.zero_grad();
    m.train_step(&mut ws, &tok);
    for (p, g) in m.params.iter().zip(&full) {
        if frozen.contains(&p.name()) {
            assert!(p.grad().iter().all(|&x| x == 0.0), "{}", p.name());
        } else {
            assert_eq!(p.grad(), &g[..], "{}", p.name());
        }
    }
}

/// `b_K` adds `q_i · b_K` to every logit of query `i`'s row, which the softmax
/// ignores: its true gradient is exactly zero, so finite differences see only
/// rounding (both are ~1e-12 there) and the check asks for that instead.
#[test]
fn key_bias_gradient_is_zero() {
    let cfg = tiny(
        true,
        Normalization::LN,
        PositionalEmbedding::Standard,
        false,
    );
    let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(7)).unwrap();
    perturb(&mut m, 8);
    let tok = tokens(3, 6, cfg.d_vocab, 9);
    let mut ws = Workspace::new(&m, 3, 5);
    m.train_step(&mut ws, &tok);
    let q = m
        .param("blocks.0.attn.b_Q")
        .unwrap()
        .grad()
        .iter()
        .fold(0.0f64, |a, v| a.max(v.abs()));
    for l in 0..2 {
        let g = m.param(&format!("blocks.{l}.attn.b_K")).unwrap().grad();
        assert!(g.iter().all(|v| v.abs() < 1e-14 * q.max(1.0)), "{g:?}");
    }
}

#[test]
fn train_step_loss_is_the_evaluated_loss_and_ln_v_at_init() {
    let cfg = GptConfig {
        init_range: 0.02,
        ..tiny(
            true,
            Normalization::LN,
            PositionalEmbedding::Standard,
            false,
        )
    };
    let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(1)).unwrap();
    let (b, t) = (4, 5);
    let tok = tokens(b, t + 1, cfg.d_vocab, 2);
    let (x, y) = split(&tok, b, t);
    let mut ws = Workspace::new(&m, b, t);
    let l_eval = m.evaluate(&mut ws, &x, Some(&y));
    let l_train = m.train_step(&mut ws, &tok);
    assert_eq!(l_eval, l_train);
    assert!((l_eval - (7f64).ln()).abs() < 0.05, "{l_eval}");
}

#[test]
fn a_step_is_bit_identical_for_any_thread_count() {
    let cfg = tiny(true, Normalization::LN, PositionalEmbedding::Rpe, false);
    let (b, t) = (11, 5);
    let tok = tokens(b, t + 1, cfg.d_vocab, 3);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut m = Gpt::<f32>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(4)).unwrap();
            let mut ws = Workspace::new(&m, b, t);
            let loss = m.train_step(&mut ws, &tok);
            let mut g = Vec::new();
            m.visit(&mut |p| g.extend(p.grad().iter().map(|v| v.to_bits())));
            (loss.to_bits(), g)
        })
    };
    assert_eq!(run(1), run(2));
    assert_eq!(run(1), run(3));
}

/// A training step's backward takes `gelu_new'` from what its forward kept;
/// every chunk's gradients are the bits of a backward that computes it again
/// from `pre` (the analysis backward's way), with a width over a `gelu` chunk.
#[test]
fn the_kept_gelu_slope_gives_the_recomputed_gradients() {
    let cfg = GptConfig {
        d_mlp: 300,
        ..tiny(
            true,
            Normalization::LN,
            PositionalEmbedding::Standard,
            false,
        )
    };
    let (b, t) = (5, 5);
    let tok = tokens(b, t + 1, cfg.d_vocab, 5);
    let mut m = Gpt::<f32>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(6)).unwrap();
    perturb(&mut m, 7);
    let mut ws = Workspace::new(&m, b, t);
    m.train_step(&mut ws, &tok);
    let mut again = Workspace::new(&m, b, t);
    let n = again.chunks.len();
    for (c, w) in again.chunks.iter_mut().enumerate() {
        let items = chunk_range(b, n, c);
        if items.is_empty() {
            continue;
        }
        w.load(&tok, items, t + 1);
        w.zero_grads_for(&m);
        w.forward(&m, &mut None).unwrap();
        w.loss_and_dlogits(1.0 / (b * t) as f64);
        w.backward(&m);
        assert!(!w.slope_kept.iter().any(|&k| k));
    }
    let bits = |ws: &Workspace<f32>| -> Vec<Vec<u32>> {
        let each = ws.chunks.iter().flat_map(|w| w.grads.iter());
        each.map(|g| g.iter().map(|v| v.to_bits()).collect())
            .collect()
    };
    assert!(ws
        .chunks
        .iter()
        .all(|w| w.n == 0 || w.slope_kept.iter().all(|&k| k)));
    assert_eq!(bits(&ws), bits(&again));
}

/// At saturation (one attention weight rounds to 1 in f64) the gradients still
/// point where the double-double's do: the softmax backward does not cancel.
#[test]
fn gradients_at_saturation_match_the_double_double() {
    let cfg = tiny(
        false,
        Normalization::LN,
        PositionalEmbedding::Standard,
        false,
    );
    let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(11)).unwrap();
    perturb(&mut m, 12);
    for name in [
        "blocks.0.attn.W_Q",
        "blocks.0.attn.W_K",
        "blocks.1.attn.W_Q",
        "blocks.1.attn.W_K",
    ] {
        m.param_mut(name)
            .unwrap()
            .value_mut()
            .iter_mut()
            .for_each(|v| *v *= 12.0);
    }
    let mut wide = Gpt::<F64x2>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(11)).unwrap();
    for (a, b) in wide.params.iter_mut().zip(&m.params) {
        a.value_mut()
            .iter_mut()
            .zip(b.value())
            .for_each(|(x, &y)| *x = F64x2::of(y));
    }
    let (b, t) = (2, 5);
    let tok = tokens(b, t + 1, cfg.d_vocab, 13);
    let mut ws = Workspace::new(&m, b, t);
    m.train_step(&mut ws, &tok);
    let mut ws2 = Workspace::new(&wide, b, t);
    wide.train_step(&mut ws2, &tok);
    let (w, i) = ws.seq(0);
    let top = w
        .pattern(0, i)
        .iter()
        .chain(w.pattern(1, i))
        .filter(|&&p| p == 1.0)
        .count();
    assert!(
        top > 4,
        "the setting must saturate: {top} weights are exactly 1"
    );
    for (p, q) in m.params.iter().zip(&wide.params) {
        if p.name().ends_with("attn.b_K") {
            continue; // zero in exact arithmetic: key_bias_gradient_is_zero
        }
        let want: Vec<f64> = q.grad().iter().map(|v| v.as_f64()).collect();
        if want.iter().all(|&v| v == 0.0) {
            continue;
        }
        assert_direction(p.name(), p.grad(), &want, MIN_COSINE);
    }
}
