//! Small text and time helpers every crate needs, in one place: cutting a string to a byte limit
//! on a character boundary (wire strings, labels, messages), and the wall clock in Unix epoch
//! milliseconds (the unit of every `ts_ms`).

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts `s` to at most `max` bytes on a character boundary, in place.
pub fn truncate(mut s: String, max: usize) -> String {
    let len = clip(&s, max).len();
    s.truncate(len);
    s
}

/// Cuts `s` to at most `max` bytes, ending in `…` when something was cut (and `max` leaves room
/// for it).
pub fn clip_marked(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let marker = if max >= 3 * '…'.len_utf8() { "…" } else { "" };
    format!("{}{marker}", clip(s, max - marker.len()))
}

/// Cuts `s` to at most `chars` characters for a table column, ending in `…` when something was cut.
pub fn ellipsize(s: &str, chars: usize) -> String {
    if s.chars().count() <= chars {
        return s.to_owned();
    }
    let keep: String = s.chars().take(chars.saturating_sub(1)).collect();
    format!("{keep}…")
}

/// Milliseconds since the Unix epoch, now (0 before 1970, saturating far in the future).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("abc", 10), "abc");
        assert_eq!(truncate("日本語".to_owned(), 4), "日");
        assert_eq!(clip_marked("abcdefghijkl", 10), "abcdefg…");
        assert_eq!(clip_marked("abcdefgh", 5), "abcde", "no room for the marker");
        assert_eq!(clip_marked("abc", 5), "abc");
        assert_eq!(ellipsize("workload-name", 6), "workl…");
        assert_eq!(ellipsize("ab", 6), "ab");
        assert!(now_ms() > 1_700_000_000_000);
    }
}
