//! Word-level tokenizer for review text.
//!
//! One pass over the characters, no regex: HTML line breaks (`<br />`, `<br/>`,
//! `<br>`, any case) become spaces, letters are lower-cased, letters and digits
//! form words, an apostrophe between two word characters stays inside the word
//! (`don't`, `n't`), a leading apostrophe before a clitic (`'s`, `'ll`, `'re`,
//! `'ve`, `'m`, `'d`, `'t`) starts one (the Yelp sentence files write `i 'll`),
//! and every other non-space character is punctuation: its own one-character
//! token with [`Punct::Keep`], dropped with [`Punct::Drop`]. `’` is read as `'`.
//!
//! ```
//! use mechlab_corpora::{Punct, Tokenizer};
//! let t = Tokenizer::default();
//! assert_eq!(t.tokenize("I didn't LOVE it...<br /><br/>Really!"),
//!            ["i", "didn't", "love", "it", ".", ".", ".", "really", "!"]);
//! let t = Tokenizer { punct: Punct::Drop, ..Tokenizer::default() };
//! assert_eq!(t.tokenize("i 'll be back , 10/10 !"), ["i", "'ll", "be", "back", "10", "10"]);
//! ```

use serde::{Deserialize, Serialize};

/// What to do with punctuation marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Punct {
    /// Each mark is a token of its own.
    Keep,
    /// Marks separate words and are dropped.
    Drop,
}

/// Tokenizer settings; [`Tokenizer::default`] lower-cases, strips `<br>` tags and
/// keeps punctuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokenizer {
    pub lowercase: bool,
    pub strip_br: bool,
    pub punct: Punct,
}

impl Default for Tokenizer {
    fn default() -> Self {
        Tokenizer {
            lowercase: true,
            strip_br: true,
            punct: Punct::Keep,
        }
    }
}

const CLITICS: [&str; 7] = ["s", "ll", "re", "ve", "m", "d", "t"];

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric()
}

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

/// Length in bytes of a `<br>`-style tag at the start of `s`, if there is one:
/// `<br`, optional spaces, optional `/`, optional spaces, `>`, any case.
fn br_tag_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.len() < 4
        || b[0] != b'<'
        || !b[1].eq_ignore_ascii_case(&b'b')
        || !b[2].eq_ignore_ascii_case(&b'r')
    {
        return None;
    }
    let mut i = 3;
    while i < b.len() && b[i] == b' ' {
        i += 1;
    }
    if i < b.len() && b[i] == b'/' {
        i += 1;
    }
    while i < b.len() && b[i] == b' ' {
        i += 1;
    }
    (i < b.len() && b[i] == b'>').then_some(i + 1)
}

/// Whether `rest` (just after an apostrophe) starts with a clitic followed by a
/// non-word character or the end.
fn clitic_follows(rest: &str) -> bool {
    CLITICS.iter().any(|c| {
        rest.len() >= c.len()
            && rest.as_bytes()[..c.len()].eq_ignore_ascii_case(c.as_bytes())
            && !rest[c.len()..].chars().next().is_some_and(is_word_char)
    })
}

impl Tokenizer {
    /// Tokens of `text`.
    pub fn tokenize(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.tokenize_into(text, &mut out);
        out
    }

    /// Appends the tokens of `text` to `out` (reuse `out` to avoid allocation).
    pub fn tokenize_into(&self, text: &str, out: &mut Vec<String>) {
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut Vec<String>| {
            if !word.is_empty() {
                out.push(std::mem::take(word));
            }
        };
        let mut i = 0;
        while i < text.len() {
            let rest = &text[i..];
            let c = rest.chars().next().expect("i is on a char boundary");
            let next = rest[c.len_utf8()..].chars().next();
            if c == '<' && self.strip_br {
                if let Some(n) = br_tag_len(rest) {
                    flush(&mut word, out);
                    i += n;
                    continue;
                }
            }
            i += c.len_utf8();
            if is_word_char(c) {
                if self.lowercase && !c.is_lowercase() {
                    word.extend(c.to_lowercase());
                } else {
                    word.push(c);
                }
            } else if is_apostrophe(c)
                && (if word.is_empty() {
                    clitic_follows(&text[i..])
                } else {
                    next.is_some_and(is_word_char)
                })
            {
                word.push('\'');
            } else if c.is_whitespace() {
                flush(&mut word, out);
            } else {
                flush(&mut word, out);
                if self.punct == Punct::Keep {
                    out.push(if is_apostrophe(c) {
                        "'".to_string()
                    } else {
                        c.to_string()
                    });
                }
            }
        }
        flush(&mut word, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(s: &str) -> Vec<String> {
        Tokenizer::default().tokenize(s)
    }

    #[test]
    fn br_variants_are_removed_and_other_tags_are_not() {
        assert_eq!(
            keep("a<br />b<BR/>c<br>d<br  / >e"),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(keep("x<b>y"), ["x", "<", "b", ">", "y"]);
        assert_eq!(keep("ends with <br"), ["ends", "with", "<", "br"]);
        let raw = Tokenizer {
            strip_br: false,
            ..Tokenizer::default()
        };
        assert_eq!(raw.tokenize("a<br/>"), ["a", "<", "br", "/", ">"]);
    }

    #[test]
    fn apostrophes_stay_inside_words_only() {
        assert_eq!(
            keep("Don't say 'no' - it’s fine"),
            ["don't", "say", "'", "no", "'", "-", "it's", "fine"]
        );
        assert_eq!(
            keep("do n't i 've 'sup'"),
            ["do", "n't", "i", "'ve", "'", "sup", "'"]
        );
        assert_eq!(
            keep("the 90's rock 'n' roll"),
            ["the", "90's", "rock", "'", "n", "'", "roll"]
        );
        assert_eq!(keep("dogs' bowls"), ["dogs", "'", "bowls"]);
    }

    #[test]
    fn punctuation_modes_and_unicode() {
        let drop = Tokenizer {
            punct: Punct::Drop,
            ..Tokenizer::default()
        };
        assert_eq!(
            drop.tokenize("Wow!!! 5/5, ÉTÉ café."),
            ["wow", "5", "5", "été", "café"]
        );
        assert_eq!(keep("Wow!!"), ["wow", "!", "!"]);
        let cased = Tokenizer {
            lowercase: false,
            ..Tokenizer::default()
        };
        assert_eq!(cased.tokenize("Big Apple"), ["Big", "Apple"]);
        assert!(keep("  \n\t ").is_empty());
        assert!(keep("").is_empty());
    }

    #[test]
    fn deterministic_and_appending() {
        let t = Tokenizer::default();
        let text = "Same input, same tokens.<br /><br />Every time!";
        assert_eq!(t.tokenize(text), t.tokenize(text));
        let mut out = vec!["pre".to_string()];
        t.tokenize_into("a b", &mut out);
        assert_eq!(out, ["pre", "a", "b"]);
    }
}
