"""The two-layer attention-only RPE transformer of Edelman et al. (2024) in PyTorch,
written for mechlab's benchmark (not the authors' code, though it follows their
`mingpt/model_rpe.py` forward: pre-LayerNorm, scores (q.k + q.p[i-j]) / sqrt(d_head),
causal softmax, output projection, final LayerNorm, unembedding; dropout at their
four places when DIR holds mechlab's masks, applied exactly, so both sides compute
the same function).
Same setting as crates/mechlab/examples/bench_markov_icl.rs: S = 2, T = 100,
batch 64, d_model 16, one head per layer, AdamW lr 5e-4 betas (0.9, 0.95), f64.

usage: torch_rpe.py DIR STEPS  (DIR holds tokens.u8 [3, 64, 101] and params.f64, and
with dropout masks.f64: per checked step, both layers' position masks over the causal
pairs [T(T+1)/2, D], then per sequence its embedding mask [T, D] and per layer its
attention mask [H, T, T] and output mask [T, D]; RpeTransformer::masks_of)
"""
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
torch.set_default_dtype(torch.float64)
S, T, B, D, H = 2, 100, 64, 16, [1, 1]


def main():
    d, steps = sys.argv[1], int(sys.argv[2])
    tok = torch.from_numpy(np.fromfile(f"{d}/tokens.u8", dtype=np.uint8).reshape(3, B, T + 1).astype(np.int64))
    flat = torch.from_numpy(np.fromfile(f"{d}/params.f64", dtype="<f8"))
    shapes = [(S, D)] + [(D,), (D,), (D, D), (D, D), (D, D), (D, D), (T, D)] * 2 + [(D,), (D,), (S, D)]
    params, off = [], 0
    for sh in shapes:
        n = int(np.prod(sh))
        params.append(flat[off : off + n].reshape(sh).clone().requires_grad_())
        off += n
    assert off == flat.numel()
    rel = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp(min=0)  # [T, T] distance i-j
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    masks = None
    if os.path.exists(f"{d}/masks.f64"):
        flat_m = torch.from_numpy(np.fromfile(f"{d}/masks.f64", dtype="<f8"))
        npair = T * (T + 1) // 2 * D
        per_seq = T * D + sum(h * T * T + T * D for h in H)
        per_step = 2 * npair + B * per_seq
        assert flat_m.numel() == 3 * per_step
        ii, jj = torch.tril_indices(T, T)  # row-major causal pairs, as mechlab packs them
        masks = []
        for st in range(3):
            m = flat_m[st * per_step : (st + 1) * per_step]
            pos = []
            for l in range(2):
                full = torch.zeros(T, T, D)
                full[ii, jj] = m[l * npair : (l + 1) * npair].view(-1, D)
                pos.append(full)
            seq = m[2 * npair :].view(B, per_seq)
            o, emb = T * D, seq[:, : T * D].view(B, T, D)
            attn, res = [], []
            for l in range(2):
                attn.append(seq[:, o : o + H[l] * T * T].view(B, H[l], T, T))
                o += H[l] * T * T
                res.append(seq[:, o : o + T * D].view(B, T, D))
                o += T * D
            masks.append((pos, emb, attn, res))
    cur = [None]

    def forward(x):
        mk = cur[0]
        h = params[0][x]  # [B, T, D]
        if mk is not None:
            h = h * mk[1]
        for l in range(2):
            lw, lb, wq, wk, wv, wo, wpos = params[1 + 7 * l : 8 + 7 * l]
            nh, dh = H[l], D // H[l]
            n = F.layer_norm(h, (D,), lw, lb, 1e-5)
            q = (n @ wq.T).view(B, T, nh, dh).transpose(1, 2)  # [B, nh, T, dh]
            k = (n @ wk.T).view(B, T, nh, dh).transpose(1, 2)
            v = (n @ wv.T).view(B, T, nh, dh).transpose(1, 2)
            p = wpos[rel]  # [T, T, D]
            if mk is not None:
                p = p * mk[0][l]
            p = p.view(T, T, nh, dh)  # [T, T, nh, dh]
            s = (q @ k.transpose(-2, -1) + torch.einsum("ijhe,bhie->bhij", p, q)) / dh**0.5
            a = s.masked_fill(~causal, float("-inf")).softmax(-1)
            if mk is not None:
                a = a * mk[2][l]
            z = (a @ v).transpose(1, 2).reshape(B, T, D)
            out = z @ wo.T
            if mk is not None:
                out = out * mk[3][l]
            h = h + out
        n = F.layer_norm(h, (D,), params[15], params[16], 1e-5)
        return n @ params[17].T  # [B, T, S]

    # with masks, the authors' weight decay too: 0.1 on the nn.Linear weights only
    linear = [params[i] for l in range(2) for i in range(3 + 7 * l, 7 + 7 * l)] + [params[17]]
    rest = [p for p in params if all(p is not q for q in linear)]
    wd = 0.1 if masks else 0.0
    opt = torch.optim.AdamW([{"params": linear, "weight_decay": wd},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=5e-4, betas=(0.9, 0.95), eps=1e-8)

    def step(b):
        x, y = tok[b, :, :T], tok[b, :, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x).reshape(-1, S), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    for b in range(3):
        cur[0] = masks[b] if masks else None
        print(f"step {b} loss {step(b):.12f}")
    cur[0] = None
    t = time.perf_counter()
    for i in range(steps):
        step(i % 3)
    per = (time.perf_counter() - t) / steps
    print(f"threads {torch.get_num_threads()} seconds_per_step {per:.6f}")


if __name__ == "__main__":
    main()
