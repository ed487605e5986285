"""One timed forward pass of transformers.BertModel over the speed batches that
bench_bert wrote to OUT/meta.json (after one warm-up pass), on 2 threads, with
the attention implementation given ("eager" or "sdpa"); prints {"seconds": ..}.
run.sh interleaves it with mechlab's `bench_bert --speed` passes.

usage: python speed.py OUT eager|sdpa
"""
import json
import sys
import time

import numpy as np
import torch
from transformers import BertModel

torch.set_num_threads(2)
out, impl = sys.argv[1], sys.argv[2]
meta = json.load(open(f"{out}/meta.json"))
model = BertModel.from_pretrained(meta["model"], attn_implementation=impl).eval().float()
pad = model.config.pad_token_id or 0
batches = [torch.from_numpy(np.asarray(b["ids"], dtype=np.int64).reshape(b["batch"], b["seq_len"]))
           for b in meta["speed_batches"]]
for _ in range(2):
    t0 = time.perf_counter()
    with torch.no_grad():
        for ids in batches:
            model(input_ids=ids, attention_mask=(ids != pad).long())
    secs = time.perf_counter() - t0
print(json.dumps({"seconds": secs, "torch": torch.__version__, "impl": impl}))
