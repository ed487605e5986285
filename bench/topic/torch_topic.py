"""PyTorch reference for the mechlab topic presets (our own code, written for this bench).

It computes what the authors' code (Hugging Face BERT with one layer, one head)
computes for these settings: the embedding lookup, Q, K and V linear maps on every
position (also when they are frozen: the official model still runs them), scaled
dot-product attention with the additive "finfo.min" mask on hidden and padded
keys, the decoder linear map on every position, and cross-entropy with
ignore_index = -100. Batches are padded to their longest document, as the
official DataLoader does (we build them before the clock starts).

Usage: torch_topic.py PRESET_DIR  (written by `examples/bench_topic.rs`); prints JSON.
"""
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)
torch.manual_seed(0)
d = sys.argv[1]
meta = json.load(open(f"{d}/meta.json"))
inp = np.fromfile(f"{d}/input.bin", dtype="<u4").astype(np.int64)
lab = np.fromfile(f"{d}/label.bin", dtype="<u4").astype(np.int64)
hid = np.fromfile(f"{d}/hidden.bin", dtype=np.uint8)
off = np.fromfile(f"{d}/offsets.bin", dtype="<u8").astype(np.int64)
order = np.fromfile(f"{d}/order.bin", dtype="<u4").astype(np.int64)
lab[lab == 0xFFFFFFFF] = -100
V = meta["d_vocab"]
m = meta["model"]
D = V if m["d_model"] == 0 else m["d_model"]
B = meta["batch_size"]
P = meta["params"]
trained = set(meta["trained"])


def t(name, transpose=False):
    x = torch.tensor(P[name]["value"], dtype=torch.float32).reshape(P[name]["shape"])
    return x.t().contiguous() if transpose else x


class Topic(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.dec = nn.Linear(D, V)
        self.tt = nn.Parameter(torch.zeros(D))
        self.ln = nn.LayerNorm(D, eps=1e-12)
        with torch.no_grad():
            self.emb.weight.copy_(t("embed.W_E"))
            # mechlab stores x·W ([in, out]); torch Linear stores [out, in].
            for lin, w, b in [(self.q, "W_Q", "b_Q"), (self.k, "W_K", "b_K"), (self.v, "W_V", "b_V")]:
                lin.weight.copy_(t(f"blocks.0.attn.{w}", True))
                lin.bias.copy_(t(f"blocks.0.attn.{b}"))
            self.dec.weight.copy_(t("unembed.W_U", True))
            self.dec.bias.copy_(t("unembed.b_U"))
            self.tt.copy_(t("embed.token_type"))
            self.ln.weight.copy_(t("embed.ln.w"))
            self.ln.bias.copy_(t("embed.ln.b"))
        groups = {
            "embed.W_E": [self.emb.weight],
            "blocks.0.attn.W_Q": [self.q.weight], "blocks.0.attn.b_Q": [self.q.bias],
            "blocks.0.attn.W_K": [self.k.weight], "blocks.0.attn.b_K": [self.k.bias],
            "blocks.0.attn.W_V": [self.v.weight], "blocks.0.attn.b_V": [self.v.bias],
            "unembed.W_U": [self.dec.weight], "unembed.b_U": [self.dec.bias],
            "embed.token_type": [self.tt], "embed.ln.w": [self.ln.weight], "embed.ln.b": [self.ln.bias],
        }
        for name, ps in groups.items():
            for p in ps:
                p.requires_grad_(name in trained)

    def forward(self, ids, keep):
        h = self.emb(ids)  # [B, L, D]
        if m["bert_embedding_ln"]:
            h = self.ln(h + self.tt)
        q, k, v = self.q(h), self.k(h), self.v(h)
        s = q @ k.transpose(-1, -2) / math.sqrt(D)  # [B, L, L]
        s = s + (1.0 - keep[:, None, :]) * torch.finfo(s.dtype).min
        a = F.softmax(s, dim=-1) @ v
        if m["decoder"] == "tied":
            return a @ self.emb.weight.t()
        return self.dec(a)


def batch(docs):
    L = max(off[i + 1] - off[i] for i in docs)
    ids = torch.zeros((len(docs), L), dtype=torch.long)
    labels = torch.full((len(docs), L), -100, dtype=torch.long)
    keep = torch.zeros((len(docs), L))
    for r, i in enumerate(docs):
        a, b = off[i], off[i + 1]
        ids[r, : b - a] = torch.from_numpy(inp[a:b])
        labels[r, : b - a] = torch.from_numpy(lab[a:b])
        keep[r, : b - a] = torch.from_numpy(1.0 - hid[a:b].astype(np.float32))
    return ids, labels, keep


batches = [batch(order[i : i + B]) for i in range(0, len(order), B)]


def make():
    model = Topic()
    params = [p for p in model.parameters() if p.requires_grad]
    if meta["optimizer"] == "sgd":
        opt = torch.optim.SGD(params, lr=meta["lr"])
    else:
        opt = torch.optim.AdamW(params, lr=meta["lr"], weight_decay=0.0, eps=1e-8)
    return model, opt


def step(model, opt, bt):
    ids, labels, keep = bt
    logits = model(ids, keep)
    loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


model, opt = make()
first = [step(model, opt, bt) for bt in batches[:5]]
ours = meta["first_losses"]
rel = max(abs(a - b) / abs(b) for a, b in zip(first, ours))
best = float("inf")
for _ in range(2):
    model, opt = make()
    t0 = time.perf_counter()
    for bt in batches:
        step(model, opt, bt)
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"preset": meta["preset"], "torch_epoch_seconds": best, "torch_first_losses": first,
                  "mechlab_first_losses": ours, "max_rel_loss_diff": rel, "threads": torch.get_num_threads(),
                  "torch": torch.__version__}))
