"""Independent PyTorch port of two in-context linear-regression experiments, as their
official code runs them (written from a reading of that code, none of it copied):

  (a) von Oswald et al. (ICML 2023), "Transformers learn in-context by gradient
      descent", github.com/google-research/self-organising-systems, folder
      transformers_learn_icl_by_gd (constructed_token_setup.ipynb with src/train.py,
      src/transformer.py, src/attn.py, src/data.py), presets `vo` (one layer) and
      `vo --layers K` (K layers, weights shared across layers as in their notebook);
  (b) Ahn, Cheng, Daneshmand and Sra (NeurIPS 2023), "Transformers learn to implement
      preconditioned gradient descent for in-context learning",
      github.com/chengxiang/LinearTransformer (linear_transformer.py with the notebooks
      "simple demonstration", "rotation demonstration-Adam" and variable_L_exp),
      presets `ahn-iso`, `ahn-rot` and `ahn-varL`.
The settings, with the places where their code and their text differ, are in
SETTINGS.md next to this file.

What is reproduced as they do it, (a) von Oswald (float32):
  * data: per task w ~ N(0, I_d), x_i and x_q ~ U(-r/2, r/2)^d with r = input_range = 1
    (so U(-0.5, 0.5)), y_i = w.x_i; tokens e_i = (x_i, y_i), query token (x_q, 0);
    d = 10, N = 10 context tokens; a fresh batch of 2048 tasks every step;
  * model: K linear self-attention layers (one set of weights for all of them, their
    `deq`), no bias, no 1/N, no softmax, no layer norm: with H the (N+1) x (d+1)
    tokens (rows), H <- H + ((H Wq)(C Wk)^T)(C Wv) Wo where C is the N context rows
    (the query row is not a key or value, include_query=False); every row, context rows
    included, is updated; the prediction is -H[query, y];
  * init: each of Wq, Wk, Wv, Wo (11 x 11) from Haiku's VarianceScaling(0.002 / K):
    a normal truncated at 2 standard deviations, std sqrt(scale / 11) / 0.8796...;
  * loss 0.5 * mean (y_q - pred)^2; optax chain(clip_by_global_norm(c), adamw(lr,
    b1 0.9, b2 0.98, eps 1e-8, weight decay 0)), c = 0.001 for K <= 2 (10 above),
    lr 0.001 (0.0005 for K > 3), 5000 steps (their one-layer / shared-weight value);
  * GD reference: their constructed weights (Wq = Wk = [[I, 0], [0, 0]],
    Wv = [[0, 0], [0, -1]], Wo = [[0, 0], [0, lr/N]]) run through the same forward, so
    K layers are K GD steps from w = 0 on (1/2N) sum (w.x_i - y_i)^2; lr is picked by
    their brute-force scan over 0.001, 0.101, ..., 24.901 on the 10 000 evaluation
    tasks; eta_best = lr/N as their notebook prints it;
  * measures, on 10 000 evaluation tasks drawn from one fixed stream for every seed
    (their eval_rng = PRNGKey(5)): test loss; "preds diff" = mean |pred_TF - pred_GD|;
    "model cos" = mean over tasks of the cosine between the gradients of the two
    models' outputs with respect to x_q (each divided by its norm + 1e-8);
    "model diff" = mean L2 norm of the difference of those gradients.
What is reproduced as they do it, (b) Ahn et al. (float32, global torch RNG):
  * data: Z is B x (n+1) x (d+1), rows (x_i, y_i), last row (x_q, 0), target y_q;
    isotropic: w, X, x_q ~ N(0, I) in that draw order; rotated (their non-identity
    covariance): U = left singular vectors of a 5 x 5 U(-1, 1) matrix, D = diag(1, 1,
    1/2, 1/4, 1), x = U D g with g ~ N(0, I) (Sigma = U D^2 U^T), and w = U D^-1 v
    with v ~ N(0, I), i.e. w ~ N(0, Sigma^-1); the draw order, the discarded first w,
    and the in-place regeneration on a view of Z every `regen` steps are theirs;
  * model: L layers Z <- Z + Attn M (Z Pf^T) / n with Attn = Z Qf Z^T
    (B x (n+1) x (n+1)), M = I except M[n, n] = 0 (the query is no key),
    Pf = [[P, 0], [0, 1]], Qf = [[Q, 0], [0, 0]]; only the d x d blocks P and Q are
    trained (their code's parameterisation); prediction = -Z_L[n, d], loss
    mean (Z_L[n, d] + y_q)^2 (no 1/2). --ops theirs evaluates it with their einsums;
    the default --ops fast computes the same map as (Z Qf)(C Pf^T)/n with C the sum of
    z_m z_m^T over the context rows (2 to 3 times faster here);
  * init: all P, Q entries ~ N(0, var), var = 1e-4 used as the standard deviation
    (their `normal_(0, var)`), drawn after torch.manual_seed(seed); then numpy and torch
    are seeded with the seed again before U and the data;
  * optimiser: torch AdamW, weight decay 0, with their betas and lr per notebook, their
    clipping (global norm for ahn-iso, each d x d matrix's gradient on its own for
    ahn-rot / ahn-varL) and their schedule (ahn-rot / ahn-varL: lr halved every 4000
    steps; ahn-iso: constant);
  * measures: test loss on a set drawn after seeding with 99 (B tasks); their
    "distance to identity" of each matrix, ||M - (tr M / d) I||_F / ||M||_F, of
    (UD)^T Q (UD) (= Sigma^1/2 Q Sigma^1/2 up to a rotation) and of P; for ahn-varL,
    like variable_L_exp, the parameters are the best of the last 20 snapshots (every
    100 steps) on a validation set drawn after seeding with 999; their "L-step GD" loss
    as variable_L_exp computes it (eta from their grid, picked on the 999 set, GD on the
    unnormalised squared loss, and, as in their do_gd, the last context example left out;
    theirs evaluates on a set drawn after seeding with the run's seed and picks eta with
    seed 1's U, ours uses the first 5000 tasks of the seed-99 test set and the run's U).

Additions (not in their code): for (a), the structure of the trained weights
(Wq Wk^T's x-block against its best multiple of I, the norms of its other blocks and
of Wv Wo's blocks outside the y-y entry, and the GD lr they amount to, -N a b); for (b),
the relative Frobenius error of each layer's Q after fitting the best scalar multiple
of Sigma^-1, the fitted multiple, and for one layer the relative error to the
closed-form optimum for the code's prior w ~ N(0, Sigma^-1), -n/(n+d+1) Sigma^-1, and
to the one for w ~ N(0, I), -((n+1)/n Sigma + tr(Sigma)/n I)^-1; L-step GD and
preconditioned GD (Sigma^-1) with all n examples and eta from a fine scan on the 999
set; von Oswald's preds diff and sensitivity cosine between the trained model and
those; --full trains all (d+1) x (d+1) entries of P and Q (the paper's general
parameterisation; init: their structure plus N(0, var) everywhere) and reports the
norms of the blocks theory says are zero; --from NPZ (von Oswald) reads initial
weights, batches and evaluation set dumped from their JAX run, --eval-from NPZ only the
evaluation set; a convergence flag for (a) (the last six logged test losses within 1 %);
--d other than 5 with the rotated covariance (their D is hard-coded for d = 5; we then
use eigenvalues geometric from 1 to 1/16).
--softmax --heads H (von Oswald) runs their attention with use_softmax = True and
num_heads = H, key_size = 11 per head, the rest of the one-layer setting unchanged (the
softmax runs of their paper's appendix used settings this port does not know, so these
are their model in our setting, not their numbers).
Not ported: von Oswald's GD++ (trained curvature correction), their OOD and noisy-data
analyses and the interpolation model; Ahn's sphere / gamma / nonlinear data modes,
LBFGS, and the P = 0 notebook.

Checked against the originals (details and numbers in README.md):
  (a) their JAX code (jax 0.4.13, dm-haiku 0.0.10, optax 0.1.7) run on CPU with
      their notebook's one-layer config, dumping its initial weights, evaluation set and
      first 300 batches; this port with --from on that dump: the per-step training
      losses agree to 3.3e-7 relative over all 300 steps, the best GD lr is the
      same grid point (6.001), the GD loss agrees to 1e-7, and at step 300 the test
      loss, model cos, model diff and preds diff agree to 6 digits. The RNGs differ
      (JAX's threefry against torch), so full runs (5000 steps) are compared over 3
      seeds each on their evaluation set: test loss 0.20507 +- 0.00010 (theirs 0.20518
      +- 0.00006, GD 0.20469), model cos 0.99926 (0.99911), preds diff 0.0202 (0.0221),
      model diff 0.086 (0.096); README.md, "Agreement with the original", has the
      details (their seeds 1 and 2 stayed longer on the initial plateau).
  (b) their linear_transformer.py and notebook loops run on CPU (`.cuda()` removed,
      nothing else changed) against this port with the same seed: the per-step
      training losses agree bit for bit (ahn-iso, 3 seeds x 300 steps; ahn-varL L = 1,
      3 seeds x 300 steps, including a data regeneration every 100 steps) with
      --ops theirs; with --ops fast they agree to 3e-7 relative over those 300 steps. Their
      published runs used a GPU, where Z's in-place regeneration draws from the CUDA
      generator, so their exact numbers cannot be reproduced on a CPU.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)

TRUNC_STD = 0.87962566103423978  # std of a unit normal truncated at +-2
GD_LR_GRID = np.arange(0.001, 25, 0.1)  # von Oswald's scan_lrs grid
AHN_ETA_GRID = [0.008, 0.01, 0.02, 0.04, 0.08, 0.16]  # variable_L_exp's grid


# --------------------------------------------------------------------------------------
# (a) von Oswald et al.
# --------------------------------------------------------------------------------------

def vo_tasks(gen, B, d, N, input_range=1.0, w_scale=1.0):
    """B regression tasks as token sequences: rows (x_i, y_i), last row (x_q, 0)."""
    w = torch.randn(B, d, generator=gen) * w_scale
    x = (torch.rand(B, N + 1, d, generator=gen) - 0.5) * input_range
    y = torch.einsum('bnd,bd->bn', x, w)
    tokens = torch.cat([x, y[..., None]], dim=-1)
    target = tokens[:, -1, -1].clone()
    tokens[:, -1, -1] = 0.0
    return tokens, target


def trunc_normal(gen, shape, std):
    """Normal truncated at +-2 sd (by inverse CDF), rescaled so its std is `std`."""
    lo = 0.5 * (1 + math.erf(-2 / math.sqrt(2)))
    u = lo + (1 - 2 * lo) * torch.rand(shape, generator=gen, dtype=torch.float64)
    return (torch.special.ndtri(u) * (std / TRUNC_STD)).float()


def vo_init(gen, d_tok, scale, layers, shared, heads=1):
    """Haiku's VarianceScaling(scale) per Linear, fan_in its input width: Wq, Wk, Wv
    map d_tok to heads * key_size (key_size = d_tok, their config), Wo back."""
    std = math.sqrt(scale / d_tok)
    std_o = math.sqrt(scale / (heads * d_tok))
    sets = 1 if shared else layers
    return [{'q': trunc_normal(gen, (d_tok, heads * d_tok), std),
             'k': trunc_normal(gen, (d_tok, heads * d_tok), std),
             'v': trunc_normal(gen, (d_tok, heads * d_tok), std),
             'o': trunc_normal(gen, (heads * d_tok, d_tok), std_o)}
            for _ in range(sets)]


def vo_forward(params, tokens, layers, softmax=False):
    """Their layer: linear (attention = the logits) or, with use_softmax, each head's
    softmax(logits / sqrt(key_size)) over the context keys; heads concatenated, then Wo."""
    h = tokens
    for l in range(layers):
        p = params[l % len(params)]
        ctx = h[:, :-1]
        if not softmax:
            att = (h @ p['q']) @ (ctx @ p['k']).transpose(1, 2)
            h = h + (att @ (ctx @ p['v'])) @ p['o']
            continue
        k = h.shape[-1]
        heads = p['q'].shape[1] // k
        B, T, _ = h.shape
        qh = (h @ p['q']).view(B, T, heads, k).transpose(1, 2)
        kh = (ctx @ p['k']).view(B, T - 1, heads, k).transpose(1, 2)
        vh = (ctx @ p['v']).view(B, T - 1, heads, k).transpose(1, 2)
        att = torch.softmax(qh @ kh.transpose(2, 3) / math.sqrt(k), dim=-1)
        out = (att @ vh).transpose(1, 2).reshape(B, T, heads * k)
        h = h + out @ p['o']
    return h


def vo_predict(params, tokens, layers, softmax=False):
    return -vo_forward(params, tokens, layers, softmax)[:, -1, -1]


def vo_gd_params(d, N, lr):
    dt = d + 1
    q = torch.zeros(dt, dt)
    q[:d, :d] = torch.eye(d)
    v = torch.zeros(dt, dt)
    v[d, d] = -1.0
    o = torch.zeros(dt, dt)
    o[d, d] = lr / N
    return [{'q': q, 'k': q.clone(), 'v': v, 'o': o}]


def vo_sensitivity(params, tokens, layers, softmax=False):
    """Gradient of the raw output H[query, y] with respect to x_q, per task."""
    t = tokens.clone().requires_grad_(True)
    out = vo_forward(params, t, layers, softmax)[:, -1, -1]
    (g,) = torch.autograd.grad(out.sum(), t)
    return g[:, -1, :-1], out.detach()


def compare(g1, p1, g2, p2):
    """von Oswald's measures: model cos, model diff, preds diff."""
    n1 = g1.norm(dim=1, keepdim=True) + 1e-8
    n2 = g2.norm(dim=1, keepdim=True) + 1e-8
    cos = ((g1 / n1) * (g2 / n2)).sum(1).mean().item()
    model_diff = (g1 - g2).norm(dim=1).mean().item()
    preds_diff = (p1 - p2).abs().mean().item()
    return cos, model_diff, preds_diff


class OptaxAdamClip:
    """optax.chain(clip_by_global_norm(c), adamw(lr, b1, b2, eps=1e-8, wd=0))."""

    def __init__(self, tensors, lr, clip, b1=0.9, b2=0.98, eps=1e-8):
        self.t = tensors
        self.m = [torch.zeros_like(x) for x in tensors]
        self.v = [torch.zeros_like(x) for x in tensors]
        self.lr, self.clip, self.b1, self.b2, self.eps, self.k = lr, clip, b1, b2, eps, 0

    @torch.no_grad()
    def step(self, grads):
        gnorm = torch.sqrt(sum((g * g).sum() for g in grads))
        if not bool(gnorm < self.clip):
            grads = [(g / gnorm) * self.clip for g in grads]
        self.k += 1
        c1, c2 = 1 - self.b1 ** self.k, 1 - self.b2 ** self.k
        for x, g, m, v in zip(self.t, grads, self.m, self.v):
            m.mul_(self.b1).add_((1 - self.b1) * g)
            v.mul_(self.b2).add_((1 - self.b2) * g * g)
            x.sub_(self.lr * ((m / c1) / (torch.sqrt(v / c2) + self.eps)))


def vo_structure(params, d, N):
    """Addition: how close the trained weights are to the GD construction."""
    out = []
    for p in params:
        mqk = p['q'] @ p['k'].T
        mvo = p['v'] @ p['o']
        xb = mqk[:d, :d]
        a = torch.diagonal(xb).mean()
        rest_qk = mqk.clone()
        rest_qk[:d, :d] = 0
        b = mvo[d, d]
        rest_vo = mvo.clone()
        rest_vo[d, d] = 0
        out.append(dict(
            qk_x_scale=a.item(),
            qk_x_rel_err_to_scaled_I=((xb - a * torch.eye(d)).norm() / xb.norm()).item(),
            qk_other_blocks_rel_norm=(rest_qk.norm() / mqk.norm()).item(),
            vo_yy=b.item(),
            vo_other_rel_norm=(rest_vo.norm() / mvo.norm()).item(),
            lr_equivalent=(-N * a * b).item()))
    return out


def run_vo(a):
    d, N, K = a.d, a.n, a.layers
    clip = a.clip if a.clip is not None else (10.0 if K > 2 else 0.001)
    lr = a.lr if a.lr is not None else (0.0005 if K > 3 else 0.001)
    steps = a.steps if a.steps is not None else 5000
    B = a.batch if a.batch is not None else 2048
    t0 = time.time()
    dump = np.load(a.from_npz) if a.from_npz else None
    gen = torch.Generator().manual_seed(a.seed)
    if dump is not None:
        pre = 'init/transformer/multi_head_attention/'
        params = [{k: torch.tensor(dump[pre + name + '/w']) for k, name in
                   (('q', 'query'), ('k', 'key'), ('v', 'value'), ('o', 'linear'))}]
        ev_x = torch.tensor(dump['eval_x'])
        ev_t = torch.tensor(dump['eval_t'])[:, -1]
        steps = min(steps, sum(1 for k in dump.files if k.endswith('_x') and k.startswith('batch')))
    else:
        params = vo_init(gen, d + 1, 0.002 / K, K, not a.no_shared, a.heads)
        if a.eval_from:
            ev = np.load(a.eval_from)
            ev_x, ev_t = torch.tensor(ev['eval_x']), torch.tensor(ev['eval_t'])[:, -1]
        else:
            ev_x, ev_t = vo_tasks(torch.Generator().manual_seed(10 ** 6 + 5), 10000, d, N)
    tensors = [p[k] for p in params for k in ('q', 'k', 'v', 'o')]
    for x in tensors:
        x.requires_grad_(True)
    opt = OptaxAdamClip(tensors, lr, clip)

    # GD reference: their lr scan on the evaluation tasks
    with torch.no_grad():
        losses = [0.5 * ((ev_t - vo_predict(vo_gd_params(d, N, float(g)), ev_x, K)) ** 2).mean().item()
                  for g in GD_LR_GRID]
    i = int(np.argmin(losses))
    lr_gd = float(GD_LR_GRID[i])
    gd_params = vo_gd_params(d, N, lr_gd)
    g_gd, o_gd = vo_sensitivity(gd_params, ev_x, K)

    train_losses, trace = [], []
    for step in range(steps):
        if dump is not None:
            x = torch.tensor(dump['batch%d_x' % step])
            t = torch.tensor(dump['batch%d_t' % step])[:, -1]
        else:
            x, t = vo_tasks(gen, B, d, N)
        loss = 0.5 * ((t - vo_predict(params, x, K, a.softmax)) ** 2).mean()
        grads = torch.autograd.grad(loss, tensors)
        opt.step(grads)
        train_losses.append(loss.item())
        if step % a.every == 0 or step == steps - 1:
            g_tf, o_tf = vo_sensitivity(params, ev_x, K, a.softmax)
            with torch.no_grad():
                ev_loss = 0.5 * ((ev_t + o_tf) ** 2).mean().item()
            cos, md, pd = compare(g_tf, o_tf, g_gd, o_gd)
            trace.append(dict(step=step, eval_loss=ev_loss, cos=cos, model_diff=md, preds_diff=pd))
    fin = trace[-1]
    conv = None
    if len(trace) >= 6:
        # converged: the last 5 logged eval losses move by less than 1 % of the final one
        last = [r['eval_loss'] for r in trace[-6:]]
        conv = (max(last) - min(last)) < 0.01 * last[-1]
    struct = None
    if not a.softmax:
        with torch.no_grad():
            struct = vo_structure([{k: v.detach() for k, v in p.items()} for p in params], d, N)
    res = dict(setting='vo', seed=a.seed, layers=K, softmax=a.softmax, heads=a.heads, shared=not a.no_shared, d=d, n=N,
               batch=B, lr=lr, clip=clip, steps=steps, final_loss=fin['eval_loss'],
               gd_loss=losses[i], gd_lr=lr_gd, eta_best=lr_gd / N,
               preds_diff=fin['preds_diff'], cos=fin['cos'], model_diff=fin['model_diff'],
               converged=conv, train_loss_last=train_losses[-1], structure=struct,
               from_dump=bool(a.from_npz), eval_from_dump=bool(a.eval_from), seconds=round(time.time() - t0, 1))
    if a.trace:
        res['trace'] = trace
        res['train_losses'] = train_losses
    return res


# --------------------------------------------------------------------------------------
# (b) Ahn et al.
# --------------------------------------------------------------------------------------

def ahn_full(P, Q, full):
    """Their P_full / Q_full: pad the d x d blocks (P_full[d, d] = 1)."""
    if full:
        return P, Q
    d = P.shape[0]
    Pf = torch.nn.functional.pad(P, (0, 1, 0, 1))
    Pf = Pf + torch.nn.functional.pad(torch.ones(1, 1), (d, 0, d, 0))
    Qf = torch.nn.functional.pad(Q, (0, 1, 0, 1))
    return Pf, Qf


def ahn_attention(Pf, Qf, Z, ops='fast'):
    n = Z.shape[1] - 1
    if ops == 'theirs':
        # their einsums, operation for operation
        A = torch.eye(n + 1)
        A[n, n] = 0
        attn = torch.einsum('BNi, ij, BMj -> BNM', (Z, Qf, Z))
        key = torch.einsum('ij, BNj -> BNi', (Pf, Z))
        return torch.einsum('BNM,ML, BLi -> BNi', (attn, A, key)) / n
    # the same map by associativity: row n of the output is z_n^T Qf C Pf^T / n with
    # C = sum over context rows of z_m z_m^T (the mask drops the query as a key)
    ctx = Z[:, :n]
    C = ctx.transpose(1, 2) @ ctx
    return (Z @ Qf) @ (C @ Pf.T) / n


def ahn_forward(allparam, Z, full, ops='fast'):
    for i in range(allparam.shape[0]):
        res = 0
        for j in range(allparam.shape[1]):
            Pf, Qf = ahn_full(allparam[i, j, 0], allparam[i, j, 1], full)
            res = res + ahn_attention(Pf, Qf, Z, ops)
        Z = Z + res
    return Z


def ahn_loss(allparam, Z, y, full, ops='fast'):
    n, d = Z.shape[1] - 1, Z.shape[2] - 1
    out = ahn_forward(allparam, Z, full, ops)
    return ((out[:, n, d] + y) ** 2).mean()


def ahn_generate(n, d, B, U=None, D=None):
    """Their generate_data('normal', ...): draws from the global torch RNG in their order."""
    W = torch.FloatTensor(B, d).normal_(0, 1)
    X = torch.FloatTensor(B, n, d).normal_(0, 1)
    Xt = torch.FloatTensor(B, 1, d).normal_(0, 1)
    if U is not None:
        W = torch.FloatTensor(B, d).normal_(0, 1)
        W = torch.mm(torch.mm(W, torch.inverse(D)), U.t())
        X = torch.einsum('ij, jk, BNk -> BNi', (U, D, X))
        Xt = torch.einsum('ij, jk, BNk -> BNi', (U, D, Xt))
    y = torch.einsum('bi,bni->bn', (W, X)).unsqueeze(2)
    yt = torch.einsum('bi,bni->bn', (W, Xt)).squeeze(1)
    Z = torch.cat([torch.cat([X, Xt], dim=1), torch.cat([y, torch.zeros(B, 1, 1)], dim=1)], dim=2)
    return Z, yt


def ahn_regenerate(Z, U=None, D=None):
    """Their generate_data_inplace: fresh x in place on a view of Z, then fresh w."""
    B, d = Z.shape[0], Z.shape[2] - 1
    X = Z[:, :, 0:-1]
    X.normal_(0, 1)
    W = torch.FloatTensor(B, d).normal_(0, 1)
    if U is not None:
        W = torch.mm(torch.mm(W, torch.inverse(D)), U.t())
        Z[:, :, 0:-1] = torch.einsum('ij, jk, BNk -> BNi', (U, D, X))
    Z[:, :, -1] = torch.einsum('bi,bni->bn', (W, Z[:, :, 0:-1]))
    yt = Z[:, -1, -1].detach().clone()
    Z[:, -1, -1].zero_()
    return Z, yt


AHN_PRESETS = {
    # simple demonstration.ipynb: identity covariance, fresh batch each step
    'ahn-iso': dict(layers=3, n=20, d=5, batch=4000, lr=0.001, betas=(0.9, 0.9), clip=1000.0,
                    clip_kind='global', steps=10000, cov='iso', regen=1, halve=0, select=0),
    # rotation demonstration-Adam.ipynb: Sigma = U D^2 U^T, batch regenerated every 100 steps
    'ahn-rot': dict(layers=3, n=20, d=5, batch=20000, lr=0.1, betas=(0.99, 0.9), clip=0.01,
                    clip_kind='matrix', steps=100000, cov='rot', regen=100, halve=4000, select=0),
    # variable_L_exp.ipynb (n_layer in 1..4)
    'ahn-varL': dict(layers=1, n=20, d=5, batch=20000, lr=0.01, betas=(0.99, 0.9), clip=0.01,
                     clip_kind='matrix', steps=20000, cov='rot', regen=100, halve=4000, select=20),
}


def clip_(grad, clip, kind):
    if kind == 'global':
        nrm = grad.norm().item()
        if nrm > clip:
            grad.mul_(clip / nrm)
    else:
        for l in range(grad.shape[0]):
            for h in range(grad.shape[1]):
                for t in range(grad.shape[2]):
                    nrm = grad[l, h, t].norm().item()
                    if nrm > clip:
                        grad[l, h, t].mul_(clip / nrm)


def dist_identity(M):
    s = torch.diagonal(M).sum() / M.shape[0]
    return ((M - s * torch.eye(M.shape[0])).norm() / M.norm()).item()


def fit_multiple(M, T):
    c = (M * T).sum() / (T * T).sum()
    return c.item(), ((M - c * T).norm() / M.norm()).item()


def gd_predict(Z, eta, steps, precond=None, drop_last=False):
    """L steps of GD from w = 0 on (1/2) sum (w.x_i - y_i)^2 (their unnormalised loss);
    precond: multiply the gradient by this matrix. Returns the prediction for x_q."""
    n, d = Z.shape[1] - 1, Z.shape[2] - 1
    m = n - 1 if drop_last else n
    X, Y, xq = Z[:, :m, :d], Z[:, :m, d], Z[:, n, :d]
    w = torch.zeros(Z.shape[0], d)
    for _ in range(steps):
        g = torch.einsum('bnk,bn->bk', X, torch.einsum('bnk,bk->bn', X, w) - Y)
        if precond is not None:
            g = g @ precond.T
        w = w - eta * g
    return (w * xq).sum(1)


def run_ahn(a):
    pr = dict(AHN_PRESETS[a.preset])
    for k in ('layers', 'n', 'd', 'batch', 'lr', 'clip', 'steps'):
        if getattr(a, k) is not None:
            pr[k] = getattr(a, k)
    if a.cov is not None:
        pr['cov'] = a.cov
    if a.regen is not None:
        pr['regen'] = a.regen
    if a.halve is not None:
        pr['halve'] = a.halve
    if a.select is not None:
        pr['select'] = a.select
    L, n, d, B = pr['layers'], pr['n'], pr['d'], pr['batch']
    var, sd, full = 0.0001, a.seed, a.full
    t0 = time.time()

    torch.manual_seed(sd)
    size = d + 1 if full else d
    allparam = torch.zeros(L, 1, 2, size, size)
    allparam.normal_(0, var)
    if full:
        allparam[:, :, 0, d, d] += 1.0  # their fixed P[d, d] = 1, here trainable
    allparam.requires_grad_(True)
    opt = torch.optim.AdamW([allparam], lr=pr['lr'], betas=pr['betas'], weight_decay=0)

    np.random.seed(sd)
    torch.manual_seed(sd)
    U = D = None
    if pr['cov'] == 'rot':
        gaus = torch.FloatTensor(d, d).uniform_(-1, 1)
        U = torch.linalg.svd(gaus)[0]
        diag = [1, 1, 1 / 2, 1 / 4, 1] if d == 5 else list(np.geomspace(1, 1 / 4, d))
        D = torch.diag(torch.FloatTensor(diag))
    if pr['regen'] != 1:
        Z, y = ahn_generate(n, d, B, U, D)
    hist, train_losses = [], []
    t_train = time.time()
    for t in range(pr['steps']):
        if pr['halve'] and t % pr['halve'] == 0 and t > 1:
            opt.param_groups[0]['lr'] *= 0.5
        if pr['regen'] == 1:
            Z, y = ahn_generate(n, d, B, U, D)
        elif t % pr['regen'] == 0:
            Z, y = ahn_regenerate(Z, U, D)
        if t % 100 == 0:
            hist.append(allparam.detach().clone())
        loss = ahn_loss(allparam, Z, y, full, a.ops)
        loss.backward()
        clip_(allparam.grad, pr['clip'], pr['clip_kind'])
        opt.step()
        opt.zero_grad()
        if a.p0:
            # rotation demonstration-Adam-p0.ipynb: P zeroed after every update
            # (their model.zero_p()), so the layers are preconditioned GD steps.
            with torch.no_grad():
                allparam[:, :, 0].zero_()
        train_losses.append(loss.item())
    t_train = time.time() - t_train

    def eval_set(seed):
        np.random.seed(seed)
        torch.manual_seed(seed)
        return ahn_generate(n, d, B, U, D)

    Zv, yv = eval_set(999)
    Zt, yt = eval_set(99)
    with torch.no_grad():
        params = allparam.detach().clone()
        if pr['select']:
            cands = hist[-pr['select']:]
            vl = [ahn_loss(p, Zv, yv, full, a.ops).item() for p in cands]
            params = cands[int(np.argmin(vl))]
        test_loss = ahn_loss(params, Zt, yt, full, a.ops).item()

    Sigma = torch.eye(d) if U is None else U @ D @ D @ U.T
    Sinv = torch.inverse(Sigma)
    UD = torch.eye(d) if U is None else U @ D
    layers = []
    for l in range(L):
        P, Q = params[l, 0, 0], params[l, 0, 1]
        Pd, Qd = P[:d, :d], Q[:d, :d]
        rec = dict(layer=l,
                   dist_id_Q_whitened=dist_identity(UD.T @ Qd @ UD),
                   dist_id_P=dist_identity(Pd))
        c, err = fit_multiple(Qd, Sinv)
        rec.update(Q_scale_of_Sigma_inv=c, Q_rel_err_to_scaled_Sigma_inv=err,
                   Q_rel_err_to_scaled_I=fit_multiple(Qd, torch.eye(d))[1],
                   P_rel_err_to_scaled_I=fit_multiple(Pd, torch.eye(d))[1],
                   P_norm=Pd.norm().item(), Q_norm=Qd.norm().item())
        if full:
            rec.update(P_xy_yx_norm=torch.cat([P[:d, d], P[d, :d]]).norm().item(),
                       P_yy=P[d, d].item(),
                       Q_xy_yx_yy_norm=torch.cat([Q[:d, d], Q[d, :]]).norm().item())
        layers.append(rec)
    theory = None
    if L == 1:
        Qd = params[0, 0, 1][:d, :d]
        A_sinv = -(n / (n + d + 1)) * Sinv
        A_id = -torch.inverse((n + 1) / n * Sigma + torch.trace(Sigma) / n * torch.eye(d))
        theory = dict(rel_err_to_opt_w_Sigma_inv=((Qd - A_sinv).norm() / A_sinv.norm()).item(),
                      rel_err_to_opt_w_identity=((Qd - A_id).norm() / A_id.norm()).item(),
                      opt_scale_w_Sigma_inv=-(n / (n + d + 1)))

    # GD references on the test set, eta picked on the 999 set
    def best_eta(precond, grid, drop_last, nval):
        vals = [((yv[:nval] - gd_predict(Zv[:nval], e, L, precond, drop_last)) ** 2).mean().item()
                for e in grid]
        return grid[int(np.argmin(vals))]

    def tf_sens(Zs):
        z = Zs.clone().requires_grad_(True)
        out = ahn_forward(params, z, full, a.ops)[:, n, d]
        (g,) = torch.autograd.grad(out.sum(), z)
        return -g[:, n, :d], -out.detach()

    def gd_sens(Zs, eta, precond):
        z = Zs.clone().requires_grad_(True)
        out = gd_predict(z, eta, L, precond)
        (g,) = torch.autograd.grad(out.sum(), z)
        return g[:, n, :d], out.detach()

    fine = list(np.geomspace(1e-3, 0.2, 400) / (n / 20))
    refs = {}
    g_tf, p_tf = tf_sens(Zt)
    for name, pc in (('gd', None), ('pgd', Sinv)):
        eta = float(best_eta(pc, fine, False, B))
        with torch.no_grad():
            lossr = ((yt - gd_predict(Zt, eta, L, pc)) ** 2).mean().item()
        g_r, p_r = gd_sens(Zt, eta, pc)
        cos, md, pd = compare(g_tf, p_tf, g_r, p_r)
        refs[name] = dict(eta=eta, loss=lossr, cos=cos, model_diff=md, preds_diff=pd)
    # their variable_L_exp GD: grid, eta chosen on 5000 tasks of the 999 set, last example dropped
    eta_a = best_eta(None, AHN_ETA_GRID, True, 5000)
    with torch.no_grad():
        gd_auth = ((yt[:5000] - gd_predict(Zt[:5000], eta_a, L, None, True)) ** 2).mean().item()

    fin_tr = float(np.mean(train_losses[-100:]))
    res = dict(setting=a.preset, seed=sd, layers=L, n=n, d=d, batch=B, cov=pr['cov'],
               lr=pr['lr'], betas=list(pr['betas']), clip=pr['clip'], clip_kind=pr['clip_kind'],
               steps=pr['steps'], regen=pr['regen'], halve=pr['halve'], select=pr['select'],
               full=full, ops=a.ops, final_loss=test_loss, train_loss_last100=fin_tr,
               gd_loss=refs['gd']['loss'], gd_eta=refs['gd']['eta'],
               pgd_loss=refs['pgd']['loss'], pgd_eta=refs['pgd']['eta'],
               preds_diff=refs['pgd']['preds_diff'], cos=refs['pgd']['cos'],
               model_diff=refs['pgd']['model_diff'], vs_gd=refs['gd'], vs_pgd=refs['pgd'],
               gd_loss_authors=gd_auth, gd_eta_authors=eta_a, layers_measures=layers,
               theory_one_layer=theory,
               zero_blocks='structural (their parameterisation)' if not full else 'see P_xy_yx_norm, Q_xy_yx_yy_norm',
               train_seconds=round(t_train, 1), seconds=round(time.time() - t0, 1))
    if a.trace:
        res['train_losses'] = train_losses
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--preset', default='vo', choices=['vo'] + list(AHN_PRESETS))
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--steps', type=int)
    ap.add_argument('--layers', type=int)
    ap.add_argument('--d', type=int)
    ap.add_argument('--n', type=int, help='context length')
    ap.add_argument('--batch', type=int)
    ap.add_argument('--lr', type=float)
    ap.add_argument('--clip', type=float)
    ap.add_argument('--cov', choices=['iso', 'rot'], help='Ahn: covariance kind')
    ap.add_argument('--regen', type=int, help='Ahn: new batch every this many steps')
    ap.add_argument('--halve', type=int, help='Ahn: halve lr every this many steps (0: never)')
    ap.add_argument('--select', type=int, help='Ahn: best of the last k snapshots (0: final)')
    ap.add_argument('--full', action='store_true', help='Ahn: train all (d+1)^2 entries')
    ap.add_argument('--p0', action='store_true',
                    help='Ahn: zero P after every update (rotation demonstration-Adam-p0)')
    ap.add_argument('--ops', choices=['fast', 'theirs'], default='fast',
                    help="Ahn: 'theirs' runs their einsums as written (bit-identical to their "
                         "code on CPU); 'fast' the same map by associativity")
    ap.add_argument('--no-shared', action='store_true', help='vo: separate weights per layer')
    ap.add_argument('--every', type=int, default=100, help='vo: measure every this many steps')
    ap.add_argument('--from', dest='from_npz', help='vo: dump of their JAX run')
    ap.add_argument('--eval-from', dest='eval_from',
                    help='vo: take only the 10 000 evaluation tasks from this dump')
    ap.add_argument('--trace', action='store_true', help='add per-step losses to the JSON')
    ap.add_argument('--softmax', action='store_true',
                    help='vo: their use_softmax attention (softmax(QK^T / sqrt(key_size)))')
    ap.add_argument('--heads', type=int, default=1, help='vo: attention heads (their num_heads)')
    a = ap.parse_args(argv)
    if a.preset == 'vo':
        a.d = a.d or 10
        a.n = a.n or 10
        a.layers = a.layers or 1
        res = run_vo(a)
    else:
        res = run_ahn(a)
    print(json.dumps(res))


if __name__ == '__main__':
    main()
