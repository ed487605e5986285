//! mechlab's figures and reports.
//!
//! Experiments record [`spec::Figure`]s as data; this crate renders them (SVG and
//! PNG) and assembles a run's `report.html` (self-contained, offline) and
//! `report.md`.

pub mod spec;

pub use spec::{Figure, Plot, Point, RefLine, Series};
