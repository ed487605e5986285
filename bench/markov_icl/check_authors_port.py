#!/usr/bin/env python3
"""Checks authors_port.py against the authors' own code (their snapshot must be on
this machine): same parameter count, bit-identical initial parameters for the same
seed, identical logits in eval and in train mode (same dropout masks), identical
parameters after five AdamW steps with their optimizer groups; and shows the two
problems in their data code that the port works around (the shadowed doubly
stochastic sampler, the uniform "stationary" law).

usage: check_authors_port.py AUTHORS_DIR   (a checkout/extract of their repository,
e.g. `git -C <mirror> archive HEAD | tar x -C AUTHORS_DIR`)
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(1)
from mingpt.model_rpe import Relative_Transformer  # noqa: E402  (theirs)
from mingpt.trainer import Trainer  # noqa: E402
from mingpt.utils import CfgNode  # noqa: E402
import datasets  # noqa: E402
import utils  # noqa: E402
import authors_port as port  # noqa: E402


def maxdiff(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


ok = True
for T, B in [(50, 32), (100, 64)]:
    cfg = CfgNode(n_layer=2, n_head=1, n_embd=16, vocab_size=2, block_size=T, embd_pdrop=0.1,
                  resid_pdrop=0.1, attn_pdrop=0.1, attention_only=True, device="cpu")
    torch.manual_seed(3)
    theirs = Relative_Transformer(cfg)
    torch.manual_seed(3)
    mine = port.RelativeTransformer(2, 16, 1, T, 0.1)
    d_init = maxdiff(theirs.parameters(), mine.parameters())
    x = torch.randint(2, (B, T))
    d_mode = {}
    for mode in ["eval", "train"]:
        getattr(theirs, mode)()
        getattr(mine, mode)()
        torch.manual_seed(9)
        lt, _ = theirs(x)
        torch.manual_seed(9)
        lm, _ = mine(x)
        d_mode[mode] = (lt - lm).abs().max().item()
    ot = theirs.configure_optimizers(Trainer.get_default_config())
    om = mine.optimizer(5e-4, (0.9, 0.95), 0.1)
    torch.manual_seed(11)
    for _ in range(5):
        x, y = torch.randint(2, (B, T)), torch.randint(2, (B, T))
        state = torch.random.get_rng_state()
        _, lt = theirs(x, y)
        theirs.zero_grad(set_to_none=True)
        lt.backward()
        ot.step()
        torch.random.set_rng_state(state)
        lm = F.cross_entropy(mine(x)[0].reshape(-1, 2), y.reshape(-1))
        om.zero_grad(set_to_none=True)
        lm.backward()
        om.step()
    d_steps = maxdiff(theirs.parameters(), mine.parameters())
    n = sum(p.numel() for p in mine.parameters())
    print(f"T={T}: {n} parameters; max |diff| init {d_init}, eval logits {d_mode['eval']}, "
          f"train logits {d_mode['train']}, after 5 AdamW steps {d_steps}")
    ok &= d_init == 0 and d_mode["eval"] == 0 and d_mode["train"] == 0 and d_steps == 0

torch.manual_seed(0)
ds = datasets.doubly_stochastic("train", length=11, num_symbols=2)
P = ds.transition_matrix_gen([2000])
print("their doubly_stochastic dataset: column sums of its matrices range "
      f"{P.sum(1).min().item():.3f}..{P.sum(1).max().item():.3f} (doubly stochastic: 1)")
Pd = torch.distributions.Dirichlet(torch.ones(1000, 2, 2)).sample()
pi = utils.stationary_distribution(Pd)
print(f"their stationary_distribution on Dirichlet chains: max |pi - 1/2| "
      f"{(pi - 0.5).abs().max().item():.2e} (true laws differ from 1/2 by up to "
      f"{(Pd[:, 1, 0] / (Pd[:, 0, 1] + Pd[:, 1, 0]) - 0.5).abs().max().item():.2f})")
Q = port.doubly_stochastic(1000, 3, torch.Generator().manual_seed(0))
print(f"port's sampler, S = 3: max |row sum - 1| {(Q.sum(2) - 1).abs().max().item():.1e}, "
      f"max |column sum - 1| {(Q.sum(1) - 1).abs().max().item():.1e}")
print("port matches the authors' model and optimiser bit for bit" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
