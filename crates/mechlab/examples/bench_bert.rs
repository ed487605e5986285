//! Writes mechlab's BERT activations on Wikipedia first sentences, and the
//! `topic-bert` preset's text batched for the speed comparison, for
//! `bench/bert/compare.py`, which runs `transformers.BertModel` on the same token
//! ids and compares. With `--speed OUT_DIR` it times one forward pass over those
//! batches (after one warm-up pass), so that `bench/bert/run.sh` can interleave it
//! with PyTorch's passes.
//!
//! `RAYON_NUM_THREADS=2 cargo run --release --example bench_bert -- OUT_DIR [MODEL_DIR] [N_SENTENCES] [N_DOCS]`
//! `RAYON_NUM_THREADS=2 cargo run --release --example bench_bert -- --speed OUT_DIR`

use mechlab::papers::topic::WikiConfig;
use mechlab::papers::topic_bert::{article_order, batches_by_length, pad_batch, BertModelConfig};
use mechlab_corpora::wordpiece::PretrainedTokenizer;
use mechlab_engine::bert::{Bert, BertConfig};
use mechlab_engine::hooks::{Batch, HookedModel};
use mechlab_engine::matmul::{gemm_kernel, measured_peak_gflops};
use safetensors::tensor::{serialize_to_file, Dtype, TensorView};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// FLOPs of the encoder's matrix products on `batch` sequences of `t` pieces
/// (padding included: both implementations compute it): per layer the Q, K, V and
/// output projections and the two MLP products, `2·rows·(4d² + 2·d·d_mlp)`, and the
/// scores and the value mix, `2 · 2·batch·t²·d`. Layer norms, softmax and GELU
/// are left out (they are not matrix products).
fn encoder_flops(c: &BertConfig, batch: usize, t: usize) -> f64 {
    let (rows, d, f) = ((batch * t) as f64, c.d_model as f64, c.d_mlp as f64);
    let per_layer = 2.0 * rows * (4.0 * d * d + 2.0 * d * f) + 4.0 * (batch * t * t) as f64 * d;
    c.n_layers as f64 * per_layer
}

/// `--speed OUT_DIR`: one warm-up and one timed pass over the batches in
/// `OUT_DIR/meta.json`, then the 2-thread `gemm` peak measured again; prints
/// `{"seconds": .., "peak_gflops": ..}` on stdout. `run.sh` divides by the best
/// peak of the sitting: one measurement alone can fall in a slow minute of the
/// shared host and flatter the share.
fn speed(out: &Path) -> anyhow::Result<()> {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json"))?)?;
    let model = meta["model"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("meta.json: no model"))?;
    let mut bert = Bert::load(Path::new(model))?;
    let batches = meta["speed_batches"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("meta.json: no speed_batches"))?
        .iter()
        .map(|b| -> anyhow::Result<Batch> {
            let field = |key: &str| {
                b[key].as_u64().map(|v| v as usize).ok_or_else(|| {
                    anyhow::anyhow!("meta.json: a speed batch without a number \"{key}\"")
                })
            };
            let (batch, t) = (field("batch")?, field("seq_len")?);
            let ids: Vec<u32> = serde_json::from_value(b["ids"].clone())
                .map_err(|e| anyhow::anyhow!("meta.json: speed batch \"ids\": {e}"))?;
            anyhow::ensure!(
                ids.len() == batch * t,
                "meta.json: speed batch has {} ids, not batch × seq_len = {batch} × {t}",
                ids.len()
            );
            Ok(Batch::new(ids, batch, t))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut secs = 0.0;
    for _ in 0..2 {
        let t0 = Instant::now();
        for b in &batches {
            bert.run_with_cache(b, &[])?;
        }
        secs = t0.elapsed().as_secs_f64();
    }
    let threads = rayon::current_num_threads();
    let peak = measured_peak_gflops::<f32>(1024, threads, 8);
    println!(
        "{}",
        serde_json::json!({"seconds": secs, "threads": threads, "peak_gflops": peak})
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--speed") {
        let out = args
            .get(2)
            .ok_or_else(|| anyhow::anyhow!("usage: bench_bert --speed OUT_DIR"))?;
        return speed(Path::new(out));
    }
    let out = PathBuf::from(args.get(1).ok_or_else(|| {
        anyhow::anyhow!("usage: bench_bert OUT_DIR [MODEL_DIR] [N_SENTENCES] [N_DOCS]")
    })?);
    let model_cfg = BertModelConfig::default();
    let model = args.get(2).cloned().unwrap_or(model_cfg.path.clone());
    let n_sent: usize = args.get(3).map_or(Ok(300), |s| s.parse())?;
    let n_docs: usize = args.get(4).map_or(Ok(300), |s| s.parse())?;
    std::fs::create_dir_all(&out)?;
    let dir = Path::new(&model);
    let mut bert = Bert::load(dir)?;
    let tok = PretrainedTokenizer::from_dir(dir)?;
    let wiki = WikiConfig::default();
    let articles = mechlab_corpora::wikipedia::load_articles(
        &mechlab_corpora::wikipedia::data_root().join(&wiki.file),
    )?;
    let dev: Vec<usize> = article_order(articles.len(), 0)[..wiki.n_dev].to_vec();
    let (nl, pad) = (bert.config.n_layers, bert.config.pad_token_id);

    // --- activations on first sentences ---
    let texts: Vec<String> = dev
        .iter()
        .take(n_sent)
        .map(|&i| {
            articles[i]
                .text
                .split(". ")
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let enc = texts
        .iter()
        .map(|t| tok.encode(t, 64))
        .collect::<Result<Vec<_>, _>>()?;
    let lens: Vec<usize> = enc.iter().map(|e| e.ids.len()).collect();
    let batches = batches_by_length(&lens, 32);
    let mut names: Vec<String> = vec!["hook_full_embed".into()];
    names.extend((0..nl).map(|l| format!("blocks.{l}.hook_normalized_resid_post")));
    names.extend((0..nl).map(|l| format!("blocks.{l}.attn.hook_pattern")));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut tensors: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
    for (k, idx) in batches.iter().enumerate() {
        let seqs: Vec<&[u32]> = idx.iter().map(|&i| &enc[i].ids[..]).collect();
        let batch = pad_batch(&seqs, pad);
        let (_, cache) = bert.run_with_cache(&batch, &refs)?;
        let ids: Vec<u8> = batch
            .tokens
            .iter()
            .flat_map(|&t| (t as i64).to_le_bytes())
            .collect();
        tensors.push((format!("b{k}.ids"), ids, vec![batch.batch, batch.seq_len]));
        for (j, n) in names.iter().enumerate() {
            let t = &cache[n];
            let bytes: Vec<u8> = t
                .data
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect();
            let key = if j <= nl {
                format!("b{k}.hidden{j}")
            } else {
                format!("b{k}.attn{}", j - nl - 1)
            };
            tensors.push((key, bytes, t.shape.clone()));
        }
    }
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, b, s)| {
            let dt = if n.ends_with(".ids") {
                Dtype::I64
            } else {
                Dtype::F32
            };
            (
                n.clone(),
                TensorView::new(dt, s.clone(), b).expect("sizes match"),
            )
        })
        .collect();
    serialize_to_file(views, None, &out.join("activations.safetensors"))?;

    // --- speed on the preset's text ---
    let docs = dev
        .iter()
        .take(n_docs)
        .map(|&i| tok.encode(&articles[i].text, model_cfg.max_len))
        .collect::<Result<Vec<_>, _>>()?;
    let dl: Vec<usize> = docs.iter().map(|e| e.ids.len()).collect();
    let speed: Vec<_> = batches_by_length(&dl, model_cfg.batch_size)
        .iter()
        .map(|idx| {
            pad_batch(
                &idx.iter().map(|&i| &docs[i].ids[..]).collect::<Vec<_>>(),
                pad,
            )
        })
        .collect();
    let tokens: usize = dl.iter().sum();
    let flops: f64 = speed
        .iter()
        .map(|b| encoder_flops(&bert.config, b.batch, b.seq_len))
        .sum();
    let threads = rayon::current_num_threads();
    let peak = measured_peak_gflops::<f32>(1024, threads, 8);
    let meta = serde_json::json!({
        "model": model,
        "texts": texts,
        "n_layers": nl,
        "n_batches": batches.len(),
        "speed_batches": speed.iter().map(|b| serde_json::json!({"ids": b.tokens, "batch": b.batch, "seq_len": b.seq_len})).collect::<Vec<_>>(),
        "speed_tokens": tokens,
        "speed_flops": flops,
        "peak_gflops": peak,
        "gemm_kernel": gemm_kernel(),
        "threads": threads,
    });
    std::fs::write(out.join("meta.json"), serde_json::to_string(&meta)?)?;
    println!(
        "speed set: {tokens} tokens in {} batches, {:.2} GFLOP of matrix products; measured f32 peak {peak:.1} GFLOP/s ({threads} threads, gemm {})",
        speed.len(),
        flops / 1e9,
        gemm_kernel()
    );
    Ok(())
}
