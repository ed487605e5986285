"""Bietti et al. (2023)'s simplified two-layer transformer and training loop in
PyTorch, written from their paper and released code (albietz/transformer-birth,
`ihead_basic_*.py`, README command), to run the authors' algorithm in the same
setting as `mechlab run birth-*` and put both runs' probes side by side.

What it follows from the authors: W_Q = identity; W_V frozen in both layers and
W_O frozen in layer 0; token embeddings N(0, 1) and the unembedding
(nn.Linear's U(±1/√d)) frozen; fixed random N(0, 1) absolute positions; scores
/ √d; no layer norm, no biases, no MLP; SGD with momentum and L2 weight decay on
the trained matrices (W_K of both layers, W_O of layer 1); the loss only on the
outputs of triggers from their second occurrence on; fresh sequences every step;
the K most frequent tokens as the fixed triggers, outputs uniform over the
vocabulary per sequence. Their memory-recall probes (wo1, wk1, wk0) and
accuracy are computed as in their script.

The bigram tables come from the mechlab run (`bigram.json`), so both runs sample
from the same distributions; the random streams differ (torch / numpy here,
ChaCha there), so the comparison is over seeds, not bit for bit.

    bench/.venv/bin/python bench/birth/torch_birth.py --run runs/<birth run> [--seeds 1 2 3]
"""

import argparse
import json
import tomllib
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


def load_setting(run: Path):
    cfg = tomllib.loads((run / "config.toml").read_text())
    tables = json.loads((run / "bigram.json").read_text())
    return cfg, tables


class Birth(torch.nn.Module):
    """Their simplified transformer, one head of width d per layer."""

    def __init__(self, n_vocab: int, d: int, t: int, n_layers: int):
        super().__init__()
        self.d = d
        self.emb = torch.nn.Embedding(n_vocab, d)  # N(0, 1), frozen
        self.emb.weight.requires_grad_(False)
        self.register_buffer("pe", torch.randn(t, d))
        lin = lambda: torch.nn.Linear(d, d, bias=False)  # U(±1/√d)
        self.wk = torch.nn.ModuleList([lin() for _ in range(n_layers)])
        self.wv = torch.nn.ModuleList([lin() for _ in range(n_layers)])
        self.wo = torch.nn.ModuleList([lin() for _ in range(n_layers)])
        for l in range(n_layers):
            self.wv[l].weight.requires_grad_(False)
            # layer 0 of the two-layer model keeps its W_O random; the last layer trains it
            if l < n_layers - 1:
                self.wo[l].weight.requires_grad_(False)
        self.out = torch.nn.Linear(d, n_vocab, bias=False)
        self.out.weight.requires_grad_(False)

    def forward(self, x):
        # x: [B, T] -> logits [B, T, V], attention per layer [B, T, T]
        t = x.shape[1]
        h = self.emb(x) + self.pe[:t]
        mask = torch.full((t, t), float("-inf"), device=x.device).triu(1)
        pats = []
        for l in range(len(self.wk)):
            s = h @ self.wk[l](h).transpose(1, 2) / math.sqrt(self.d) + mask
            a = F.softmax(s, dim=-1)
            pats.append(a)
            h = h + self.wo[l](a @ self.wv[l](h))
        return self.out(h), pats


class Source:
    """Bigram sequences with K fixed triggers whose outputs are drawn per sequence."""

    def __init__(self, tables, k: int, t: int):
        uni = np.asarray(tables["unigram"], dtype=np.float64)
        big = np.asarray(tables["bigram"], dtype=np.float64)
        self.n = len(uni)
        self.marginal = uni / uni.sum()
        rows = big.sum(1, keepdims=True)
        self.cond = np.where(rows > 0, big / np.maximum(rows, 1), self.marginal)
        self.triggers = list(tables["triggers"])[:k]
        self.t = t

    def batch(self, rng, b):
        """`b` sequences at once, position by position (inverse-CDF sampling)."""
        cum_m = np.cumsum(self.marginal)
        cum_c = np.cumsum(self.cond, axis=1)
        trig = np.full(self.n, -1)
        trig[self.triggers] = np.arange(len(self.triggers))
        outs = rng.integers(self.n, size=(b, len(self.triggers)))
        seq = np.zeros((b, self.t + 1), dtype=np.int64)
        occ = np.zeros((b, self.t + 1), dtype=np.int64)
        count = np.zeros((b, len(self.triggers)), dtype=np.int64)
        seq[:, 0] = np.minimum((rng.random(b)[:, None] > cum_m[None]).sum(1), self.n - 1)
        rows = np.arange(b)
        for p in range(self.t):
            last = seq[:, p]
            u = rng.random(b)
            nxt = np.minimum((u[:, None] > cum_c[last]).sum(1), self.n - 1)
            j = trig[last]
            is_t = j >= 0
            count[rows[is_t], j[is_t]] += 1
            occ[is_t, p] = count[rows[is_t], j[is_t]]
            nxt[is_t] = outs[rows[is_t], j[is_t]]
            seq[:, p + 1] = nxt
        xs = torch.from_numpy(seq)
        return xs[:, :-1], xs[:, 1:], torch.from_numpy(occ[:, :-1])


@torch.no_grad()
def probes(m: Birth, src: Source, x, y, occ):
    logits, pats = m(x)
    sel = occ >= 2
    acc = (logits.argmax(-1)[sel] == y[sel]).float().mean().item()
    sel2 = occ == 2
    acc2 = (logits.argmax(-1)[sel2] == y[sel2]).float().mean().item()
    loss = F.cross_entropy(logits[sel], y[sel]).item()
    toks = torch.arange(src.n)
    e = m.emb(toks)
    last = len(m.wk) - 1
    wo1 = (m.out(m.wo[last](m.wv[last](e))).argmax(-1) == toks).float().mean().item()
    r = {"acc": acc, "acc2": acc2, "loss_head": loss, "wo1": wo1}
    if last == 1:
        trig = torch.tensor(src.triggers)
        et = m.emb(trig)
        keys = m.wk[1](m.wo[0](m.wv[0](et)))
        r["wk1"] = ((et @ keys.T).argmax(-1) == torch.arange(len(trig))).float().mean().item()
        pe = m.pe
        q, k = pe[1:], m.wk[0](pe[:-1])
        r["wk0"] = ((q @ k.T).argmax(-1) == torch.arange(pe.shape[0] - 1)).float().mean().item()
        # layer 1 at each trigger's 2nd+ occurrence: argmax on a token after an earlier occurrence
        b, i = torch.where(sel)
        am = pats[1][b, i].argmax(-1)
        ok = (am >= 1) & (x[b, (am - 1).clamp(min=0)] == x[b, i])
        r["attn1"] = ok.float().mean().item()
        b, i = torch.where(occ[:, :-1] >= 1)
        r["attn0"] = (pats[0][b, i + 1].argmax(-1) == i).float().mean().item()
    return r


def train(cfg, tables, seed: int, steps=None):
    torch.manual_seed(seed)
    d, t = cfg["model"]["d_model"], cfg["data"]["seq_len"]
    nl, k, bsz = cfg["model"]["n_layers"], cfg["data"]["k"], cfg["data"]["batch"]
    tr = cfg["train"]
    steps = steps or tr["steps"]
    src = Source(tables, k, t)
    m = Birth(src.n, d, t, nl)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=tr["lr"],
                          momentum=tr["momentum"], weight_decay=tr["weight_decay"])
    rng = np.random.default_rng([seed, 0])
    x_ev, y_ev, o_ev = src.batch(np.random.default_rng([seed, 1]), cfg["probe"]["n_eval"])
    every = cfg["run"]["probe_every"]
    hist = []
    t0 = time.time()
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            hist.append({"step": step, **probes(m, src, x_ev, y_ev, o_ev)})
        if step == steps:
            break
        x, y, occ = src.batch(rng, bsz)
        logits, _ = m(x)
        sel = occ >= 2
        loss = F.cross_entropy(logits[sel], y[sel])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return hist, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, type=Path, help="a mechlab birth run folder")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, tables = load_setting(args.run)
    for seed in args.seeds:
        hist, secs = train(cfg, tables, seed, args.steps)
        print(json.dumps({"seed": seed, "seconds": round(secs, 1), "final": hist[-1],
                          "history": hist}))


if __name__ == "__main__":
    main()
