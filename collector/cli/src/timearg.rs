//! Time arguments of the report commands (`--since`, `--until`, `--window`): one parser for
//! durations (`90s`, `15m`, `2h`, `7d`, `1w`, `500ms`, combined like `1h30m`), RFC 3339 instants
//! (`2026-11-29T12:00:00Z`, `2026-11-29T12:00:00.250+01:00`) and Unix epoch milliseconds
//! (`1764460800000`).
//!
//! As a point in time a duration means "that long before now" (`--since 7d`); `now` is now.
//! [`parse_window`] turns a `--since`/`--until` pair into the half-open window every report
//! queries, and refuses windows that end before they start.

/// A time argument that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad time {0:?}: expected a duration (500ms, 90s, 15m, 2h, 7d, 1w, 1h30m), an RFC 3339 time \
     (2026-11-29T12:00:00Z) or Unix epoch milliseconds"
)]
pub struct TimeArgError(pub String);

pub use oomlens_collector::analysis::json::format_ms;
pub use oomlens_schema::text::now_ms;

/// Parses a duration such as `7d`, `2h`, `1h30m`, `250ms` into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64, TimeArgError> {
    let bad = || TimeArgError(text.to_owned());
    let s = text.trim();
    if s.is_empty() {
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: i64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return Err(bad()),
        };
        total = n.checked_mul(scale).and_then(|v| total.checked_add(v)).ok_or_else(bad)?;
    }
    Ok(total)
}

/// Parses a point in time relative to `now_ms`: `now`, a duration (that long before now), an
/// RFC 3339 time, or epoch milliseconds (a bare integer; `0` is the beginning).
pub fn parse_instant_ms(text: &str, now_ms: i64) -> Result<i64, TimeArgError> {
    let s = text.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<i64>().map_err(|_| TimeArgError(text.to_owned()));
    }
    if s.contains('-') && s.contains(':') {
        return parse_rfc3339_ms(s).ok_or_else(|| TimeArgError(text.to_owned()));
    }
    Ok(now_ms.saturating_sub(parse_duration_ms(s)?))
}

/// A report window: events with `since_ms <= at < until_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First millisecond inside the window.
    pub since_ms: i64,
    /// First millisecond after the window.
    pub until_ms: i64,
}

/// A `--since`/`--until` pair that does not make a window.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// `--since` does not parse.
    #[error("--since: {0}")]
    Since(TimeArgError),
    /// `--until` does not parse.
    #[error("--until: {0}")]
    Until(TimeArgError),
    /// The window is empty or reversed (`--since 1h --until 2h`).
    #[error(
        "empty window: --since {since} ({since_at}) is not before --until {until} ({until_at}); \
         a duration counts back from now, so the longer one is the earlier time"
    )]
    Reversed {
        /// `--since` as given.
        since: String,
        /// `--until` as given.
        until: String,
        /// `--since` as an RFC 3339 time.
        since_at: String,
        /// `--until` as an RFC 3339 time.
        until_at: String,
    },
}

/// Parses `--since`/`--until` into a window relative to `now_ms`. An `--until` of `now` includes
/// events stamped at this very millisecond (the window ends one past it); any other `--until` is
/// exclusive. Refuses a window whose end is not after its start.
pub fn parse_window(since: &str, until: &str, now_ms: i64) -> Result<Window, WindowError> {
    let since_ms = parse_instant_ms(since, now_ms).map_err(WindowError::Since)?;
    let mut until_ms = parse_instant_ms(until, now_ms).map_err(WindowError::Until)?;
    if until.trim().eq_ignore_ascii_case("now") {
        until_ms = until_ms.saturating_add(1);
    }
    if since_ms >= until_ms {
        return Err(WindowError::Reversed {
            since: since.to_owned(),
            until: until.to_owned(),
            since_at: format_ms(since_ms),
            until_at: format_ms(until_ms),
        });
    }
    Ok(Window { since_ms, until_ms })
}

fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let num = |t: &str| -> Option<u32> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok()).flatten()
    };
    let (date, time) = s.split_once(['T', 't', ' '])?;
    let mut d = date.split('-');
    let (year, month, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    if d.next().is_some() || date.len() != 10 {
        return None;
    }
    let (clock, offset_s) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0i64)
    } else {
        let idx = time.rfind(['+', '-'])?;
        let (c, off) = time.split_at(idx);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':')?;
        let (oh, om) = (num(oh)?, num(om)?);
        if oh > 23 || om > 59 {
            return None;
        }
        (c, sign * (i64::from(oh) * 3600 + i64::from(om) * 60))
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut t = hms.split(':');
    let (h, m, sec) = (num(t.next()?)?, num(t.next()?)?, num(t.next()?)?);
    if t.next().is_some() {
        return None;
    }
    let millis = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        num(&digits)?
    };
    let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(i32::try_from(year).ok()?, month, u8::try_from(day).ok()?).ok()?;
    let clock = time::Time::from_hms_milli(
        u8::try_from(h).ok()?,
        u8::try_from(m).ok()?,
        u8::try_from(sec).ok()?,
        u16::try_from(millis).ok()?,
    )
    .ok()?;
    let utc = time::PrimitiveDateTime::new(date, clock).assume_utc();
    let ms = i64::try_from(utc.unix_timestamp_nanos() / 1_000_000).ok()?;
    Some(ms - offset_s * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("15m"), Ok(900_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("1w"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        for bad in ["", "7", "d", "7x", "-1h", "1.5h", "99999999999999999999d", "1h 2m"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn instants() {
        let now = 1_764_460_800_000; // 2025-11-30T00:00:00Z
        assert_eq!(parse_instant_ms("now", now), Ok(now));
        assert_eq!(parse_instant_ms("7d", now), Ok(now - 604_800_000));
        assert_eq!(parse_instant_ms("2h", now), Ok(now - 7_200_000));
        assert_eq!(parse_instant_ms("1764460800123", now), Ok(1_764_460_800_123));
        assert_eq!(parse_instant_ms("0", now), Ok(0));
        assert_eq!(parse_instant_ms("2025-11-30T00:00:00Z", now), Ok(now));
        assert_eq!(parse_instant_ms("2025-11-30T00:00:00.25Z", now), Ok(now + 250));
        assert_eq!(parse_instant_ms("2025-11-30T01:00:00+01:00", now), Ok(now));
        assert_eq!(parse_instant_ms("2025-11-29T23:30:00-00:30", now), Ok(now));
        assert_eq!(parse_instant_ms("2025-11-30 00:00:01z", now), Ok(now + 1000));
        for bad in [
            "2025-13-01T00:00:00Z",
            "2025-11-31T00:00:00Z",
            "2025-11-30T25:00:00Z",
            "2025-11-30T00:00:00",
            "2025-11-30T00:00:00+1",
            "2025-11-30T00:00:00.x1Z",
            "yesterday",
        ] {
            assert!(parse_instant_ms(bad, now).is_err(), "{bad:?}");
        }
        assert_eq!(format_ms(now + 5), "2025-11-30T00:00:00.005Z");
        assert_eq!(parse_instant_ms(&format_ms(now + 1234), now), Ok(now + 1234));
    }

    #[test]
    fn windows() {
        let now = 1_764_460_800_000;
        let w = |since, until| parse_window(since, until, now);
        assert_eq!(w("7d", "now"), Ok(Window { since_ms: now - 604_800_000, until_ms: now + 1 }));
        assert_eq!(w("0", " NOW "), Ok(Window { since_ms: 0, until_ms: now + 1 }));
        assert_eq!(w("2h", "1h"), Ok(Window { since_ms: now - 7_200_000, until_ms: now - 3_600_000 }));
        assert_eq!(w("now", "now"), Ok(Window { since_ms: now, until_ms: now + 1 }));
        for (since, until) in [("1h", "2h"), ("1h", "1h"), ("2025-11-30T00:00:00Z", "1764460800000")] {
            let err = w(since, until).unwrap_err();
            assert!(matches!(err, WindowError::Reversed { .. }), "{since} {until}: {err}");
            assert!(err.to_string().contains(since), "{err}");
        }
        assert!(matches!(w("yesterday", "now"), Err(WindowError::Since(_))));
        assert!(matches!(w("1h", "later"), Err(WindowError::Until(_))));
    }
}
