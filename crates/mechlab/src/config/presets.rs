//! Presets: TOML configs embedded in the binary, listed by `mechlab list`.
//!
//! Each lives in `crates/mechlab/presets/<name>.toml`, names its `experiment`, and
//! carries a one-line `description`. A paper lists its own presets
//! ([`crate::experiment::Paper::presets`], built with [`crate::preset!`]); the
//! registry gathers them ([`crate::experiment::Registry::presets`],
//! [`crate::experiment::Registry::find_preset`]); this module knows no registry.

/// An embedded preset.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub text: &'static str,
}

/// An embedded preset from `crates/mechlab/presets/<name>.toml`.
#[macro_export]
macro_rules! preset {
    ($name:literal) => {
        $crate::config::presets::Preset {
            name: $name,
            text: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/presets/",
                $name,
                ".toml"
            )),
        }
    };
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
