//! mechlab (skeleton).
