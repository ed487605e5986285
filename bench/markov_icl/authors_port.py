#!/usr/bin/env python3
"""A port of the authors' training for in-context learning of Markov chains
(Edelman, Tsilivis, Edelman, Malach, Goel 2024, arXiv 2402.11004; official code
`EzraEdelman/Evolution-of-Statistical-Induction-Heads`), written for mechlab to check
its findings against the authors' algorithm in the same setting. Nothing here is
copied from their repository; it is re-written from reading it.

What is ported (file names are theirs):
  * model (`mingpt/model_rpe.py`, `Relative_Transformer`, attention only): token
    embedding with dropout; per layer pre-LayerNorm, bias-free Q/K/V/output
    projections, a relative-position table with T + 1 rows (the last row is the
    padding row used for future positions, which the causal mask removes), score
    (q_i.k_j + q_i.p[i-j]) / sqrt(d_head), causal softmax, dropout on the gathered
    relative-position vectors, on the attention weights and on the projected output
    before the residual add; final LayerNorm, bias-free unembedding. Layer 0 has
    `--heads0` heads (theirs: n - 1 = 1 for bigrams), layer 1 one head. The modules
    are built and initialised in their order (N(0, 0.02) for linear and embedding
    weights, then N(0, 0.01) for the output projections), so with the same
    `torch.manual_seed` the initial parameters are theirs.
  * optimiser (`mingpt/trainer.py`, `configure_optimizers`): AdamW, lr 5e-4, betas
    (0.9, 0.95), weight decay 0.1 on the nn.Linear weights only (embeddings, the
    position tables and LayerNorm parameters undecayed), no gradient clipping (their
    clip call is commented out), mean cross-entropy over every position.
  * data (`datasets.py`, `ngrams.__getitems__`): a fresh batch every step, one
    transition matrix per sequence, T + 1 tokens per sequence, inputs the first T,
    targets the last T.

Their code, and what this port does about it:
  * `utils.stationary_distribution` raises P to the 16th power and then averages
    over the last axis: every row of P^16 sums to one, so the "stationary law" it
    returns is uniform, and the first token of every sequence is uniform. We do what
    their code does: the first token is uniform.
  * `datasets.doubly_stochastic.__init__` calls `ngrams.__init__`, which stores a
    Dirichlet sampler in the instance attribute `transition_matrix_gen`; that
    attribute hides the class's own `transition_matrix_gen` method, so the committed
    "doubly stochastic" dataset draws ordinary Dirichlet rows. (Its parent call also
    drops `num_symbols`, so it is S = 2 whatever is asked, and the method itself,
    were it reached, writes a block of n = 100 candidates into an output of `num`
    rows on its first pass, which fails for num < 100.) The method's intent, and
    that of the earlier `doubly_stochastic_3` in their first commit, is a rejection
    sampler: the top-left (S-1) x (S-1) block uniform on [0, 1], the last row and
    column filled so rows and columns sum to one, kept if every entry is positive.
    That is the uniform (Lebesgue) law on the Birkhoff polytope. We implement that
    sampler correctly. For S = 2 it gives [[p, 1-p], [1-p, p]] with p ~ U(0, 1).

Measured every `--probe-every` steps (and at step 0) with dropout off, on a fixed
evaluation set (`--n-eval` sequences from `--eval-seed`, same prior as training):
  * loss: mean cross-entropy over every position;
  * KL(strategy || model) averaged over positions for the in-context strategies
    uniform, unigram ((count + 1) / (t + S)) and bigram ((count(prev -> next) + 1) /
    (count(prev) + S), the Dirichlet-posterior mean, used under both priors as
    mechlab does); for S = 2 also "stay": the exact Bayes predictor under the
    doubly stochastic prior, P(next = current) = (stays + 1) / (transitions + 2);
  * KL(true row || model) averaged over positions;
  * mechlab's head scores (crates/mechlab/src/papers/markov_icl/probes.rs): layer 0's
    mean attention from i to i - 1 per head, and layer 1's attention mass on keys j
    (1 <= j <= i) with x[j-1] == x[i], each beside its value under uniform causal
    attention (queries i >= 1);
  * the authors' own metric (`test_error.test_last_token`): on a second fixed set of
    768 sequences, at the last position only, KL(true row || model) and
    KL(m-gram || model) for m = 0, 1, 2.
From both metrics, mechlab's phase times (plateau entry, below the unigram
strategy, half-way to the bigram strategy, bigram nearest; `phase_times` below and
crates/mechlab/src/papers/markov_icl/phases.rs); `--phases JSON` recomputes them from
saved curves.
From these: t_bayes (mechlab's: first probe step with loss <= bigram +
0.1 (uniform - bigram), the strategy losses taken on the same evaluation set), the
first probe step at which bigram is the nearest strategy (and the step from which it
stays nearest), the final gap to the bigram (Bayes under Dirichlet) loss.

usage: nice -n 15 bench/.venv/bin/python bench/markov_icl/authors_port.py \
         --prior dirichlet --seq-len 50 --batch 32 --steps 1500 --seeds 1-5 --json OUT
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- model


class RpeAttention(nn.Module):
    """One attention-only block of the authors' relative-position transformer."""

    def __init__(self, d_model, n_head, block, p_drop):
        super().__init__()
        assert d_model % n_head == 0
        # registration order matters: it fixes the order of RNG draws at construction
        # and at re-initialisation, which we keep equal to theirs
        self.Q = nn.Linear(d_model, d_model, bias=False)
        self.K = nn.Linear(d_model, d_model, bias=False)
        self.V = nn.Linear(d_model, d_model, bias=False)
        self.c_proj = nn.Linear(d_model, d_model, bias=False)
        self.wpe = nn.Embedding(block + 1, d_model, padding_idx=block)
        self.attn_dropout = nn.Dropout(p_drop)
        self.resid_dropout = nn.Dropout(p_drop)
        self.pos_dropout = nn.Dropout(p_drop)
        self.ln = nn.LayerNorm(d_model)
        self.n_head = n_head
        self.register_buffer("causal", torch.ones(block, block).tril().bool())
        i = torch.arange(block)
        dist = i[:, None] - i[None, :]
        dist[dist < 0] = block  # future keys read the padding row (masked anyway)
        self.register_buffer("dist", dist)

    def forward(self, x, want_pattern=False):
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        h = self.ln(x)
        k = self.K(h).view(B, T, nh, hs).transpose(1, 2)
        q = self.Q(h).view(B, T, nh, hs).transpose(1, 2)
        v = self.V(h).view(B, T, nh, hs).transpose(1, 2)
        rel = self.pos_dropout(self.wpe(self.dist[:T, :T])).view(T, T, nh, hs)
        score = q @ k.transpose(-2, -1) + torch.einsum("ijhe,bhie->bhij", rel, q)
        score = score / math.sqrt(hs)
        score = score.masked_fill(~self.causal[:T, :T], float("-inf"))
        att = F.softmax(score, dim=-1)
        pattern = att if want_pattern else None
        att = self.attn_dropout(att)
        z = (att @ v).transpose(1, 2).reshape(B, T, C)
        return x + self.resid_dropout(self.c_proj(z)), pattern


class RelativeTransformer(nn.Module):
    def __init__(self, vocab, d_model, heads0, block, p_drop):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.drop = nn.Dropout(p_drop)
        first = RpeAttention(d_model, heads0, block, p_drop)
        self.layers = nn.ModuleList([first, RpeAttention(d_model, 1, block, p_drop)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.apply(self._init)
        for layer in self.layers:
            nn.init.normal_(layer.c_proj.weight, mean=0.0, std=0.01)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, idx, want_patterns=False):
        x = self.drop(self.wte(idx))
        pats = []
        for layer in self.layers:
            x, p = layer(x, want_patterns)
            pats.append(p)
        return self.lm_head(self.ln_f(x)), pats

    def optimizer(self, lr, betas, weight_decay):
        """AdamW with decay on nn.Linear weights only (their optimizer groups)."""
        decay, rest = [], []
        for m in self.modules():
            for name, p in m.named_parameters(recurse=False):
                (decay if isinstance(m, nn.Linear) and name == "weight" else rest).append(p)
        assert len(decay) + len(rest) == len(list(self.parameters()))
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas)


# ------------------------------------------------------------------------------ data


def dirichlet_rows(n, S, gen):
    """n transition matrices, each row Dirichlet(1, ..., 1) (normalised Exp(1) draws)."""
    e = -torch.log1p(-torch.rand(n, S, S, generator=gen))
    return e / e.sum(-1, keepdim=True)


def doubly_stochastic(n, S, gen):
    """n matrices uniform on the doubly stochastic ones: the (S-1)x(S-1) block
    uniform, the last row and column completing the sums, rejected unless every
    entry is positive (the sampler their `doubly_stochastic` class means to use)."""
    got, left = [], n
    while left > 0:
        m = torch.zeros(max(left, 64), S, S)
        m[:, : S - 1, : S - 1] = torch.rand(m.shape[0], S - 1, S - 1, generator=gen)
        m[:, S - 1, : S - 1] = 1 - m[:, : S - 1, : S - 1].sum(1)
        m[:, :, S - 1] = 1 - m[:, :, : S - 1].sum(2)
        m = m[(m > 0).flatten(1).all(1)][:left]
        got.append(m)
        left -= m.shape[0]
    return torch.cat(got)


def sample_batch(prior, n, S, length, gen):
    """Transition matrices [n, S, S] and sequences [n, length] (first token uniform)."""
    P = dirichlet_rows(n, S, gen) if prior == "dirichlet" else doubly_stochastic(n, S, gen)
    cum = P.cumsum(-1)
    seq = torch.empty(n, length, dtype=torch.long)
    seq[:, 0] = torch.randint(S, (n,), generator=gen)
    u = torch.rand(n, length - 1, generator=gen)
    rows = torch.arange(n)
    for t in range(1, length):
        c = cum[rows, seq[:, t - 1], : S - 1]
        seq[:, t] = (u[:, t - 1, None] >= c).sum(-1)
    return P, seq


# ------------------------------------------------------------------------ strategies


def strategies(x, S):
    """In-context strategies' next-token distributions at every position of the
    inputs x [n, T] (float64, [n, T, S] each)."""
    n, T = x.shape
    oh = F.one_hot(x, S).double()
    t = torch.arange(1, T + 1, dtype=torch.float64)[None, :, None]
    out = {"uniform": torch.full((n, T, S), 1.0 / S, dtype=torch.float64)}
    out["unigram"] = (oh.cumsum(1) + 1) / (t + S)
    # transitions x[j-1] -> x[j] with j <= i, read from the row of the current token x[i]
    pair = torch.zeros(n, T, S, S, dtype=torch.float64)
    pair[:, 1:] = oh[:, :-1, :, None] * oh[:, 1:, None, :]
    cnt = pair.cumsum(1)
    row = cnt[torch.arange(n)[:, None], torch.arange(T)[None, :], x]  # [n, T, S]
    out["bigram"] = (row + 1) / (row.sum(-1, keepdim=True) + S)
    if S == 2:
        stays = torch.zeros(n, T, dtype=torch.float64)
        stays[:, 1:] = (x[:, 1:] == x[:, :-1]).double().cumsum(1)
        p_stay = (stays + 1) / (torch.arange(T, dtype=torch.float64)[None] + 2)
        out["stay"] = torch.where(oh.bool(), p_stay[..., None], 1 - p_stay[..., None])
    return out


def kl(p, logq):
    """Mean over leading dims of KL(p || q), p probabilities, logq log-probabilities."""
    return (p * (torch.log(p.clamp_min(1e-300)) - logq)).sum(-1).mean().item()


class EvalSet:
    def __init__(self, prior, n, S, T, seed):
        g = torch.Generator().manual_seed(seed)
        self.P, seq = sample_batch(prior, n, S, T + 1, g)
        self.x, self.y = seq[:, :-1], seq[:, 1:]
        self.strat = strategies(self.x, S)
        self.true = self.P[torch.arange(n)[:, None], self.x].double()  # [n, T, S]
        self.base = {k: -torch.log(v.gather(-1, self.y[..., None])).mean().item()
                     for k, v in self.strat.items()}
        # the uniform-attention values of mechlab's head scores (queries i >= 1)
        i = torch.arange(1, T, dtype=torch.float64)
        self.prev_uniform = (1 / (i + 1)).mean().item()
        self.match = self._match_mask()
        cnt = self.match.double().sum(-1)[:, 1:]
        self.ind_uniform = (cnt / (i + 1)).mean().item()

    def _match_mask(self):
        n, T = self.x.shape
        m = torch.zeros(n, T, T, dtype=torch.bool)  # [seq, query i, key j]
        m[:, :, 1:] = self.x[:, None, :-1] == self.x[:, :, None]
        return m & torch.ones(T, T, dtype=torch.bool).tril()[None]


@torch.no_grad()
def probe(model, ev, last):
    model.eval()
    logits, pats = model(ev.x, want_patterns=True)
    logq = F.log_softmax(logits.double(), -1)
    r = {"loss": -logq.gather(-1, ev.y[..., None]).mean().item(),
         "kl_true": kl(ev.true, logq)}
    for k, v in ev.strat.items():
        r[f"kl.{k}"] = kl(v, logq)
    a0, a1 = pats[0].double(), pats[1].double()[:, 0]
    T = ev.x.shape[1]
    i = torch.arange(1, T)
    r["prev_token"] = [a0[:, h, i, i - 1].mean().item() for h in range(a0.shape[1])]
    r["induction"] = (a1 * ev.match).sum(-1)[:, 1:].mean().item()
    # the authors' last-token metric
    ll = F.log_softmax(model(last.x)[0][:, -1].double(), -1)
    r["last.kl_true"] = kl(last.true[:, -1], ll)
    for m, k in enumerate(["uniform", "unigram", "bigram"]):
        r[f"last.kl.{m}gram"] = kl(last.strat[k][:, -1], ll)
    model.train()
    return r


# ------------------------------------------------------------------------------ runs


def first_step(steps, ok):
    return next((s for s, o in zip(steps, ok) if o), None)


def phase_times(steps, kls, model_vs_truth, levels):
    """mechlab's phase times (crates/mechlab/src/papers/markov_icl/phases.rs) from one
    metric: `kls[j]` the KL(strategy || model) of uniform, unigram and bigram at probe j,
    `model_vs_truth[j]` the model's distance to the true chain (a loss or a KL) and
    `levels` the unigram and bigram strategies' distances on the same set."""
    uni, big = levels
    nearest = [min(range(3), key=lambda k: kl[k]) for kl in kls]
    return {
        "plateau": first_step(steps, [k == 1 for k in nearest]),
        "below_unigram": first_step(steps, [m < uni for m in model_vs_truth]),
        "half_to_bigram": first_step(steps, [m < 0.5 * (uni + big) for m in model_vs_truth]),
        "bigram_closest": first_step(steps, [k == 2 for k in nearest]),
    }


def both_phases(curve, base, last_levels):
    """Phase times on the all-position metric and on the authors' last-token one."""
    steps = [c["step"] for c in curve]
    names = ["uniform", "unigram", "bigram"]
    return {
        "phases_all": phase_times(steps, [[c[f"kl.{k}"] for k in names] for c in curve],
                                  [c["loss"] for c in curve],
                                  (base["unigram"], base["bigram"])),
        "phases_last": phase_times(steps, [[c[f"last.kl.{m}gram"] for m in range(3)]
                                           for c in curve],
                                   [c["last.kl_true"] for c in curve], last_levels),
    }


def train_one(a, seed, ev, last):
    torch.manual_seed(seed)  # init and dropout, as their set_seed before building
    model = RelativeTransformer(a.vocab, a.d_model, a.heads0, a.seq_len, a.dropout)
    n_params = sum(p.numel() for p in model.parameters())
    opt = model.optimizer(a.lr, (0.9, 0.95), a.weight_decay)
    data = torch.Generator().manual_seed(1_000_003 * seed + 17)
    curve, train_loss = [], []
    t0 = time.time()
    model.train()
    for step in range(a.steps + 1):
        if step % a.probe_every == 0 or step == a.steps:
            r = probe(model, ev, last)
            r["step"] = step
            curve.append(r)
            if a.verbose:
                print(f"  seed {seed} step {step:5d} loss {r['loss']:.4f} "
                      f"kl uni/big {r['kl.unigram']:.4f}/{r['kl.bigram']:.4f} "
                      f"ind {r['induction']:.3f} prev {r['prev_token'][0]:.3f} "
                      f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
        if step == a.steps:
            break
        _, seq = sample_batch(a.prior, a.batch, a.vocab, a.seq_len + 1, data)
        logits, _ = model(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        train_loss.append(loss.item())
    wall = time.time() - t0

    steps = [c["step"] for c in curve]
    names = ["uniform", "unigram", "bigram"]
    nearest = [min(names, key=lambda k: c[f"kl.{k}"]) for c in curve]
    uni, bay = ev.base["uniform"], ev.base["bigram"]
    target = bay + 0.1 * (uni - bay)
    t_bayes = first_step(steps, [c["loss"] <= target for c in curve])
    stays = None
    for s, k in zip(reversed(steps), reversed(nearest)):
        if k != "bigram":
            break
        stays = s
    phases = [k for j, k in enumerate(nearest) if j == 0 or nearest[j - 1] != k]
    fin, init = curve[-1], curve[0]
    last_levels = tuple(kl(last.true[:, -1], torch.log(last.strat[k][:, -1]))
                        for k in ("unigram", "bigram"))
    summary = {
        **both_phases(curve, ev.base, last_levels),
        "seed": seed, "n_params": n_params, "wall_s": round(wall, 1),
        "t_bayes": t_bayes,
        "bigram_nearest_first": first_step(steps, [k == "bigram" for k in nearest]),
        "bigram_nearest_from": stays,
        "phases": phases,
        "final_loss": fin["loss"], "final_gap_to_bigram": fin["loss"] - bay,
        "final_kl": {k: fin[f"kl.{k}"] for k in ev.strat},
        "prev_token": fin["prev_token"], "prev_token_uniform": ev.prev_uniform,
        "induction": fin["induction"], "induction_init": init["induction"],
        "induction_uniform": ev.ind_uniform,
        "induction_bar": ev.ind_uniform + 0.5 * (1 - ev.ind_uniform),
        "last_token_final": {k: v for k, v in fin.items() if k.startswith("last.")},
        "train_loss_last50": sum(train_loss[-50:]) / max(1, len(train_loss[-50:])),
    }
    if "stay" in ev.base:
        t_stay = ev.base["stay"] + 0.1 * (uni - ev.base["stay"])
        summary["t_stay_bayes"] = first_step(steps, [c["loss"] <= t_stay for c in curve])
        summary["final_gap_to_stay"] = fin["loss"] - ev.base["stay"]
    rnd = lambda v: round(v, 6) if isinstance(v, float) else v
    slim = [{k: ([rnd(x) for x in v] if isinstance(v, list) else rnd(v)) for k, v in c.items()}
            for c in curve]
    return summary, slim


def parse_seeds(s):
    out = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prior", choices=["dirichlet", "doubly_stochastic"], default="dirichlet")
    ap.add_argument("--seq-len", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--d-model", type=int, default=16)
    ap.add_argument("--heads0", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--probe-every", type=int, default=50)
    ap.add_argument("--n-eval", type=int, default=128)
    ap.add_argument("--n-last", type=int, default=768)
    ap.add_argument("--eval-seed", type=int, default=4242)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--phases", metavar="JSON",
                    help="print the phase times of the runs saved in JSON (no training)")
    a = ap.parse_args()
    if a.phases:
        saved = json.load(open(a.phases))
        lv = saved["eval"]["last_token_kl_true_strategy"]
        for r in saved["runs"]:
            ph = both_phases(r["curve"], saved["eval"]["strategy_loss"],
                             (lv["1gram"], lv["2gram"]))
            print(f"seed {r['summary']['seed']}: " + "; ".join(
                f"{m[7:]}: " + ", ".join(f"{k} {v}" for k, v in p.items())
                for m, p in ph.items()))
        return
    torch.set_num_threads(a.threads)
    torch.set_default_dtype(torch.float32)
    ev = EvalSet(a.prior, a.n_eval, a.vocab, a.seq_len, a.eval_seed)
    last = EvalSet(a.prior, a.n_last, a.vocab, a.seq_len, a.eval_seed + 1)
    runs, t0 = [], time.time()
    for seed in parse_seeds(a.seeds):
        s, curve = train_one(a, seed, ev, last)
        runs.append({"summary": s, "curve": curve})
        fmt = lambda v: "never" if v is None else str(v)
        print(f"{a.prior} T={a.seq_len} B={a.batch} steps={a.steps} dropout={a.dropout} "
              f"seed {seed}: t_bayes {fmt(s['t_bayes'])}, bigram nearest from "
              f"{fmt(s['bigram_nearest_first'])} (stays from {fmt(s['bigram_nearest_from'])}), "
              f"gap {s['final_gap_to_bigram']:.4f}, prev {s['prev_token'][0]:.3f} "
              f"(unif {s['prev_token_uniform']:.3f}), induction {s['induction']:.3f} "
              f"(unif {s['induction_uniform']:.3f}, bar {s['induction_bar']:.3f}), "
              f"{s['wall_s']:.0f}s", flush=True)
        for m in ("last", "all"):
            ph = s[f"phases_{m}"]
            print(f"  phases ({m}): " + ", ".join(f"{k} {fmt(v)}" for k, v in ph.items()),
                  flush=True)
    out = {
        "command": " ".join(sys.argv), "args": vars(a), "torch": torch.__version__,
        "wall_s_total": round(time.time() - t0, 1),
        "eval": {"n": a.n_eval, "seed": a.eval_seed, "strategy_loss": ev.base,
                 "prev_token_uniform": ev.prev_uniform, "induction_uniform": ev.ind_uniform,
                 "last_token_kl_true_strategy": {
                     f"{m}gram": kl(last.true[:, -1], torch.log(last.strat[k][:, -1]))
                     for m, k in enumerate(["uniform", "unigram", "bigram"])}},
        "runs": runs,
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
