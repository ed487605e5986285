#!/usr/bin/env python3
"""Checks authors_port.py against the authors' own JAX code (catformer.py, problems.py
of eshnich/transformers-learn-causal-structure, run here; their snapshot must be on
this machine). Needs a Python with torch, numpy, jax[cpu], optax and simple_pytree.
Their single_parent.py itself also needs wandb, tyro, flax, jaxopt, seaborn and PIL
(through util.py), so this script rebuilds its loop from their modules: their RNG
class's key splitting, their dag construction, criterion, step_fn (SGD, their weight
decay) and optax.cosine_decay_schedule, their batch iterator (with a smaller
`max_size` epoch, same i.i.d. samples).

usage: check_authors_port.py AUTHORS_DIR PART [options]
  PART equiv : the same batches (their sampler) fed to both models for --steps steps:
               per-step losses and final parameters compared (several configs)
  PART stats : their sampler vs ours (Monte Carlo statistics); their `bayes` vs ours
               on the same sequences; their stationary law vs ours on the same pi
  PART train : their full loop for --seeds, printing one JSON line per seed with the
               same fields as authors_port.py's (probes computed by the port's code
               on their final parameters); run authors_port.py with the same flags for
               the other side
AUTHORS_DIR: `git -C <mirror> archive HEAD | tar x -C AUTHORS_DIR`.
"""
import argparse
import json
import os
import sys
import time
from functools import partial

import numpy as np
import torch

ap = argparse.ArgumentParser()
ap.add_argument("authors")
ap.add_argument("part", choices=["equiv", "stats", "train"])
ap.add_argument("--problem", default="chain")
ap.add_argument("--seeds", default="0,1,2")
ap.add_argument("--S", type=int, default=5)
ap.add_argument("--T", type=int, default=10)
ap.add_argument("--alpha", type=float, default=0.1)
ap.add_argument("--steps", type=int, default=3000)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--lr", type=float, default=1.0)
ap.add_argument("--wd", type=float, default=0.0)
ap.add_argument("--n-eval", type=int, default=2 ** 14)
ap.add_argument("--max-size", type=int, default=2 ** 16)
ap.add_argument("--only", default="0,1,2,3", help="equiv: which configs")
args = ap.parse_args()

sys.path.insert(0, args.authors)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(1)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import optax  # noqa: E402
from jax import jit, vmap  # noqa: E402
from jax.tree_util import tree_map  # noqa: E402

from catformer import CatFormer  # noqa: E402  (theirs)
from problems import InContextTree, get_stationary  # noqa: E402  (theirs)
import authors_port as port  # noqa: E402


class RNG:
    """the key handling of their util.RNG."""

    def __init__(self, seed):
        self.key = jr.PRNGKey(seed)

    def next(self, n=1):
        if n > 1:
            return jr.split(self.next(), n)
        self.key, key = jr.split(self.key)
        return key

    def __getattr__(self, name):
        return partial(getattr(jr, name), self.next())


def their_dag(problem, T, rng):
    if problem == "chain":
        return jnp.arange(T - 1) - 1
    if problem == "icl":
        dag = jnp.zeros(T - 1, dtype=int) - 1
        return dag.at[1::2].set(2 * jnp.arange((T - 1) // 2))
    if problem == "random":
        return rng.randint((T - 1,), minval=-1, maxval=jnp.arange(T - 1))
    raise ValueError(problem)


@jit
def criterion(f, y):
    c = lambda f, y: -jnp.log(f) @ y  # noqa: E731
    for _ in range(y.ndim - 1):
        c = vmap(c)
    return c(f, y).mean()


@jit
def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


@jit
def step_fn(model, batch, lr, wd):
    g = jax.grad(loss_fn)(model, batch)
    g = tree_map(lambda a, b: a + wd * b, g, model)
    return tree_map(lambda a, b: a - lr * b, model, g)


def batch_iterator(problem, key, batch, max_size):
    epoch_len = max_size // batch
    sample_fn = jit(lambda k: vmap(problem.sample)(jr.split(k, epoch_len * batch)))
    while True:
        key, sub = jr.split(key)
        data = sample_fn(sub)
        for i in range(epoch_len):
            yield tree_map(lambda x: x[batch * i: batch * (i + 1)], data)


def to_port(model_j, S, T, heads):
    m = port.CatFormer(S, T, heads)
    with torch.no_grad():
        for a, b in zip(m.A, model_j.A):
            a.copy_(torch.from_numpy(np.array(b)))
        m.W.copy_(torch.from_numpy(np.array(model_j.W)))
    return m


def equiv():
    configs = [("chain", 5, 10, [1, 1], 1.0, 0.0), ("icl", 5, 11, [1, 1], 4.0, 0.0),
               ("random", 4, 8, [1, 1], 2.0, 1e-3), ("chain", 3, 8, [2, 1], 1.0, 0.0), ("chain", 5, 10, [1, 1], 4.0, 0.0),
               ("random", 10, 20, [1, 1], 8.0, 0.0)]
    ok = True
    for k in [int(c) for c in args.only.split(",")]:
        prob, S, T, heads, lr, wd = configs[k]
        rng = RNG(0)
        dag = their_dag(prob, T, rng)
        problem = InContextTree(vocab_size=S, dag=dag, alpha=args.alpha)
        mj = CatFormer(seq_len=T, vocab_size=S, heads=heads)
        mt = port.CatFormer(S, T, heads)
        it = batch_iterator(problem, rng.next(), args.batch, 2 ** 14)
        sched = optax.cosine_decay_schedule(lr, args.steps)
        dl = 0.0
        for i in range(args.steps):
            b = next(it)
            lj = float(loss_fn(mj, b))
            mj = step_fn(mj, b, sched(i), wd)
            x = torch.from_numpy(np.asarray(b[0]).astype(np.int64))
            y = torch.from_numpy(np.array(b[1]))
            lt = port.sgd_step(mt, x, y, port.cosine_lr(lr, i, args.steps), wd)
            dl = max(dl, abs(lj - lt))
        pj = [np.asarray(a) for a in mj.A] + [np.asarray(mj.W)]
        pt = [p.detach().numpy() for p in mt.params()]
        dp = max(np.abs(a - b).max() for a, b in zip(pj, pt))
        scale = max(np.abs(a).max() for a in pj)
        good = dl < 1e-4 and dp < 1e-4 * max(1.0, scale)
        ok &= good
        print(f"{prob:6s} S={S} T={T} heads={heads} lr={lr} wd={wd} steps={args.steps}: "
              f"max |loss diff| {dl:.2e}, max |param diff| {dp:.2e} (max |param| "
              f"{scale:.2f}), final loss {lj:.5f} {'ok' if good else 'DIFFERENT'}")
    print("equiv:", "all agree" if ok else "DISAGREE")


def stats():
    S, T, n = args.S, args.T, 2 ** 15
    for prob in ["chain", "icl", "random"]:
        rng = RNG(1)
        dag = their_dag(prob, T, rng)
        dag_np = np.asarray(dag).astype(np.int64)
        problem = InContextTree(vocab_size=S, dag=dag, alpha=args.alpha)
        xj, yj = vmap(problem.sample)(rng.next(n))
        xj, yj = np.asarray(xj).astype(np.int64), np.asarray(yj).astype(np.float64)
        bj = np.asarray(vmap(problem.bayes)(jnp.asarray(xj)))
        bt = port.bayes(xj, dag_np, S, args.alpha, theirs=True)
        d_bayes = np.abs(bj - bt).max()
        g = np.random.default_rng(1)
        xt, yt, pit = port.sample(g, n, dag_np, S, args.alpha)
        muj = np.asarray(vmap(get_stationary)(jnp.asarray(pit[:2048], dtype=jnp.float32)))
        mut = port.stationary(pit[:2048])
        d_mu = np.abs(muj - mut).max()
        kids = np.where(dag_np >= 0)[0]

        def st(x, y):
            same = (x[:, kids] == x[:, dag_np[kids]]).mean(1) if len(kids) else np.zeros(len(x))
            ent = -(y * np.log(np.maximum(y, 1e-30))).sum(-1)
            bl = -(y * np.log(port.bayes(x, dag_np, S, args.alpha, True))).sum(-1)
            bf = -(y * np.log(port.bayes(x, dag_np, S, args.alpha, False))).sum(-1)
            rep = (x[:, :-1] == x[:, -1:]).mean(1)
            return {"P(child=parent)": same, "H(target)": ent, "bayes(theirs)": bl,
                    "bayes(fixed)": bf, "P(x_i=query)": rep}
        a, b = st(xj, yj), st(xt, yt)
        print(f"{prob} S={S} T={T} dag={dag_np.tolist()}: max |bayes diff| on their "
              f"sequences {d_bayes:.1e}; max |mu diff| on our pi {d_mu:.1e}")
        for k in a:
            ma, mb = a[k].mean(), b[k].mean()
            se = np.sqrt(a[k].var() / n + b[k].var() / n)
            print(f"   {k:16s} theirs {ma:.4f}  ours {mb:.4f}  diff/se {(ma - mb) / se:+.2f}")


def train():
    S, T = args.S, args.T
    for seed in [int(s) for s in args.seeds.split(",")]:
        t0 = time.time()
        rng = RNG(seed)
        dag = their_dag(args.problem, T, rng)
        dag_np = np.asarray(dag).astype(np.int64)
        problem = InContextTree(vocab_size=S, dag=dag, alpha=args.alpha)
        model = CatFormer(seq_len=T, vocab_size=S, heads=[1, 1])
        testx, testy = vmap(problem.sample)(rng.next(args.n_eval))
        bayes = float(criterion(vmap(problem.bayes)(testx), testy))
        it = batch_iterator(problem, rng.next(), args.batch, args.max_size)
        sched = optax.cosine_decay_schedule(args.lr, args.steps)
        for i in range(args.steps):
            model = step_fn(model, next(it), sched(i), args.wd)
        final = float(loss_fn(model, (testx, testy)))
        xe = torch.from_numpy(np.asarray(testx).astype(np.int64))
        ye = np.asarray(testy).astype(np.float64)
        res = {"impl": "theirs(jax)", "problem": args.problem, "seed": seed, "S": S, "T": T,
               "steps": args.steps, "batch": args.batch, "lr": args.lr,
               "dag": dag_np.tolist(), "final_loss": final, "bayes_loss": bayes,
               "bayes_fixed": port.soft_ce(port.bayes(np.asarray(testx), dag_np, S,
                                                      args.alpha, False), ye),
               "entropy": port.soft_ce(ye, ye)}
        res.update(port.probes(to_port(model, S, T, [1, 1]), xe[:4096], dag_np, S, T))
        res["train_s"] = round(time.time() - t0, 1)
        print(json.dumps(res), flush=True)


{"equiv": equiv, "stats": stats, "train": train}[args.part]()
