//! The training task of the papers that train the general transformer
//! (`engine::gpt`) on sequences drawn afresh every step (lm-induction, birth):
//! the model, its workspace, the data stream and the step's batch, and the
//! [`Trainable`] the trainer drives. A paper supplies only its [`Sampler`].

use crate::experiment::Dtype;
use crate::rng;
use crate::train::Trainable;
use mechlab_engine::gpt::{Gpt, Workspace};
use mechlab_engine::{Float, Parameters};
use rand_chacha::ChaCha8Rng;

/// What a paper draws for one step.
pub trait Sampler: Send {
    /// Fills `tokens` (`[B, T + 1]`, rows of `seq_len + 1`) with the step's
    /// sequences from `rng`; returns the loss mask (`[B, T]`, one flag per
    /// target) when only some targets are scored, `None` when all are.
    fn draw(&mut self, tokens: &mut [u32], seq_len: usize, rng: &mut ChaCha8Rng)
        -> Option<&[bool]>;
}

/// The model with its stream of fresh sequences: what the trainer trains.
pub struct GptTask<T: Float, S> {
    pub model: Gpt<T>,
    pub data: S,
    ws: Workspace<T>,
    /// The `Data` stream; its state is the task's checkpointed state.
    rng: ChaCha8Rng,
    /// The step's sequences `[B, T + 1]`, reused.
    buf: Vec<u32>,
}

impl<T: Float, S: Sampler> GptTask<T, S> {
    /// A task over `batch` sequences of `seq_len` tokens a step.
    pub fn new(model: Gpt<T>, data: S, batch: usize, seq_len: usize, rng: ChaCha8Rng) -> Self {
        GptTask {
            ws: Workspace::new(&model, batch, seq_len),
            model,
            data,
            rng,
            buf: vec![0; batch * (seq_len + 1)],
        }
    }
}

impl<T: Float, S> Parameters<T> for GptTask<T, S> {
    mechlab_engine::parameters!(T; model);
}

impl<T: Float, S: Sampler> Trainable<T> for GptTask<T, S> {
    fn train_step(&mut self, _step: u64) -> T {
        let mask = self
            .data
            .draw(&mut self.buf, self.ws.seq_len(), &mut self.rng);
        T::of(self.model.train_step_masked(&mut self.ws, &self.buf, mask))
    }
    fn save_state(&self) -> serde_json::Value {
        rng::save_json(&self.rng)
    }
    fn load_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        self.rng = rng::restore_json(state)?;
        Ok(())
    }
}

/// The checks every such paper's config needs: the window, the batch and the
/// evaluation set in range, and a dtype the GPT trains in. The message names
/// the key, the value and what is allowed.
pub fn check_sizes(
    paper: &str,
    seq_len: usize,
    batch: usize,
    n_eval: usize,
    dtype: Dtype,
) -> Result<(), String> {
    if !(8..=2048).contains(&seq_len) {
        return Err(format!("data.seq_len = {seq_len}: must be 8..=2048"));
    }
    if batch == 0 || batch > 4096 {
        return Err(format!("data.batch = {batch}: must be 1..=4096"));
    }
    if n_eval == 0 || n_eval > 4096 {
        return Err(format!("probe.n_eval = {n_eval}: must be 1..=4096"));
    }
    if dtype == Dtype::F64x2 {
        return Err(format!(
            "model.dtype = \"f64x2\": {paper} runs in f32 or f64"
        ));
    }
    Ok(())
}
