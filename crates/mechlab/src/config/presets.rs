//! Presets: TOML configs embedded in the binary, listed by `mechlab list`.
//!
//! Each lives in `crates/mechlab/presets/<name>.toml`, names its `experiment`, and
//! carries a one-line `description`.

/// An embedded preset.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub text: &'static str,
}

#[allow(unused_macros)]
macro_rules! preset {
    ($name:literal) => {
        Preset {
            name: $name,
            text: include_str!(concat!("../../presets/", $name, ".toml")),
        }
    };
}

/// Every preset, in `mechlab list` order.
pub const PRESETS: &[Preset] = &[
    preset!("induction-simplified"),
    preset!("induction-staged"),
    preset!("induction-full"),
    preset!("induction-bigram"),
    preset!("induction-noncontiguous"),
    preset!("selection-synthetic"),
    preset!("selection-imdb"),
    preset!("selection-yelp"),
    preset!("topic-value"),
    preset!("topic-embedding"),
    preset!("topic-attention"),
    preset!("topic-two-stage"),
    preset!("topic-wikipedia"),
    preset!("topic-bert"),
];

/// The preset called `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

impl Preset {
    /// The preset's `description` line.
    pub fn description(&self) -> String {
        toml::from_str::<toml::Table>(self.text)
            .ok()
            .and_then(|t| {
                t.get("description")
                    .and_then(|d| d.as_str())
                    .map(String::from)
            })
            .unwrap_or_default()
    }
    /// The preset's `experiment`.
    pub fn experiment(&self) -> String {
        toml::from_str::<toml::Table>(self.text)
            .ok()
            .and_then(|t| {
                t.get("experiment")
                    .and_then(|d| d.as_str())
                    .map(String::from)
            })
            .unwrap_or_default()
    }
}
