//! The topic MLM's training loop state: minibatch order, early stopping that keeps
//! the best parameters, the dev loss, and the probes logged during training.

use crate::papers::topic::data::{generate, mask_docs, LdaConfig, LdaModel, MlmSet};
use crate::papers::topic::model::{TopicMlm, W_V};
use crate::papers::topic::permutation::{self, PairSums, Tests};
use crate::papers::topic::probes::{gram_gap, AttnAccum, AttnStats, DocAttention, Gap};
use crate::rng::{self, substream, RngState, Stream};
use crate::run::{Activation, RunCtx, RunError};
use crate::train::Trainable;
use mechlab_engine::{Float, Param, Parameters};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Early-stopping state (saved in checkpoints).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Early {
    pub best_loss: f64,
    pub best_step: u64,
    pub since_best: u64,
    pub stop: bool,
    pub evals: u64,
    pub last_eval: u64,
}

/// The model with its training stream and early-stopping state.
pub struct TopicRun<T: Float> {
    pub model: TopicMlm<T>,
    train: MlmSet,
    data_cfg: LdaConfig,
    d_vocab: usize,
    rng: ChaCha8Rng,
    epoch: Option<u64>,
    epoch_start: RngState,
    order: Vec<u32>,
    batch: usize,
    /// Steps per epoch.
    pub spe: u64,
    pub patience: u64,
    pub early: Early,
    best: Vec<Vec<T>>,
}

impl<T: Float> TopicRun<T> {
    /// Steps between dev evaluations: `eval_every`, or once per epoch when it is 0.
    pub fn eval_interval(&self, eval_every: u64) -> u64 {
        if eval_every == 0 {
            self.spe
        } else {
            eval_every
        }
    }

    pub fn new(
        model: TopicMlm<T>,
        train: MlmSet,
        data_cfg: &LdaConfig,
        d_vocab: usize,
        batch: usize,
        patience: u64,
        seed: u64,
    ) -> Self {
        let rng = substream(seed, Stream::Data, 16);
        let n = train.len();
        TopicRun {
            model,
            epoch_start: rng::save(&rng),
            rng,
            epoch: None,
            order: (0..n as u32).collect(),
            spe: n.div_ceil(batch.max(1)) as u64,
            train,
            data_cfg: data_cfg.clone(),
            d_vocab,
            batch: batch.max(1),
            patience,
            early: Early {
                best_loss: f64::INFINITY,
                ..Early::default()
            },
            best: Vec::new(),
        }
    }

    /// Draws epoch `e`'s masks (when fresh) and order from the data stream.
    fn begin_epoch(&mut self, e: u64) {
        self.epoch_start = rng::save(&self.rng);
        if self.data_cfg.fresh_masks {
            mask_docs(&mut self.train, &self.data_cfg, self.d_vocab, &mut self.rng);
        }
        self.order
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = i as u32);
        self.order.shuffle(&mut self.rng);
        self.epoch = Some(e);
    }

    /// Whether the probe at state `s` evaluates the dev loss: after the first
    /// update (the authors' "epoch 0"), at the first probe on or after each
    /// multiple of `every`, and at the end.
    pub fn eval_due(&self, s: u64, every: u64, total: u64) -> bool {
        let every = every.max(1);
        s == 1 || s == total || (s > 1 && s / every > self.early.last_eval / every)
    }

    /// Records a dev loss at `step`; snapshots the parameters on a new best.
    pub fn observe(&mut self, step: u64, dev: f64) {
        self.early.evals += 1;
        self.early.last_eval = step;
        if dev < self.early.best_loss {
            self.early.best_loss = dev;
            self.early.best_step = step;
            self.early.since_best = 0;
            self.best.clear();
            let best = &mut self.best;
            self.model
                .visit(&mut |p: &Param<T>| best.push(p.value().to_vec()));
        } else {
            self.early.since_best += 1;
            self.early.stop = self.patience > 0 && self.early.since_best >= self.patience;
        }
    }

    /// The current epoch's document order.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// The training documents (with the current masks).
    pub fn train_set(&self) -> &MlmSet {
        &self.train
    }

    /// Puts the best parameters back (no-op before any evaluation).
    pub fn restore_best(&mut self) {
        if self.best.is_empty() {
            return;
        }
        let mut i = 0;
        let best = &self.best;
        self.model.visit_mut(&mut |p| {
            p.value_mut().copy_from_slice(&best[i]);
            i += 1;
        });
    }
}

impl<T: Float> Parameters<T> for TopicRun<T> {
    mechlab_engine::parameters!(T; model);
}

#[derive(Serialize, Deserialize)]
struct SavedState {
    epoch: Option<u64>,
    rng: RngState,
    early: Early,
    best: Vec<Vec<f64>>,
}

impl<T: Float> Trainable<T> for TopicRun<T> {
    fn train_step(&mut self, step: u64) -> T {
        let e = step / self.spe;
        if self.epoch != Some(e) {
            self.begin_epoch(e);
        }
        let b = (step % self.spe) as usize * self.batch;
        let hi = (b + self.batch).min(self.order.len());
        let TopicRun {
            model,
            train,
            order,
            ..
        } = self;
        model.forward_backward(train, &order[b..hi])
    }
    fn stop_requested(&self) -> bool {
        self.early.stop
    }
    fn save_state(&self) -> serde_json::Value {
        let st = SavedState {
            epoch: self.epoch,
            rng: self.epoch_start.clone(),
            early: Early {
                best_loss: if self.early.best_loss.is_finite() {
                    self.early.best_loss
                } else {
                    f64::MAX
                },
                ..self.early.clone()
            },
            best: self
                .best
                .iter()
                .map(|v| v.iter().map(|x| x.as_f64()).collect())
                .collect(),
        };
        serde_json::to_value(st).expect("state serialises")
    }
    fn load_state(&mut self, v: &serde_json::Value) -> Result<(), String> {
        let st: SavedState =
            serde_json::from_value(v.clone()).map_err(|e| format!("topic state: {e}"))?;
        self.rng = rng::restore(&st.rng)?;
        if let Some(e) = st.epoch {
            // Redraw that epoch's masks and order: the stream ends where it was.
            self.begin_epoch(e);
        }
        self.early = st.early;
        self.best = st
            .best
            .iter()
            .map(|v| v.iter().map(|x| T::of(*x)).collect())
            .collect();
        Ok(())
    }
}

/// Mean over batches of the batch-mean loss (the authors' dev loss).
pub fn dev_loss<T: Float>(model: &mut TopicMlm<T>, set: &MlmSet, batch: usize) -> f64 {
    let ids: Vec<u32> = (0..set.len() as u32).collect();
    let chunks: Vec<&[u32]> = ids.chunks(batch.max(1)).collect();
    chunks.iter().map(|c| model.loss(set, c)).sum::<f64>() / chunks.len().max(1) as f64
}

/// Every probe at one state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Probes {
    pub value: Gap,
    pub value_control: Gap,
    pub embedding: Gap,
    pub embedding_control: Gap,
    pub attention: AttnStats,
    pub attention_control: AttnStats,
}

impl Probes {
    /// The gaps with their shuffled-topic controls and attention's same-topic mass:
    /// the numbers every probe record, the synthetic summary and the Wikipedia
    /// summary all report, kept in one list so the three cannot drift apart. The
    /// order is the probe record's (`metrics.jsonl` keeps it).
    pub fn gap_metrics(&self) -> [(&'static str, f64); 10] {
        [
            ("value_gap", self.value.gap),
            ("value_gap_control", self.value_control.gap),
            ("embedding_gap", self.embedding.gap),
            ("embedding_gap_control", self.embedding_control.gap),
            ("attention_same", self.attention.pairs.same),
            ("attention_diff", self.attention.pairs.diff),
            ("attention_gap", self.attention.pairs.gap),
            ("attention_gap_control", self.attention_control.pairs.gap),
            ("attention_same_mass", self.attention.same_mass),
            (
                "attention_same_mass_uniform",
                self.attention.same_mass_uniform,
            ),
        ]
    }
}

/// Rows whose Gram the value probe reads: `W_V`'s rows (the PyTorch weight's
/// columns) when `d_model = d_vocab`, else each token's value vector `h0(w) W_V`.
pub fn value_rows<T: Float>(m: &TopicMlm<T>) -> Vec<f64> {
    let (v, d) = (m.d_vocab(), m.d_model());
    let wv: Vec<f64> = m.p[W_V].value().iter().map(|x| x.as_f64()).collect();
    if v == d {
        return wv;
    }
    let e = m.token_embeddings();
    let mut out = vec![0.0; v * d];
    for i in 0..v {
        for k in 0..d {
            let ek = e[i * d + k];
            for j in 0..d {
                out[i * d + j] += ek * wv[k * d + j];
            }
        }
    }
    out
}

/// Measures the gaps (true topics and the control) on `set`'s first `docs` documents.
pub fn measure<T: Float>(
    m: &TopicMlm<T>,
    set: &MlmSet,
    docs: usize,
    n_topics: usize,
    topics: &[usize],
    control: &[usize],
) -> Probes {
    let (v, d) = (m.d_vocab(), m.d_model());
    let vr = value_rows(m);
    let e = m.token_embeddings();
    let mut out = Probes {
        value: gram_gap(&vr, v, d, topics),
        value_control: gram_gap(&vr, v, d, control),
        embedding: gram_gap(&e, v, d, topics),
        embedding_control: gram_gap(&e, v, d, control),
        ..Probes::default()
    };
    let (mut a, mut c) = (AttnAccum::new(n_topics), AttnAccum::new(n_topics));
    for i in 0..docs.min(set.len()) {
        let r = set.range(i);
        let (ids, hidden) = (&set.input[r.clone()], &set.hidden[r]);
        let pattern = m.attention_pattern(ids, hidden);
        let doc = DocAttention {
            ids,
            hidden,
            pattern: &pattern,
        };
        a.add(&doc, topics);
        c.add(&doc, control);
    }
    out.attention = a.finish();
    out.attention_control = c.finish();
    out
}

/// The permutation tests of the final verdicts ([`super::permutation`]) under
/// the true labels `topics` and under their shuffled `control` (where no topic
/// can be, so the tests must fail there): the value and embedding Gram gaps,
/// and (with `docs > 0`) the attention gap and the same-topic mass above uniform
/// on `set`'s first `docs` documents. A shuffle keeps which words have a topic,
/// so both labellings read the same tables.
pub fn permutation_tests<T: Float>(
    m: &TopicMlm<T>,
    set: &MlmSet,
    docs: usize,
    [topics, control]: [&[usize]; 2],
    seed: u64,
) -> [Tests; 2] {
    let (v, d) = (m.d_vocab(), m.d_model());
    let k = permutation::RELABELLINGS;
    let value = PairSums::gram(&value_rows(m), v, d, topics);
    let embedding = PairSums::gram(&m.token_embeddings(), v, d, topics);
    let attention = (docs > 0).then(|| {
        let mut a = PairSums::attention(topics);
        for i in 0..docs.min(set.len()) {
            let r = set.range(i);
            let (ids, hidden) = (&set.input[r.clone()], &set.hidden[r]);
            let pattern = m.attention_pattern(ids, hidden);
            a.add(&DocAttention {
                ids,
                hidden,
                pattern: &pattern,
            });
        }
        a
    });
    [topics, control].map(|l| {
        let mut t = Tests {
            value: permutation::test(l, k, seed, |x| value.gap(x)),
            embedding: permutation::test(l, k, seed, |x| embedding.gap(x)),
            ..Tests::default()
        };
        if let Some(a) = &attention {
            t.attention_gap = permutation::test(l, k, seed, |x| a.gap(x));
            t.same_mass = permutation::test(l, k, seed, |x| a.mass_excess(x));
        }
        t
    })
}

/// The attention patterns of the first `n` dev documents, zero-padded to the
/// longest, as `blocks.0.attn.hook_pattern` `[batch, head, query_pos, key_pos]`.
pub(super) fn record_patterns<T: Float>(m: &TopicMlm<T>, set: &MlmSet, n: usize) -> Activation {
    let n = n.min(set.len());
    let l = (0..n).map(|i| set.range(i).len()).max().unwrap_or(0);
    let mut data = vec![0.0; n * l * l];
    for i in 0..n {
        let r = set.range(i);
        let li = r.len();
        let pattern = m.attention_pattern(&set.input[r.clone()], &set.hidden[r]);
        for q in 0..li {
            data[i * l * l + q * l..i * l * l + q * l + li]
                .copy_from_slice(&pattern[q * li..(q + 1) * li]);
        }
    }
    Activation {
        name: "blocks.0.attn.hook_pattern".into(),
        shape: vec![n, 1, l, l],
        data,
    }
}

/// The report's attention viewer of the shortest document among those
/// [`record_patterns`] recorded (`pats`): its words as `t{topic}w{word}` (the
/// topic that owns the word, the word's index within it), special tokens by
/// name, citing its sequence in `activations.safetensors`.
pub(super) fn pattern_viewer(
    pats: &Activation,
    set: &MlmSet,
    words_per_topic: usize,
) -> mechlab_report::Figure {
    use crate::papers::topic::data::{END, MASK, N_SPECIAL, PAD, START};
    let (n, l) = (pats.shape[0], pats.shape[2]);
    let doc = (0..n).min_by_key(|&i| set.range(i).len()).unwrap_or(0);
    let r = set.range(doc);
    let li = r.len();
    let tokens = set.input[r]
        .iter()
        .map(|&t| match t {
            PAD => "[PAD]".to_string(),
            MASK => "[MASK]".to_string(),
            START => "[START]".to_string(),
            END => "[END]".to_string(),
            w => {
                let w = w as usize - N_SPECIAL;
                format!("t{}w{}", w / words_per_topic, w % words_per_topic)
            }
        })
        .collect();
    let mut pattern = Vec::with_capacity(li * li);
    for q in 0..li {
        let at = doc * l * l + q * l;
        pattern.extend_from_slice(&pats.data[at..at + li]);
    }
    mechlab_report::Figure::attention(
        "attention",
        &format!("Attention on dev document {doc} ({li} tokens)"),
        tokens,
        vec![mechlab_report::AttentionHead::of_layer(0, 0)],
        pattern,
    )
    .with_source("activations.safetensors", doc)
    .caption(
        "Words are written t{topic}w{word}. A trained topic attention puts each query's weight on words of its own topic; masked positions are hidden as keys.",
    )
}

pub(super) fn log_probes(ctx: &mut RunCtx, step: u64, p: &Probes) -> Result<(), RunError> {
    // Key order is the record's byte layout: value same/diff, the gaps, entropy.
    let mut rec = vec![("value_same", p.value.same), ("value_diff", p.value.diff)];
    rec.extend(p.gap_metrics());
    rec.extend([
        ("attention_entropy", p.attention.entropy),
        ("attention_entropy_uniform", p.attention.entropy_uniform),
    ]);
    ctx.log("probe", step, &rec)
}

/// `n` documents from data sub-stream `idx`, masked from sub-stream `idx + 1`.
pub fn make_set(lda: &LdaModel, cfg: &LdaConfig, n: usize, seed: u64, idx: u64) -> MlmSet {
    let mut set = generate(lda, cfg, n, &mut substream(seed, Stream::Data, idx)).to_mlm();
    mask_docs(
        &mut set,
        cfg,
        lda.d_vocab(),
        &mut substream(seed, Stream::Data, idx + 1),
    );
    set
}
