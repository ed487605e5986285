//! Wikitext markup stripper: MediaWiki source to the plain text a reader sees.
//!
//! [`strip_wikitext`] removes the markup that dominates article source so that
//! topic models and language models see prose: templates `{{...}}` (nested, with
//! parameters `{{{1}}}`), tables `{| ... |}`, HTML comments, `<ref>` footnotes and
//! other tags whose content is not prose (`<math>`, `<gallery>`, ...). It keeps the
//! visible text of internal links (`[[target|text]]` becomes `text`), drops file,
//! image, category and interlanguage links, keeps the label of external links
//! (`[http://x label]`), drops `''italic''`/`'''bold'''` quotes and other HTML
//! tags (keeping their content), turns headings `== x ==` into a line `x`, removes
//! list markers and decodes common entities (`&nbsp;`, `&ndash;`, `&#123;`).
//! It is a heuristic, not a parser: unbalanced markup never panics, an unclosed
//! `{{` or `[[` is dropped and the text after it kept, and an unclosed table runs
//! to the end of the page, as MediaWiki renders it.
//!
//! ```
//! use mechlab_corpora::wikipedia::wikitext::strip_wikitext;
//!
//! let src = "{{Infobox|name={{lang|fr|x}}}}\n'''Anarchism''' is a [[political philosophy|philosophy]]\
//! <ref name=\"a\">{{cite book|title=X}}</ref> that rejects [[hierarchy]].\n\
//! [[File:A.png|thumb|A [[flag]]]]\n== History ==\n* [http://example.org Early] ideas\n\
//! [[Category:Anarchism]]";
//! assert_eq!(
//!     strip_wikitext(src),
//!     "Anarchism is a philosophy that rejects hierarchy.\nHistory\nEarly ideas"
//! );
//! ```

/// Tags removed together with everything between them and their closing tag.
const DROPPED_ELEMENTS: &[&str] = &[
    "ref",
    "references",
    "gallery",
    "math",
    "chem",
    "ce",
    "timeline",
    "score",
    "imagemap",
    "syntaxhighlight",
    "source",
    "graph",
    "hiero",
    "includeonly",
    "templatedata",
    "templatestyles",
    "mapframe",
];

/// Tags removed while their content is kept.
const KEPT_CONTENT_TAGS: &[&str] = &[
    "abbr",
    "b",
    "bdi",
    "big",
    "blockquote",
    "br",
    "caption",
    "center",
    "cite",
    "code",
    "dd",
    "del",
    "div",
    "dl",
    "dt",
    "em",
    "font",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "ins",
    "kbd",
    "li",
    "mark",
    "noinclude",
    "nowiki",
    "ol",
    "onlyinclude",
    "p",
    "poem",
    "pre",
    "q",
    "s",
    "samp",
    "section",
    "small",
    "span",
    "strike",
    "strong",
    "sub",
    "sup",
    "table",
    "td",
    "th",
    "tr",
    "tt",
    "u",
    "ul",
    "var",
    "wbr",
];

/// Namespaces whose links are not part of the running text.
const DROPPED_LINK_NAMESPACES: &[&str] = &["file", "image", "category", "media"];

/// Plain text of a page's wikitext source (see the module documentation).
pub fn strip_wikitext(src: &str) -> String {
    let text = remove_comments(src);
    let text = remove_dropped_elements(&text);
    let mut inline = String::with_capacity(text.len());
    strip_inline(&text, &mut inline);
    tidy_lines(&inline)
}

/// Removes `<!-- ... -->`; an unclosed comment runs to the end.
fn remove_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start + 4..].find("-->") {
            Some(end) => rest = &rest[start + 4 + end + 3..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// Name of the tag starting at `s[i] == '<'` (lower-cased), whether it is a closing
/// tag, and the index just past its `>`; `None` if this `<` does not start a tag.
fn parse_tag(s: &str, i: usize) -> Option<(String, bool, bool, usize)> {
    let b = s.as_bytes();
    let mut j = i + 1;
    let closing = b.get(j) == Some(&b'/');
    if closing {
        j += 1;
    }
    let name_start = j;
    while j < b.len() && b[j].is_ascii_alphanumeric() {
        j += 1;
    }
    if j == name_start || !b[name_start].is_ascii_alphabetic() {
        return None;
    }
    match b.get(j) {
        Some(b'>' | b'/' | b' ' | b'\t' | b'\n') => {}
        _ => return None,
    }
    let gt = j + s[j..].find('>')?;
    let self_closing = b[gt - 1] == b'/';
    Some((
        s[name_start..j].to_ascii_lowercase(),
        closing,
        self_closing,
        gt + 1,
    ))
}

/// Removes `<ref>...</ref>`, `<ref .../>` and the other [`DROPPED_ELEMENTS`].
fn remove_dropped_elements(s: &str) -> String {
    let lower = s.to_ascii_lowercase(); // same byte offsets as `s`
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while let Some(off) = s[i..].find('<') {
        let lt = i + off;
        i = lt + 1;
        let Some((name, closing, self_closing, after)) = parse_tag(s, lt) else {
            continue;
        };
        if !DROPPED_ELEMENTS.contains(&name.as_str()) {
            continue;
        }
        out.push_str(&s[copied..lt]);
        let mut end = after;
        if !closing && !self_closing {
            let close = format!("</{name}");
            if let Some(c) = lower[after..].find(&close) {
                let c = after + c;
                end = s[c..].find('>').map_or(s.len(), |g| c + g + 1);
            }
        }
        copied = end;
        i = end;
    }
    out.push_str(&s[copied..]);
    out
}

/// True if only spaces or tabs stand between the line start and `b[i]`.
fn at_line_start(b: &[u8], i: usize) -> bool {
    let mut j = i;
    while j > 0 && (b[j - 1] == b' ' || b[j - 1] == b'\t') {
        j -= 1;
    }
    j == 0 || b[j - 1] == b'\n'
}

/// Index just past the `}` closing the template that opens at `b[i..i+2] == "{{"`,
/// counting single braces so that `{{{param}}}` nests correctly.
fn match_braces(b: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &c) in b.iter().enumerate().skip(i) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Index just past the line that closes the table opening at `b[i..i+2] == "{|"`;
/// an unclosed table runs to the end.
fn match_table(s: &str, i: usize) -> usize {
    let mut depth = 0usize;
    let mut line_start = i;
    while line_start < s.len() {
        let line_end = s[line_start..]
            .find('\n')
            .map_or(s.len(), |e| line_start + e);
        let line = s[line_start..line_end].trim_start();
        if line.starts_with("{|") {
            depth += 1;
        } else if line.starts_with("|}") && !line.starts_with("|}}") {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return line_end;
            }
        }
        line_start = line_end + 1;
    }
    s.len()
}

/// Index just past the `]]` closing the link that opens at `b[i..i+2] == "[["`.
fn match_link(b: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    while j + 1 < b.len() {
        if b[j] == b'[' && b[j + 1] == b'[' {
            depth += 1;
            j += 2;
        } else if b[j] == b']' && b[j + 1] == b']' {
            depth = depth.saturating_sub(1);
            j += 2;
            if depth == 0 {
                return Some(j);
            }
        } else {
            j += 1;
        }
    }
    None
}

/// Splits link content at its first `|` outside nested `[[...]]` and `{{...}}`.
fn split_link(inner: &str) -> (&str, Option<&str>) {
    let mut depth = 0i32;
    for (j, c) in inner.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            '|' if depth == 0 => return (&inner[..j], Some(&inner[j + 1..])),
            _ => {}
        }
    }
    (inner, None)
}

/// Appends the visible text of the internal link with content `inner`.
fn push_link(inner: &str, out: &mut String) {
    let (target, label) = split_link(inner);
    let target = target.trim();
    let (visible_ns_link, target) = match target.strip_prefix(':') {
        Some(t) => (true, t),
        None => (false, target),
    };
    if let Some((ns, _)) = target.split_once(':') {
        let ns_lower = ns.trim().to_ascii_lowercase();
        let interlanguage = label.is_none()
            && (2..=12).contains(&ns.len())
            && ns.bytes().all(|c| c.is_ascii_lowercase() || c == b'-');
        if !visible_ns_link
            && (DROPPED_LINK_NAMESPACES.contains(&ns_lower.as_str()) || interlanguage)
        {
            return;
        }
    }
    match label.map(str::trim) {
        Some(l) if !l.is_empty() => strip_inline(l, out),
        _ => strip_inline(target.trim_start_matches('#'), out),
    }
}

/// True if `s` starts with the URL of an external link.
fn starts_with_url(s: &str) -> bool {
    const SCHEMES: &[&str] = &[
        "http://", "https://", "ftp://", "//", "mailto:", "news:", "irc://",
    ];
    let b = s.as_bytes();
    SCHEMES.iter().any(|p| {
        b.get(..p.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(p.as_bytes()))
    })
}

/// Strips templates, tables, links, external links, tags and quote markup from
/// `s`, appending the result to `out`.
fn strip_inline(s: &str, out: &mut String) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let next = b[i..]
            .iter()
            .position(|c| matches!(c, b'{' | b'[' | b'<' | b'\''))
            .map_or(b.len(), |p| i + p);
        out.push_str(&s[i..next]);
        i = next;
        if i >= b.len() {
            break;
        }
        let second = b.get(i + 1).copied();
        match (b[i], second) {
            (b'{', Some(b'{')) => i = match_braces(b, i).unwrap_or(i + 2),
            (b'{', Some(b'|')) if at_line_start(b, i) => i = match_table(s, i),
            (b'[', Some(b'[')) => match match_link(b, i) {
                Some(end) => {
                    push_link(&s[i + 2..end - 2], out);
                    i = end;
                }
                None => i += 2,
            },
            (b'[', _) if starts_with_url(&s[i + 1..]) => {
                let close = s[i + 1..].find([']', '\n']).map(|e| i + 1 + e);
                match close {
                    Some(end) if b[end] == b']' => {
                        if let Some((_, label)) = s[i + 1..end].split_once([' ', '\t']) {
                            strip_inline(label.trim(), out);
                        }
                        i = end + 1;
                    }
                    _ => {
                        out.push('[');
                        i += 1;
                    }
                }
            }
            (b'<', _) => match parse_tag(s, i) {
                Some((name, _, _, after)) if KEPT_CONTENT_TAGS.contains(&name.as_str()) => {
                    if matches!(name.as_str(), "br" | "p" | "div" | "li" | "hr") {
                        out.push(' ');
                    }
                    i = after;
                }
                _ => {
                    out.push('<');
                    i += 1;
                }
            },
            (b'\'', Some(b'\'')) => {
                while i < b.len() && b[i] == b'\'' {
                    i += 1;
                }
            }
            (c, _) => {
                out.push(c as char); // one of the ASCII bytes searched for above
                i += 1;
            }
        }
    }
}

/// Line-level markup: headings, list markers, rules, magic words, entities and
/// whitespace; drops the lines left empty, joining the others with `\n`.
fn tidy_lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for raw in s.lines() {
        let mut line = raw.trim();
        if line.len() >= 2 && line.starts_with('=') && line.ends_with('=') {
            line = line.trim_matches('=').trim();
        }
        if line.starts_with("----") {
            line = line.trim_start_matches('-');
        }
        line = line.trim_start_matches(['*', '#', ':', ';']);
        let line = collapse_spaces(&decode_entities(&remove_magic_words(line)));
        if line.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&line);
    }
    out
}

/// Removes behaviour switches such as `__NOTOC__`.
fn remove_magic_words(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("__") {
        let after = &rest[start + 2..];
        let name_len = after.bytes().take_while(|c| c.is_ascii_uppercase()).count();
        if name_len > 0 && after[name_len..].starts_with("__") {
            out.push_str(&rest[..start]);
            rest = &after[name_len + 2..];
        } else {
            out.push_str(&rest[..start + 2]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Decodes named entities common in articles and numeric `&#...;` references;
/// unknown ones are kept as written.
pub fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest[1..]
            .find(';')
            .filter(|&semi| semi <= 10)
            .and_then(|semi| entity_char(&rest[1..1 + semi]).map(|c| (c, semi + 2)));
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity_char(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code).filter(|&c| c != '\0');
    }
    Some(match name {
        "nbsp" | "ensp" | "emsp" | "thinsp" => ' ',
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "ndash" => '\u{2013}',
        "mdash" => '\u{2014}',
        "minus" => '\u{2212}',
        "times" => '\u{d7}',
        "hellip" => '\u{2026}',
        "deg" => '\u{b0}',
        _ => return None,
    })
}

/// Collapses runs of whitespace to one space and trims.
fn collapse_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
