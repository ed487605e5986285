//! Where a run's batches and held-out windows come from: a built-in task, a
//! token file, arrays handed over from Python (kept in the run's `inputs/`), or
//! a Python generator called once per update.
//!
//! Every source fills the same `[B, T + 1]` tokens and loss mask, so one task
//! gives the same numbers bit for bit whether it arrives as a `.npy` file from
//! the command line or as an array from Python. A task and a file draw from
//! their own seeded stream (saved in checkpoints); a generator is called as
//! `fn(step, rng)` with a generator seeded from `(seed, step)` on the Python
//! side, a pure function of its arguments, so a resumed run asks it for the
//! same batches again.

use super::config::{Inputs, TransformerConfig};
use super::tasks::Task;
use super::windows::{read_set, resolve_tokenizer, text_vocab, token_names, TokenSet};
use crate::rng::{self, substream, Stream};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// One batch a generator returned: token ids `[rows, L]` and an optional mask.
pub struct GenBatch {
    pub tokens: Vec<i64>,
    pub shape: Vec<usize>,
    pub mask: Option<Vec<bool>>,
}

/// A batch function handed over from outside (Python's generator): the batch
/// of update `step`, or with `step = −1` the held-out windows.
pub trait BatchFn: Send {
    fn call(&mut self, step: i64) -> Result<GenBatch, String>;
}

/// A batch generator handed over from outside, for `data.inputs = "generator"`.
pub struct Generator(pub Box<dyn BatchFn>);

/// Detection patterns computed outside (Python's `patterns={name: fn}`): for
/// the held-out inputs `x` (`[n, T]`), each name of `probe.pattern_fns` with
/// its patterns `[n, T, T]`.
pub trait PatternFn: Send {
    fn call(&mut self, x: &[u32], n: usize, t: usize) -> Result<Vec<(String, Vec<f64>)>, String>;
}

/// What a caller hands a `transformer` run besides its config
/// ([`crate::run::RunCtx::set_input`]).
#[derive(Default)]
pub struct Handover {
    pub generator: Option<Generator>,
    pub patterns: Option<Box<dyn PatternFn>>,
}

enum Feed {
    Task(Box<Task>, ChaCha8Rng),
    Set(TokenSet, ChaCha8Rng),
    Gen(Box<dyn BatchFn>),
}

/// A run's data: the training feed, the held-out windows and what is known of them.
pub struct Data {
    feed: Feed,
    /// Positions the model reads; windows are `T + 1` tokens.
    pub t: usize,
    pub d_vocab: usize,
    /// Held-out windows and their target mask, `[n, T + 1]`.
    pub heldout: Vec<u32>,
    pub heldout_mask: Vec<bool>,
    /// The mean Bayes loss over the held-out targets, where the task has one.
    pub bayes: Option<f64>,
    /// What the run trains on, for the report.
    pub what: String,
    /// Each id's text for a text file's tokenizer (empty: ids are shown as numbers).
    names: Vec<String>,
}

/// The folder a Python run's arrays are stored in.
pub const INPUTS: &str = "inputs";

impl Data {
    /// The data `cfg` names; `dir` is the run folder, `gen` a generator handed
    /// over from Python. Errors name the key or file and the offending value.
    pub fn new(
        cfg: &TransformerConfig,
        dir: &Path,
        gen: Option<Generator>,
    ) -> Result<Data, String> {
        let cfg = &*resolve_tokenizer(cfg, dir)?;
        let d = &cfg.data;
        let n_eval = cfg.probe.n_eval;
        match d.inputs {
            Inputs::Config if d.file.is_empty() => {
                let task = Task::new(cfg)?;
                let t = task.t;
                let (heldout, heldout_mask) =
                    task.heldout(n_eval, &mut substream(cfg.seed, Stream::Sample, 1));
                let mut b = vec![0.0; t + 1];
                let (mut sum, mut cnt) = (0.0, 0.0f64);
                for (row, m) in heldout
                    .chunks_exact(t + 1)
                    .zip(heldout_mask.chunks_exact(t + 1))
                {
                    task.bayes(row, &mut b);
                    for (x, &k) in b.iter().zip(m) {
                        if k {
                            sum += x;
                            cnt += 1.0;
                        }
                    }
                }
                let d_vocab = vocab_for(cfg, task.vocab, "data.task")?;
                let what = format!(
                    "the built-in task `{}` ({} token ids, T = {t})",
                    task.name(),
                    task.vocab
                );
                Ok(Data {
                    feed: Feed::Task(Box::new(task), rng::stream(cfg.seed, Stream::Data)),
                    t,
                    d_vocab,
                    heldout,
                    heldout_mask,
                    bayes: Some(sum / cnt.max(1.0)),
                    what,
                    names: Vec::new(),
                })
            }
            Inputs::Config | Inputs::Arrays => {
                let (file, mask, held, held_mask) = if d.inputs == Inputs::Arrays {
                    let p = |n: &str| {
                        let f = dir.join(INPUTS).join(n);
                        if f.exists() {
                            f.display().to_string()
                        } else {
                            String::new()
                        }
                    };
                    (
                        p("tokens.npy"),
                        p("loss_mask.npy"),
                        p("heldout.npy"),
                        p("heldout_mask.npy"),
                    )
                } else {
                    (
                        d.file.clone(),
                        d.loss_mask_file.clone(),
                        d.heldout_file.clone(),
                        d.heldout_mask_file.clone(),
                    )
                };
                if file.is_empty() {
                    return Err(format!(
                        "data.inputs = \"arrays\": {} holds no tokens.npy (the arrays mechlab.train stores)",
                        dir.join(INPUTS).display()
                    ));
                }
                // error messages name the arrays as Python passed them, or the keys
                let keys = if d.inputs == Inputs::Arrays {
                    ["tokens", "loss_mask", "heldout", "heldout_mask"]
                } else {
                    [
                        "data.file",
                        "data.loss_mask_file",
                        "data.heldout_file",
                        "data.heldout_mask_file",
                    ]
                };
                let train = read_set(&file, keys[0], &mask, keys[1], cfg)?;
                let t = match (train.width, d.seq_len) {
                    (Some(l), 0) => l.checked_sub(1).filter(|&t| t >= 1).ok_or_else(|| {
                        format!("data.file = {file:?}: windows of {l} token: need at least 2")
                    })?,
                    (Some(l), t) if t + 1 != l => {
                        return Err(format!(
                            "data.seq_len = {t}: data.file = {file:?} holds windows of {l} tokens (seq_len + 1); set data.seq_len = {} or 0",
                            l - 1
                        ))
                    }
                    (None, 0) => {
                        return Err(format!(
                            "data.seq_len = 0: data.file = {file:?} is a flat stream of tokens; say how many positions a window has"
                        ))
                    }
                    (_, t) => t,
                };
                let (train, held) = if held.is_empty() {
                    train.split(d.heldout_frac, t + 1)?
                } else {
                    let h = read_set(
                        &held,
                        "data.heldout_file",
                        &held_mask,
                        "data.heldout_mask_file",
                        cfg,
                    )?;
                    if h.width.is_some_and(|l| l != t + 1) {
                        return Err(format!(
                            "data.heldout_file = {held:?}: windows of {} tokens, but the training windows have {}",
                            h.width.unwrap_or(0),
                            t + 1
                        ));
                    }
                    (train, h)
                };
                if train.width.is_none() && train.tokens.len() < t + 1 {
                    return Err(format!(
                        "data.file = {file:?}: {} training tokens, fewer than one window of data.seq_len + 1 = {}",
                        train.tokens.len(),
                        t + 1
                    ));
                }
                if held.width.is_none() && held.tokens.len() < t + 1 {
                    return Err(format!(
                        "the held-out stream has {} tokens, fewer than one window of {} (raise data.heldout_frac or give data.heldout_file)",
                        held.tokens.len(),
                        t + 1
                    ));
                }
                let seen = train.max_id().max(held.max_id()) as usize + 1;
                // with model.d_vocab set, a token past it is reported where it is
                let d_vocab = match cfg.model.d_vocab {
                    0 => text_vocab(&file, cfg)?.unwrap_or(seen),
                    v => v,
                };
                train.check_vocab(d_vocab, &format!("{} = {file:?}", keys[0]))?;
                held.check_vocab(d_vocab, "the held-out windows")?;
                let (heldout, heldout_mask) = held.windows(n_eval, t + 1);
                let what = format!(
                    "{} ({} {}, T = {t}, {} token ids{})",
                    if d.inputs == Inputs::Arrays {
                        "arrays from Python".to_string()
                    } else {
                        format!("`{file}`")
                    },
                    train.len(),
                    if train.width.is_some() {
                        "windows"
                    } else {
                        "tokens in one stream"
                    },
                    d_vocab,
                    if train.mask.is_some() {
                        ", with a loss mask"
                    } else {
                        ""
                    }
                );
                Ok(Data {
                    feed: Feed::Set(train, rng::stream(cfg.seed, Stream::Data)),
                    t,
                    d_vocab,
                    heldout,
                    heldout_mask,
                    bayes: None,
                    what,
                    names: token_names(&file, cfg)?,
                })
            }
            Inputs::Generator => {
                let Some(Generator(mut f)) = gen else {
                    return Err(
                        "data.inputs = \"generator\": this run's batches come from a Python function; \
                         run or resume it from Python with mechlab.train(..., generator=fn) / mechlab.resume(run, generator=fn)"
                            .into(),
                    );
                };
                if cfg.model.d_vocab == 0 {
                    return Err("model.d_vocab = 0: a generator's batches are not known in advance; set model.d_vocab".into());
                }
                let d_vocab = cfg.model.d_vocab;
                let h = f.call(-1)?;
                let (tok, mask, l) = check_batch(&h, None, d_vocab, -1)?;
                let t = match d.seq_len {
                    0 => l - 1,
                    t if t + 1 == l => t,
                    t => {
                        return Err(format!(
                            "generator, held-out batch (step −1): windows of {l} tokens, but data.seq_len + 1 = {}",
                            t + 1
                        ))
                    }
                };
                let set = TokenSet {
                    tokens: tok,
                    mask: Some(mask),
                    width: Some(l),
                };
                let (heldout, heldout_mask) = set.windows(n_eval, l);
                Ok(Data {
                    feed: Feed::Gen(f),
                    t,
                    d_vocab,
                    heldout,
                    heldout_mask,
                    bayes: None,
                    what: format!("batches from a Python generator (T = {t}, {d_vocab} token ids)"),
                    names: Vec::new(),
                })
            }
        }
    }

    /// The batch of update `step + 1` into `tokens` and `mask` (`[B, T + 1]`).
    pub fn fill(&mut self, step: u64, tokens: &mut [u32], mask: &mut [bool]) -> Result<(), String> {
        let w = self.t + 1;
        match &mut self.feed {
            Feed::Task(task, rng) => task.batch(tokens, mask, rng),
            Feed::Set(set, rng) => set.draw(tokens, mask, w, rng),
            Feed::Gen(f) => {
                let g = f.call(step as i64)?;
                let (tok, m, _) =
                    check_batch(&g, Some((tokens.len() / w, w)), self.d_vocab, step as i64)?;
                tokens.copy_from_slice(&tok);
                mask.copy_from_slice(&m);
            }
        }
        Ok(())
    }

    /// The feed's stream position, for a checkpoint (none for a generator).
    pub fn save_state(&self) -> serde_json::Value {
        match &self.feed {
            Feed::Task(_, r) | Feed::Set(_, r) => rng::save_json(r),
            Feed::Gen(_) => serde_json::Value::Null,
        }
    }

    pub fn load_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        match &mut self.feed {
            Feed::Task(_, r) | Feed::Set(_, r) => *r = rng::restore_json(state)?,
            Feed::Gen(_) => {}
        }
        Ok(())
    }

    /// The ids the data uses (for the repeated-token probe): those in the held-out windows.
    pub fn ids(&self) -> Vec<u32> {
        let mut seen = vec![false; self.d_vocab];
        self.heldout.iter().for_each(|&x| seen[x as usize] = true);
        (0..self.d_vocab as u32)
            .filter(|&x| seen[x as usize])
            .collect()
    }

    /// A token as text: the task's own names, else the id.
    pub fn show(&self, id: u32) -> String {
        match &self.feed {
            Feed::Task(task, _) => task.show(id),
            _ => self
                .names
                .get(id as usize)
                .cloned()
                .unwrap_or_else(|| id.to_string()),
        }
    }
}

/// `model.d_vocab` when set (it must cover `needed`), else `needed`.
fn vocab_for(cfg: &TransformerConfig, needed: usize, what: &str) -> Result<usize, String> {
    match cfg.model.d_vocab {
        0 => Ok(needed),
        v if v >= needed => Ok(v),
        v => Err(format!(
            "model.d_vocab = {v}: {what} uses {needed} token ids (set 0 to take the data's)"
        )),
    }
}

/// A generator's batch as tokens and mask, checked: rank 2, `shape` when
/// given, ids in `0..d_vocab`, a mask of the same shape. Errors name the step.
fn check_batch(
    g: &GenBatch,
    shape: Option<(usize, usize)>,
    d_vocab: usize,
    step: i64,
) -> Result<(Vec<u32>, Vec<bool>, usize), String> {
    let at = if step < 0 {
        "held-out batch (step −1)".to_string()
    } else {
        format!("step {step}")
    };
    let bad = |m: String| format!("generator, {at}: {m}");
    let [rows, l] = g.shape[..] else {
        return Err(bad(format!(
            "returned an array of shape {:?}: token ids are [batch, L]",
            g.shape
        )));
    };
    if rows == 0 || l < 2 {
        return Err(bad(format!(
            "returned shape {:?}: need at least one window of 2 tokens",
            g.shape
        )));
    }
    if let Some((b, w)) = shape {
        if (rows, l) != (b, w) {
            return Err(bad(format!(
                "returned shape [{rows}, {l}], expected [{b}, {w}] (data.batch, data.seq_len + 1)"
            )));
        }
    }
    if let Some(i) = g
        .tokens
        .iter()
        .position(|&x| x < 0 || x as u64 >= d_vocab as u64)
    {
        return Err(bad(format!(
            "token {} at [{}, {}] is outside 0..model.d_vocab = {d_vocab}",
            g.tokens[i],
            i / l,
            i % l
        )));
    }
    let mut mask = match &g.mask {
        Some(m) if m.len() != g.tokens.len() => {
            return Err(bad(format!(
                "the mask has {} entries, the tokens {}",
                m.len(),
                g.tokens.len()
            )))
        }
        Some(m) => m.clone(),
        None => vec![true; g.tokens.len()],
    };
    mask.chunks_exact_mut(l).for_each(|r| r[0] = false);
    if !mask.iter().any(|&x| x) {
        return Err(bad("the mask marks no token to predict".into()));
    }
    Ok((g.tokens.iter().map(|&x| x as u32).collect(), mask, l))
}
