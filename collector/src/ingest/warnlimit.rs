//! Warnings a peer can cause at will — a refused session, an identity claim that does not match
//! its certificate — rate-limited: a flood of hostile connections must not become a flood of log
//! lines (every refusal is still counted in `rejects_total{reason}`). The first
//! [`WARNINGS_PER_WINDOW`] of each window are logged; the rest are counted by kind and summarised
//! in one line when the window ends (on the next warning, or the server's once-a-window tick).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Warnings logged per window.
pub const WARNINGS_PER_WINDOW: u32 = 20;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// A shared rate limit for peer-caused warnings.
#[derive(Debug)]
pub struct WarnLimiter {
    per_window: u32,
    window: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    start: Instant,
    logged: u32,
    suppressed: BTreeMap<&'static str, u64>,
}

impl Default for WarnLimiter {
    fn default() -> Self {
        WarnLimiter::new(WARNINGS_PER_WINDOW, WINDOW)
    }
}

impl WarnLimiter {
    /// At most `per_window` warnings each `window`.
    pub fn new(per_window: u32, window: Duration) -> WarnLimiter {
        WarnLimiter {
            per_window,
            window,
            state: Mutex::new(State { start: Instant::now(), logged: 0, suppressed: BTreeMap::new() }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a warning of `kind` may be logged now; when not, it is counted for the summary.
    /// Also returns the summary of a window that just ended, to be logged first.
    pub fn allow(&self, kind: &'static str) -> (bool, Option<String>) {
        let mut st = self.lock();
        let summary = self.roll(&mut st);
        if st.logged < self.per_window {
            st.logged += 1;
            (true, summary)
        } else {
            *st.suppressed.entry(kind).or_default() += 1;
            (false, summary)
        }
    }

    /// The summary of the window if it has ended (`kind=count, …`), starting a new one.
    pub fn take_summary(&self) -> Option<String> {
        let mut st = self.lock();
        self.roll(&mut st)
    }

    fn roll(&self, st: &mut State) -> Option<String> {
        if st.start.elapsed() < self.window {
            return None;
        }
        st.start = Instant::now();
        st.logged = 0;
        let suppressed = std::mem::take(&mut st.suppressed);
        (!suppressed.is_empty())
            .then(|| suppressed.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_logged_up_to_the_limit_then_summarised() {
        let l = WarnLimiter::new(3, Duration::from_millis(50));
        let allowed: Vec<bool> =
            (0..10).map(|i| l.allow(if i % 2 == 0 { "tls" } else { "protocol" }).0).collect();
        assert_eq!(allowed.iter().filter(|a| **a).count(), 3);
        assert_eq!(l.take_summary(), None, "the window has not ended");
        std::thread::sleep(Duration::from_millis(60));
        let (ok, summary) = l.allow("tls");
        assert!(ok, "a new window");
        assert_eq!(summary.as_deref(), Some("protocol=4, tls=3"));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(l.take_summary(), None, "nothing suppressed in the last window");
    }
}
