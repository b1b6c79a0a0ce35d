//! A real browser for the tests of the HTML pages: headless Chromium (Debian's `chromium`) lays a
//! page out at a given viewport width and reports what a reader would see go wrong — the page wider
//! than the screen, an element sticking out without a scrolling box around it, chart labels that
//! overlap or are clipped by their chart — and takes PNG screenshots to keep as artefacts.
//!
//! The layout is measured by a script in a harness page that holds the report page in an iframe
//! of the requested width (headless Chromium will not open a window narrower than 500 px, and the
//! report pages themselves carry no script); `--dump-dom` returns the harness with the verdict.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Running the browser failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// The browser could not be started.
    #[error("cannot run {path}: {source}")]
    Spawn {
        /// The executable.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The browser ran but did not produce what was asked.
    #[error("{what} failed: {detail}")]
    Failed {
        /// What was asked.
        what: String,
        /// Its exit status and the end of its stderr.
        detail: String,
    },
    /// A file around the run could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The verdict of the layout script was not valid JSON.
    #[error("the layout check returned no verdict: {0}")]
    Verdict(String),
}

/// What the layout script found on one page at one width.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Layout {
    /// The viewport width the page was laid out in, CSS px.
    pub viewport: f64,
    /// The page's scroll width (wider than `viewport` = the page scrolls sideways).
    pub scroll_width: f64,
    /// The page's height, CSS px.
    pub height: f64,
    /// SVG charts on the page.
    pub charts: usize,
    /// Text labels inside them.
    pub chart_labels: usize,
    /// Legends (`.legend`) on the page.
    pub legends: usize,
    /// Every problem found, in words (`chart 2: "capacity 80 GiB" overlaps "OOM"`).
    pub problems: Vec<String>,
}

/// The headless browser.
#[derive(Debug, Clone)]
pub struct Chromium {
    path: PathBuf,
}

/// The layout script: runs in the harness once the iframe has loaded, measures the page inside it
/// and writes its verdict as JSON into `<pre id="verdict">`.
const CHECK_SCRIPT: &str = r#"
function describe(el) {
  const text = (el.textContent || '').trim().slice(0, 40);
  return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (text ? ' "' + text + '"' : '');
}
function inScroller(el, w) {
  for (let p = el.parentElement; p; p = p.parentElement) {
    const o = w.getComputedStyle(p).overflowX;
    if (o === 'auto' || o === 'scroll' || o === 'hidden') return true;
  }
  return false;
}
function overlap(a, b) {
  const x = Math.min(a.right, b.right) - Math.max(a.left, b.left);
  const y = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
  return x > 1 && y > 1;
}
function check(d, w) {
  const problems = [];
  const vw = w.innerWidth;
  const sw = d.documentElement.scrollWidth;
  if (sw > vw + 1) problems.push('the page is ' + sw + ' px wide in a ' + vw + ' px viewport');
  let reported = 0;
  for (const el of d.body.querySelectorAll('*')) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 1 && !inScroller(el, w) && reported < 20) {
      problems.push(describe(el) + ' ends at ' + Math.round(r.right) + ' px, past the ' + vw + ' px viewport');
      reported++;
    }
  }
  const svgs = [...d.querySelectorAll('svg')];
  let labels = 0;
  svgs.forEach((svg, i) => {
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')]
      .map(t => ({ s: t.textContent, b: t.getBoundingClientRect() }))
      .filter(t => t.b.width > 0);
    labels += texts.length;
    for (const t of texts) {
      if (t.b.left < box.left - 1 || t.b.right > box.right + 1 || t.b.top < box.top - 1 || t.b.bottom > box.bottom + 1)
        problems.push('chart ' + (i + 1) + ': "' + t.s + '" is cut off by the chart edge');
    }
    for (let a = 0; a < texts.length; a++)
      for (let b = a + 1; b < texts.length; b++)
        if (overlap(texts[a].b, texts[b].b))
          problems.push('chart ' + (i + 1) + ': "' + texts[a].s + '" overlaps "' + texts[b].s + '"');
  });
  for (const l of d.querySelectorAll('.legend .entry')) {
    if (l.scrollWidth > l.clientWidth + 1) problems.push('legend entry "' + l.textContent + '" is clipped');
  }
  return { viewport: vw, scroll_width: sw, height: d.documentElement.scrollHeight, charts: svgs.length,
           chart_labels: labels, legends: d.querySelectorAll('.legend').length, problems };
}
window.addEventListener('load', () => {
  const f = document.getElementById('page');
  let verdict;
  try { verdict = check(f.contentDocument, f.contentWindow); }
  catch (e) { verdict = { error: String(e) }; }
  const pre = document.createElement('pre');
  pre.id = 'verdict';
  pre.textContent = JSON.stringify(verdict);
  document.body.appendChild(pre);
});
"#;

impl Chromium {
    /// The browser named by `OOMLENS_CHROMIUM`, else the first of `chromium`, `chromium-browser`,
    /// `google-chrome` on the `PATH`; `None` when there is none.
    pub fn find() -> Option<Self> {
        if let Some(p) = std::env::var_os("OOMLENS_CHROMIUM") {
            return Some(Chromium { path: PathBuf::from(p) });
        }
        let path = std::env::var_os("PATH")?;
        ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .map(|path| Chromium { path })
        })
    }

    /// The executable.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn command(&self, profile: &Path) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--allow-file-access-from-files",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
        cmd
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<String, BrowserError> {
        let out = cmd.output().map_err(|source| BrowserError::Spawn { path: self.path.clone(), source })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            return Err(BrowserError::Failed {
                what: what.to_owned(),
                detail: format!("{}: {tail}", out.status),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Lays `page` out in a viewport `width` px wide (any width, phones included) and returns what
    /// the layout script found.
    pub fn layout(&self, page: &Path, width: u32) -> Result<Layout, BrowserError> {
        let page =
            page.canonicalize().map_err(|source| BrowserError::Io { path: page.to_owned(), source })?;
        let work =
            tempfile::tempdir().map_err(|source| BrowserError::Io { path: std::env::temp_dir(), source })?;
        let harness = work.path().join("harness.html");
        let html = format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{{margin:0}}</style></head><body>\
             <iframe id=\"page\" src=\"file://{}\" style=\"width:{width}px;height:900px;border:0\"></iframe>\
             <script>{CHECK_SCRIPT}</script></body></html>",
            page.display()
        );
        std::fs::write(&harness, html)
            .map_err(|source| BrowserError::Io { path: harness.clone(), source })?;
        let mut cmd = self.command(&work.path().join("profile"));
        cmd.arg(format!("--window-size={},1000", width.max(500) + 20))
            .arg("--dump-dom")
            .arg(format!("file://{}", harness.display()));
        let dom = self.run(cmd, &format!("laying out {} at {width} px", page.display()))?;
        let verdict = dom
            .split("<pre id=\"verdict\">")
            .nth(1)
            .and_then(|rest| rest.split("</pre>").next())
            .ok_or_else(|| BrowserError::Verdict(dom.chars().take(300).collect()))?;
        let json =
            verdict.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
        serde_json::from_str(&json).map_err(|e| BrowserError::Verdict(format!("{e}: {json}")))
    }

    /// A PNG of `page` in a `width` × `height` px window (a phone-sized width shows the page in a
    /// frame of that width).
    pub fn screenshot(&self, page: &Path, width: u32, height: u32, png: &Path) -> Result<(), BrowserError> {
        let page =
            page.canonicalize().map_err(|source| BrowserError::Io { path: page.to_owned(), source })?;
        let work =
            tempfile::tempdir().map_err(|source| BrowserError::Io { path: std::env::temp_dir(), source })?;
        let target = if width >= 500 {
            format!("file://{}", page.display())
        } else {
            let frame = work.path().join("frame.html");
            let html = format!(
                "<!DOCTYPE html><html><body style=\"margin:0;background:#888\"><iframe src=\"file://{}\" \
                 style=\"width:{width}px;height:{height}px;border:0;background:#fff\"></iframe></body></html>",
                page.display()
            );
            std::fs::write(&frame, html)
                .map_err(|source| BrowserError::Io { path: frame.clone(), source })?;
            format!("file://{}", frame.display())
        };
        let mut cmd = self.command(&work.path().join("profile"));
        cmd.arg(format!("--window-size={},{height}", width.max(500)))
            .arg(format!("--screenshot={}", png.display()))
            .arg(target);
        self.run(cmd, &format!("a screenshot of {}", page.display()))?;
        match std::fs::metadata(png) {
            Ok(m) if m.len() > 0 => Ok(()),
            _ => Err(BrowserError::Failed {
                what: format!("a screenshot of {}", page.display()),
                detail: format!("{} was not written", png.display()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker sees what a reader would: a page that overflows, labels that collide or are
    /// cut off — and passes a page without them.
    #[test]
    fn layout_check_finds_overflow_overlap_and_clipping() {
        let Some(browser) = Chromium::find() else {
            assert!(std::env::var_os("CI").is_none(), "CI must have chromium");
            eprintln!("skipped: no chromium");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.html");
        std::fs::write(
            &bad,
            "<!DOCTYPE html><html><body><div style=\"width:900px\">wide</div>\
             <svg width=\"300\" height=\"60\"><text x=\"10\" y=\"20\">capacity 80 GiB</text>\
             <text x=\"30\" y=\"22\">OOM</text><text x=\"280\" y=\"50\">cut off here</text></svg>\
             <p class=\"legend\"><span class=\"entry\">x</span></p></body></html>",
        )
        .unwrap();
        let layout = browser.layout(&bad, 600).unwrap();
        let problems = layout.problems.join("\n");
        assert!(problems.contains("the page is") && problems.contains("px viewport"), "{problems}");
        assert!(problems.contains("\"capacity 80 GiB\" overlaps \"OOM\""), "{problems}");
        assert!(problems.contains("\"cut off here\" is cut off"), "{problems}");
        assert_eq!((layout.charts, layout.chart_labels, layout.legends), (1, 3, 1));

        let good = dir.path().join("good.html");
        std::fs::write(
            &good,
            "<!DOCTYPE html><html><body><div style=\"overflow-x:auto\"><div style=\"width:900px\">wide</div></div>\
             <svg width=\"300\" height=\"60\"><text x=\"10\" y=\"20\">capacity</text>\
             <text x=\"200\" y=\"50\">OOM</text></svg></body></html>",
        )
        .unwrap();
        let layout = browser.layout(&good, 375).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(layout.viewport, 375.0);
        let png = dir.path().join("good.png");
        browser.screenshot(&good, 375, 400, &png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    }
}
