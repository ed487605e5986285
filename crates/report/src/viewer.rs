//! The report's interactive attention viewer, in the spirit of CircuitsVis's
//! `attention_patterns`: the sequence as text, hover (or click, to hold) a query
//! token to shade every key by the weight it gets, pick a head, and a
//! query × key heatmap beside it that answers to the pointer too. Tokens are
//! shaded relative to the row's largest weight (which the summary line states),
//! heatmap cells by the square root of the weight, so that diffuse rows of a
//! long context stay visible without looking sharp.
//!
//! Written by hand because the report must open offline from one file: the
//! script is inline, about a hundred lines of plain DOM code, with no library
//! and no network. Without JavaScript the page shows the first head as a static
//! heatmap (the figure's still, [`crate::spec::Figure::still`]) and says where
//! the other heads are. Each figure's weights travel as JSON in a
//! `<script type="application/json">` element (never executed), and every key
//! token carries the exact weight it shows in `data-w`, so a browser test can
//! compare the page with the run's activation file number for number.

use std::fmt::Write as _;

use serde::Serialize;

use crate::html::{esc, inline};
use crate::spec::{
    attention_queries, AttentionCheckpoint, AttentionHead, AttentionSource, Figure, Plot,
};

/// What the script reads: the figure's data with the queries spelled out.
#[derive(Serialize)]
struct ViewData<'a> {
    tokens: &'a [String],
    /// Empty when the queries are the tokens themselves.
    query_tokens: &'a [String],
    heads: &'a [AttentionHead],
    pattern: &'a [f64],
    source: &'a Option<AttentionSource>,
    first_head: usize,
    /// Earlier checkpoints, oldest first; empty without a slider.
    history: &'a [AttentionCheckpoint],
    step: Option<u64>,
}

/// Why an attention figure cannot be shown, if it cannot.
pub(crate) fn check(fig: &Figure) -> Result<(), String> {
    let Plot::Attention {
        tokens,
        query_tokens,
        heads,
        pattern,
        first_head,
        history,
        step,
        ..
    } = &fig.plot
    else {
        return Ok(());
    };
    let nq = attention_queries(tokens, query_tokens).len();
    let want = heads.len() * nq * tokens.len();
    if tokens.is_empty() || heads.is_empty() {
        return Err(format!(
            "figure `{}`: an attention viewer needs at least one token and one head",
            fig.id
        ));
    }
    if *first_head >= heads.len() {
        return Err(format!(
            "figure `{}`: first_head {first_head} is not one of its {} heads",
            fig.id,
            heads.len()
        ));
    }
    if pattern.len() != want {
        return Err(format!(
            "figure `{}`: pattern has {} values, expected heads × queries × keys = {} × {nq} × {} = {want}",
            fig.id,
            pattern.len(),
            heads.len(),
            tokens.len()
        ));
    }
    if !history.is_empty() && step.is_none() {
        return Err(format!(
            "figure `{}`: a viewer with earlier checkpoints needs the step of its own pattern",
            fig.id
        ));
    }
    for c in history {
        if c.pattern.len() != want {
            return Err(format!(
                "figure `{}`: the checkpoint at step {} has {} values, expected {want} like the viewer's pattern",
                fig.id,
                c.step,
                c.pattern.len()
            ));
        }
        if step.is_some_and(|s| c.step >= s) {
            return Err(format!(
                "figure `{}`: the checkpoint at step {} is not before the viewer's step {}",
                fig.id,
                c.step,
                step.unwrap_or(0)
            ));
        }
    }
    Ok(())
}

/// Writes the viewer's `<figure>`: the still as inline SVG (what a reader
/// without JavaScript sees), the data, and an empty viewer the script fills.
pub(crate) fn figure(out: &mut String, anchor: &str, fig: &Figure, svg: &str, n: usize) {
    let Plot::Attention {
        tokens,
        query_tokens,
        heads,
        pattern,
        source,
        first_head,
        history,
        step,
    } = &fig.plot
    else {
        return;
    };
    let data = ViewData {
        tokens,
        query_tokens,
        heads,
        pattern,
        source,
        first_head: *first_head,
        history,
        step: *step,
    };
    // `<`, `>` and `&` escaped inside JSON strings keep a token such as
    // `</script>` from ending the element; JSON.parse reads them back.
    let json = serde_json::to_string(&data)
        .expect("attention data serialise")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let names: Vec<&str> = heads.iter().map(|h| h.name.as_str()).collect();
    let file = source.as_ref().map_or(String::new(), |s| {
        format!(
            " The weights are recorded in <code>{}</code> (sequence {}).",
            esc(&s.file),
            s.batch
        )
    });
    let _ = write!(
        out,
        "<figure id=\"fig-{anchor}\" class=\"attn\">\n<div class=\"plot attn-still\">{svg}</div>\n\
         <p class=\"attn-nojs\">This picture shows head {first}. With JavaScript the report shows \
         every head ({all}) interactively.{file}</p>\n\
         <div class=\"attn-view\" hidden></div>\n\
         <script type=\"application/json\" class=\"attn-data\">{json}</script>\n",
        first = esc(names.get(*first_head).copied().unwrap_or("")),
        all = esc(&names.join(", ")),
    );
    let slider = match (history.first(), step) {
        (Some(first), Some(last)) => format!(
            " Slide through {} checkpoints, steps {} to {last}.",
            history.len() + 1,
            first.step
        ),
        _ => String::new(),
    };
    let _ = write!(
        out,
        "<figcaption><span class=\"fig-no\">Figure {n}.</span> <strong>{}</strong> \
         <span class=\"attn-hint\">Hover a token to see where it attends; click to hold it.{slider}</span>",
        esc(&fig.title)
    );
    if !fig.caption.is_empty() {
        let _ = write!(out, " {}", inline(&fig.caption));
    }
    out.push_str("</figcaption>\n</figure>\n");
}

pub(crate) const CSS: &str = r#"
.attn-view { border: 1px solid var(--line); border-radius: 6px; padding: .75rem; background: #fff; }
.attn-picker { margin-bottom: .6rem; }
.attn-heads { display: flex; flex-wrap: wrap; gap: .25rem; align-items: center; margin-bottom: .25rem; }
.attn-heads .attn-label { min-width: 3.2rem; }
.attn-label { color: var(--muted); font-size: .8rem; margin-right: .3rem; }
.attn-head { font: inherit; font-size: .78rem; padding: .05rem .4rem; border: 1px solid var(--line);
  border-radius: 4px; background: #fff; color: var(--ink); cursor: pointer; }
.attn-head[aria-pressed="true"] { background: var(--accent); border-color: var(--accent); color: #fff; }
.attn-body { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
.attn-text { flex: 1 1 280px; min-width: 0; }
.attn-tokens { font-family: ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: .9rem; line-height: 2.1; }
.attn-queries { margin-bottom: .4rem; }
.attn-tok { padding: .12rem .22rem; border-radius: 3px; cursor: pointer; white-space: pre; }
.attn-tok.attn-current { outline: 2px solid #bf8700; outline-offset: 1px; }
.attn-tok.attn-locked { outline-width: 3px; }
.attn-info { font-size: .86rem; color: var(--muted); margin: .6rem 0 0; }
.attn-map svg { display: block; max-width: 100%; height: auto; }
.attn-map .attn-row { fill: none; stroke: #bf8700; stroke-width: 2; pointer-events: none; }
.attn-hint { font-size: .85em; }
.attn-steps { display: flex; align-items: center; gap: .5rem; margin-bottom: .5rem; }
.attn-steps input { flex: 1 1 auto; max-width: 28rem; }
.attn-step { font-size: .8rem; min-width: 6rem; }
"#;

/// The viewer's script: one function per figure, state `{head, query, locked}`,
/// and `draw` repaints tokens, heatmap and the summary line from it.
pub(crate) const SCRIPT: &str = r##"
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function shown(t) { return t === "" ? "\u2205" : t; }
  function viewer(fig) {
    var d = JSON.parse(fig.querySelector("script.attn-data").textContent);
    var nk = d.tokens.length, self = d.query_tokens.length === 0;
    var qs = self ? d.tokens : d.query_tokens, nq = qs.length;
    // The checkpoints, oldest first; the viewer's own pattern is the last.
    var hist = d.history || [];
    var pats = hist.map(function (c) { return c.pattern; }).concat([d.pattern]);
    var steps = hist.map(function (c) { return c.step; }).concat([d.step]);
    var st = { head: d.first_head || 0, query: nq - 1, locked: false, at: pats.length - 1 };
    function w(q, k) { return pats[st.at][(st.head * nq + q) * nk + k]; }
    var view = fig.querySelector(".attn-view");

    // Many heads over several layers: one row of buttons per layer.
    var bar = el("div", "attn-picker"), line = null, hook = null;
    var byLayer = d.heads.length > 8 && d.heads.some(function (h) { return h.hook !== d.heads[0].hook; });
    var buttons = d.heads.map(function (h, i) {
      if (!line || (byLayer && h.hook !== hook)) {
        line = el("div", "attn-heads");
        var m = /^blocks\.(\d+)\./.exec(h.hook);
        line.appendChild(el("span", "attn-label", byLayer && m ? "layer " + m[1] : "head"));
        bar.appendChild(line);
        hook = h.hook;
      }
      var b = el("button", "attn-head", byLayer ? "H" + h.head : h.name);
      b.type = "button";
      b.title = h.name + ": " + h.hook + ", head " + h.head;
      b.addEventListener("click", function () { st.head = i; draw(); });
      line.appendChild(b);
      return b;
    });

    var slider = null, stepLabel = null;
    if (pats.length > 1) {
      var sl = el("div", "attn-steps");
      sl.appendChild(el("span", "attn-label", "checkpoint"));
      slider = el("input", "attn-slider");
      slider.type = "range";
      slider.min = "0";
      slider.max = String(pats.length - 1);
      slider.step = "1";
      slider.value = String(st.at);
      slider.setAttribute("aria-label", "training step of the weights shown");
      slider.addEventListener("input", function () { st.at = Number(slider.value); draw(); });
      stepLabel = el("span", "attn-step");
      sl.appendChild(slider);
      sl.appendChild(stepLabel);
      bar.appendChild(sl);
    }

    var text = el("div", "attn-text");
    var qspans, keys;
    function pick(i) { if (!st.locked) { st.query = i; draw(); } }
    function hold(i) {
      if (st.locked && st.query === i) st.locked = false;
      else { st.locked = true; st.query = i; }
      draw();
    }
    function strip(words, cls, label) {
      var s = el("div", "attn-tokens " + cls);
      if (label) s.appendChild(el("span", "attn-label", label));
      return [s, words.map(function (t, i) {
        var sp = el("span", "attn-tok", shown(t));
        sp.setAttribute("data-pos", String(i));
        s.appendChild(sp);
        s.appendChild(document.createTextNode(" "));
        return sp;
      })];
    }
    if (!self) {
      var q = strip(qs, "attn-queries", "query");
      text.appendChild(q[0]);
      qspans = q[1];
    }
    var k = strip(d.tokens, "attn-keys", self ? "" : "keys");
    text.appendChild(k[0]);
    keys = k[1];
    if (self) qspans = keys;
    qspans.forEach(function (sp, i) {
      sp.tabIndex = 0;
      sp.addEventListener("mouseenter", function () { pick(i); });
      sp.addEventListener("focus", function () { pick(i); });
      sp.addEventListener("click", function () { hold(i); });
    });
    var info = el("p", "attn-info");
    text.appendChild(info);

    var cell = Math.max(3, Math.min(20, Math.floor(420 / Math.max(nq, nk))));
    var map = el("div", "attn-map");
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", String(nk * cell));
    svg.setAttribute("height", String(nq * cell));
    svg.setAttribute("viewBox", "0 0 " + nk * cell + " " + nq * cell);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "attention heatmap, query rows by key columns");
    var bg = document.createElementNS(NS, "rect");
    bg.setAttribute("width", String(nk * cell));
    bg.setAttribute("height", String(nq * cell));
    bg.setAttribute("fill", "#f6f8fa");
    svg.appendChild(bg);
    var rects = [];
    for (var qi = 0; qi < nq; qi++) {
      for (var ki = 0; ki < nk; ki++) {
        var r = document.createElementNS(NS, "rect");
        r.setAttribute("x", String(ki * cell));
        r.setAttribute("y", String(qi * cell));
        r.setAttribute("width", String(cell));
        r.setAttribute("height", String(cell));
        r.setAttribute("fill", "#0b5cad");
        r.setAttribute("data-q", String(qi));
        r.setAttribute("data-k", String(ki));
        r.appendChild(document.createElementNS(NS, "title"));
        svg.appendChild(r);
        rects.push(r);
      }
    }
    var row = document.createElementNS(NS, "rect");
    row.setAttribute("class", "attn-row");
    row.setAttribute("width", String(nk * cell));
    row.setAttribute("height", String(cell));
    svg.appendChild(row);
    svg.addEventListener("mouseover", function (e) {
      var q = e.target.getAttribute && e.target.getAttribute("data-q");
      if (q !== null && q !== undefined) pick(Number(q));
    });
    svg.addEventListener("click", function (e) {
      var q = e.target.getAttribute && e.target.getAttribute("data-q");
      if (q !== null && q !== undefined) hold(Number(q));
    });
    map.appendChild(svg);
    map.appendChild(el("div", "attn-label", "rows: queries \u00b7 columns: keys \u00b7 shade \u221d \u221aweight"));

    var body = el("div", "attn-body");
    body.appendChild(text);
    body.appendChild(map);
    view.appendChild(bar);
    view.appendChild(body);

    function draw() {
      buttons.forEach(function (b, i) { b.setAttribute("aria-pressed", i === st.head ? "true" : "false"); });
      if (slider) {
        stepLabel.textContent = "step " + steps[st.at];
        fig.setAttribute("data-step", String(steps[st.at]));
      }
      var ws = [], max = 0;
      for (var j = 0; j < nk; j++) { ws.push(w(st.query, j)); if (ws[j] > max) max = ws[j]; }
      keys.forEach(function (sp, j) {
        var a = max > 0 ? Math.max(0, ws[j]) / max : 0;
        sp.setAttribute("data-w", String(ws[j]));
        sp.style.backgroundColor = "rgba(11, 92, 173, " + a.toFixed(3) + ")";
        sp.style.color = a > 0.55 ? "#fff" : "";
        sp.title = "weight " + ws[j].toPrecision(4);
      });
      qspans.forEach(function (sp, i) {
        sp.classList.toggle("attn-current", i === st.query);
        sp.classList.toggle("attn-locked", st.locked && i === st.query);
      });
      rects.forEach(function (r) {
        var q = Number(r.getAttribute("data-q")), c = Number(r.getAttribute("data-k"));
        var x = w(q, c);
        r.setAttribute("fill-opacity", String(Math.sqrt(Math.max(0, Math.min(1, x)))));
        r.firstChild.textContent = shown(qs[q]) + " \u2192 " + shown(d.tokens[c]) + ": " + x.toPrecision(4);
      });
      row.setAttribute("y", String(st.query * cell));
      var order = ws.map(function (x, j) { return j; })
        .sort(function (a, b) { return ws[b] - ws[a] || a - b; }).slice(0, 3);
      info.textContent = d.heads[st.head].name + (slider ? " at step " + steps[st.at] : "") + ", query " + st.query + " \u201c" + shown(qs[st.query]) +
        "\u201d" + (st.locked ? " (held; click it again to let go)" : "") + " attends most to " +
        order.map(function (j) { return "\u201c" + shown(d.tokens[j]) + "\u201d @" + j + " " + ws[j].toFixed(3); }).join(", ") +
        ". Tokens are shaded from 0 to this row\u2019s largest weight, " + max.toPrecision(3) + ".";
    }
    draw();
    fig.querySelector(".attn-still").hidden = true;
    fig.querySelector(".attn-nojs").hidden = true;
    view.hidden = false;
  }
  Array.prototype.forEach.call(document.querySelectorAll("figure.attn"), function (fig) {
    // (a page with several fragments runs this script once per fragment)
    if (fig.getAttribute("data-started")) return;
    fig.setAttribute("data-started", "1");
    try { viewer(fig); } catch (e) {
      fig.querySelector(".attn-nojs").textContent = "The interactive viewer failed: " + e;
    }
  });
})();
"##;
