//! The window index of a token set: what layer 2's table lookups need from the
//! tokens, computed once per data set instead of once per step.
//!
//! A key's cell in layer 2's tables depends only on the tokens (its window, and
//! its own token in the full model), and full-batch training feeds the same
//! tokens every step. So [`WindowIndex`] keeps, per sequence, the compact
//! query-window row and every key's compact key-window column, and the sequences
//! sorted by query row (stably: a row's sequences keep their order). The keys'
//! columns and tokens are stored in that sorted order, so a row's job reads them
//! as one stream instead of a few cache lines from anywhere in the data. A step then
//! gives each query row to one job, with that row of the `exp` table and of the
//! gradient hot in L1, instead of giving each chunk of sequences a whole
//! gradient table to fill and reduce.
//!
//! The sort changes no sum: a row's job still forms one partial per work chunk
//! ([`sized_chunks`], each from zero, its sequences in order) and adds them in
//! chunk order, and the per-sequence losses are summed in sequence order, chunk
//! by chunk; so a step is bit-identical to the chunk-parallel one before it, and
//! to itself for any thread count.
//!
//! [`IndexCache`] holds two indexes (the training set and the probes' validation
//! set) and rebuilds the older one, reusing its buffers, when other tokens come;
//! a hit costs one comparison of the tokens with the copy the index keeps.

#[cfg(doc)]
use mechlab_engine::parallel::sized_chunks;

/// The window index of one token set `[n, l+1]` (target last).
#[derive(Default)]
pub(crate) struct WindowIndex {
    /// The tokens it was built from (a hit compares them all).
    tokens: Vec<u8>,
    pub l: usize,
    pub n: usize,
    /// `[n]`: the compact query-window row of each sequence.
    pub qrow: Vec<u32>,
    /// `[n, l]`: the compact key-window column of each key, the sequences in
    /// `order` (a row's job then reads its keys as one stream).
    pub kidx: Vec<u16>,
    /// `[n, l]` and `[n]`: each sequence's key tokens and target, also in `order`.
    pub keys: Vec<u8>,
    pub label: Vec<u8>,
    /// `[n]`: the sequences sorted by (query row, index).
    pub order: Vec<u32>,
    /// `[n]`: where each sequence sits in `order`.
    pub pos: Vec<u32>,
    /// `[nqw + 1]`: row `q`'s sequences are `order[row_start[q]..row_start[q + 1]]`.
    pub row_start: Vec<u32>,
    /// `[l+1]`: the window codes of sequence 0 (the models' pattern hooks read them).
    pub first_win: Vec<usize>,
    last_used: u64,
}

/// How windows are coded: what [`WindowIndex::build`] needs from layer 2.
pub(crate) struct Coding<'a> {
    pub s: usize,
    /// Tokens in a window: `2H − 1`.
    pub digits: usize,
    pub own_token: bool,
    pub nqw: usize,
    pub wq_index: &'a [usize],
    pub wk_index: &'a [u32],
}

impl WindowIndex {
    fn matches(&self, tokens: &[u8], l: usize) -> bool {
        self.l == l && self.tokens == tokens
    }

    /// Rebuilds the index for `tokens` `[n, l+1]`, reusing the buffers.
    fn build(&mut self, tokens: &[u8], l: usize, c: &Coding) {
        let n = tokens.len() / (l + 1);
        let (s, p) = (c.s, c.s + 1);
        let n_w = p.pow(c.digits as u32);
        let top = n_w / p; // (S+1)^(2H-2)
        self.tokens.clear();
        self.tokens.extend_from_slice(tokens);
        self.l = l;
        self.n = n;
        self.qrow.resize(n, 0);
        self.first_win.resize(l + 1, 0);
        let mut win = vec![0usize; l + 1];
        // the 2H-1 tokens before each position, nearest first; rolling without a
        // division: drop the farthest digit, shift, add the nearest
        let roll = |x: &[u8], win: &mut [usize]| {
            win[0] = n_w - 1;
            for i in 1..=l {
                let far = if i > c.digits {
                    x[i - 1 - c.digits] as usize
                } else {
                    s
                };
                win[i] = x[i - 1] as usize + p * (win[i - 1] - far * top);
            }
        };
        for (b, seq) in tokens.chunks_exact(l + 1).enumerate() {
            roll(&seq[..l], &mut win);
            if b == 0 {
                self.first_win.copy_from_slice(&win);
            }
            self.qrow[b] = c.wq_index[win[l]] as u32;
        }
        // counting sort by row: stable, so each row's sequences keep their order
        self.row_start.clear();
        self.row_start.resize(c.nqw + 1, 0);
        for &q in &self.qrow {
            self.row_start[q as usize + 1] += 1;
        }
        for q in 0..c.nqw {
            self.row_start[q + 1] += self.row_start[q];
        }
        self.order.resize(n, 0);
        self.pos.resize(n, 0);
        let mut next = self.row_start.clone();
        for (b, &q) in self.qrow.iter().enumerate() {
            let at = next[q as usize] as usize;
            self.order[at] = b as u32;
            self.pos[b] = at as u32;
            next[q as usize] += 1;
        }
        // the keys, each sequence at its place in `order`
        self.kidx.resize(n * l, 0);
        self.keys.resize(n * l, 0);
        self.label.resize(n, 0);
        for (b, seq) in tokens.chunks_exact(l + 1).enumerate() {
            let x = &seq[..l];
            roll(x, &mut win);
            let at = self.pos[b] as usize;
            for i in 0..l {
                let key = if c.own_token {
                    x[i] as usize + p * win[i]
                } else {
                    win[i]
                };
                self.kidx[at * l + i] = c.wk_index[key] as u16;
            }
            self.keys[at * l..(at + 1) * l].copy_from_slice(x);
            self.label[at] = seq[l];
        }
    }
}

/// Two window indexes, the least recently used one rebuilt on a miss.
#[derive(Default)]
pub(crate) struct IndexCache {
    slots: [WindowIndex; 2],
    clock: u64,
}

impl IndexCache {
    /// The index of `tokens` `[n, l+1]`, built if neither slot holds it.
    pub fn get(&mut self, tokens: &[u8], l: usize, c: &Coding) -> &WindowIndex {
        self.clock += 1;
        let hit = self.slots.iter().position(|w| w.matches(tokens, l));
        let i = hit.unwrap_or_else(|| {
            let i = (self.slots[0].last_used > self.slots[1].last_used) as usize;
            self.slots[i].build(tokens, l, c);
            i
        });
        self.slots[i].last_used = self.clock;
        &self.slots[i]
    }

    /// The index the last [`IndexCache::get`] returned.
    pub fn last(&self) -> Option<&WindowIndex> {
        self.slots
            .iter()
            .filter(|w| w.last_used > 0)
            .max_by_key(|w| w.last_used)
    }
}
