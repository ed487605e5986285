"""The simplified two-layer induction model of Chen et al. (2024) in PyTorch, written
for mechlab's benchmark (not the authors' code): same config as
crates/mechlab/examples/bench_induction.rs (S = 3, L = 100, H = 3, D = 2, w+ = 3,
w- = 0.1, c_init = a_init = 0.01, code loss, full batch of 9 000, SGD lr 1).

Layer 1 is written with shifted slices (no [L+1, L+1] matrices), layer 2 only for
the query row, so this is a fair, efficient PyTorch version.

usage: torch_simplified.py TOKENS_FILE EPOCHS [S]  (tokens: u8 [9000, 101]; S default 3)
"""
import itertools
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
torch.set_default_dtype(torch.float64)

S, L, H, D = 3, 100, 3, 2
W_PLUS, W_MINUS, C_INIT, A_INIT, LR = 3.0, 0.1, 0.01, 0.01, 1.0


def main():
    global S
    path, epochs = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        S = int(sys.argv[3])
    tok = torch.from_numpy(np.fromfile(path, dtype=np.uint8).reshape(-1, L + 1).astype(np.int64))
    x, y = tok[:, :L], tok[:, L]
    X = F.one_hot(x, S).double()  # [B, L, S]
    Xt = torch.cat([X, torch.zeros_like(X[:, :1])], 1)  # [B, L+1, S], query row zero
    nd = 2 * H - 1
    W = torch.full((nd, H), W_MINUS)
    for h in range(H):
        W[h, h] = W_PLUS
    W.requires_grad_()
    # subsets over H+1 components (component 0 = raw token), |δ| ≤ D, product order
    subsets = [d for d in itertools.product([0, 1], repeat=H + 1) if sum(d) <= D]
    C = torch.full((len(subsets),), C_INIT, requires_grad=True)
    a = torch.full((1,), A_INIT, requires_grad=True)
    active = [i for i, d in enumerate(subsets) if d[0] == 0]
    # which distances exist at each position: [L+1, H] per head
    pos = torch.arange(L + 1)
    # the data shifted by each distance r (zeros before the start): data, no gradient
    shifted = {
        r: torch.cat([torch.zeros_like(Xt[:, :r]), Xt[:, : L + 1 - r]], 1) for r in range(1, nd + 1)
    }

    def forward():
        feats = []
        for h in range(H):
            r = torch.arange(h + 1, h + H + 1)  # distances
            logit = W[h : h + H, h].expand(L + 1, H)
            avail = pos[:, None] >= r[None, :]
            logit = logit.masked_fill(~avail, float("-inf"))
            A = torch.nan_to_num(torch.softmax(logit, -1), nan=0.0)  # [L+1, H]
            u = sum(A[:, j, None] * shifted[h + 1 + j] for j in range(H))
            v = u / (u.norm(dim=-1, keepdim=True) + 1e-7)
            feats.append(v)
        # ip_c for the query row L against keys 0..L-1; component 0 is zero for the query
        ip = [torch.zeros(x.shape[0], L)] + [(f[:, L : L + 1] * f[:, :L]).sum(-1).relu() for f in feats]
        num = 0
        for i in active:
            k = C[i] ** 2
            for c, on in enumerate(subsets[i]):
                if on:
                    k = k * ip[c]
            num = num + k
        z = (C[active] ** 2).sum()
        s = a * num / z
        p = torch.softmax(s, -1)  # [B, L]
        yhat = torch.einsum("bl,bls->bs", p, X)
        return F.cross_entropy(yhat, y)  # the code loss: ŷ used as logits

    params = [W, C, a]
    opt = torch.optim.SGD(params, lr=LR)

    def step():
        opt.zero_grad()
        loss = forward()
        loss.backward()
        opt.step()
        return loss.item()

    for e in range(3):
        print(f"epoch {e} loss {step():.12f}")
    t = time.perf_counter()
    for _ in range(epochs):
        step()
    per = (time.perf_counter() - t) / epochs
    print(f"threads {torch.get_num_threads()} seconds_per_epoch {per:.6f}")


if __name__ == "__main__":
    main()
