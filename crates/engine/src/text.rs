//! The one sanitiser for quoting input inside an error message, shared by every
//! crate (the engine's model loader, the corpora's readers, the config parser).
//!
//! Error messages quote bytes from the input they failed on, and those bytes may
//! be anything: a raw newline or escape sequence must not reach a terminal, and a
//! fuzzed value of a megabyte must not fill it.
//!
//! ```
//! use mechlab_engine::text::excerpt;
//! assert_eq!(excerpt("a\nb\x1b[2J", 60), "a\\nb\\u{1b}[2J");
//! assert_eq!(excerpt("abcdef", 3), "abc…");
//! ```

/// Longest excerpt of a parser's message shown in an error, in characters.
pub const MESSAGE_CHARS: usize = 200;
/// Longest excerpt of a value from the input (a label, a member or page name).
pub const VALUE_CHARS: usize = 60;

/// `text` made safe for a one-line error message: control characters escaped
/// (`\n`, `\t`, `\u{1b}`), and cut to `max` characters with `…` when longer.
pub fn excerpt(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 2));
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}
