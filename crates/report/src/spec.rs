//! Figures as data.
//!
//! An experiment never draws: it records a [`Figure`] (series, heatmap values or
//! points, with labels) as JSON in its run folder, and the renderer turns that into
//! SVG and PNG. So `mechlab report <run>` rebuilds every picture from the run folder
//! alone, a user can re-plot the same numbers in Python from the JSON, and the
//! plotting crate can be swapped in one place. JSON has no NaN or infinity:
//! such values are written as `null` and read back as NaN.
//!
//! ```
//! use mechlab_report::spec::{Figure, Series};
//! let fig = Figure::lines("loss", "Training loss", "step", "loss")
//!     .log_x()
//!     .with_series(Series::new("train", vec![1.0, 2.0, 4.0], vec![1.0, 0.5, 0.25]))
//!     .with_hline("Bayes bound", 0.2);
//! let json = serde_json::to_string(&fig).unwrap();
//! let back: Figure = serde_json::from_str(&json).unwrap();
//! assert_eq!(back.id, "loss");
//! ```

use serde::{Deserialize, Deserializer, Serialize};

/// One figure of a report; `id` is its file stem under `figures/`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    pub id: String,
    pub title: String,
    /// One or two sentences under the figure: what to look for.
    #[serde(default)]
    pub caption: String,
    pub plot: Plot,
}

/// What a figure shows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Plot {
    /// Curves against a shared x axis, with optional horizontal reference lines
    /// (baselines, bounds, a theory's prediction).
    Lines {
        x_label: String,
        y_label: String,
        #[serde(default)]
        log_x: bool,
        #[serde(default)]
        log_y: bool,
        series: Vec<Series>,
        #[serde(default)]
        hlines: Vec<RefLine>,
    },
    /// A matrix of values, row-major `[rows, cols]`. `diverging` uses a blue-white-red
    /// map centred on zero (for signed quantities such as Gram entries or gaps).
    Heatmap {
        x_label: String,
        y_label: String,
        rows: usize,
        cols: usize,
        #[serde(deserialize_with = "floats")]
        values: Vec<f64>,
        #[serde(default)]
        row_ticks: Vec<String>,
        #[serde(default)]
        col_ticks: Vec<String>,
        #[serde(default)]
        diverging: bool,
    },
    /// Points, optionally labelled (a word next to its point) and grouped (one
    /// colour per group), with optional lines drawn over them (a fitted or
    /// theoretical slope).
    Scatter {
        x_label: String,
        y_label: String,
        points: Vec<Point>,
        #[serde(default)]
        lines: Vec<Series>,
    },
    /// Attention weights over one sequence, for the HTML report's interactive
    /// viewer (tokens as text, hover a query to see where it attends, pick a
    /// head). `pattern` is row-major `[head, query, key]`; the queries are the
    /// tokens themselves (self-attention) unless `query_tokens` names them (a
    /// ⟨cls⟩ query). Pictures (SVG, PNG, and the page without JavaScript) show
    /// the first head as a heatmap.
    Attention {
        /// The sequence, one entry per key position.
        tokens: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        query_tokens: Vec<String>,
        heads: Vec<AttentionHead>,
        #[serde(deserialize_with = "floats")]
        pattern: Vec<f64>,
        /// Where the same weights are stored as activations, if anywhere.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<AttentionSource>,
        /// The head shown first (and in pictures), an index into `heads`.
        #[serde(default, skip_serializing_if = "is_zero")]
        first_head: usize,
        /// The same heads on the same sequence at earlier checkpoints, oldest
        /// first, each `pattern`'s shape; the viewer's slider steps through
        /// them to `pattern`, which is the checkpoint at `step`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        history: Vec<AttentionCheckpoint>,
        /// The training step of `pattern`, when the viewer has a history.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
    },
}

/// One earlier checkpoint of an attention viewer: `[head, query, key]` like
/// the viewer's own pattern.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttentionCheckpoint {
    pub step: u64,
    #[serde(deserialize_with = "floats")]
    pub pattern: Vec<f64>,
}

/// An attention viewer's queries: `query_tokens` when it names them, else the
/// tokens themselves (self-attention).
pub fn attention_queries<'a>(tokens: &'a [String], query_tokens: &'a [String]) -> &'a [String] {
    if query_tokens.is_empty() {
        tokens
    } else {
        query_tokens
    }
}

/// One head of an attention viewer: its label and where it lives.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttentionHead {
    /// Shown on the head picker, e.g. `L1H0`.
    pub name: String,
    /// The hook whose activation holds it, e.g. `blocks.1.attn.hook_pattern`.
    pub hook: String,
    /// Its index on the hook's head axis.
    pub head: usize,
}

impl AttentionHead {
    /// Head `head` of layer `layer`'s `blocks.{layer}.attn.hook_pattern`, named `L{layer}H{head}`.
    pub fn of_layer(layer: usize, head: usize) -> Self {
        AttentionHead {
            name: format!("L{layer}H{head}"),
            hook: format!("blocks.{layer}.attn.hook_pattern"),
            head,
        }
    }
}

/// The activation file holding a viewer's weights: each head's
/// `[batch, head, query_pos, key_pos]` hook at sequence `batch`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttentionSource {
    /// Relative to the report (a run's `activations.safetensors`).
    pub file: String,
    pub batch: usize,
}

/// One named curve.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub name: String,
    #[serde(deserialize_with = "floats")]
    pub x: Vec<f64>,
    #[serde(deserialize_with = "floats")]
    pub y: Vec<f64>,
    /// Drawn dashed (theory, baselines) rather than solid (measurements).
    #[serde(default)]
    pub dashed: bool,
}

/// A horizontal reference line across a line plot.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RefLine {
    pub name: String,
    #[serde(deserialize_with = "float")]
    pub y: f64,
}

/// One scatter point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    #[serde(deserialize_with = "float")]
    pub x: f64,
    #[serde(deserialize_with = "float")]
    pub y: f64,
    /// Text drawn beside the point (e.g. the word), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Colour group (e.g. "positive" / "negative"), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

// JSON has no NaN or infinity: serde_json writes them as `null`. Reading
// `null` back as NaN lets a figure with missing values round-trip through its
// file (the renderer skips NaN).

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn float<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn floats<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v = Vec::<Option<f64>>::deserialize(d)?;
    Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}

impl Series {
    pub fn new(name: &str, x: Vec<f64>, y: Vec<f64>) -> Self {
        Series {
            name: name.to_string(),
            x,
            y,
            dashed: false,
        }
    }
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
}

impl Figure {
    /// An empty line plot; add curves with [`Figure::with_series`].
    pub fn lines(id: &str, title: &str, x_label: &str, y_label: &str) -> Self {
        Figure {
            id: id.to_string(),
            title: title.to_string(),
            caption: String::new(),
            plot: Plot::Lines {
                x_label: x_label.to_string(),
                y_label: y_label.to_string(),
                log_x: false,
                log_y: false,
                series: Vec::new(),
                hlines: Vec::new(),
            },
        }
    }

    /// A heatmap of `values` (row-major `[rows, cols]`).
    #[allow(clippy::too_many_arguments)]
    pub fn heatmap(
        id: &str,
        title: &str,
        x_label: &str,
        y_label: &str,
        rows: usize,
        cols: usize,
        values: Vec<f64>,
        diverging: bool,
    ) -> Self {
        Figure {
            id: id.to_string(),
            title: title.to_string(),
            caption: String::new(),
            plot: Plot::Heatmap {
                x_label: x_label.to_string(),
                y_label: y_label.to_string(),
                rows,
                cols,
                values,
                row_ticks: Vec::new(),
                col_ticks: Vec::new(),
                diverging,
            },
        }
    }

    /// A scatter plot of `points`.
    pub fn scatter(
        id: &str,
        title: &str,
        x_label: &str,
        y_label: &str,
        points: Vec<Point>,
    ) -> Self {
        Figure {
            id: id.to_string(),
            title: title.to_string(),
            caption: String::new(),
            plot: Plot::Scatter {
                x_label: x_label.to_string(),
                y_label: y_label.to_string(),
                points,
                lines: Vec::new(),
            },
        }
    }

    pub fn caption(mut self, text: &str) -> Self {
        self.caption = text.to_string();
        self
    }

    pub fn log_x(mut self) -> Self {
        if let Plot::Lines { log_x, .. } = &mut self.plot {
            *log_x = true;
        }
        self
    }

    pub fn log_y(mut self) -> Self {
        if let Plot::Lines { log_y, .. } = &mut self.plot {
            *log_y = true;
        }
        self
    }

    /// An attention viewer of `pattern` (`[head, query, key]`) over `tokens`,
    /// queries being the tokens themselves; see [`Plot::Attention`].
    pub fn attention(
        id: &str,
        title: &str,
        tokens: Vec<String>,
        heads: Vec<AttentionHead>,
        pattern: Vec<f64>,
    ) -> Self {
        Figure {
            id: id.to_string(),
            title: title.to_string(),
            caption: String::new(),
            plot: Plot::Attention {
                tokens,
                query_tokens: Vec::new(),
                heads,
                pattern,
                source: None,
                first_head: 0,
                history: Vec::new(),
                step: None,
            },
        }
    }

    /// Gives an attention viewer a checkpoint slider: `earlier` are the same
    /// heads on the same sequence at earlier steps (oldest first), and `step`
    /// is the step of the viewer's own pattern, the slider's last position.
    pub fn with_history(mut self, earlier: Vec<AttentionCheckpoint>, at: u64) -> Self {
        if let Plot::Attention { history, step, .. } = &mut self.plot {
            *history = earlier;
            *step = Some(at);
        }
        self
    }

    /// Names the queries of an attention viewer whose queries are not its tokens.
    pub fn with_queries(mut self, queries: Vec<String>) -> Self {
        if let Plot::Attention { query_tokens, .. } = &mut self.plot {
            *query_tokens = queries;
        }
        self
    }

    /// Says which activation file and sequence hold an attention viewer's weights.
    pub fn with_source(mut self, file: &str, batch: usize) -> Self {
        if let Plot::Attention { source, .. } = &mut self.plot {
            *source = Some(AttentionSource {
                file: file.to_string(),
                batch,
            });
        }
        self
    }

    /// Makes head `index` (into the viewer's heads) the one shown first and in pictures.
    pub fn with_first_head(mut self, index: usize) -> Self {
        if let Plot::Attention { first_head, .. } = &mut self.plot {
            *first_head = index;
        }
        self
    }

    /// What pictures of this figure show: itself, or for an attention viewer
    /// its first head (`first_head`) as a heatmap (query rows, key columns,
    /// token ticks).
    pub fn still(&self) -> std::borrow::Cow<'_, Figure> {
        let Plot::Attention {
            tokens,
            query_tokens,
            heads,
            pattern,
            first_head,
            step,
            history,
            ..
        } = &self.plot
        else {
            return std::borrow::Cow::Borrowed(self);
        };
        let queries = attention_queries(tokens, query_tokens);
        let (nq, nk) = (queries.len(), tokens.len());
        let tick = |v: &[String]| {
            v.iter()
                .enumerate()
                .map(|(i, t)| format!("{i}:{t}"))
                .collect()
        };
        let at = match step {
            Some(s) if !history.is_empty() => format!(" at step {s}"),
            _ => String::new(),
        };
        let title = match heads.get(*first_head) {
            Some(h) if heads.len() > 1 => format!(
                "{} ({}{at}; {} heads in the HTML report)",
                self.title,
                h.name,
                heads.len()
            ),
            Some(h) => format!("{} ({}{at})", self.title, h.name),
            None => self.title.clone(),
        };
        let at = first_head * nq * nk;
        let values = pattern.get(at..at + nq * nk).unwrap_or(pattern).to_vec();
        let mut fig = Figure::heatmap(&self.id, &title, "key", "query", nq, nk, values, false)
            .with_ticks(tick(queries), tick(tokens));
        fig.caption = self.caption.clone();
        std::borrow::Cow::Owned(fig)
    }

    /// Adds a curve to a line plot, or an overlay line to a scatter plot.
    pub fn with_series(mut self, s: Series) -> Self {
        match &mut self.plot {
            Plot::Lines { series, .. } => series.push(s),
            Plot::Scatter { lines, .. } => lines.push(s),
            Plot::Heatmap { .. } | Plot::Attention { .. } => {}
        }
        self
    }

    /// Adds a horizontal reference line to a line plot.
    pub fn with_hline(mut self, name: &str, y: f64) -> Self {
        if let Plot::Lines { hlines, .. } = &mut self.plot {
            hlines.push(RefLine {
                name: name.to_string(),
                y,
            });
        }
        self
    }

    /// Sets row and column tick labels of a heatmap.
    pub fn with_ticks(mut self, rows: Vec<String>, cols: Vec<String>) -> Self {
        if let Plot::Heatmap {
            row_ticks,
            col_ticks,
            ..
        } = &mut self.plot
        {
            *row_ticks = rows;
            *col_ticks = cols;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_read_back_as_nan() {
        let fig = Figure::heatmap("h", "t", "x", "y", 1, 2, vec![f64::NAN, 1.0], false);
        let json = serde_json::to_string(&fig).unwrap();
        assert!(json.contains("[null,1.0]"), "{json}");
        let back: Figure = serde_json::from_str(&json).unwrap();
        let Plot::Heatmap { values, .. } = back.plot else {
            panic!("not a heatmap")
        };
        assert!(values[0].is_nan() && values[1] == 1.0);
        let p: Point = serde_json::from_str(r#"{"x": null, "y": 2}"#).unwrap();
        assert!(p.x.is_nan() && p.y == 2.0);
    }
}
