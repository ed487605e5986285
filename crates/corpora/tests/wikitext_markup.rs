//! The wikitext stripper on realistic snippets of article source.

use mechlab_corpora::wikipedia::wikitext::{decode_entities, strip_wikitext};

#[test]
fn infobox_and_nested_templates_vanish() {
    let src =
        "{{Infobox settlement\n| name = Rome\n| image = {{#if:{{{img|}}}|[[File:{{{img}}}]]|}}\n\
               | population = {{formatnum:2872800}}\n}}\n{{Use dmy dates|date=May 2016}}\
               '''Rome''' is the capital{{efn|Since 1871.}} of [[Italy]].";
    assert_eq!(strip_wikitext(src), "Rome is the capital of Italy.");
}

#[test]
fn tables_vanish_including_nested_ones() {
    let src = "Before.\n{| class=\"wikitable\"\n|+ Caption\n|-\n! Year !! Team\n|-\n| 1990 || {{flag|Italy}}\n\
               |-\n|\n{| class=\"inner\"\n| a || b\n|}\n|}\nAfter.";
    assert_eq!(strip_wikitext(src), "Before.\nAfter.");
    // An unclosed table runs to the end of the page.
    assert_eq!(strip_wikitext("Text.\n{|\n| cell\nmore"), "Text.");
}

#[test]
fn internal_links_keep_their_visible_text() {
    let src = "A [[political philosophy|philosophy]] of [[crustacean]]s, see [[Anarchism#History|history]] \
               and [[:Category:Lobsters]] or [[wikt:sui generis|sui generis]].";
    assert_eq!(
        strip_wikitext(src),
        "A philosophy of crustaceans, see history and Category:Lobsters or sui generis."
    );
}

#[test]
fn file_category_and_interlanguage_links_are_dropped() {
    let src = "[[File:Lobster.jpg|thumb|upright|A [[lobster]] in ''situ'']]Lobsters live.\n\
               [[Image:Map.png|left]]\n[[Category:Decapods]]\n[[category:Seafood|Lobster]]\n\
               [[de:Hummer]]\n[[zh-min-nan:Hummer]]";
    assert_eq!(strip_wikitext(src), "Lobsters live.");
}

#[test]
fn external_links_keep_their_label() {
    let src =
        "See [http://example.org/a?b=c the site] and [https://x.org] or http://bare.org/ too.";
    assert_eq!(
        strip_wikitext(src),
        "See the site and or http://bare.org/ too."
    );
    assert_eq!(
        strip_wikitext("[[Foo]] [not a link] [3]"),
        "Foo [not a link] [3]"
    );
}

#[test]
fn bold_italic_and_apostrophes() {
    assert_eq!(
        strip_wikitext("'''Bold''', ''italic'', '''''both''''' and l'eau isn't."),
        "Bold, italic, both and l'eau isn't."
    );
}

#[test]
fn headings_lists_rules_and_magic_words() {
    let src =
        "__NOTOC__\nIntro.\n\n== History ==\n=== Early [[life]] ===\n* one\n** two\n# three\n\
               ; term : definition\n----\n: indented";
    assert_eq!(
        strip_wikitext(src),
        "Intro.\nHistory\nEarly life\none\ntwo\nthree\nterm : definition\nindented"
    );
}

#[test]
fn references_and_comments_vanish() {
    let src = "Claim.<ref name=\"a\">{{cite web|url=http://x.org|title=X}}</ref> More<ref name=b /> \
               text<REF>Upper.</REF>.<!-- hidden\n multi-line -->\n==Notes==\n<references />\n{{Reflist}}";
    assert_eq!(strip_wikitext(src), "Claim. More text.\nNotes");
    assert_eq!(strip_wikitext("Kept. <!-- unclosed comment"), "Kept.");
}

#[test]
fn other_tags_keep_content_but_math_is_dropped() {
    let src = "E<sub>0</sub> = m<sup>2</sup><br />line <small>small</small>; \
               <math>x^2</math> and a < b > c, <span style=\"x\">span</span>.";
    assert_eq!(
        strip_wikitext(src),
        "E0 = m2 line small; and a < b > c, span."
    );
}

#[test]
fn entities_are_decoded() {
    assert_eq!(
        decode_entities("1&nbsp;km &ndash; A&amp;B &#91;1&#93; &#x263A; &unknown; & alone"),
        "1 km \u{2013} A&B [1] \u{263a} &unknown; & alone"
    );
    assert_eq!(
        strip_wikitext("5&nbsp;&nbsp;kg&mdash;heavy"),
        "5 kg\u{2014}heavy"
    );
}

#[test]
fn unbalanced_markup_never_swallows_the_page() {
    assert_eq!(
        strip_wikitext("{{unclosed template\nText after."),
        "unclosed template\nText after."
    );
    assert_eq!(strip_wikitext("A [[broken link. B."), "A broken link. B.");
    assert_eq!(strip_wikitext("A }} ]] |} B"), "A }} ]] |} B");
}

#[test]
fn any_truncation_of_real_markup_is_handled() {
    let src = "{{Infobox|name=Ærø {{lang|da|Ærø}}}}'''Ærø''' ({{IPA-da|ˈɛːʁøˀ}}) is a [[Danish|dansk]] ö \
               island.<ref name=\"dk\">{{cite|t=Ø}}</ref>\n{|\n| ü || [[ß]]\n|}\n== Ĥistory ==\n\
               [http://ø.dk Ø] <!-- ñ --> &nbsp;ŋ [[File:ø.png|thumb|ø [[ø]]]] ''ø''";
    for (cut, _) in src.char_indices() {
        let _ = strip_wikitext(&src[..cut]);
        let _ = strip_wikitext(&src[cut..]);
    }
    assert_eq!(
        strip_wikitext(src),
        "Ærø () is a dansk ö island.\nĤistory\nØ ŋ ø"
    );
}
