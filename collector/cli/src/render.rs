//! What the reports share: sizes for people, HTML escaping, the head of a self-contained page and
//! the chart colours (postmortem and capacity pages look alike).

/// Bytes as `12.34 GiB`.
pub fn human_bytes(v: Option<u64>) -> String {
    let Some(v) = v else { return "-".to_owned() };
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit < UNITS.len() - 1 {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{v} B") } else { format!("{x:.2} {}", UNITS[unit]) }
}

/// Escapes text for HTML.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Colours of the stacked series.
pub const PALETTE: [&str; 8] =
    ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

/// The start of a self-contained HTML page (no scripts, no external assets). Charts and tables
/// sit in `.wide` boxes that scroll sideways on a narrow screen instead of widening the page.
pub fn html_head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}}\
         p,li,h2{{overflow-wrap:anywhere}}td{{overflow-wrap:break-word}}table{{border-collapse:collapse}}th{{white-space:nowrap}}\
         td,th{{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}}th{{background:#f3f3f3}}\
         .num{{text-align:right;white-space:nowrap}}section{{margin-bottom:3em}}code{{background:#f3f3f3;padding:1px 4px}}\
         .wide{{max-width:100%;overflow-x:auto}}svg text{{font-family:system-ui,sans-serif}}\
         .legend{{font-size:13px;margin:4px 0 16px}}.legend .entry{{display:inline-block;margin-right:14px;white-space:nowrap}}\
         .legend .swatch{{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:middle}}\
         nav ol{{padding-left:1.5em}}td.words{{min-width:18em}}.note{{color:#555}}\
         @media (max-width:600px){{body{{margin:0.8em}}h1{{font-size:1.4em}}}}\
         </style></head><body>\n<h1>{}</h1>\n",
        html_escape(title),
        html_escape(title)
    )
}

/// `content` in a box that scrolls sideways when it is wider than the screen.
pub fn wide(content: &str) -> String {
    format!("<div class=\"wide\">{content}</div>\n")
}
