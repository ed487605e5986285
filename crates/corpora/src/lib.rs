//! Real-text corpora (skeleton; the loaders land in their own commits).

pub mod article;
pub mod lda;
pub mod wikipedia;
