"""Phase times of mechlab runs beside the authors' algorithm's, over seeds, with
the tests docs/markov-icl.md quotes ("The authors' setting").

usage: compare_seeds.py --mechlab RUN_DIR... --authors PORT_JSON...

RUN_DIR: `mechlab run markov-icl --set seed=N ...` folders (summary.json metrics
`phase.{last,all}.*`); PORT_JSON: `authors_port.py --json` files (one seed each
or several). Prints, per phase and metric (last = the authors' last-token metric,
all = ours over every position), each side's times by seed, median, quartiles
and range, then Mann-Whitney (shift), Kolmogorov-Smirnov (law) and
Brown-Forsythe on log times (spread). A phase never reached counts as later than
every reached one (the rank tests); the spread test caps it at the run's length.
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

PHASES = ["below_unigram", "half_to_bigram", "bigram_closest"]


def mechlab_times(dirs):
    out = {}
    for d in dirs:
        s = json.loads((Path(d) / "summary.json").read_text())
        m = s["metrics"]
        out[s["seed"]] = {
            (metric, p): m.get(f"phase.{metric}.{p}", math.inf) for metric in ["last", "all"] for p in PHASES
        }
    return out


def port_times(files):
    out = {}
    for f in files:
        d = json.loads(Path(f).read_text())
        for r in d["runs"]:
            s = r["summary"]
            seed = r.get("seed", d["args"]["seeds"])
            out[int(seed)] = {
                (metric, p): (lambda v: math.inf if v is None else float(v))(s[f"phases_{metric}"].get(p))
                for metric in ["last", "all"]
                for p in PHASES
            }
    return out


def describe(xs):
    a = np.array(xs, float)
    q = np.quantile(np.where(np.isfinite(a), a, np.inf), [0.25, 0.5, 0.75], method="linear")
    fmt = lambda v: "never" if not np.isfinite(v) else f"{v:.0f}"
    f = a[np.isfinite(a)]
    sd = f"{f.std(ddof=1):.0f}" if len(f) > 1 else "-"
    return (f"median {fmt(q[1])}, quartiles {fmt(q[0])}-{fmt(q[2])}, range {fmt(a.min())}-{fmt(a.max())}, "
            f"sd {sd} over the {len(f)} reached")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mechlab", nargs="+", required=True)
    ap.add_argument("--authors", nargs="+", required=True)
    ap.add_argument("--cap", type=float, default=None, help="steps of the runs (default: the largest time + 1)")
    a = ap.parse_args()
    ours, theirs = mechlab_times(a.mechlab), port_times(a.authors)
    for key in [(m, p) for m in ["last", "all"] for p in PHASES]:
        x = [ours[s][key] for s in sorted(ours)]
        y = [theirs[s][key] for s in sorted(theirs)]
        finite = [v for v in x + y if math.isfinite(v)]
        cap = a.cap or (max(finite) + 1 if finite else 1)
        xc, yc = np.minimum(x, cap), np.minimum(y, cap)
        print(f"== {key[1]}, {key[0]} metric")
        print(f"  mechlab seeds {sorted(ours)}: {x}\n    {describe(x)}")
        print(f"  authors' seeds {sorted(theirs)}: {y}\n    {describe(y)}")
        ymin, ymax = min(y), max(y)
        inside = sum(ymin <= v <= ymax for v in x)
        mw = stats.mannwhitneyu(xc, yc, alternative="two-sided").pvalue
        ks = stats.ks_2samp(xc, yc).pvalue
        bf = stats.levene(np.log(xc), np.log(yc), center="median").pvalue
        print(f"  ours inside their range: {inside}/{len(x)}; Mann-Whitney p = {mw:.3f}, "
              f"KS p = {ks:.3f}, Brown-Forsythe (log) p = {bf:.3f}")


if __name__ == "__main__":
    main()
