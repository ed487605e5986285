"""What the general experiment's conveniences cost, each against the same run
without them, interleaved A B A B:

- the generator path: batches from a Python function (slices of one array)
  against the same windows stored as an array (data.inputs = "arrays");
- the telemetry: probes every `run.probe_every` = 50 steps (the default: loss,
  detectors, composition, lens on 64 held-out windows) against probes only at
  the checkpoint steps (`probe_every = 0` with checkpoints every 1 000).

Usage: python bench/transformer/overheads.py [REPS]  (mechlab installed; prints
the processor, the build the package was made with is the caller's to say).
"""

import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mechlab

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
STEPS = 600
rng = np.random.default_rng(0)
TOK = rng.integers(0, 64, size=(32 * STEPS, 65))
tmp = Path(tempfile.mkdtemp())
BASE = {"model": {"d_model": 128, "n_heads": 4, "d_head": 32}, "train.steps": STEPS, "data.heldout_frac": 0.01}


def from_arrays(i: int, probe_every: int = 50) -> float:
    t0 = time.perf_counter()
    mechlab.train({**BASE, "run.probe_every": probe_every}, tokens=TOK, out=tmp / f"a{i}-{probe_every}", quiet=True)
    return time.perf_counter() - t0


def from_generator(i: int) -> float:
    def gen(step: int, r: np.random.Generator) -> np.ndarray:
        s = max(step, 0) % STEPS
        return TOK[s * 32 : (s + 1) * 32]

    t0 = time.perf_counter()
    mechlab.train({**BASE, "model.d_vocab": 64, "run.probe_every": 50}, generator=gen, out=tmp / f"g{i}", quiet=True)
    return time.perf_counter() - t0


cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"{cpu}; {STEPS} steps of 32 windows of 64 positions, d_model 128, 2 layers; {REPS} interleaved pairs")
arr, gen, quiet = [], [], []
for i in range(REPS):
    arr.append(from_arrays(i))
    gen.append(from_generator(i))
    quiet.append(from_arrays(i, probe_every=0))
med = lambda x: float(np.median(x))
print(f"arrays, probes every 50:    median {med(arr):.2f} s  {['%.2f' % x for x in arr]}")
print(f"generator, probes every 50: median {med(gen):.2f} s  {['%.2f' % x for x in gen]}  ratio {med(gen) / med(arr):.3f}")
print(f"arrays, probes at checkpoints only: median {med(quiet):.2f} s  {['%.2f' % x for x in quiet]}  "
      f"telemetry share {(med(arr) - med(quiet)) / med(arr):.1%}")
