"""The general causal transformer of bench_gpt.rs in PyTorch: same parameters
(read from the Rust side's params.bin), same batches, same AdamW. Checks the
first losses against mechlab's, then times a training step with the attention
written out (eager) and with F.scaled_dot_product_attention (sdpa).

Usage: torch_gpt.py DIR RUST_OUTPUT
"""
import json, math, sys, time
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
d = sys.argv[1]
meta = json.load(open(f"{d}/config.json"))
c, B, T = meta["cfg"], meta["batch"], meta["seq_len"]
flat = np.fromfile(f"{d}/params.bin", dtype="<f4")
params, off = {}, 0
for p in meta["params"]:
    n = int(np.prod(p["shape"]))
    params[p["name"]] = torch.nn.Parameter(torch.from_numpy(flat[off:off + n].reshape(p["shape"]).copy()))
    off += n
tokens = torch.from_numpy(np.fromfile(f"{d}/tokens.bin", dtype="<u4").astype(np.int64)).view(-1, B, T + 1)
L, H, dh, D = c["n_layers"], c["n_heads"], c["d_head"], c["d_model"]
ln = c["normalization"] == "LN"


def forward(x, sdpa):
    P = params
    h = P["embed.W_E"][x] + P["pos_embed.W_pos"][: x.shape[1]]
    for l in range(L):
        b = f"blocks.{l}"
        a = F.layer_norm(h, (D,), P[f"{b}.ln1.w"], P[f"{b}.ln1.b"], 1e-5) if ln else h
        q, k, v = (F.linear(a, P[f"{b}.attn.W_{n}"], P[f"{b}.attn.b_{n}"]).view(B, T, H, dh).transpose(1, 2) for n in "QKV")
        if sdpa:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = q @ k.transpose(-1, -2) / math.sqrt(dh)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            z = s.softmax(-1) @ v
        h = h + F.linear(z.transpose(1, 2).reshape(B, T, H * dh), P[f"{b}.attn.W_O"], P[f"{b}.attn.b_O"])
        if c["d_mlp"] > 0:
            a = F.layer_norm(h, (D,), P[f"{b}.ln2.w"], P[f"{b}.ln2.b"], 1e-5) if ln else h
            u = F.gelu(F.linear(a, P[f"{b}.mlp.W_in"], P[f"{b}.mlp.b_in"]), approximate="tanh")
            h = h + F.linear(u, P[f"{b}.mlp.W_out"], P[f"{b}.mlp.b_out"])
    if ln:
        h = F.layer_norm(h, (D,), P["ln_final.w"], P["ln_final.b"], 1e-5)
    W_U = P["embed.W_E"] if c["tied_embeddings"] else P["unembed.W_U"]
    return F.linear(h, W_U, P["unembed.b_U"])


init = {k: v.detach().clone() for k, v in params.items()}


def run(sdpa, n_check, steps):
    for k, v in params.items():
        v.data.copy_(init[k])
    opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0)
    losses, t0 = [], None
    for i in range(n_check + steps):
        if i == n_check:
            t0 = time.perf_counter()
        x = tokens[i]
        logits = forward(x[:, :T], sdpa)
        if meta.get("mask") == "last":  # the loss on each sequence's last position only
            loss = F.cross_entropy(logits[:, -1], x[:, T])
        else:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses[:n_check], (time.perf_counter() - t0) / steps


rust = {int(l.split()[1]): float(l.split()[2]) for l in open(sys.argv[2]) if l.startswith("loss ")}
n_check, steps = meta["check"], meta["steps"]
for name, sdpa in [("eager", False), ("sdpa", True)]:
    losses, sec = run(sdpa, n_check, steps)
    err = max(abs(a - rust[i]) / abs(rust[i]) for i, a in enumerate(losses))
    print(f"torch-{name} step {sec*1e3:.2f} ms ({B*T/sec:.0f} tokens/s) max rel loss diff {err:.1e}")
    assert err < 1e-4, f"mechlab and PyTorch ({name}) disagree: {losses} vs {rust}"
