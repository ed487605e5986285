//! Targets for mechlab's own inputs: a config file with `--set` overrides, and a
//! checkpoint file.

use mechlab::config;
use mechlab::run::checkpoint;

use crate::corpora::assert_one_line;
use crate::scratch;

/// Config resolution: the input up to the first NUL is a config file, each line
/// after it a `--set` override. A config that resolves must survive being saved
/// as a run's `config.toml` and read back (what `mechlab resume` does).
pub fn config(data: &[u8]) {
    let (file, sets) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let overrides: Vec<String> = String::from_utf8_lossy(sets)
        .lines()
        .take(16)
        .map(str::to_string)
        .collect();
    let path = scratch::file("fuzz.toml", file);
    let resolved = match mechlab::commands::resolve(
        &mechlab::papers::registry(),
        &path.display().to_string(),
        &overrides,
        None,
    ) {
        Ok(r) => r,
        Err(e) => return assert_one_line(&e.to_string()),
    };
    let text = toml::to_string(&resolved.table).expect("a resolved table serialises");
    let back = config::parse(&text, "config.toml").expect("a saved config parses");
    assert_eq!(
        toml::to_string(&back).expect("a parsed table serialises"),
        text,
        "the config changed on a round trip"
    );
}

/// The checkpoint reader, at both float widths; a checkpoint that loads must pass
/// its own integrity check.
pub fn checkpoint(data: &[u8]) {
    let path = scratch::file("step_000001.safetensors", data);
    for r in [
        checkpoint::load::<f64>(&path).map(|_| ()),
        checkpoint::load::<f32>(&path).map(|_| ()),
    ] {
        if let Err(e) = r {
            assert_one_line(&e.to_string());
        }
    }
}
