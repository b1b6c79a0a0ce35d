//! The pieces every SVG chart of the HTML pages is built from: axes with round ticks and units
//! (bytes, percent, counts, time before a failure), colours that follow a key across a whole page
//! (a process keeps its colour in every chart; a scenario has one colour everywhere) and legends
//! written as HTML under the chart, where they wrap instead of being clipped.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::render::{PALETTE, html_escape};

/// One axis: its ticks (value, label) from 0 up to `max`, the top of the scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Ticks, ascending, the first at 0 and the last at `max`.
    pub ticks: Vec<(f64, String)>,
    /// The top of the scale (the last tick).
    pub max: f64,
}

/// A round step (1, 2 or 5 × 10ⁿ) cutting `0..=max` into about `target` intervals.
pub fn nice_step(max: f64, target: usize) -> f64 {
    let raw = (max / target.max(1) as f64).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|s| *s >= raw);
    step.unwrap_or(10.0 * magnitude)
}

/// Ticks 0, step, 2·step … up to the first at or above `max` (about `target` intervals).
fn ticks(max: f64, target: usize, label: impl Fn(f64) -> String) -> Axis {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let step = nice_step(max, target);
    let n = (max / step - 1e-9).ceil().max(1.0) as usize;
    let ticks: Vec<(f64, String)> = (0..=n).map(|i| i as f64 * step).map(|v| (v, label(v))).collect();
    Axis { max: n as f64 * step, ticks }
}

/// A byte axis up to at least `max_bytes`: the unit (B … TiB) chosen by the size, round ticks in
/// it (`0 GiB`, `20 GiB`, … `80 GiB`).
pub fn byte_axis(max_bytes: f64, target: usize) -> Axis {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut scale = 1.0_f64;
    while max_bytes / scale >= 1024.0 && unit < UNITS.len() - 1 {
        scale *= 1024.0;
        unit += 1;
    }
    let axis = ticks(max_bytes / scale, target, |v| format!("{} {}", trim_number(v), UNITS[unit]));
    Axis { max: axis.max * scale, ticks: axis.ticks.into_iter().map(|(v, l)| (v * scale, l)).collect() }
}

/// A share axis 0–100 % (values as fractions) with ticks every 20 %.
pub fn percent_axis() -> Axis {
    Axis { max: 1.0, ticks: (0..=5).map(|i| (f64::from(i) * 0.2, format!("{} %", i * 20))).collect() }
}

/// A count axis up to at least `max` with whole-number ticks.
pub fn count_axis(max: f64, target: usize) -> Axis {
    let axis = ticks(max.max(1.0), target, trim_number);
    if axis.ticks.len() > 1 && axis.ticks[1].0 < 1.0 {
        return ticks(max.max(1.0), max.max(1.0).ceil() as usize, trim_number);
    }
    axis
}

/// A time axis over `span_ms` before a failure: ticks at round offsets (`−5 min`, `−30 s`) from
/// the start, the last one `OOM` at the end. Values are ms from the start.
pub fn time_before_axis(span_ms: i64, target: usize) -> Axis {
    const STEPS_S: [i64; 16] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400];
    let span_s = (span_ms.max(1000) as f64 / 1000.0).ceil() as i64;
    let want = span_s / i64::try_from(target.max(1)).unwrap_or(1);
    let step = STEPS_S.iter().copied().find(|s| *s >= want.max(1)).unwrap_or(86400);
    let mut ticks: Vec<(f64, String)> = Vec::new();
    let mut back = span_s - span_s % step;
    if back == span_s {
        back -= step;
    }
    ticks.push((0.0, format!("−{}", duration_words(span_s))));
    while back > 0 {
        // Skip a tick crowding the start label.
        if (span_s - back) as f64 >= step as f64 * 0.6 {
            ticks.push(((span_s - back) as f64 * 1000.0, format!("−{}", duration_words(back))));
        }
        back -= step;
    }
    ticks.push((span_s as f64 * 1000.0, "OOM".to_owned()));
    Axis { max: span_s as f64 * 1000.0, ticks }
}

/// `90 s`, `5 min`, `2 h`, `1 d` (the largest unit that divides evenly, else seconds/minutes).
fn duration_words(s: i64) -> String {
    match s {
        s if s >= 86400 && s % 86400 == 0 => format!("{} d", s / 86400),
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// `20`, `2.5`, `0.25` (no trailing zeros).
fn trim_number(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Colours that follow a key across a page: the first key asked gets the first palette colour,
/// and a key keeps its colour in every chart of the page.
#[derive(Debug, Default)]
pub struct Colours {
    by_key: HashMap<String, usize>,
}

impl Colours {
    /// The colour of `key`.
    pub fn of(&mut self, key: &str) -> &'static str {
        let next = self.by_key.len();
        let i = *self.by_key.entry(key.to_owned()).or_insert(next);
        PALETTE[i % PALETTE.len()]
    }
}

/// The fixed colour of a scenario (the same on every page).
pub fn scenario_colour(scenario: &str) -> &'static str {
    match scenario {
        "static" => "#4e79a7",
        "batch" => "#f28e2b",
        "sequence" => "#edc948",
        "contention" => "#e15759",
        "fragmentation" => "#76b7b2",
        "host_oom" => "#b07aa1",
        "unknown" => "#bab0ac",
        _ => "#9c755f",
    }
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swatch {
    /// A filled square.
    Fill,
    /// A solid line.
    Line,
    /// A dashed line.
    Dashed,
}

/// A legend under a chart: one entry per (colour, swatch, label), wrapping like text.
pub fn legend(entries: &[(&str, Swatch, String)]) -> String {
    let mut html = String::from("<p class=\"legend\">");
    for (colour, swatch, label) in entries {
        let style = match swatch {
            Swatch::Fill => format!("background:{colour}"),
            Swatch::Line => format!("border-top:3px solid {colour};height:0;margin-bottom:4px"),
            Swatch::Dashed => format!("border-top:3px dashed {colour};height:0;margin-bottom:4px"),
        };
        let _ = write!(
            html,
            "<span class=\"entry\"><span class=\"swatch\" style=\"{style}\"></span>{}</span> ",
            html_escape(label)
        );
    }
    html.push_str("</p>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(100.0, 5), 20.0);
        assert_eq!(nice_step(80.0, 5), 20.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.9, 5), 0.2);
        assert_eq!(nice_step(1_000_000.0, 4), 500_000.0);
    }

    #[test]
    fn byte_axes_pick_a_unit_and_cover_the_data() {
        let gib = 1024.0 * 1024.0 * 1024.0;
        let a = byte_axis(84.0 * gib, 5);
        assert!(a.max >= 84.0 * gib);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0 GiB", "20 GiB", "40 GiB", "60 GiB", "80 GiB", "100 GiB"]);
        let a = byte_axis(300.0 * 1024.0 * 1024.0, 4);
        assert_eq!(a.ticks[1].1, "100 MiB");
        assert!(byte_axis(0.0, 4).ticks.len() >= 2, "an empty chart still has an axis");
    }

    #[test]
    fn count_axes_have_whole_ticks() {
        let a = count_axis(3.0, 5);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0", "1", "2", "3"]);
        let a = count_axis(29.0, 5);
        assert_eq!(a.ticks.last().map(|t| t.0), Some(30.0));
    }

    #[test]
    fn time_axes_count_back_from_the_failure() {
        let a = time_before_axis(60_000, 4);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["−1 min", "−45 s", "−30 s", "−15 s", "OOM"]);
        assert_eq!(a.ticks.last().map(|t| t.0), Some(60_000.0));
        let a = time_before_axis(600_000, 5);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["−10 min", "−8 min", "−6 min", "−4 min", "−2 min", "OOM"]);
        assert!(a.ticks.windows(2).all(|w| w[0].0 < w[1].0), "ascending: {labels:?}");
    }

    #[test]
    fn colours_follow_keys_and_scenarios_are_fixed() {
        let mut c = Colours::default();
        let a = c.of("pid 7 train");
        let b = c.of("pid 9 other");
        assert_ne!(a, b);
        assert_eq!(c.of("pid 7 train"), a);
        assert_eq!(scenario_colour("batch"), scenario_colour("batch"));
        assert_ne!(scenario_colour("batch"), scenario_colour("static"));
    }

    #[test]
    fn legends_escape() {
        let l = legend(&[("#000", Swatch::Fill, "a<b".to_owned())]);
        assert!(l.contains("a&lt;b") && l.contains("class=\"legend\""));
    }
}
