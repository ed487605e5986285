//! The AFL entry point: `mechlab-fuzz TARGET` fuzzes the plain target function of
//! that name from the library (see `fuzz/run.sh`). Built only with the `afl`
//! feature, by `cargo afl build`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = mechlab_fuzz::target(&name) else {
        eprintln!(
            "unknown fuzz target `{name}`; targets: {}",
            mechlab_fuzz::TARGETS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| target(data));
}
