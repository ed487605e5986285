use mechlab::data::selection::*;
use mechlab::models::selection::*;
use mechlab::probes::selection as pr;
use mechlab::train::Trainable;
use mechlab_engine::Parameters;
use std::sync::Arc;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let eta: f64 = a[1].parse().unwrap();
    let lr: f64 = a[2].parse().unwrap();
    let steps: usize = a[3].parse().unwrap();
    let norm: bool = a[4] == "n";
    let cfg = SynthConfig::default();
    let mut rng = mechlab::rng::stream(0, mechlab::rng::Stream::Data);
    let d = Arc::new(generate(&cfg, cfg.n_train, &mut rng).unwrap());
    let mc = ModelConfig::default();
    let mut m = SelectionModel::<f64>::new(&mc, d.clone(), 0);
    m.set_trainable(&["embed".into()]);
    m.zero_grad();
    m.train_step(0);
    let g = m.w_e.grad().to_vec();
    for (x, gx) in m.w_e.value_mut().iter_mut().zip(&g) {
        *x -= eta * gx;
    }
    let dm = mc.d_model;
    let e = m.w_e.value().to_vec();
    let ev = pr::project(&e, dm, m.v.value());
    let sel = pr::selected_tokens(&d, &ev);
    let ok = sel.iter().zip(&d.signal).filter(|(a, b)| a == b).count();
    println!("selected==signal {ok}/{}", d.n);
    let pairs = pr::constraint_pairs(&d, &sel);
    let pmm = pr::max_margin(&e, dm, &pairs).unwrap();
    println!(
        "pairs {} |pmm| {:.3}",
        pairs.len(),
        pmm.iter().map(|x| x * x).sum::<f64>().sqrt()
    );
    m.set_trainable(&["cls".into()]);
    let t0 = std::time::Instant::now();
    for s in 0..steps {
        m.zero_grad();
        let loss = m.train_step(s as u64);
        let g = m.p.grad().to_vec();
        let gn = g.iter().map(|x| x * x).sum::<f64>().sqrt();
        let sc = if norm { lr / gn } else { lr };
        for (x, gx) in m.p.value_mut().iter_mut().zip(&g) {
            *x -= sc * gx;
        }
        if (s + 1).is_power_of_two() || s + 1 == steps {
            let (pat, _) = m.attend(&d);
            let ep = pr::project(&e, dm, m.p.value());
            let pn = m.p.value().iter().map(|x| x * x).sum::<f64>().sqrt();
            println!(
                "{:6} loss {:.4e} cos {:.5} mass {:.4} margin/|p| {:.4} |p| {:.2}",
                s + 1,
                loss,
                pr::cosine(m.p.value(), &pmm),
                pr::attention_mass(&d, &pat, &sel),
                pr::margin(&ep, &pairs) / pn,
                pn
            );
        }
    }
    println!("{:?}", t0.elapsed());
}
