//! Wikipedia corpora (the loaders follow; [`wikitext`] strips page markup).

pub mod wikitext;
