"""Compares mechlab's BERT encoder with transformers.BertModel on the same folder.

Reads OUT/activations.safetensors and OUT/meta.json written by the bench_bert
example, runs BertModel (eager attention, float32) on the same token ids with the
same padding masks, prints the largest absolute differences of the hidden states
and attention probabilities (real query positions only), and checks that the
Hugging Face tokenizer gives mechlab's ids. Speed is speed.py's, interleaved with
mechlab's passes by run.sh. With --golden FILE it also writes the small golden file the Rust test
reads (reference activations from BertModel, not from mechlab).

usage: python compare.py OUT [--golden FILE]
"""
import json
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import AutoTokenizer, BertModel

torch.set_num_threads(2)
out = sys.argv[1]
meta = json.load(open(f"{out}/meta.json"))
acts = load_file(f"{out}/activations.safetensors")
model_dir = meta["model"]
model = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval().float()
tok = AutoTokenizer.from_pretrained(model_dir)
nl = meta["n_layers"]
pad = model.config.pad_token_id or 0


def run(ids, attentions=True):
    ids = torch.from_numpy(np.asarray(ids, dtype=np.int64))
    mask = (ids != pad).long()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=attentions,
                     output_attentions=attentions)


# --- tokenizer agreement ---
mechlab_ids = {}
for k in range(meta["n_batches"]):
    for row in acts[f"b{k}.ids"]:
        seq = [int(t) for t in row if t != pad]
        mechlab_ids[tuple(seq)] = True
hf = [tok(t, truncation=True, max_length=64)["input_ids"] for t in meta["texts"]]
tok_mismatch = sum(tuple(h) not in mechlab_ids for h in hf)

# --- activations ---
max_h, max_a = np.zeros(nl + 1), np.zeros(nl)
for k in range(meta["n_batches"]):
    ids = acts[f"b{k}.ids"]
    o = run(ids)
    real = ids != pad  # [B, T]
    for l in range(nl + 1):
        d = np.abs(o.hidden_states[l].numpy() - acts[f"b{k}.hidden{l}"])[real]
        max_h[l] = max(max_h[l], d.max())
    for l in range(nl):
        d = np.abs(o.attentions[l].numpy() - acts[f"b{k}.attn{l}"])  # [B, H, Tq, Tk]
        d = d.transpose(0, 2, 1, 3)[real]
        max_a[l] = max(max_a[l], d.max())

print(f"sentences: {len(meta['texts'])}, tokenizer mismatches vs Hugging Face: {tok_mismatch}")
print("max |hidden diff| per layer (0 = embeddings):", " ".join(f"{x:.2e}" for x in max_h))
print("max |attention diff| per layer:             ", " ".join(f"{x:.2e}" for x in max_a))
print(f"max |hidden diff| {max_h.max():.2e} (target < 1e-4), max |attention diff| {max_a.max():.2e} (target < 1e-5)")
ok = max_h.max() < 1e-4 and max_a.max() < 1e-5 and tok_mismatch == 0

# --- golden file for the Rust test ---
if "--golden" in sys.argv:
    path = sys.argv[sys.argv.index("--golden") + 1]
    texts = ["The Roman Empire was the post-Republican state of ancient Rome.",
             "Photosynthesis converts light energy into chemical energy.",
             "Jazz is a music genre."]
    enc = tok(texts, padding=True, return_tensors="np")
    ids = enc["input_ids"].astype(np.int64)
    o = run(ids)
    layers = [0, 3, nl]
    g = {"ids": ids,
         "hidden": np.stack([o.hidden_states[l].numpy() for l in layers]).astype(np.float32),
         "attn": np.stack([o.attentions[l].numpy() for l in (0, nl - 1)]).astype(np.float32)}
    save_file(g, path, metadata={"texts": json.dumps(texts), "hidden_layers": json.dumps(layers),
                                 "attn_layers": json.dumps([0, nl - 1]),
                                 "source": f"transformers {__import__('transformers').__version__} BertModel, torch {torch.__version__}, {model_dir}"})
    print(f"golden file: {path}")
sys.exit(0 if ok else 1)
