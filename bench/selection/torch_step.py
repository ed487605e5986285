"""One full-batch step of the token-selection model in PyTorch, on the data and
parameters that `bench_selection` wrote, timed with 2 threads.

f(X) = softmax(E_X p)^T E_X v with padding masked, loss mean log(1 + exp(-y f)),
gradients of E, p, v by autograd. Two faithful variants of the same model:

- gather:    E_X = E[X] is materialised ([n, T, d]), scores E_X p and values E_X v
             (the model as written; processed in batch chunks to fit in memory,
             gradients accumulated over the chunks: still one full-batch step);
- projected: scores (E p)[X] and values (E v)[X], the same numbers without the
             [n, T, d] tensor (the algebra our Rust step uses, left to autograd).
"""
import json, sys, time
import numpy as np
import torch

out = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(2)
r = json.load(open(f"{out}/rust.json"))
n, T, V, d = r["n"], r["T"], r["vocab"], r["d"]
ids = torch.from_numpy(np.fromfile(f"{out}/ids.u32", dtype=np.uint32).astype(np.int64).reshape(n, T))
lens = torch.from_numpy(np.fromfile(f"{out}/lens.u32", dtype=np.uint32).astype(np.int64))
y = torch.from_numpy(np.fromfile(f"{out}/y.f32", dtype=np.float32))
E0 = torch.from_numpy(np.fromfile(f"{out}/E.f32", dtype=np.float32).reshape(V, d))
p0 = torch.from_numpy(np.fromfile(f"{out}/p.f32", dtype=np.float32))
v0 = torch.from_numpy(np.fromfile(f"{out}/v.f32", dtype=np.float32))
mask = torch.arange(T)[None, :] < lens[:, None]  # [n, T]


def loss_of(s, u, m, yy):
    # s, u: [b, T] scores and values; m: [b, T] keep-mask; yy: [b]
    a = torch.softmax(s.masked_fill(~m, float("-inf")), dim=1)
    f = (a * u).sum(1)
    return torch.nn.functional.softplus(-yy * f).sum() / n


def step_gather(E, p, v, chunk=1000):
    total = 0.0
    for i in range(0, n, chunk):
        EX = E[ids[i:i + chunk]]  # [b, T, d]
        l = loss_of(EX @ p, EX @ v, mask[i:i + chunk], y[i:i + chunk])
        l.backward()
        total += l.item()
    return total


def step_projected(E, p, v):
    s = (E @ p)[ids]  # [n, T]
    u = (E @ v)[ids]
    l = loss_of(s, u, mask, y)
    l.backward()
    return l.item()


res = {}
# The reference: the projected step in float64 (not timed). Both f32 implementations
# are compared with it, since their f32 sums differ from each other in order.
E = E0.double().requires_grad_(True)
p = p0.double().requires_grad_(True)
v = v0.double().requires_grad_(True)
y64, y = y, y.double()
loss = step_projected(E, p, v)
y = y64
res["reference_f64"] = {"loss": loss, "grad_norm_E": E.grad.norm().item(),
                        "grad_norm_p": p.grad.norm().item(), "grad_norm_v": v.grad.norm().item()}
print("reference_f64", json.dumps(res["reference_f64"]), flush=True)
# The gather variant takes tens of seconds a step: time it once after no warm-up.
for name, fn, k_reps in [("projected", step_projected, reps), ("gather", step_gather, 1)]:
    times = []
    for k in range(k_reps + (1 if k_reps > 1 else 0)):
        E = E0.clone().requires_grad_(True)
        p = p0.clone().requires_grad_(True)
        v = v0.clone().requires_grad_(True)
        t0 = time.perf_counter()
        loss = fn(E, p, v)
        dt = time.perf_counter() - t0
        if k > 0 or k_reps == 1:  # one warm-up when timing several
            times.append(dt)
    times.sort()
    res[name] = {
        "loss": loss,
        "grad_norm_E": E.grad.norm().item(),
        "grad_norm_p": p.grad.norm().item(),
        "grad_norm_v": v.grad.norm().item(),
        "median_s": times[len(times) // 2],
    }
    print(name, json.dumps(res[name]), flush=True)
json.dump(res, open(f"{out}/torch.json", "w"))
