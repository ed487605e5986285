//! The topic MLM's fused per-document kernel against a reference assembled from
//! engine layers, llm.c style: the same mean loss and every parameter gradient,
//! in f64, to 1e-10 relative, for the config that exercises every part (trained
//! embeddings with BERT's embedding layer norm, trained attention and values,
//! residual, final layer norm, trained decoder, cross-entropy).
//!
//! Per document the reference runs `embedding` (+ token type) → `layernorm` →
//! three `linear` projections (queries only at labelled positions) → `attention`
//! (hidden keys masked) → residual → `layernorm` → `linear` decoder →
//! `loss::cross_entropy_logits`, and back the same way. Weights are TransformerLens
//! `[in, out]` in the model and `[out, in]` in the engine's `linear`, so the
//! reference transposes them.

use mechlab::papers::topic::data::{MlmSet, NO_LABEL};
use mechlab::papers::topic::model::*;
use mechlab_engine::layers::attention::{Attention, AttnExtras};
use mechlab_engine::layers::loss::{cross_entropy_logits, Reduction};
use mechlab_engine::layers::{embedding, layernorm, linear};

fn transpose(m: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; m.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = m[r * cols + c];
        }
    }
    t
}

/// Three documents over `v` tokens, some positions hidden and labelled.
fn set(v: u32) -> MlmSet {
    let lens = [5usize, 7, 4];
    let mut offsets = vec![0];
    let (mut input, mut label, mut hidden) = (Vec::new(), Vec::new(), Vec::new());
    for (doc, &len) in lens.iter().enumerate() {
        for i in 0..len {
            let tok = ((doc * 3 + i * 5 + doc * i) as u32) % v;
            let masked = (i + doc) % 3 == 0;
            input.push(tok);
            hidden.push(masked);
            // labelled: the masked positions and one visible one per document
            let lab = masked || i == 1;
            label.push(if lab { (tok + 1) % v } else { NO_LABEL });
        }
        offsets.push(input.len());
    }
    MlmSet {
        offsets,
        original: input.clone(),
        input,
        label,
        hidden,
    }
}

/// `(mean loss, gradient per parameter slot)` from engine layers.
fn reference(p: &[Vec<f64>], set: &MlmSet, v: usize, d: usize) -> (f64, Vec<Vec<f64>>) {
    let mut g: Vec<Vec<f64>> = p.iter().map(|x| vec![0.0; x.len()]).collect();
    let t = |s: usize| transpose(&p[s], d, if s == W_U { v } else { d });
    let (wq, wk, wv, wu) = (t(W_Q), t(W_K), t(W_V), t(W_U));
    let (mut dwq, mut dwk, mut dwv, mut dwu) = (
        vec![0.0; d * d],
        vec![0.0; d * d],
        vec![0.0; d * d],
        vec![0.0; v * d],
    );
    let docs: Vec<u32> = (0..set.len() as u32).collect();
    let inv_n = 1.0 / set.n_labels(&docs) as f64;
    let mut total = 0.0;
    for doc in 0..set.len() {
        let r = set.range(doc);
        let ids: Vec<usize> = set.input[r.clone()].iter().map(|&x| x as usize).collect();
        let keep: Vec<bool> = set.hidden[r.clone()].iter().map(|h| !h).collect();
        let qpos: Vec<usize> = (0..ids.len())
            .filter(|&j| set.label[r.start + j] != NO_LABEL)
            .collect();
        let labels: Vec<Option<usize>> = qpos
            .iter()
            .map(|&j| Some(set.label[r.start + j] as usize))
            .collect();
        let (l, s) = (ids.len(), qpos.len());
        // --- forward ---
        let mut pre = vec![0.0; l * d];
        embedding::forward(&mut pre, &ids, &p[W_E], d);
        for row in pre.chunks_mut(d) {
            row.iter_mut()
                .zip(&p[TOKEN_TYPE])
                .for_each(|(a, b)| *a += *b);
        }
        let (mut h0, mut m0, mut r0) = (vec![0.0; l * d], vec![0.0; l], vec![0.0; l]);
        let (ge, be) = (&p[EMB_LN_W], &p[EMB_LN_B]);
        layernorm::forward(&mut h0, &mut m0, &mut r0, &pre, ge, be, l, d, LN_EPS);
        let hq: Vec<f64> = qpos
            .iter()
            .flat_map(|&j| h0[j * d..(j + 1) * d].to_vec())
            .collect();
        let (mut q, mut k, mut vv) = (vec![0.0; s * d], vec![0.0; l * d], vec![0.0; l * d]);
        linear::forward(&mut q, &hq, &wq, Some(&p[B_Q]), s, d, d);
        linear::forward(&mut k, &h0, &wk, Some(&p[B_K]), l, d, d);
        linear::forward(&mut vv, &h0, &wv, Some(&p[B_V]), l, d, d);
        let attn = Attention::new(1, s, l, d, d);
        let ex = AttnExtras {
            key_mask: Some(&keep),
            ..AttnExtras::default()
        };
        let (mut z, mut pat) = (vec![0.0; s * d], vec![0.0; s * l]);
        attn.forward(&mut z, &mut pat, &q, &k, &vv, &ex);
        let resid: Vec<f64> = z.iter().zip(&hq).map(|(a, b)| a + b).collect();
        let (mut y, mut m1, mut r1) = (vec![0.0; s * d], vec![0.0; s], vec![0.0; s]);
        layernorm::forward(
            &mut y, &mut m1, &mut r1, &resid, &p[LN_W], &p[LN_B], s, d, LN_EPS,
        );
        let mut logits = vec![0.0; s * v];
        linear::forward(&mut logits, &y, &wu, Some(&p[B_U]), s, d, v);
        let mut dlogits = vec![0.0; s * v];
        total += cross_entropy_logits(&mut dlogits, &logits, &labels, v, Reduction::Sum).loss;
        // --- backward ---
        dlogits.iter_mut().for_each(|x| *x *= inv_n);
        let mut dy = vec![0.0; s * d];
        let (gu, rest) = g.split_at_mut(B_U);
        linear::backward(
            Some(&mut dy),
            &mut dwu,
            Some(&mut rest[0]),
            &dlogits,
            &y,
            &wu,
            s,
            d,
            v,
        );
        let mut dresid = vec![0.0; s * d];
        {
            let (gw, gb) = gu.split_at_mut(LN_B);
            layernorm::backward(
                &mut dresid,
                Some(&mut gw[LN_W]),
                Some(&mut gb[0]),
                &dy,
                &resid,
                &m1,
                &r1,
                &p[LN_W],
                s,
                d,
            );
        }
        let (mut dq, mut dk, mut dv) = (vec![0.0; s * d], vec![0.0; l * d], vec![0.0; l * d]);
        let mut scratch = vec![0.0; s * l];
        attn.backward(
            &mut dq,
            &mut dk,
            &mut dv,
            None,
            &mut scratch,
            &dresid,
            &pat,
            &q,
            &k,
            &vv,
        );
        let mut dhq = dresid.clone(); // the residual branch
        let mut dh0 = vec![0.0; l * d];
        linear::backward(
            Some(&mut dhq),
            &mut dwq,
            Some(&mut g[B_Q]),
            &dq,
            &hq,
            &wq,
            s,
            d,
            d,
        );
        linear::backward(
            Some(&mut dh0),
            &mut dwk,
            Some(&mut g[B_K]),
            &dk,
            &h0,
            &wk,
            l,
            d,
            d,
        );
        linear::backward(
            Some(&mut dh0),
            &mut dwv,
            Some(&mut g[B_V]),
            &dv,
            &h0,
            &wv,
            l,
            d,
            d,
        );
        for (r, &j) in qpos.iter().enumerate() {
            dh0[j * d..(j + 1) * d]
                .iter_mut()
                .zip(&dhq[r * d..(r + 1) * d])
                .for_each(|(a, b)| *a += *b);
        }
        let mut dpre = vec![0.0; l * d];
        {
            let (lo, hi) = g.split_at_mut(EMB_LN_B);
            layernorm::backward(
                &mut dpre,
                Some(&mut lo[EMB_LN_W]),
                Some(&mut hi[0]),
                &dh0,
                &pre,
                &m0,
                &r0,
                ge,
                l,
                d,
            );
        }
        for row in dpre.chunks(d) {
            g[TOKEN_TYPE]
                .iter_mut()
                .zip(row)
                .for_each(|(a, b)| *a += *b);
        }
        embedding::backward(&mut g[W_E], &ids, &dpre, d);
    }
    g[W_Q] = transpose(&dwq, d, d);
    g[W_K] = transpose(&dwk, d, d);
    g[W_V] = transpose(&dwv, d, d);
    g[W_U] = transpose(&dwu, v, d);
    (total * inv_n, g)
}

#[test]
fn topic_kernel_matches_engine_layers() {
    let (v, d) = (6, 4);
    let cfg = TopicMlmConfig {
        dtype: mechlab::experiment::Dtype::F64,
        d_model: d,
        embedding: EmbedKind::Trained,
        attention: AttnKind::Trained,
        value: ValueKind::Trained,
        decoder: DecoderKind::Trained,
        residual: true,
        layer_norm: true,
        loss: LossKind::CrossEntropy,
        bert_embedding_ln: true,
        ..TopicMlmConfig::default()
    };
    let set = set(v as u32);
    let topics: Vec<usize> = (0..v).map(|i| i % 2).collect();
    let mut m = TopicMlm::<f64>::new(&cfg, v, &topics, set.max_len(), 4).unwrap();
    // a generic point: layer-norm gains off 1, biases off 0
    let mut k = 0;
    for p in m.p.iter_mut() {
        for x in p.value_mut() {
            *x += 0.3 * (k as f64 * 0.7).sin();
            k += 1;
        }
        p.grad_mut().iter_mut().for_each(|x| *x = 0.0);
    }
    let values: Vec<Vec<f64>> = m.p.iter().map(|p| p.value().to_vec()).collect();
    let docs: Vec<u32> = (0..set.len() as u32).collect();
    let loss = m.forward_backward(&set, &docs);
    let (want, grads) = reference(&values, &set, v, d);
    assert!(
        (loss - want).abs() <= 1e-10 * want.abs(),
        "loss: fused {loss} vs reference {want}"
    );
    for (slot, want) in grads.iter().enumerate() {
        assert!(m.trains(slot), "slot {slot} is not trained in this config");
        let got = m.p[slot].grad();
        if slot == B_K {
            // q·b_K shifts every key's logit equally, so ∂L/∂b_K = 0 exactly: both
            // sides are rounding noise
            let noise = got.iter().chain(want).fold(0.0f64, |a, x| a.max(x.abs()));
            assert!(
                noise < 1e-14,
                "b_K gradient {noise:e} is not rounding noise"
            );
            continue;
        }
        let scale = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
        assert!(scale > 0.0, "{}: zero reference gradient", m.p[slot].name());
        assert!(
            err <= 1e-10 * scale,
            "{}: {err:e} vs scale {scale:e}",
            m.p[slot].name()
        );
    }
}
