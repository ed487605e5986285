//! The authors' two-layer attention-only transformer with relative positions.
//!
//! Edelman et al. train `Relative_Transformer` (`mingpt/model_rpe.py`): token
//! embedding, then per layer a pre-LayerNorm causal attention whose score adds a
//! learned relative-position term to the query–key product,
//! `s_ij = (q_i·k_j + q_i·p_{i−j}) / √d_head` for `j ≤ i`, with `p_r` row `r`
//! of the layer's table `W_pos` (`[T, D]`, split over heads like `q`), an output
//! projection back into the residual stream, and finally LayerNorm and an
//! unembedding. There are no absolute positions and no MLPs; layer 0 has
//! `n_heads` heads and layer 1 one head, as in their code.
//!
//! Dropout (`model.dropout`, theirs 0.1) sits at their four places: on the token
//! embeddings, on the relative-position vectors gathered for each (query, key)
//! pair (one mask per step, shared by the batch, as their `pos_dropout` acts on a
//! `[T, T, D]` tensor without a batch axis), on the attention weights after the
//! softmax (the recorded pattern is the one before it), and on each layer's output
//! projection before the residual add. Masks come from `engine::layers::dropout`,
//! keyed by (step, sequence), so training stays bit-identical for any thread
//! count; evaluation (`run_one`, and `loss` outside a training step) has none.
//!
//! Forward and backward are written by hand over preallocated per-chunk
//! workspaces; the batch is split into [`N_CHUNKS`] fixed chunks
//! (`engine::parallel`) and the chunks' gradients are reduced in order, so a
//! step is bit-identical for any thread count. Parameters use TransformerLens
//! names (`embed.W_E`, `blocks.{l}.attn.W_Q`, ...), stored `[out, in]` like
//! PyTorch's `nn.Linear`.
//!
//! The file stays whole past ~600 lines on purpose: forward and backward of one
//! model side by side, with the dropout masks they share, read best together
//! (llm.c style); its tests are in `model_tests.rs`.

use super::pairs::{self, Keys};
use mechlab_engine::layers::dropout::{self, Dropout, MAX_ITEMS};
use mechlab_engine::layers::loss::{cross_entropy_logits, Reduction};
use mechlab_engine::layers::{layernorm, linear, softmax};
use mechlab_engine::parallel::{for_each_chunk, reduce_ordered, N_CHUNKS};
use mechlab_engine::{param, Float, Param, Parameters};
use rand::Rng;
use rand_distr::{Distribution, Normal};

/// LayerNorm ε of `nn.LayerNorm`.
const LN_EPS: f64 = 1e-5;
/// Parameters per attention layer, in visit order.
const PER_LAYER: usize = 7;

/// The sizes of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Dims {
    pub vocab: usize,
    /// Longest input `T` (rows of each `W_pos`).
    pub max_len: usize,
    pub d_model: usize,
    /// Heads of layer 0 (layer 1 has one, as in the authors' model).
    pub n_heads: usize,
    /// Init std of every weight but the output projections (0.02 in theirs).
    pub init_std: f64,
    /// Init std of `W_O` (their `c_proj`, 0.01).
    pub proj_std: f64,
    /// Dropout rate at the four places of the module doc (0: none).
    pub dropout: f64,
}

/// The model: parameters and its training workspaces.
pub struct RpeTransformer<T: Float> {
    pub dims: Dims,
    pub params: Vec<Param<T>>,
    work: Vec<Work<T>>,
    /// The dropout layer (`None` when `dims.dropout` is 0).
    drop: Option<Dropout>,
    /// The training step `loss` draws dropout masks for (`None`: evaluation).
    train_step: Option<u64>,
    // pos_mask[l]: [T(T+1)/2, D], the step's mask on p_{i−j} for every causal (i, j)
    pos_mask: Vec<Vec<T>>,
}

/// What one training step's dropout gives the forward of a sequence.
#[derive(Clone, Copy)]
struct StepDrop<'a, T> {
    layer: &'a Dropout,
    step: u64,
    pos: &'a [Vec<T>],
}

/// One chunk's activations for one sequence and its gradient accumulators.
#[derive(Clone)]
struct Work<T> {
    t: usize,
    // resid[l]: [T, D], l = 0..=2 (input of layer l; resid[2] feeds ln_final)
    resid: Vec<Vec<T>>,
    // per layer: ln output [T, D], mean/rstd [T], q/k/v/z [T, D], pattern [H, T, T]
    ln: Vec<Vec<T>>,
    mean: Vec<Vec<T>>,
    rstd: Vec<Vec<T>>,
    q: Vec<Vec<T>>,
    k: Vec<Vec<T>>,
    v: Vec<Vec<T>>,
    z: Vec<Vec<T>>,
    pattern: Vec<Vec<T>>,
    // final: ln_final [T, D], mean/rstd [T], logits/dlogits [T, S]
    lnf: Vec<T>,
    meanf: Vec<T>,
    rstdf: Vec<T>,
    logits: Vec<T>,
    dlogits: Vec<T>,
    labels: Vec<Option<usize>>,
    // backward scratch: [T, D] each, one attention row [T]
    dx: Vec<T>,
    dln: Vec<T>,
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dz: Vec<T>,
    drow: Vec<T>,
    // dropout masks of this sequence (when on): embedding [T, D], per layer
    // attention [H, T, T] and output projection [T, D]; dres: [T, D] scratch
    drop_on: bool,
    m_emb: Vec<T>,
    m_attn: Vec<Vec<T>>,
    m_res: Vec<Vec<T>>,
    dres: Vec<T>,
    // gradients of every parameter, in visit order
    grads: Vec<Vec<T>>,
    loss: f64,
}

impl<T: Float> Work<T> {
    fn new(dims: &Dims, sizes: &[usize], t: usize) -> Self {
        let d = dims.d_model;
        let hs = [dims.n_heads, 1];
        let td = vec![T::zero(); t * d];
        let tv = vec![T::zero(); t];
        let on = dims.dropout > 0.0;
        let masks = |n: usize| if on { vec![T::zero(); n] } else { Vec::new() };
        Work {
            drop_on: false,
            m_emb: masks(t * d),
            m_attn: hs.iter().map(|&h| masks(h * t * t)).collect(),
            m_res: vec![masks(t * d); 2],
            dres: masks(t * d),
            t,
            resid: vec![td.clone(); 3],
            ln: vec![td.clone(); 2],
            mean: vec![tv.clone(); 2],
            rstd: vec![tv.clone(); 2],
            q: vec![td.clone(); 2],
            k: vec![td.clone(); 2],
            v: vec![td.clone(); 2],
            z: vec![td.clone(); 2],
            pattern: hs.iter().map(|&h| vec![T::zero(); h * t * t]).collect(),
            lnf: td.clone(),
            meanf: tv.clone(),
            rstdf: tv.clone(),
            logits: vec![T::zero(); t * dims.vocab],
            dlogits: vec![T::zero(); t * dims.vocab],
            labels: vec![None; t],
            dx: td.clone(),
            dln: td.clone(),
            dq: td.clone(),
            dk: td.clone(),
            dv: td.clone(),
            dz: td,
            drow: tv,
            grads: sizes.iter().map(|&n| vec![T::zero(); n]).collect(),
            loss: 0.0,
        }
    }
}

/// Index of parameter `which` (0 ln.w, 1 ln.b, 2 W_Q, 3 W_K, 4 W_V, 5 W_O, 6 W_pos) of layer `l`.
fn li(l: usize, which: usize) -> usize {
    1 + l * PER_LAYER + which
}
const LNF_W: usize = 1 + 2 * PER_LAYER;
const LNF_B: usize = LNF_W + 1;
const W_U: usize = LNF_W + 2;

impl<T: Float> RpeTransformer<T> {
    /// A freshly initialised model (normal weights as in the authors' `_init_weights`).
    pub fn new(dims: &Dims, rng: &mut impl Rng) -> Result<Self, String> {
        let (s, d, t) = (dims.vocab, dims.d_model, dims.max_len);
        if dims.n_heads == 0 || d % dims.n_heads != 0 {
            return Err(format!(
                "model.n_heads = {}: must divide model.d_model = {d}",
                dims.n_heads
            ));
        }
        let normal = |std: f64| Normal::new(0.0, std).map_err(|e| format!("init std {std}: {e}"));
        let (w, pj) = (normal(dims.init_std)?, normal(dims.proj_std)?);
        let mut draw = |dist: &Normal<f64>, n: usize| -> Vec<T> {
            (0..n).map(|_| T::of(dist.sample(rng))).collect()
        };
        let mut params = vec![param("embed.W_E", "embed", &[s, d], draw(&w, s * d))];
        for l in 0..2 {
            let b = format!("blocks.{l}");
            let g = format!("layer{l}");
            params.push(param(&format!("{b}.ln1.w"), &g, &[d], vec![T::one(); d]));
            params.push(param(&format!("{b}.ln1.b"), &g, &[d], vec![T::zero(); d]));
            for m in ["W_Q", "W_K", "W_V"] {
                params.push(param(
                    &format!("{b}.attn.{m}"),
                    &g,
                    &[d, d],
                    draw(&w, d * d),
                ));
            }
            params.push(param(
                &format!("{b}.attn.W_O"),
                &g,
                &[d, d],
                draw(&pj, d * d),
            ));
            params.push(param(
                &format!("{b}.attn.W_pos"),
                &g,
                &[t, d],
                draw(&w, t * d),
            ));
        }
        params.push(param("ln_final.w", "unembed", &[d], vec![T::one(); d]));
        params.push(param("ln_final.b", "unembed", &[d], vec![T::zero(); d]));
        params.push(param("unembed.W_U", "unembed", &[s, d], draw(&w, s * d)));
        Ok(RpeTransformer {
            dims: dims.clone(),
            params,
            work: Vec::new(),
            drop: None,
            train_step: None,
            pos_mask: Vec::new(),
        })
    }

    /// Turns on `dims.dropout`, its masks drawn from `seed`'s dropout streams.
    pub fn with_dropout_seed(mut self, seed: u64) -> Self {
        let d = Dropout::new(self.dims.dropout, seed);
        self.drop = (!d.is_off()).then_some(d);
        self
    }

    /// The training step the next `loss` calls draw dropout masks for; `None`
    /// (the default) evaluates without dropout.
    pub fn set_train_step(&mut self, step: Option<u64>) {
        self.train_step = step;
    }

    /// The dropout masks of training step `step` for a batch of `items`
    /// sequences of `t` inputs, flattened for checks against other
    /// implementations: both layers' shared position masks (`[T(T+1)/2, D]` each,
    /// rows the causal pairs (i, j ≤ i) in order), then per sequence its
    /// embedding mask `[T, D]` and per layer its attention mask `[H_l, T, T]` and
    /// output mask `[T, D]`. `None` without dropout.
    pub fn masks_of(&self, step: u64, t: usize, items: usize) -> Option<Vec<f64>> {
        let layer = self.drop.as_ref()?;
        let d = self.dims.d_model;
        let mut out: Vec<f64> = Vec::new();
        for l in 0..2 {
            let mut m = vec![0.0f64; t * (t + 1) / 2 * d];
            layer.fill(&mut m, &mut layer.rng(step, MAX_ITEMS - 1 - l as u64));
            out.extend(m);
        }
        let hs = [self.dims.n_heads, 1];
        let mut emb = vec![0.0f64; t * d];
        let mut attn: Vec<Vec<f64>> = hs.iter().map(|&h| vec![0.0; h * t * t]).collect();
        let mut res = vec![vec![0.0f64; t * d]; 2];
        for item in 0..items {
            fill_seq_masks(layer, step, item, &mut emb, &mut attn, &mut res);
            out.extend(&emb);
            for l in 0..2 {
                out.extend(&attn[l]);
                out.extend(&res[l]);
            }
        }
        Some(out)
    }

    /// The same parameters and dropout, fresh workspaces (for finite differences).
    pub fn duplicate(&self) -> Self {
        RpeTransformer {
            dims: self.dims.clone(),
            params: self.params.clone(),
            work: Vec::new(),
            drop: self.drop.clone(),
            train_step: self.train_step,
            pos_mask: Vec::new(),
        }
    }

    fn ensure_work(&mut self, t: usize) {
        if self.work.first().is_none_or(|w| w.t != t) {
            let sizes: Vec<usize> = self.params.iter().map(|p| p.numel()).collect();
            self.work = vec![Work::new(&self.dims, &sizes, t); N_CHUNKS];
            let n = if self.drop.is_some() {
                t * (t + 1) / 2 * self.dims.d_model
            } else {
                0
            };
            self.pos_mask = vec![vec![T::zero(); n]; 2];
        }
    }

    /// Mean next-token cross-entropy over `tokens` ([B, T + 1]); with `grad`, the
    /// gradients are accumulated into the parameters.
    pub fn loss(&mut self, tokens: &[u8], len: usize, grad: bool) -> T {
        let (b, t) = (tokens.len() / len, len - 1);
        assert!(t <= self.dims.max_len, "sequence longer than model.max_len");
        self.ensure_work(t);
        let inv = 1.0 / (b * t) as f64;
        // The step's shared position masks, keyed after the batch's items.
        let drop = match (&self.drop, self.train_step) {
            (Some(layer), Some(step)) => {
                for (l, m) in self.pos_mask.iter_mut().enumerate() {
                    layer.fill(m, &mut layer.rng(step, MAX_ITEMS - 1 - l as u64));
                }
                Some(StepDrop {
                    layer,
                    step,
                    pos: &self.pos_mask,
                })
            }
            _ => None,
        };
        let params = &self.params;
        let dims = &self.dims;
        for_each_chunk(b, &mut self.work, |_, items, w| {
            w.loss = 0.0;
            if grad {
                w.grads
                    .iter_mut()
                    .for_each(|g| g.iter_mut().for_each(|x| *x = T::zero()));
            }
            for i in items {
                let seq = &tokens[i * len..(i + 1) * len];
                forward(dims, params, &seq[..t], w, drop.map(|d| (d, i)));
                for (p, lab) in w.labels.iter_mut().enumerate() {
                    *lab = Some(seq[p + 1] as usize);
                }
                let out = cross_entropy_logits(
                    &mut w.dlogits,
                    &w.logits,
                    &w.labels,
                    dims.vocab,
                    Reduction::Sum,
                );
                w.loss += out.loss;
                if grad {
                    let sc = T::of(inv);
                    w.dlogits.iter_mut().for_each(|x| *x *= sc);
                    backward(dims, params, &seq[..t], w, drop.map(|d| (d, i)));
                }
            }
        });
        if grad {
            for (k, p) in self.params.iter_mut().enumerate() {
                reduce_ordered(p.grad_mut(), &self.work, |w| &w.grads[k]);
            }
        }
        T::of(self.work.iter().map(|w| w.loss).sum::<f64>() * inv)
    }

    /// Logits at the last input position of every sequence of `tokens`
    /// (`[B, T + 1]`, inputs the first `T`): `[B, S]`, computed in the fixed
    /// chunks, without dropout.
    pub fn last_logits(&mut self, tokens: &[u8], len: usize) -> Vec<f64> {
        let (b, t, s) = (tokens.len() / len, len - 1, self.dims.vocab);
        self.ensure_work(t);
        let (params, dims) = (&self.params, &self.dims);
        let mut outs: Vec<Vec<f64>> = vec![Vec::new(); self.work.len()];
        let mut pairs: Vec<(&mut Work<T>, &mut Vec<f64>)> =
            self.work.iter_mut().zip(outs.iter_mut()).collect();
        for_each_chunk(b, &mut pairs, |_, items, (w, out)| {
            for i in items {
                forward(dims, params, &tokens[i * len..i * len + t], w, None);
                out.extend(w.logits[(t - 1) * s..t * s].iter().map(|v| v.as_f64()));
            }
        });
        outs.concat()
    }

    /// Runs one sequence of inputs (`[T]`), returning its logits `[T, S]` and the
    /// attention patterns of both layers (`[H_l, T, T]` each).
    pub fn run_one(&mut self, input: &[u8]) -> (Vec<T>, [Vec<T>; 2]) {
        let t = input.len();
        self.ensure_work(t);
        let w = &mut self.work[0];
        forward(&self.dims, &self.params, input, w, None);
        (
            w.logits.clone(),
            [w.pattern[0].clone(), w.pattern[1].clone()],
        )
    }
}

fn heads(dims: &Dims, l: usize) -> usize {
    if l == 0 {
        dims.n_heads
    } else {
        1
    }
}

/// One sequence's dropout masks, in a fixed order from its own stream:
/// embedding, then per layer attention and output projection.
fn fill_seq_masks<T: Float>(
    layer: &Dropout,
    step: u64,
    item: usize,
    emb: &mut [T],
    attn: &mut [Vec<T>],
    res: &mut [Vec<T>],
) {
    let r = &mut layer.rng(step, item as u64);
    layer.fill(emb, r);
    for l in 0..2 {
        layer.fill(&mut attn[l], r);
        layer.fill(&mut res[l], r);
    }
}

fn forward<T: Float>(
    dims: &Dims,
    p: &[Param<T>],
    input: &[u8],
    w: &mut Work<T>,
    drop: Option<(StepDrop<T>, usize)>,
) {
    let (s, d, t) = (dims.vocab, dims.d_model, input.len());
    w.drop_on = drop.is_some();
    if let Some((sd, item)) = drop {
        fill_seq_masks(
            sd.layer,
            sd.step,
            item,
            &mut w.m_emb,
            &mut w.m_attn,
            &mut w.m_res,
        );
    }
    // resid[0]: [T, D] = W_E[input] (⊙ mask)
    let we = p[0].value();
    for (i, &tok) in input.iter().enumerate() {
        let tok = tok as usize;
        w.resid[0][i * d..(i + 1) * d].copy_from_slice(&we[tok * d..(tok + 1) * d]);
    }
    if w.drop_on {
        dropout::apply(&mut w.resid[0], &w.m_emb);
    }
    for l in 0..2 {
        let (h, dh) = (heads(dims, l), d / heads(dims, l));
        let scale = T::of(1.0 / (dh as f64).sqrt());
        let (x, rest) = w.resid.split_at_mut(l + 1);
        let (x, xo) = (&x[l], &mut rest[0]);
        layernorm::forward(
            &mut w.ln[l],
            &mut w.mean[l],
            &mut w.rstd[l],
            x,
            p[li(l, 0)].value(),
            p[li(l, 1)].value(),
            t,
            d,
            LN_EPS,
        );
        // q, k, v: [T, D] = ln · Wᵀ
        linear::forward(&mut w.q[l], &w.ln[l], p[li(l, 2)].value(), None, t, d, d);
        linear::forward(&mut w.k[l], &w.ln[l], p[li(l, 3)].value(), None, t, d, d);
        linear::forward(&mut w.v[l], &w.ln[l], p[li(l, 4)].value(), None, t, d, d);
        let pos = p[li(l, 6)].value(); // [T_max, D]
        let pm = drop.map(|(sd, _)| &sd.pos[l][..]);
        let (q, k, v, z, pat) = (&w.q[l], &w.k[l], &w.v[l], &mut w.z[l], &mut w.pattern[l]);
        let ma = &w.m_attn[l];
        z.iter_mut().for_each(|x| *x = T::zero());
        let keys = Keys {
            k,
            pos,
            mask: pm,
            d,
            o: 0,
            dh,
        };
        for hd in 0..h {
            let (o, keys) = (hd * dh, Keys { o: hd * dh, ..keys });
            let head = &mut pat[hd * t * t..(hd + 1) * t * t];
            for i in 0..t {
                // pattern[hd, i, :]: [T], causal
                let row = &mut head[i * t..(i + 1) * t];
                keys.scores(row, &q[i * d + o..], i, scale);
                row[i + 1..].iter_mut().for_each(|x| *x = T::zero());
            }
            // the causal softmax over each row's keys j ≤ i, rows side by side
            softmax::prefix_rows_in_place(head, t, t, |i| i + 1);
            for i in 0..t {
                let row = &pat[(hd * t + i) * t..(hd * t + i + 1) * t];
                // z_i += (a_ij ⊙ mask_ij) v_j; the pattern keeps a_ij
                let mrow = w
                    .drop_on
                    .then(|| &ma[(hd * t + i) * t..(hd * t + i) * t + i + 1]);
                pairs::mix(&mut z[i * d + o..][..dh], v, &row[..=i], mrow, (d, o));
            }
        }
        // resid[l+1] = resid[l] + dropout(z · W_Oᵀ)
        linear::forward(xo, z, p[li(l, 5)].value(), None, t, d, d);
        if w.drop_on {
            dropout::apply(xo, &w.m_res[l]);
        }
        for (o, &xi) in xo.iter_mut().zip(x.iter()) {
            *o += xi;
        }
    }
    layernorm::forward(
        &mut w.lnf,
        &mut w.meanf,
        &mut w.rstdf,
        &w.resid[2],
        p[LNF_W].value(),
        p[LNF_B].value(),
        t,
        d,
        LN_EPS,
    );
    // logits: [T, S]
    linear::forward(&mut w.logits, &w.lnf, p[W_U].value(), None, t, d, s);
}

fn backward<T: Float>(
    dims: &Dims,
    p: &[Param<T>],
    input: &[u8],
    w: &mut Work<T>,
    drop: Option<(StepDrop<T>, usize)>,
) {
    let (s, d, t) = (dims.vocab, dims.d_model, input.len());
    let g = &mut w.grads;
    // d(ln_final): [T, D]
    w.dln.iter_mut().for_each(|x| *x = T::zero());
    linear::backward(
        Some(&mut w.dln),
        &mut g[W_U],
        None,
        &w.dlogits,
        &w.lnf,
        p[W_U].value(),
        t,
        d,
        s,
    );
    w.dx.iter_mut().for_each(|x| *x = T::zero());
    {
        let (a, b) = g.split_at_mut(LNF_B);
        layernorm::backward(
            &mut w.dx,
            Some(&mut a[LNF_W]),
            Some(&mut b[0]),
            &w.dln,
            &w.resid[2],
            &w.meanf,
            &w.rstdf,
            p[LNF_W].value(),
            t,
            d,
        );
    }
    for l in (0..2).rev() {
        let (h, dh) = (heads(dims, l), d / heads(dims, l));
        let scale = T::of(1.0 / (dh as f64).sqrt());
        // dz: [T, D] = (dx ⊙ mask) · W_O ; dW_O += (dx ⊙ mask)ᵀ z. dx itself flows
        // on through the residual.
        let dout = if w.drop_on {
            w.dres.iter_mut().for_each(|x| *x = T::zero());
            dropout::backward(&mut w.dres, &w.dx, &w.m_res[l]);
            &w.dres
        } else {
            &w.dx
        };
        w.dz.iter_mut().for_each(|x| *x = T::zero());
        linear::backward(
            Some(&mut w.dz),
            &mut g[li(l, 5)],
            None,
            dout,
            &w.z[l],
            p[li(l, 5)].value(),
            t,
            d,
            d,
        );
        w.dq.iter_mut().for_each(|x| *x = T::zero());
        w.dk.iter_mut().for_each(|x| *x = T::zero());
        w.dv.iter_mut().for_each(|x| *x = T::zero());
        let pos = p[li(l, 6)].value();
        let pm = drop.map(|(sd, _)| &sd.pos[l][..]);
        let (q, k, v, pat, ma) = (&w.q[l], &w.k[l], &w.v[l], &w.pattern[l], &w.m_attn[l]);
        let dpos = &mut g[li(l, 6)];
        let keys = Keys {
            k,
            pos,
            mask: pm,
            d,
            o: 0,
            dh,
        };
        for hd in 0..h {
            let (o, keys) = (hd * dh, Keys { o: hd * dh, ..keys });
            for i in 0..t {
                let row = &pat[(hd * t + i) * t..(hd * t + i) * t + i + 1];
                // drow_j = (dz_i · v_j) m_ij, dv_j += a_ij m_ij dz_i (no m without dropout)
                let mrow = w
                    .drop_on
                    .then(|| &ma[(hd * t + i) * t..(hd * t + i) * t + i + 1]);
                let dzi = &w.dz[i * d + o..][..dh];
                pairs::mix_backward(&mut w.drow[..=i], &mut w.dv, v, dzi, row, mrow, (d, o));
                softmax::backward_row_in_place(&mut w.drow[..=i], row);
                w.drow[..=i].iter_mut().for_each(|x| *x *= scale);
                let dqi = &mut w.dq[i * d + o..][..dh];
                keys.scores_backward(dqi, &mut w.dk, dpos, &q[i * d + o..], i, &w.drow[..=i]);
            }
        }
        // d(ln): [T, D] from q, k, v
        w.dln.iter_mut().for_each(|x| *x = T::zero());
        for (m, dm) in [(2, &w.dq), (3, &w.dk), (4, &w.dv)] {
            linear::backward(
                Some(&mut w.dln),
                &mut g[li(l, m)],
                None,
                dm,
                &w.ln[l],
                p[li(l, m)].value(),
                t,
                d,
                d,
            );
        }
        let (a, b) = g.split_at_mut(li(l, 1));
        layernorm::backward(
            &mut w.dx,
            Some(&mut a[li(l, 0)]),
            Some(&mut b[0]),
            &w.dln,
            &w.resid[l],
            &w.mean[l],
            &w.rstd[l],
            p[li(l, 0)].value(),
            t,
            d,
        );
    }
    // embedding: dW_E[tok] += dx (⊙ mask)
    if w.drop_on {
        dropout::apply(&mut w.dx, &w.m_emb);
    }
    for (i, &tok) in input.iter().enumerate() {
        let tok = tok as usize;
        for e in 0..d {
            g[0][tok * d + e] += w.dx[i * d + e];
        }
    }
}

impl<T: Float> Parameters<T> for RpeTransformer<T> {
    mechlab_engine::parameters!(T; params);
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
