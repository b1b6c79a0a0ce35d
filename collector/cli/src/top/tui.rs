//! The interactive screen of `oomlens top`, as `top`, `htop` and `nvitop` behave: the alternate
//! screen (the shell's scrollback is left as it was), the header pinned at the top, the body
//! scrolled with the keys, a status line naming the keys at the bottom. Keys: `q` / Esc / Ctrl-C
//! quit; ↑ ↓ / `k` `j` scroll a line; PgUp PgDn / space scroll a page; Home End / `g` `G` jump;
//! `+` `-` refresh faster / slower; `p` pauses; `r` refreshes now. A failed fetch keeps the last
//! frame and says why in the status line; the next refresh retries. The terminal is restored
//! however the loop ends (quit, SIGTERM, SIGHUP, error, panic).

use std::io::Write as _;
use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, terminal};

use super::{FrameQuery, Rendered, TopError, fetch_frame};

/// Running the screen failed.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// The terminal refused raw mode, the alternate screen or a write.
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    /// The first frame could not be fetched.
    #[error(transparent)]
    Fetch(#[from] TopError),
}

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Leave.
    Quit,
    /// Scroll by this many lines (negative: up).
    Scroll(i64),
    /// Scroll by this many pages.
    Page(i64),
    /// To the top.
    Top,
    /// To the bottom.
    Bottom,
    /// Refresh twice as often.
    Faster,
    /// Refresh half as often.
    Slower,
    /// Stop or resume refreshing.
    Pause,
    /// Refresh now.
    Refresh,
    /// Nothing.
    None,
}

/// The action of a key press.
pub fn action_of(key: KeyEvent) -> Action {
    if key.kind == KeyEventKind::Release {
        return Action::None;
    }
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => Action::Scroll(-1),
        KeyCode::Down | KeyCode::Char('j') => Action::Scroll(1),
        KeyCode::PageUp | KeyCode::Char('b') => Action::Page(-1),
        KeyCode::PageDown | KeyCode::Char(' ') => Action::Page(1),
        KeyCode::Home | KeyCode::Char('g') => Action::Top,
        KeyCode::End | KeyCode::Char('G') => Action::Bottom,
        KeyCode::Char('+' | '=') => Action::Faster,
        KeyCode::Char('-' | '_') => Action::Slower,
        KeyCode::Char('p' | 'P') => Action::Pause,
        KeyCode::Char('r' | 'R') => Action::Refresh,
        _ => Action::None,
    }
}

/// The screen's state between frames.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// First body line shown.
    pub scroll: usize,
    /// Refreshing stopped.
    pub paused: bool,
    /// Time between refreshes.
    pub interval: Duration,
    /// Why the last refresh failed, until one succeeds.
    pub error: Option<String>,
}

/// The fastest and slowest refresh `+` / `-` reach.
const INTERVAL_RANGE: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(60));

impl View {
    /// Applies a scroll or interval action for a body of `body` lines shown `rows` at a time;
    /// returns false for [`Action::Quit`].
    pub fn apply(&mut self, action: Action, body: usize, rows: usize) -> bool {
        let max_scroll = body.saturating_sub(rows.max(1));
        let by = |s: usize, n: i64| -> usize {
            let moved = if n < 0 {
                s.saturating_sub(n.unsigned_abs() as usize)
            } else {
                s.saturating_add(n as usize)
            };
            moved.min(max_scroll)
        };
        match action {
            Action::Quit => return false,
            Action::Scroll(n) => self.scroll = by(self.scroll, n),
            Action::Page(n) => self.scroll = by(self.scroll, n.saturating_mul(rows.max(1) as i64)),
            Action::Top => self.scroll = 0,
            Action::Bottom => self.scroll = max_scroll,
            Action::Faster => self.interval = (self.interval / 2).max(INTERVAL_RANGE.0),
            Action::Slower => self.interval = (self.interval * 2).min(INTERVAL_RANGE.1),
            Action::Pause => self.paused = !self.paused,
            Action::Refresh | Action::None => {}
        }
        self.scroll = self.scroll.min(max_scroll);
        true
    }
}

/// Cuts `line` to `cols` characters.
fn fit(line: &str, cols: usize) -> String {
    line.chars().take(cols).collect()
}

/// The screen as exactly `rows` lines of at most `cols` characters: the header, the body from
/// `view.scroll`, then the status line (keys, interval, position, pause, the last error).
pub fn compose(frame: &Rendered, view: &View, rows: usize, cols: usize) -> Vec<String> {
    let rows = rows.max(3);
    let header: Vec<&String> = frame.header.iter().take(rows - 2).collect();
    let body_rows = rows - header.len() - 1;
    let mut out: Vec<String> = header.iter().map(|l| fit(l, cols)).collect();
    let start = view.scroll.min(frame.body.len());
    let shown: Vec<&String> = frame.body.iter().skip(start).take(body_rows).collect();
    out.extend(shown.iter().map(|l| fit(l, cols)));
    out.resize(rows - 1, String::new());
    let position = if frame.body.len() > body_rows {
        format!("lines {}–{} of {}", start + 1, start + shown.len(), frame.body.len())
    } else {
        "all lines".to_owned()
    };
    let state = match (&view.error, view.paused) {
        (Some(e), _) => format!("! {e}"),
        (None, true) => "PAUSED".to_owned(),
        (None, false) => format!("every {:.2} s", view.interval.as_secs_f64()),
    };
    out.push(fit(
        &format!("q quit  ↑↓ PgUp PgDn scroll  +/- interval  p pause  r refresh  │ {position} │ {state}"),
        cols,
    ));
    out
}

/// Raw mode, the alternate screen and a hidden cursor while alive; all undone on drop.
#[derive(Debug)]
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Self> {
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(std::io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(screen)
    }

    fn draw(&self, lines: &[String]) -> std::io::Result<()> {
        let mut buf = String::from("\x1b[H");
        for (i, l) in lines.iter().enumerate() {
            if i > 0 {
                buf.push_str("\r\n");
            }
            buf.push_str(l);
            buf.push_str("\x1b[K");
        }
        buf.push_str("\x1b[J");
        let mut out = std::io::stdout().lock();
        out.write_all(buf.as_bytes())?;
        out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(std::io::stdout(), cursor::Show, terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

/// The terminal's size (columns, rows); where it reports none (a pseudo-terminal nobody sized),
/// `COLUMNS` / `LINES`, else 100 × 30.
fn screen_size() -> (usize, usize) {
    let env = |name: &str, default: usize| {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(default)
    };
    match terminal::size() {
        Ok((c, r)) if c > 0 && r > 0 => (usize::from(c), usize::from(r)),
        _ => (env("COLUMNS", 100), env("LINES", 30)),
    }
}

/// Reads key and resize events on a thread of its own (the terminal read blocks) until the
/// receiver is dropped.
fn spawn_event_reader() -> tokio::sync::mpsc::Receiver<Event> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::spawn(move || {
        while !tx.is_closed() {
            match crossterm::event::poll(Duration::from_millis(200)) {
                Ok(true) => match crossterm::event::read() {
                    Ok(ev) => {
                        if tx.blocking_send(ev).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                Ok(false) => {}
                Err(_) => return,
            }
        }
    });
    rx
}

/// Runs the screen until the user quits: a frame of `query()` (called before each fetch, so the
/// caller moves the frame's time) every interval, `procs` processes per GPU.
pub async fn run(
    client: &clickhouse::Client,
    db: &str,
    interval: Duration,
    procs: usize,
    mut query: impl FnMut() -> FrameQuery,
) -> Result<(), TuiError> {
    let mut frame = fetch_frame(client, db, &query()).await?.render(procs);
    // SIGTERM and SIGHUP (the terminal closed) end the view like `q`, so the terminal is restored;
    // Ctrl-C arrives as a key in raw mode.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let screen = Screen::enter()?;
    let mut events = spawn_event_reader();
    let mut view = View { scroll: 0, paused: false, interval, error: None };
    let mut next = tokio::time::Instant::now() + view.interval;
    loop {
        let (cols, rows) = screen_size();
        // Keep the scroll inside the body as frames change length.
        view.apply(Action::None, frame.body.len(), rows.saturating_sub(frame.header.len() + 1));
        screen.draw(&compose(&frame, &view, rows, cols))?;
        tokio::select! {
            _ = tokio::time::sleep_until(next), if !view.paused => {}
            _ = term.recv() => break,
            _ = hangup.recv() => break,
            ev = events.recv() => {
                let body_rows = rows.saturating_sub(frame.header.len() + 1);
                match ev {
                    Some(Event::Key(key)) => {
                        let action = action_of(key);
                        if !view.apply(action, frame.body.len(), body_rows) {
                            break;
                        }
                        if matches!(action, Action::Faster | Action::Slower) {
                            next = tokio::time::Instant::now() + view.interval;
                        }
                        if action != Action::Refresh {
                            continue;
                        }
                    }
                    // A resize redraws; a closed terminal ends the view.
                    Some(_) => continue,
                    None => break,
                }
            }
        }
        next = tokio::time::Instant::now() + view.interval;
        match fetch_frame(client, db, &query()).await {
            Ok(f) => {
                frame = f.render(procs);
                view.error = None;
            }
            Err(e) => view.error = Some(format!("cannot refresh: {e}; showing the last frame")),
        }
    }
    drop(screen);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_map_to_actions() {
        assert_eq!(action_of(key(KeyCode::Char('q'))), Action::Quit);
        assert_eq!(action_of(key(KeyCode::Esc)), Action::Quit);
        assert_eq!(action_of(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Action::Quit);
        assert_eq!(action_of(key(KeyCode::Char('c'))), Action::None);
        assert_eq!(action_of(key(KeyCode::Down)), Action::Scroll(1));
        assert_eq!(action_of(key(KeyCode::PageUp)), Action::Page(-1));
        assert_eq!(action_of(key(KeyCode::Char('G'))), Action::Bottom);
        assert_eq!(action_of(key(KeyCode::Char('+'))), Action::Faster);
    }

    #[test]
    fn the_header_stays_pinned_and_the_body_scrolls() {
        let frame = Rendered {
            header: vec!["HEADER".into()],
            body: (1..=50).map(|i| format!("line {i} {}", "x".repeat(200))).collect(),
        };
        let mut view = View { scroll: 0, paused: false, interval: Duration::from_secs(2), error: None };
        let rows = 10;
        let body_rows = rows - 2;
        let screen = compose(&frame, &view, rows, 40);
        assert_eq!(screen.len(), rows);
        assert_eq!(screen[0], "HEADER");
        assert!(screen[1].starts_with("line 1 ") && screen[1].chars().count() == 40, "cut to the width");
        assert!(screen[9].starts_with("q quit  "), "{screen:?}");

        assert!(view.apply(Action::Page(1), 50, body_rows));
        let screen = compose(&frame, &view, rows, 200);
        assert_eq!(screen[0], "HEADER", "pinned");
        assert!(screen[1].starts_with("line 9 "), "{screen:?}");
        assert!(screen[9].contains("lines 9–16 of 50"), "{}", screen[9]);
        view.apply(Action::Bottom, 50, body_rows);
        assert_eq!(view.scroll, 42);
        view.apply(Action::Scroll(5), 50, body_rows);
        assert_eq!(view.scroll, 42, "not past the end");
        view.apply(Action::Top, 50, body_rows);
        view.apply(Action::Scroll(-3), 50, body_rows);
        assert_eq!(view.scroll, 0);
        assert!(!view.apply(Action::Quit, 50, body_rows));

        view.apply(Action::Pause, 50, body_rows);
        assert!(compose(&frame, &view, rows, 200)[9].contains("PAUSED"));
        view.error = Some("cannot refresh: ClickHouse down".into());
        assert!(compose(&frame, &view, rows, 200)[9].contains("! cannot refresh: ClickHouse down"));
        // A short body fills the screen with blank lines; the status line stays last.
        let short = Rendered { header: vec!["H".into()], body: vec!["b".into()] };
        let screen = compose(&short, &View { error: None, ..view.clone() }, 6, 80);
        assert_eq!(screen.len(), 6);
        assert!(screen[5].contains("all lines"));
    }

    #[test]
    fn the_interval_stays_in_range() {
        let mut view = View { scroll: 0, paused: false, interval: Duration::from_secs(2), error: None };
        for _ in 0..10 {
            view.apply(Action::Faster, 0, 10);
        }
        assert_eq!(view.interval, INTERVAL_RANGE.0);
        for _ in 0..20 {
            view.apply(Action::Slower, 0, 10);
        }
        assert_eq!(view.interval, INTERVAL_RANGE.1);
    }
}
