"""PyTorch's side of `bench_packed`'s encoder line: MiniLM's 36 linear maps in
order (q, k, v, o, MLP in, MLP out, six layers; random weights, 42 MB), on ROWS
rows, THREADS intra-op threads, best and median of 20 passes in GFLOP/s.

    bench/.venv/bin/python bench/bert/torch_linears.py [ROWS] [THREADS]

`bench_packed ROWS/2 2` runs the same FLOPs as two threads of ROWS/2 rows each (the
encoder's chunks); PyTorch splits each product over its threads instead.
"""
import sys
import time

import torch

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 512
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
torch.set_num_threads(threads)
maps = [(384, 384)] * 4 + [(384, 1536), (1536, 384)]
maps = maps * 6
weights = [(torch.randn(o, i), torch.randn(o)) for i, o in maps]
xs = {i: torch.randn(rows, i) for i in (384, 1536)}
flops = sum(2 * rows * i * o for i, o in maps)


def run():
    for (w, b), (i, _) in zip(weights, maps):
        torch.nn.functional.linear(xs[i], w, b)


run()
times = []
for _ in range(20):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
times.sort()
print(f"torch {torch.__version__}, {threads} thread(s), {rows} rows: encoder's 36 maps "
      f"{flops / times[0] / 1e9:6.1f} / {flops / times[10] / 1e9:6.1f} GFLOP/s (best / median)")
