#!/usr/bin/env python3
"""Independent PyTorch port of the single-parent training of Nichani, Damian and Lee
(2024), "How Transformers Learn Causal Structure with Gradient Descent" (ICML 2024),
as implemented in their official code (github.com/eshnich/transformers-learn-causal-
structure, commit 7d5e456: single_parent.py, problems.py `InContextTree`, catformer.py
`CatFormer`; the random-DAG draw of many_graphs.ipynb). Written from a reading of that
code (JAX), not copied. SETTINGS.md, next to this file, describes their setting.

What is reproduced as they do it:
  * graphs over the first T - 1 positions (0-based; position T - 1 is the query):
    `chain` parent(i) = i - 1; `icl` odd positions have parent i - 1, even positions
    are roots (pairs); `random` parent(i) uniform on {none, 0, ..., i - 1} (their
    single_parent.py, drawn once per run from the seed); `random-half` (their
    many_graphs.ipynb, Fig. 9): parent(i) uniform on {0, ..., i - 1}, then dropped with
    probability 1/2 (position 0 a root);
  * per sequence: the S x S transition matrix has i.i.d. Dirichlet(alpha 1_S) rows;
    its stationary law mu is the right singular vector of (pi^T - I) for the smallest
    singular value, normalised to sum one; roots are drawn from mu, a child from the row
    of its parent's token; the query x[T-1] is uniform on [S]; the target is the whole
    row pi[x[T-1]] (a soft label), and only the last position is scored;
  * model (their CatFormer, heads [1, 1]): h0 = [one_hot(token, S), one_hot(position,
    T)], d = S + T; per layer and head, scores h_i^T A h_j with no scaling, causal mask
    with the diagonal (j <= i), softmax over j, output sum_j a_ij h_j; the heads'
    outputs are concatenated to the residual stream (d -> d (1 + heads)); after two
    layers the last position's 4d vector times W (4d x S), softmax. Every parameter
    (A1: heads x d x d, A2: heads x 2d x 2d, W) starts at zero and all are trained;
  * loss: mean over the batch of -sum_s y_s log f_s (cross-entropy against the soft
    label); optimiser: plain SGD on every parameter, lr times optax's cosine decay to
    zero over `steps` (step t uses lr (1 + cos(pi t / steps)) / 2, t = 0..steps-1),
    weight decay added to the gradient (g + wd p; their default wd = 0);
  * the "Bayes" number they plot: Dirichlet posterior mean (alpha + count(s)) /
    (S alpha + total), counts over positions i < T - 1 whose parent's token equals the
    query token. Their `bayes` indexes the parent of a root with -1, which in the
    truncated sequence is position T - 2, so in their number every root also counts
    whenever x[T-2] equals the query. `bayes_loss` reproduces that; `bayes_fixed`
    counts only positions that have a parent (what the formula describes);
  * their single_parent.py defaults: S = 10, T = 20, alpha = 0.1, lr = 1, wd = 0,
    batch 1024, 2^17 steps, float32, evaluation on 2^16 test sequences.

Differences (same computation, or flagged):
  * data come from numpy's PCG64 (seeded) instead of JAX's threefry keys, and a fresh
    batch per step instead of slices of 2^20-sample "epochs" (all draws are i.i.d.,
    so the distribution is the same); the graph of `random` is therefore another draw
    for the same seed number (--dag=... takes theirs). The stationary law is computed
    in float64 from the linear system (pi^T - I) mu = 0, sum mu = 1 (the same vector as
    their SVD, to 5e-12 against their code run in float64; their float32 SVD is off
    by up to 1.6e-3), clipped at zero;
  * the second layer is evaluated for the last query only (other positions of layer 2
    never reach the output, so loss and gradients are the same);
  * log-softmax instead of log(softmax(.)) (same value and gradient, no underflow);
  * --problem random-half --schedule constant is many_graphs.ipynb (Fig. 9: S = 3,
    T = 20, constant lr 1, 2^14 steps, batch 1024; their wd = 2e-4 there is defined
    but never passed to the optimiser, so wd 0).

Additions (not in their code; on a fixed evaluation set of --n-eval sequences drawn
from the seed, same prior):
  * bayes_fixed, entropy (loss of the true row: the floor) and uniform_loss (log S);
  * parent_attn: layer-1 attention weight from i to parent(i), over evaluation
    sequences and positions i < T - 1 with a parent; parent_attn_chance = mean
    1/(i+1) over the same positions (uniform causal attention); parent_argmax: share
    of those positions whose mean attention row peaks at the parent (a weak test: any
    tilt passes); parent_attn_pos: their many_graphs.ipynb metric, the masked softmax
    of A1's position-position block alone, weight on the parent averaged over edges;
  * induction: layer-2 attention from the query (position T - 1) to the keys j whose
    parent's token equals the query token, summed, over evaluation sequences with at
    least one such key; induction_uniform: the same mass under uniform attention.
    a2_ind_diag / w_copy_diag: mean diagonal minus mean off-diagonal of A2's block
    (query token) x (key's layer-1 output token), the match, and of W's block (layer-2
    output token) x (logit), the copy; the blocks their plots.py outlines in red;
  * mutual information between x_i and x_j (j < i < T - 1) within one transition
    matrix, estimated from data: --mi-pis matrices, --mi-seqs sequences each, plug-in
    chi-square MI sum_ab p(a,b)^2 / (p(a) p(b)) - 1 per matrix, averaged (Shannon MI
    the same way); mi_argmax: share of positions with a parent whose row argmax over
    j < i is the parent (mi_argmax_pos lists the argmaxes). For checking: the exact
    chi-square MI from the graph and each pi (joint through the lowest common
    ancestor, stationary roots), mi_exact_argmax, and mi_est_exact_rowcorr (mean over
    positions with a parent of the Pearson correlation of the two rows, j < i);
  * the theory's gradient: reduced_grad is -dL/dA1 (position block) at A1 = 0 with
    A2 = beta on the (query token) x (key's layer-1 output token) block and W the
    identity from layer 2's output token to the logits, everything else zero (the
    simplified model embedded in CatFormer; our construction, --reduced-beta 0.1,
    --reduced-n sequences, float64); reduced_grad_argmax and reduced_grad_mi_rowcorr
    (vs the exact MI; _est_rowcorr vs the estimate) as above. In their zero-initialised
    model the first step moves only W (A1 and A2 get zero gradient while W = 0), so we
    also report the actual A1 after --early-steps steps: a1_early_argmax and
    a1_early_mi_rowcorr;
  * --matrices adds the T-1 x T-1 matrices (mi_chi2, mi_exact_chi2, mi_shannon,
    reduced_grad, final a1_pos) to the JSON line;
  * --control (default none: the code path above, same random draws and output):
    - redraw: a fresh graph for EVERY sequence, training batches and evaluation set
      alike, from the `random` prior (parent(i) uniform on {none, 0, ..., i - 1});
      --problem is ignored and `dag` is null in the JSON line;
    - shuffle: --problem's fixed graph generates the nodes 0..T-2 as usual, then node
      k is written at position sigma(k), sigma a uniform permutation of 0..T-2 drawn
      per sequence; the query stays at T - 1. In position terms the parent of
      sigma(k) is sigma(parent(k)), which may come after its child.
    Under a control every quantity uses each sequence's own parents (position terms,
    -1 for roots): sampling, both Bayes losses (counts over positions with a parent
    whose parent's token is the query; bayes_loss keeps their -1 -> T - 2 quirk), and
    the probes. parent_attn and parent_attn_chance run over the (sequence, i) pairs
    whose parent is earlier than i (causal attention cannot see a later one);
    parent_attn_pairs is the share of the pairs with a parent that are counted (1 for
    redraw, about 1/2 for shuffle). induction counts the keys j with a parent earlier
    than j whose token equals the query's. The target is unchanged (row pi[x_query]).
    The fixed-graph quantities (parent_argmax, parent_attn_pos, mi_*, a1_early_*,
    reduced_grad_*) are null; a2_ind_diag and w_copy_diag are kept. The JSON line
    gets "control".

Checked against their code run here (check_authors_port.py; JAX 0.10.2, optax 0.2.8,
float32; results/check_*.txt and results/check_train_*.jsonl):
  * the same batches (their sampler) fed to both: per-step losses agree to 1e-6 and
    all parameters to 1e-5 (float32 rounding) over 300 steps for chain / icl / random
    (with wd 1e-3) / two first-layer heads, over 2000 steps at lr 4 (S 5, T 10) and
    1000 steps at S 10, T 20, lr 8 (the preset's sizes and lr);
  * their `bayes` and ours on their sequences: 8e-8; sampler statistics (P(child =
    parent token), entropy of the target, both Bayes losses, P(x_i = query)) within
    1.1 standard errors on 2^15 sequences for each problem;
  * full short trainings, their loop (their RNG) vs the port (ours), 3 seeds, S 5,
    T 10, batch 256, 3000 steps, lr 1: chain final loss 1.2427 +- 0.0028 vs 1.2401 +-
    0.0042, parent_attn 0.8044 +- 0.0012 vs 0.8021 +- 0.0010, induction 0.816 vs
    0.818; random (their three graphs passed with --dag) per graph within 0.011 in
    loss and 0.016 in parent_attn (e.g. 0.7125 vs 0.7131).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

# one thread unless PORT_THREADS says otherwise (bench/causal_structure/speed.sh)
torch.set_num_threads(int(os.environ.get("PORT_THREADS", "1")))


# ----------------------------------------------------------------------------- graphs
def make_dag(problem, T, rng):
    """parent of each of the positions 0..T-2 (-1: root)."""
    n = T - 1
    if problem == "chain":
        return np.arange(n) - 1
    if problem == "icl":
        dag = -np.ones(n, dtype=np.int64)
        dag[1::2] = np.arange(1, n, 2) - 1
        return dag
    if problem == "random":
        return np.array([rng.integers(-1, i) for i in range(n)], dtype=np.int64)
    if problem == "random-half":
        dag = np.array([-1] + [rng.integers(0, i) for i in range(1, n)], dtype=np.int64)
        drop = rng.random(n) < 0.5
        dag[drop] = -1
        return dag
    raise ValueError(problem)


# ------------------------------------------------------------------------------- data
def stationary(pi, svd=False):
    """stationary law of each pi (batched). svd=True: theirs, the right singular
    vector of pi^T - I for the smallest singular value; default: the same vector from
    the linear system (pi^T - I) mu = 0, sum(mu) = 1 (4x faster; SVD where singular)."""
    S = pi.shape[-1]
    M = np.swapaxes(pi, -1, -2) - np.eye(S)
    if not svd:
        M = M.copy()
        M[..., -1, :] = 1.0
        b = np.zeros(pi.shape[:-1] + (1,))
        b[..., -1, 0] = 1.0
        try:
            mu = np.linalg.solve(M, b)[..., 0]
            if np.isfinite(mu).all():
                mu = np.clip(mu, 0.0, None)
                return mu / mu.sum(-1, keepdims=True)
        except np.linalg.LinAlgError:
            pass
        return stationary(pi, svd=True)
    _, _, vh = np.linalg.svd(M)
    mu = vh[..., -1, :]
    mu = mu / mu.sum(-1, keepdims=True)
    mu = np.clip(mu, 0.0, None)
    return mu / mu.sum(-1, keepdims=True)


def draw(rng, p):
    """one categorical draw per row of p (n x S)."""
    c = np.cumsum(p, -1)
    u = rng.random((p.shape[0], 1)) * c[:, -1:]
    return np.minimum((u >= c).sum(-1), p.shape[1] - 1)


def sample_pi(rng, n, S, alpha):
    g = rng.gamma(alpha, size=(n, S, S))
    s = g.sum(-1, keepdims=True)
    bad = s[..., 0] == 0
    if bad.any():  # all-zero row (probability ~1e-30 at alpha 0.1): make it uniform
        g[bad] = 1.0
        s = g.sum(-1, keepdims=True)
    return g / s


def sample_seqs(rng, dag, pi, S, query=True):
    """tokens (n x T) given one transition matrix per sequence; last token uniform."""
    n = pi.shape[0]
    T = len(dag) + 1
    mu = stationary(pi)
    x = np.zeros((n, T), dtype=np.int64)
    rows = np.arange(n)
    for i, p in enumerate(dag):
        x[:, i] = draw(rng, mu if p < 0 else pi[rows, x[:, p]])
    x[:, T - 1] = rng.integers(0, S, size=n) if query else 0
    return x


def sample(rng, n, dag, S, alpha):
    pi = sample_pi(rng, n, S, alpha)
    x = sample_seqs(rng, dag, pi, S)
    y = pi[np.arange(n), x[:, -1]]
    return x, y, pi


def sample_control(rng, n, dag, S, alpha, control):
    """--control: tokens, target, pi and each sequence's parents in position terms
    (n x (T - 1), -1 for roots). redraw: a fresh `random` graph per sequence (parent
    of i uniform on {-1, 0, ..., i - 1}); shuffle: the fixed graph `dag` generates the
    nodes 0..T-2 as usual, then node k is written at position sigma(k), sigma a
    uniform permutation per sequence (the query stays at T - 1)."""
    n_pos = len(dag)
    rows = np.arange(n)
    if control == "redraw":
        parents = rng.integers(-1, np.arange(n_pos)[None, :], size=(n, n_pos))
        pi = sample_pi(rng, n, S, alpha)
        mu = stationary(pi)
        x = np.zeros((n, n_pos + 1), dtype=np.int64)
        for i in range(n_pos):
            p = parents[:, i]
            prob = pi[rows, x[rows, np.maximum(p, 0)]]
            prob[p < 0] = mu[p < 0]
            x[:, i] = draw(rng, prob)
        x[:, n_pos] = rng.integers(0, S, size=n)
    elif control == "shuffle":
        pi = sample_pi(rng, n, S, alpha)
        xn = sample_seqs(rng, dag, pi, S)
        sigma = np.argsort(rng.random((n, n_pos)), 1)  # node k -> position sigma[:, k]
        x = xn.copy()
        x[rows[:, None], sigma] = xn[:, :n_pos]
        parents = np.full((n, n_pos), -1, dtype=np.int64)
        par_pos = np.where(dag >= 0, sigma[:, np.maximum(dag, 0)], -1)  # sigma(parent(k))
        parents[rows[:, None], sigma] = par_pos
    else:
        raise ValueError(control)
    y = pi[rows, x[:, -1]]
    return x, y, pi, parents


def bayes_parents(x, parents, S, alpha, theirs=True):
    """bayes() with each sequence's own parents (n x (T - 1), position terms)."""
    ctx, s = x[:, :-1], x[:, -1:]
    par = np.where(parents < 0, ctx.shape[1] - 1, parents)
    hit = np.take_along_axis(ctx, par, 1) == s
    if not theirs:
        hit &= parents >= 0
    counts = np.full((x.shape[0], S), alpha)
    np.add.at(counts, (np.repeat(np.arange(x.shape[0]), ctx.shape[1]), ctx.ravel()),
              hit.ravel().astype(float))
    return counts / counts.sum(-1, keepdims=True)


def bayes(x, dag, S, alpha, theirs=True):
    """Dirichlet posterior mean of the query's row; theirs=True reproduces their
    indexing of a root's parent (-1 -> position T - 2 of the context)."""
    ctx, s = x[:, :-1], x[:, -1:]
    par = np.where(dag < 0, len(dag) - 1, dag)
    hit = ctx[:, par] == s
    if not theirs:
        hit &= (dag >= 0)[None, :]
    counts = np.full((x.shape[0], S), alpha)
    np.add.at(counts, (np.repeat(np.arange(x.shape[0]), ctx.shape[1]), ctx.ravel()),
              hit.ravel().astype(float))
    return counts / counts.sum(-1, keepdims=True)


def soft_ce(p, y):
    return float(-(y * np.log(np.maximum(p, 1e-300))).sum(-1).mean())


# ------------------------------------------------------------------------------ model
class CatFormer:
    """their CatFormer: concatenated residual stream, zero init, last position read."""

    def __init__(self, S, T, heads=(1, 1), dtype=torch.float32):
        self.S, self.T, self.heads, self.dtype = S, T, list(heads), dtype
        d = S + T
        self.A = []
        for h in self.heads:
            self.A.append(torch.zeros(h, d, d, dtype=dtype, requires_grad=True))
            d *= 1 + h
        self.W = torch.zeros(d, S, dtype=dtype, requires_grad=True)
        self.eye_T = torch.eye(T, dtype=dtype)

    def params(self):
        return self.A + [self.W]

    def embed(self, x):
        B, T = x.shape
        tok = torch.nn.functional.one_hot(x, self.S).to(self.dtype)
        pos = self.eye_T[:T].expand(B, T, T)
        return torch.cat([tok, pos], -1)

    def forward(self, x, keep=False):
        """logits at the last position; keep=True also returns the attention maps."""
        h = self.embed(x)
        T = h.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        maps = []
        for li, A in enumerate(self.A):
            last = li == len(self.A) - 1
            if not last:
                s = torch.einsum("bid,hde,bje->bhij", h, A, h)
                a = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
                o = torch.einsum("bhij,bjd->bihd", a, h).flatten(2)
                h = torch.cat([h, o], -1)
            else:  # only the last query reaches the output
                s = torch.einsum("bd,hde,bje->bhj", h[:, -1], A, h)
                a = torch.softmax(s, -1)
                o = torch.einsum("bhj,bjd->bhd", a, h).flatten(1)
                h = torch.cat([h[:, -1], o], -1)
            if keep:
                maps.append(a.detach())
        logits = h @ self.W
        return (logits, maps) if keep else logits

    def loss(self, x, y):
        return -(y * torch.log_softmax(self.forward(x), -1)).sum(-1).mean()


def cosine_lr(lr, t, steps):
    return lr * 0.5 * (1 + math.cos(math.pi * min(t, steps) / steps))


def sgd_step(model, x, y, lr, wd):
    loss = model.loss(x, y)
    grads = torch.autograd.grad(loss, model.params())
    with torch.no_grad():
        for p, g in zip(model.params(), grads):
            p -= lr * (g + wd * p)
    return loss.item()


def eval_loss(model, x, y, chunk=8192):
    tot = 0.0
    with torch.no_grad():
        for i in range(0, len(x), chunk):
            tot += model.loss(x[i:i + chunk], y[i:i + chunk]).item() * len(x[i:i + chunk])
    return tot / len(x)


# ---------------------------------------------------------------------- mutual info
def mi_estimate(rng, dag, S, alpha, n_pi, n_seq):
    """plug-in chi-square and Shannon MI between positions, within one pi, averaged
    over n_pi matrices; and the exact chi-square MI from the graph and each pi."""
    n = len(dag)
    chi = np.zeros((n, n))
    sha = np.zeros((n, n))
    exact = np.zeros((n, n))
    for _ in range(n_pi):
        pi1 = sample_pi(rng, 1, S, alpha)
        x = sample_seqs(rng, dag, np.repeat(pi1, n_seq, 0), S, query=False)[:, :n]
        oh = np.eye(S)[x]  # n_seq x n x S
        joint = np.einsum("kia,kjb->ijab", oh, oh) / n_seq
        marg = oh.mean(0)  # n x S
        prod = marg[:, None, :, None] * marg[None, :, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(prod > 0, joint ** 2 / prod, 0.0)
            chi += r.sum((2, 3)) - 1
            lg = np.where(joint > 0, joint * np.log(joint / np.where(prod > 0, prod, 1)), 0)
            sha += lg.sum((2, 3))
        exact += exact_chi2(dag, pi1[0])
    return chi / n_pi, sha / n_pi, exact / n_pi


def exact_chi2(dag, pi):
    """population chi-square MI of (x_i, x_j) within pi, for a forest with stationary
    roots: joint = (pi^dj)^T diag(mu) pi^di through the lowest common ancestor."""
    n = len(dag)
    mu = stationary(pi[None])[0]
    anc = []
    for i in range(n):  # ancestors of i with distances, i itself at 0
        a, k, d = {}, i, 0
        while k >= 0:
            a[k] = d
            k, d = dag[k], d + 1
        anc.append(a)
    out = np.zeros((n, n))
    pw = [np.eye(len(mu))]
    for _ in range(n):
        pw.append(pw[-1] @ pi)
    for i in range(n):
        for j in range(i):
            common = [c for c in anc[i] if c in anc[j]]
            if not common:
                continue
            c = max(common)  # deepest common ancestor (ancestors have smaller index)
            joint = pw[anc[j][c]].T @ np.diag(mu) @ pw[anc[i][c]]  # (x_j, x_i)
            prod = np.outer(mu, mu)
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(prod > 0, joint ** 2 / prod, 0.0).sum() - 1
            out[i, j] = out[j, i] = v
    return out


def row_corr(m, ref, dag):
    """mean over positions i >= 2 with a parent of Pearson(m[i, :i], ref[i, :i])."""
    c = [np.corrcoef(m[i, :i], ref[i, :i])[0, 1] for i in range(2, len(dag))
         if dag[i] >= 0 and np.std(m[i, :i]) > 0 and np.std(ref[i, :i]) > 0]
    return float(np.mean(c)) if c else float("nan")


def reduced_grad(dag, S, T, alpha, beta, n, rng):
    """-dL/dA1 (position block) at the theory's initialisation, embedded in CatFormer:
    A1 = 0; A2 = beta on the block (query token) x (key's layer-1 output token), zero
    elsewhere; W = identity from layer 2's output token to the logits, zero elsewhere
    (softmax read-out). Our construction; see SETTINGS.md."""
    m = CatFormer(S, T, (1, 1), torch.float64)
    d = S + T
    with torch.no_grad():
        m.A[1][0, :S, d:d + S] = beta * torch.eye(S, dtype=torch.float64)
        m.W[2 * d:2 * d + S] = torch.eye(S, dtype=torch.float64)
    x, y, _ = sample(rng, n, dag, S, alpha)
    loss = m.loss(torch.from_numpy(x), torch.from_numpy(y))
    g = torch.autograd.grad(loss, m.A[0])[0][0, S:, S:]
    return -g.numpy()[:T - 1, :T - 1]


def row_argmax_frac(m, dag):
    """share of positions with a parent whose argmax over j < i is the parent."""
    kids = [i for i in range(len(dag)) if dag[i] >= 0]
    if not kids:
        return float("nan"), []
    am = [int(np.argmax(m[i, :i])) for i in kids]
    return float(np.mean([a == dag[i] for a, i in zip(am, kids)])), am


# -------------------------------------------------------------------------- probes
def probes(model, x, dag, S, T):
    with torch.no_grad():
        _, maps = model.forward(x, keep=True)
    a1 = maps[0][:, 0].double().numpy()  # B x T x T (head 0)
    a2 = maps[1][:, 0].double().numpy()  # B x T   (query T-1)
    xs = x.numpy()
    kids = np.array([i for i in range(T - 1) if dag[i] >= 0])
    out = {}
    if len(kids):
        out["parent_attn"] = float(a1[:, kids, dag[kids]].mean())
        out["parent_attn_chance"] = float(np.mean(1.0 / (kids + 1)))
        mean_rows = a1.mean(0)
        out["parent_argmax"] = float(np.mean(np.argmax(mean_rows[kids], -1) == dag[kids]))
        A1 = model.A[0][0].detach().double()
        P = A1[S:, S:].masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        P = torch.softmax(P, -1).numpy()
        out["parent_attn_pos"] = float(P[kids, dag[kids]].mean())
    # induction: keys j < T-1 with a parent whose token equals the query token
    par = np.where(dag < 0, 0, dag)
    match = (xs[:, par] == xs[:, -1:]) & (dag >= 0)[None, :]  # B x (T-1)
    has = match.any(1)
    if has.any():
        out["induction"] = float((a2[:, :T - 1] * match).sum(1)[has].mean())
        out["induction_uniform"] = float((match.sum(1) / T)[has].mean())
    out.update(block_contrasts(model, S, T))
    return out


def block_contrasts(model, S, T):
    """mean diagonal minus mean off-diagonal of A2's match block (query token x key's
    layer-1 output token) and of W's copy block (layer-2 output token -> logits)."""
    def contrast(blk):
        off = (blk.sum() - np.trace(blk)) / (S * S - S)
        return float(np.trace(blk) / S - off)
    d = S + T
    A2 = model.A[1][0].detach().double().numpy()
    h1 = d * (1 + model.heads[0])
    Wb = model.W.detach().double().numpy()[h1:h1 + S, :]
    return {"a2_ind_diag": contrast(A2[:S, d:d + S]), "w_copy_diag": contrast(Wb)}


def probes_control(model, x, parents, S, T):
    """probes() with each sequence's own parents (position terms). Pairs (sequence,
    i) count only where i has a parent earlier than i (causal attention cannot see a
    later one); parent_attn_pairs is their share of the pairs with a parent."""
    with torch.no_grad():
        _, maps = model.forward(x, keep=True)
    a1 = maps[0][:, 0].double().numpy()  # B x T x T (head 0)
    a2 = maps[1][:, 0].double().numpy()  # B x T   (query T-1)
    xs = x.numpy()
    B, n_pos = parents.shape
    pos = np.arange(n_pos)[None, :]
    earlier = (parents >= 0) & (parents < pos)  # B x (T-1)
    par0 = np.maximum(parents, 0)
    out = {}
    if earlier.any():
        att = np.take_along_axis(a1[:, :n_pos, :], par0[:, :, None], 2)[:, :, 0]
        out["parent_attn"] = float(att[earlier].mean())
        chance = np.broadcast_to(1.0 / (pos + 1), parents.shape)
        out["parent_attn_chance"] = float(chance[earlier].mean())
        out["parent_attn_pairs"] = float(earlier.sum() / max(1, (parents >= 0).sum()))
    out["parent_argmax"] = None
    out["parent_attn_pos"] = None
    # induction: keys j < T-1 with an earlier parent whose token equals the query's
    match = earlier & (np.take_along_axis(xs[:, :n_pos], par0, 1) == xs[:, -1:])
    has = match.any(1)
    if has.any():
        out["induction"] = float((a2[:, :T - 1] * match).sum(1)[has].mean())
        out["induction_uniform"] = float((match.sum(1) / T)[has].mean())
    out.update(block_contrasts(model, S, T))
    return out


FIXED_GRAPH_KEYS = ["mi_argmax", "mi_shannon_argmax", "mi_exact_argmax", "mi_argmax_pos",
                    "mi_est_exact_rowcorr", "a1_early_argmax", "a1_early_mi_rowcorr",
                    "reduced_grad_argmax", "reduced_grad_mi_rowcorr",
                    "reduced_grad_mi_est_rowcorr"]


def rnd(m, k=4):
    return [[round(float(v), k) for v in row] for row in m]


# ---------------------------------------------------------------------------- main
def run(args):
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    dag_rng = np.random.default_rng(args.dag_seed if args.dag_seed is not None else args.seed)
    S, T = args.S, args.T
    dag = make_dag(args.problem, T, dag_rng)
    if args.dag:
        dag = np.array([int(v) for v in args.dag.split(",")], dtype=np.int64)
        assert len(dag) == T - 1 and all(-1 <= p < i for i, p in enumerate(dag)), "bad --dag"
    ctl = args.control
    assert not (ctl == "redraw" and args.dag), "--dag has no meaning with --control redraw"
    dtype = torch.float64 if args.f64 else torch.float32
    eval_rng = np.random.default_rng([args.seed, 1])
    if ctl == "none":
        xe, ye, _ = sample(eval_rng, args.n_eval, dag, S, args.alpha)
        bayes_theirs = soft_ce(bayes(xe, dag, S, args.alpha, True), ye)
        bayes_fixed = soft_ce(bayes(xe, dag, S, args.alpha, False), ye)
    else:
        xe, ye, _, pe = sample_control(eval_rng, args.n_eval, dag, S, args.alpha, ctl)
        bayes_theirs = soft_ce(bayes_parents(xe, pe, S, args.alpha, True), ye)
        bayes_fixed = soft_ce(bayes_parents(xe, pe, S, args.alpha, False), ye)
    entropy = soft_ce(ye, ye)
    uniform = math.log(S)
    xe_t, ye_t = torch.from_numpy(xe), torch.from_numpy(ye).to(dtype)
    model = CatFormer(S, T, [int(h) for h in args.heads.split(",")], dtype)
    curve, a1_early = [], None
    every = max(1, args.steps // args.n_log)
    for t in range(args.steps):
        if t % every == 0:
            curve.append([t, round(eval_loss(model, xe_t, ye_t), 5)])
        if ctl == "none":
            x, y, _ = sample(rng, args.batch, dag, S, args.alpha)
        else:
            x, y, _, _ = sample_control(rng, args.batch, dag, S, args.alpha, ctl)
        lr = cosine_lr(args.lr, t, args.steps) if args.schedule == "cosine" else args.lr
        sgd_step(model, torch.from_numpy(x), torch.from_numpy(y).to(dtype), lr, args.wd)
        if t + 1 == args.early_steps:
            a1_early = model.A[0][0].detach().double().numpy()[S:, S:].copy()
    final = eval_loss(model, xe_t, ye_t)
    curve.append([args.steps, round(final, 5)])
    train_s = time.time() - t0
    res = {
        "problem": args.problem, "seed": args.seed, "S": S, "T": T, "alpha": args.alpha,
        "steps": args.steps, "batch": args.batch, "lr": args.lr, "wd": args.wd,
        "schedule": args.schedule,
        "heads": args.heads, "dtype": str(dtype).split(".")[-1], "n_eval": args.n_eval,
        "dag": [int(v) for v in dag],
        "final_loss": final, "bayes_loss": bayes_theirs, "bayes_fixed": bayes_fixed,
        "entropy": entropy, "uniform_loss": uniform,
    }
    if ctl != "none":
        res["control"] = ctl
        if ctl == "redraw":
            res["dag"] = None  # one graph per sequence
        res.update(probes_control(model, xe_t[:args.n_probe], pe[:args.n_probe], S, T))
        res.update({k: None for k in FIXED_GRAPH_KEYS})
    else:
        res.update(probes(model, xe_t[:args.n_probe], dag, S, T))
    if args.mi_pis > 0 and ctl == "none":
        mi_rng = np.random.default_rng([args.seed, 2])
        chi, sha, ex = mi_estimate(mi_rng, dag, S, args.alpha, args.mi_pis, args.mi_seqs)
        res["mi_argmax"], am = row_argmax_frac(chi, dag)
        res["mi_shannon_argmax"], _ = row_argmax_frac(sha, dag)
        res["mi_exact_argmax"], _ = row_argmax_frac(ex, dag)
        res["mi_argmax_pos"] = am
        res["mi_est_exact_rowcorr"] = row_corr(chi, ex, dag)
        if a1_early is not None:
            res["a1_early_argmax"], _ = row_argmax_frac(a1_early, dag)
            res["a1_early_mi_rowcorr"] = row_corr(a1_early, ex, dag)
        if args.reduced_beta > 0:
            g = reduced_grad(dag, S, T, args.alpha, args.reduced_beta, args.reduced_n,
                             np.random.default_rng([args.seed, 3]))
            res["reduced_grad_argmax"], _ = row_argmax_frac(g, dag)
            res["reduced_grad_mi_rowcorr"] = row_corr(g, ex, dag)
            res["reduced_grad_mi_est_rowcorr"] = row_corr(g, chi, dag)
            if args.matrices:
                res["reduced_grad"] = rnd(g, 6)
        if args.matrices:
            res["mi_chi2"] = rnd(chi)
            res["mi_exact_chi2"] = rnd(ex)
            res["mi_shannon"] = rnd(sha)
    if args.matrices:
        res["a1_pos"] = rnd(model.A[0][0].detach().numpy()[S:, S:], 3)
    res["loss_curve"] = curve
    res["train_s"] = round(train_s, 1)
    res["total_s"] = round(time.time() - t0, 1)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", choices=["chain", "icl", "random", "random-half"],
                    default="chain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dag-seed", type=int, default=None,
                    help="seed of the random graph (default: --seed)")
    ap.add_argument("--dag", help="explicit parents of positions 0..T-2, comma list, -1 root "
                    "(overrides --problem's graph; e.g. the graph their code drew)")
    ap.add_argument("--S", type=int, default=10, help="vocabulary size (theirs 10)")
    ap.add_argument("--T", type=int, default=20, help="sequence length incl. query (20)")
    ap.add_argument("--alpha", type=float, default=0.1, help="Dirichlet parameter (0.1)")
    ap.add_argument("--steps", type=int, default=2 ** 17, help="theirs 2^17")
    ap.add_argument("--batch", type=int, default=1024, help="theirs 1024")
    ap.add_argument("--lr", type=float, default=1.0, help="peak lr, cosine to 0 (1)")
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                    help="constant: many_graphs.ipynb (Fig. 9)")
    ap.add_argument("--heads", default="1,1")
    ap.add_argument("--f64", action="store_true")
    ap.add_argument("--n-eval", type=int, default=2 ** 16, help="theirs 2^16")
    ap.add_argument("--n-probe", type=int, default=4096)
    ap.add_argument("--n-log", type=int, default=16, help="loss evaluations along the way")
    ap.add_argument("--early-steps", type=int, default=20)
    ap.add_argument("--mi-pis", type=int, default=32)
    ap.add_argument("--mi-seqs", type=int, default=2048)
    ap.add_argument("--reduced-beta", type=float, default=0.1,
                    help="beta of the reduced-model gradient probe (0: off)")
    ap.add_argument("--reduced-n", type=int, default=2 ** 15)
    ap.add_argument("--matrices", action="store_true", help="include T x T matrices")
    ap.add_argument("--control", choices=["none", "redraw", "shuffle"], default="none",
                    help="redraw: a fresh random graph per sequence; shuffle: --problem's "
                    "graph, context positions permuted per sequence (see the docstring)")
    ap.add_argument("--out", help="append the JSON line to this file too")
    args = ap.parse_args(argv)
    res = run(args)
    line = json.dumps(res)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
