"""Single-layer attention f(X) = v^T X^T softmax(X W z) (Tarzanagh et al. 2023) on
the logistic loss, trained by normalised GD (W <- W - lr g / ||g||, the norm over
all trained parameters), f64, in PyTorch: written for mechlab's benchmark (not the
authors' code). Same model and step as crates/mechlab/examples/bench_attention_svm.rs,
both parameterisations: W directly, and W = K Q^T (K, Q [d, d]).

usage: torch_svm.py DIR N T D STEPS  (DIR holds x, z, y, v, w, k, q .f64 from the example)
"""
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
torch.set_default_dtype(torch.float64)
LR = 0.1


def main():
    d_, n, t, d, steps = sys.argv[1], *map(int, sys.argv[2:6])
    load = lambda name, *sh: torch.from_numpy(np.fromfile(f"{d_}/{name}.f64", dtype="<f8").reshape(sh))
    x, z, y, v = load("x", n, t, d), load("z", n, d), load("y", n), load("v", d)
    u = x @ v  # [n, T] values v^T x_t

    def loss_of(w):
        wz = z @ w.T  # [n, d]: W z_i
        a = torch.einsum("ntd,nd->nt", x, wz).softmax(-1)  # [n, T]
        f = (a * u).sum(-1)  # [n]
        return F.softplus(-y * f).mean()

    for name, make, init in [
        ("w", lambda p: p[0], ["w"]),
        ("kq", lambda p: p[0] @ p[1].T, ["k", "q"]),
    ]:
        params = [load(p, d, d).clone().requires_grad_() for p in init]

        def step():
            for p in params:
                p.grad = None
            loss = loss_of(make(params))
            loss.backward()
            with torch.no_grad():
                norm = torch.sqrt(sum((p.grad * p.grad).sum() for p in params))
                if norm > 0:
                    for p in params:
                        p.sub_(p.grad, alpha=LR / norm.item())
            return loss.item()

        for s in range(3):
            print(f"{name} step {s} loss {step():.15f}")
        clock = time.perf_counter()
        for _ in range(steps):
            step()
        per = (time.perf_counter() - clock) / max(steps, 1)
        print(f"{name} threads {torch.get_num_threads()} seconds_per_step {per:.9f}")


if __name__ == "__main__":
    main()
