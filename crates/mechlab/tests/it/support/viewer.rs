//! A run's attention viewer (`figures/<id>.json`) against the activation file
//! it cites: every weight the report's viewer shows is the one recorded.

use mechlab_report::{Figure, Plot};
use safetensors::SafeTensors;
use std::path::Path;

/// Checks viewer `id` of the run in `run` weight for weight against its
/// activations; returns how many heads it shows.
pub fn viewer_matches_activations(run: &Path, id: &str) -> usize {
    let path = run.join("figures").join(format!("{id}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fig: Figure = serde_json::from_str(&text).unwrap();
    let Plot::Attention {
        tokens,
        query_tokens,
        heads,
        pattern,
        source,
        ..
    } = fig.plot
    else {
        panic!("{id} is not an attention viewer")
    };
    let src = source.expect("the viewer cites its activations");
    let bytes = std::fs::read(run.join(&src.file)).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let nk = tokens.len();
    let nq = mechlab_report::spec::attention_queries(&tokens, &query_tokens).len();
    assert_eq!(pattern.len(), heads.len() * nq * nk, "{id}");
    for (i, h) in heads.iter().enumerate() {
        let t = st
            .tensor(&h.hook)
            .unwrap_or_else(|e| panic!("{id}: {}: {e}", h.hook));
        let s = t.shape();
        assert_eq!(s.len(), 4, "{}: [batch, head, query_pos, key_pos]", h.hook);
        let act: Vec<f64> = t
            .data()
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        for q in 0..nq {
            for k in 0..nk {
                let want = act[((src.batch * s[1] + h.head) * s[2] + q) * s[3] + k];
                assert_eq!(
                    pattern[(i * nq + q) * nk + k],
                    want,
                    "{id} {} q{q} k{k}",
                    h.name
                );
            }
        }
    }
    heads.len()
}
