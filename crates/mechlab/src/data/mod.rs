//! Data: seeded synthetic generators for each paper, and adapters over the
//! real-text corpora of [`mechlab_corpora`].
pub mod lda;
pub mod markov;
pub mod reviews;
pub mod selection;
pub mod wiki;
