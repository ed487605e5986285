"""Independent PyTorch port of the training experiment of Tarzanagh, Li, Thrampoulidis
and Oymak (2023), "Max-margin token selection in attention" / "Transformers as SVMs",
as implemented in their official code (github.com/umich-sota/TF-as-SVM, files
local_converge.ipynb and base.py). Written from a reading of that code, not copied.

What is reproduced as they do it:
  * data: a torch.Generator seeded with the run index draws, in float32 and in this
    order, v ~ N(0, I_d) (then unit norm), labels y = +-1 from the sign of N(0, 1),
    X ~ N(0, I) of shape [n, T, d] (each token unit norm), queries Z ~ N(0, I) of
    shape [n, d] (unit norm); everything is then cast to float64;
  * model: cross attention with query z_i, output v^T X_i^T softmax(X_i W z_i);
    W is one bias-free nn.Linear (their univariate=True), or two, `query` and `key`,
    with W = (query.weight^T key.weight)^T; the head v is fixed (not trained);
  * init: nn.Linear's default init in float32, then cast to float64; the modules are
    built in their order (W model, then the (K, Q) model: query, key, and in each one
    extra randn(d) draw for the head that is then overwritten by v), from the global
    torch RNG. The notebook never seeds that RNG; we call torch.manual_seed(seed)
    before building the two models of each seed (our choice), and always build both,
    so the (K, Q) init does not depend on --param;
  * loss log(1 + exp(-y f)) averaged; for (K, Q) plus eps (||K||^2 + ||Q||^2), eps =
    float64 machine epsilon; each trained matrix's gradient is divided by its own norm
    plus eps; plain SGD, lr 0.1;
  * the selection is the argmax of the softmax from the last forward pass (which is
    computed before the last update), and the correlation is <W/|W|, S/|S|> with S the
    Frobenius- or nuclear-norm max-margin solution for that selection (cvxpy, its
    default solver), constraints (x_it - x_i,sel)^T W z_i <= -1 for t != sel.
Indexing kept from theirs: at step s (1-based) we report W after s updates and the
softmax from the forward pass of update s (i.e. computed with W after s - 1 updates).

Additions (not in their code): --no-floor / --no-reg remove the +eps of the gradient
normalisation and the (K, Q) penalty; --from DIR reads a data dump instead of the
generator; ranks, the highest-score comparison, and the local-optimality check of the
paper's Definition 2 at the Frobenius solution of the final selection (--local).
Small differences: the SVM constraints are stacked into one numpy matrix (same problem),
and the highest-score tokens are found from the float64 data (theirs: float32).
Checked against their notebook run as is (global RNG seeded the same way), 3 seeds,
300 steps: max prob, Frobenius and nuclear correlations agree to 1.3e-11 (solver noise).
"""
import argparse
import json
import math
import sys
import time

import cvxpy as cp
import numpy as np
import torch
import torch.nn as nn

torch.set_num_threads(1)
EPS = torch.finfo(torch.float64).eps
LR = 0.1
RANK_TOL = 1e-3  # singular values above RANK_TOL * sigma_1 count
SUPPORT_TOL = 1e-5  # |margin - 1| below this marks a support token


def parse_ints(text):
    out = []
    for part in filter(None, text.split(",")):
        if "-" in part[1:]:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def generate(seed, n, T, d):
    """Their data generator (float32 draws, cast to float64 at the end)."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    v = torch.randn(d, generator=gen)
    v = v / v.norm()
    y = 2 * torch.ones(n) * (torch.randn(n, generator=gen) > 0) - 1
    x = torch.randn((n, T, d), generator=gen)
    x = x / x.norm(dim=-1, keepdim=True)
    z = torch.randn((n, d), generator=gen)
    z = z / z.norm(dim=-1, keepdim=True)
    return x.double(), y.double(), z.double(), v.double()


def load_dump(folder, n, T, d):
    def read(name, *shape):
        a = np.fromfile(f"{folder}/{name}.f64", dtype="<f8")
        if a.size != math.prod(shape):
            sys.exit(f"{folder}/{name}.f64 holds {a.size} numbers, expected {shape}")
        return torch.from_numpy(a.reshape(shape).copy())

    return read("x", n, T, d), read("y", n), read("z", n, d), read("v", d)


class CrossAttention(nn.Module):
    """Scores z_i^T A x_it with A = W.weight (so W := A^T gives x^T W z), or A =
    query.weight^T key.weight; output is the softmax average of the tokens' v^T x."""

    def __init__(self, d, kind):
        super().__init__()
        self.kind = kind
        if kind == "w":
            self.W = nn.Linear(d, d, bias=False)
        else:
            self.query = nn.Linear(d, d, bias=False)
            self.key = nn.Linear(d, d, bias=False)
        self.head_draw = nn.Parameter(torch.randn(d) * 0.01)  # RNG draw only; unused

    def params(self):
        return [self.W.weight] if self.kind == "w" else [self.query.weight, self.key.weight]

    def forward(self, x, z, v):
        q = z.unsqueeze(1)  # [n, 1, d]
        if self.kind == "w":
            logits = q @ self.W(x).transpose(-2, -1)
        else:
            logits = self.query(q) @ self.key(x).transpose(-2, -1)
        attn = torch.softmax(logits, dim=-1)  # [n, 1, T]
        return attn, (attn @ x @ v).view(-1)

    def svm_matrix(self):
        """W such that the score of token x for query z is x^T W z."""
        with torch.no_grad():
            if self.kind == "w":
                return self.W.weight.T.numpy().copy()
            return (self.query.weight.T @ self.key.weight).T.numpy().copy()


def svm(x, z, sel, norm):
    """Min ||W|| (norm 'fro' or 'nuc') s.t. (x_it - x_i,sel)^T W z_i <= -1, t != sel.
    Returns (W or None, status)."""
    n, T, d = x.shape
    rows = []
    for i in range(n):
        for t in range(T):
            if t != sel[i]:
                rows.append(np.outer(x[i, t] - x[i, sel[i]], z[i]).reshape(-1))
    w = cp.Variable(d * d)
    W = cp.reshape(w, (d, d), order="C")
    prob = cp.Problem(cp.Minimize(cp.norm(W, norm)), [np.array(rows) @ w <= -1])
    try:
        prob.solve()
    except cp.error.SolverError as e:
        return None, f"solver error: {e}"
    if w.value is None or prob.status not in ("optimal", "optimal_inaccurate"):
        return None, prob.status
    return w.value.reshape(d, d), prob.status


def rank(m):
    if m is None or not np.all(np.isfinite(m)):
        return None
    s = np.linalg.svd(m, compute_uv=False)
    return int((s > RANK_TOL * s[0]).sum()) if s[0] > 0 else 0


def corr(a, b):
    if a is None or b is None:
        return float("nan")
    return float((a / np.linalg.norm(a)).ravel() @ (b / np.linalg.norm(b)).ravel())


def local_optimality(x, z, gamma, sel, w_mm):
    """Definition 2: every support token (margin (x_sel - x_t)^T W z_i within
    SUPPORT_TOL of 1) of every sequence scores strictly below the selected token."""
    n, T, _ = x.shape
    support, ok, next_margin = 0, True, float("inf")
    for i in range(n):
        for t in range(T):
            if t == sel[i]:
                continue
            m = float((x[i, sel[i]] - x[i, t]) @ w_mm @ z[i])
            if abs(m - 1) <= SUPPORT_TOL:
                support += 1
                ok = ok and bool(gamma[i, t] < gamma[i, sel[i]])
            else:
                next_margin = min(next_margin, m)
    return ok, support, next_margin


def train(kind, model, x, y, z, v, steps, trace, floor, reg):
    params = model.params()
    opt = torch.optim.SGD(params, lr=LR)
    snaps, nonfinite, first_bad = {}, 0, None
    for it in range(1, steps + 1):
        opt.zero_grad()
        attn, out = model(x, z, v)
        loss = torch.log(1 + torch.exp(-y * out)).mean()
        if kind == "kq" and reg:
            loss = loss + EPS * (model.key.weight.norm() ** 2 + model.query.weight.norm() ** 2)
        loss.backward()
        for p in params:
            p.grad /= p.grad.norm() + (EPS if floor else 0.0)
            if not torch.isfinite(p.grad).all():
                nonfinite += 1
                first_bad = it if first_bad is None else first_bad
        opt.step()
        if it in trace:
            top = attn.detach().max(dim=-1)
            snaps[it] = (model.svm_matrix(), float(top.values.mean()), float(loss.detach()))
    return snaps, top.indices.view(-1).numpy(), nonfinite, first_bad


def run_one(kind, model, data, args, trace):
    x, y, z, v = data
    xn, zn = x.numpy(), z.numpy()
    gamma = (y.view(-1, 1) * (x @ v)).numpy()  # token scores y_i v^T x_it
    best = gamma.argmax(axis=1)
    clock = time.perf_counter()
    snaps, sel, nonfinite, first_bad = train(kind, model, x, y, z, v, args.steps, trace,
                                  not args.no_floor, not args.no_reg)
    train_s = time.perf_counter() - clock
    W, maxprob, loss = snaps[args.steps]
    diverged = not (np.isfinite(W).all() and math.isfinite(maxprob))
    if diverged:  # the selection is an argmax over NaNs: meaningless, no SVM for it
        fro, fro_status, nuc, nuc_status = None, "skipped (diverged)", None, "skipped"
    else:
        fro, fro_status = svm(xn, zn, sel, "fro")
        nuc, nuc_status = svm(xn, zn, sel, "nuc")
    best_fro, best_status = svm(xn, zn, best, "fro")
    res = {
        "param": kind, "corr_fro": corr(W, fro), "corr_nuc": corr(W, nuc),
        "norm_W": float(np.linalg.norm(W)), "rank_W": rank(W),
        "rank_fro": rank(fro), "rank_nuc": rank(nuc),
        "sel_is_best": None if diverged else float((sel == best).mean()), "max_prob": maxprob, "loss": loss,
        "best_feasible": best_fro is not None, "best_status": best_status,
        "svm_status": [fro_status, nuc_status], "nonfinite_grad_steps": nonfinite, "first_nonfinite_step": first_bad,
        "selection": None if diverged else sel.tolist(), "best": best.tolist(), "train_seconds": train_s,
        "trace": [{"step": s, "corr_fro": corr(snaps[s][0], fro),
                   "corr_nuc": corr(snaps[s][0], nuc),
                   "norm_W": float(np.linalg.norm(snaps[s][0])), "max_prob": snaps[s][1],
                   "loss": snaps[s][2]} for s in sorted(snaps)],
    }
    if args.local and fro is not None:
        ok, support, nxt = local_optimality(xn, zn, gamma, sel, fro)
        res.update(locally_optimal=ok, support_tokens=support, next_margin=nxt,
                   globally_optimal=bool((sel == best).all()))
    return res


def fmt(val, spec):
    if val is None:
        return "-"
    if isinstance(val, bool):
        return "yes" if val else "no"
    return format(val, spec)


COLUMNS = [("corr_fro", "corrF", ".4f"), ("corr_nuc", "corrN", ".4f"),
           ("norm_W", "|W|F", ".2f"), ("rank_W", "rkW", "d"), ("rank_fro", "rkF", "d"),
           ("rank_nuc", "rkN", "d"), ("sel_is_best", "sel=best", ".3f"),
           ("max_prob", "maxprob", ".6f"), ("best_feasible", "bestfeas", "")]
LOCAL_COLUMNS = [("locally_optimal", "locopt", ""), ("support_tokens", "nsupp", "d"),
                 ("next_margin", "nextm", ".3f")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--param", choices=["w", "kq", "both"], default="both")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--T", type=int, default=8)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--trace", default="", help="steps to report along the way")
    ap.add_argument("--from", dest="dump", help="folder with x,z,y,v .f64 (mechlab dump)")
    ap.add_argument("--no-floor", action="store_true", help="divide by ||g||, no +eps")
    ap.add_argument("--no-reg", action="store_true", help="drop the (K,Q) eps penalty")
    ap.add_argument("--local", action="store_true",
                    help="also check Definition 2 (local optimality) of the selection")
    ap.add_argument("--json", help="write per-seed results here")
    args = ap.parse_args()
    kinds = ["w", "kq"] if args.param == "both" else [args.param]
    trace = sorted({s for s in parse_ints(args.trace) if 0 < s <= args.steps} | {args.steps})
    print(f"# torch {torch.__version__}, cvxpy {cp.__version__} (default solver), "
          f"threads {torch.get_num_threads()}; {' '.join(sys.argv[1:])}")
    clock = time.perf_counter()
    results = []
    for seed in parse_ints(args.seeds):
        if args.dump:
            data = load_dump(args.dump, args.n, args.T, args.d)
        else:
            data = generate(seed, args.n, args.T, args.d)
        torch.manual_seed(seed)  # our choice: the notebook leaves the global RNG unseeded
        models = {k: CrossAttention(args.d, k).double() for k in ("w", "kq")}
        for kind in kinds:
            res = run_one(kind, models[kind], data, args, set(trace))
            res["seed"] = seed
            results.append(res)
    wall = time.perf_counter() - clock

    cols = COLUMNS + (LOCAL_COLUMNS if args.local else [])
    head = f"{'seed':>4} {'par':>3} " + " ".join(f"{h:>9}" for _, h, _ in cols)
    print("\n## final (step %d)" % args.steps)
    print(head)
    for r in results:
        print(f"{r['seed']:>4} {r['param']:>3} "
              + " ".join(f"{fmt(r.get(k), s):>9}" for k, _, s in cols))
    print("\n## min / median / max over seeds")
    for kind in kinds:
        rs = [r for r in results if r["param"] == kind]
        for k, h, s in cols:
            vals = [float(r[k]) for r in rs if r.get(k) is not None]
            good = [x for x in vals if math.isfinite(x)]
            note = f"  ({len(rs) - len(good)} of {len(rs)} missing/non-finite)" \
                if len(good) < len(rs) else ""
            if good:
                print(f"{kind:>3} {h:>9}: {min(good):.4g} / {np.median(good):.4g} / "
                      f"{max(good):.4g}{note}")
    if len(trace) > 1:
        print("\n## trace (corr against the final selection's SVMs)")
        print(f"{'seed':>4} {'par':>3} {'step':>6} {'corrF':>8} {'corrN':>8} "
              f"{'|W|F':>9} {'maxprob':>9}")
        for r in results:
            for t in r["trace"]:
                print(f"{r['seed']:>4} {r['param']:>3} {t['step']:>6} {t['corr_fro']:>8.4f} "
                      f"{t['corr_nuc']:>8.4f} {t['norm_W']:>9.3f} {t['max_prob']:>9.6f}")
        print("\n## trace, min / median / max over seeds")
        for kind in kinds:
            for i, step in enumerate(trace):
                row = [r["trace"][i] for r in results if r["param"] == kind]
                parts = []
                for k in ("corr_fro", "corr_nuc", "norm_W", "max_prob"):
                    vals = [t[k] for t in row if math.isfinite(t[k])]
                    parts.append(f"{k} {min(vals):.4g}/{np.median(vals):.4g}/{max(vals):.4g}"
                                 if vals else f"{k} nan")
                nan = len(row) - sum(math.isfinite(t["corr_fro"]) for t in row)
                parts += [f"({nan} non-finite)"] if nan else []
                print(f"{kind:>3} {step:>6}: " + "  ".join(parts))
    bad = [(r["seed"], r["param"], r["nonfinite_grad_steps"], r["first_nonfinite_step"])
           for r in results if r["nonfinite_grad_steps"]]
    if bad:
        print("\n# non-finite normalised gradient (seed, param, steps, first step):", bad)
    print(f"\n# wall {wall:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv[1:], "torch": torch.__version__,
                       "cvxpy": cp.__version__, "wall_seconds": wall, "results": results},
                      f, indent=1)


if __name__ == "__main__":
    main()
