//! How the data-side work of the induction experiment scales with S: seconds to
//! generate 9 000 sequences of L = 100, to score one parent set with the modified
//! χ² MI (dense counts up to `S^(|P|+1)` = 1 024, sorted pair counts above), and
//! to run the whole parent-set search of H = 3 (15 sets) and H = 5 (45 sets), D = 2.
//! `induction_mi_scaling [S ...]` (default 3 10 32 64 256).

use mechlab::papers::induction::data::{generate, modified_chi2_mi, MarkovSpec};
use mechlab::papers::induction::probes::{mi_argmax, mi_search};
use std::time::Instant;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![3, 10, 32, 64, 256]
    } else {
        sizes
    };
    println!("S | generate (s) | one set |P|=1, 2, 3 (ms) | search H=3 (s) | search H=5 (s)");
    for s in sizes {
        let spec = MarkovSpec {
            vocab: s,
            n_seqs: 9000,
            ..MarkovSpec::default()
        };
        let t = Instant::now();
        let d = generate(&spec, 1).expect("valid spec");
        let gen = t.elapsed().as_secs_f64();
        let one: Vec<f64> = [vec![1], vec![1, 2], vec![1, 2, 3]]
            .iter()
            .map(|p| {
                let t = Instant::now();
                std::hint::black_box(modified_chi2_mi(&d, p, 2.0));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let search = |h: usize| {
            let (w, k) = mi_search(2 * h - 1, 2);
            let t = Instant::now();
            let (best, _) = mi_argmax(&d, w, k, 2.0);
            (t.elapsed().as_secs_f64(), best)
        };
        let (s3, b3) = search(3);
        let (s5, b5) = search(5);
        println!(
            "{s} | {gen:.2} | {:.1}, {:.1}, {:.1} | {s3:.2} ({b3:?}) | {s5:.2} ({b5:?})",
            one[0], one[1], one[2]
        );
    }
}
