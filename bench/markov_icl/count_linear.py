#!/usr/bin/env python3
"""The best count-linear read-out of in-context Markov chains, for mechlab's
markov-icl minimal model (docs/markov-icl.md, "The paper's minimal model").

The paper's minimal model, with its first layer on the previous token, predicts
softmax over x of  sum_y W[x_i, y] * c_i(y -> x),  where c_i(y -> x) counts the
transitions y -> x among the tokens seen up to position i and x_i is the current
token. Its logits are linear in the counts, while the Bayes predictor is the
posterior mean (c_i(x_i -> x) + 1) / (c_i(x_i -> .) + S). This script finds the W
that minimises the mean next-token cross-entropy over every position (a convex
problem in the S x S entries of W; L-BFGS on a fitting sample) and reports its
loss on a separate sample beside the Bayes and uniform losses, so the minimal
model's final gap can be read against the best any W can do.

usage: bench/.venv/bin/python bench/markov_icl/count_linear.py [--vocab 2] [--seq-len 100]
"""
import argparse

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def sample(n, S, T, gen):
    """n sequences of T + 1 tokens, each from its own Dirichlet(1) chain; the first
    token from the chain's stationary law (mechlab's default)."""
    e = -torch.log1p(-torch.rand(n, S, S, generator=gen))
    P = e / e.sum(-1, keepdim=True)
    pi = torch.linalg.matrix_power(P, 64)[:, 0]  # rows of P^64 are the stationary law
    seq = torch.empty(n, T + 1, dtype=torch.long)
    seq[:, 0] = torch.multinomial(pi, 1, generator=gen)[:, 0]
    rows = torch.arange(n)
    for t in range(1, T + 1):
        seq[:, t] = torch.multinomial(P[rows, seq[:, t - 1]], 1, generator=gen)[:, 0]
    return seq


def counts(seq, S):
    """c[n, i, y, x]: transitions y -> x among tokens 0..i, for i < T."""
    x = seq[:, :-1]
    n, T = x.shape
    oh = F.one_hot(x, S).double()
    pair = torch.zeros(n, T, S, S)
    pair[:, 1:] = oh[:, :-1, :, None] * oh[:, 1:, None, :]
    return pair.cumsum(1)


def losses(seq, S, W):
    """Mean cross-entropy of the count-linear read-out W and of the Bayes predictor."""
    c = counts(seq, S)
    x, y = seq[:, :-1], seq[:, 1:]
    logits = torch.einsum("niyx,niy->nix", c, W[x])  # W[x_i, y] c(y -> x)
    lin = F.cross_entropy(logits.reshape(-1, S), y.reshape(-1))
    row = c[torch.arange(x.shape[0])[:, None], torch.arange(x.shape[1])[None, :], x]
    bayes = (row + 1) / (row.sum(-1, keepdim=True) + S)
    bay = -torch.log(bayes.gather(-1, y[..., None])).mean()
    return lin, bay


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=100)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    S, T = a.vocab, a.seq_len
    gen = torch.Generator().manual_seed(a.seed)
    fit, test = sample(a.n, S, T, gen), sample(a.n, S, T, gen)
    W = torch.zeros(S, S, requires_grad=True)
    opt = torch.optim.LBFGS([W], max_iter=200, tolerance_grad=1e-12,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss, _ = losses(fit, S, W)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        lin, bay = losses(test, S, W)
    uni = torch.log(torch.tensor(float(S)))
    print(f"S = {S}, T = {T}, {a.n} fitting and {a.n} test sequences (seed {a.seed})")
    print(f"W = {W.detach().numpy().round(4).tolist()}")
    print(f"test loss: count-linear {lin:.5f}, Bayes {bay:.5f}, uniform {uni:.5f}")
    print(f"count-linear gap to Bayes {lin - bay:.5f} nats = "
          f"{(lin - bay) / (uni - bay):.3f} of the uniform-Bayes span")


if __name__ == "__main__":
    main()
