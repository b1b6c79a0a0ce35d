//! Text helpers shared by the parsers: the bounded view of a line and the *compact* form.
//!
//! The compact form of a message is its text lower-cased with every whitespace character removed.
//! A message hard-wrapped at 80 columns (at a space or in the middle of a word, the space kept,
//! moved or dropped) has the same compact form as the unwrapped message, so every extractor
//! matches phrases without spaces (`"totalcapacityof"`) and never cares where a wrap fell.

/// Most bytes of one line that are looked at (the rest is ignored, never buffered).
pub const MAX_LINE_BYTES: usize = 4096;

/// The first [`MAX_LINE_BYTES`] of `line` (cut at a character boundary), without a trailing `\r`.
pub fn bounded(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    oomlens_schema::text::clip(line, MAX_LINE_BYTES)
}

/// Appends the compact form of `text` to `out` (ASCII lower-cased, whitespace removed).
pub fn push_compact(out: &mut String, text: &str) {
    out.reserve(text.len());
    for c in text.chars() {
        if !c.is_whitespace() {
            out.push(c.to_ascii_lowercase());
        }
    }
}

/// The compact form of `text`.
pub fn compact(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    push_compact(&mut s, text);
    s
}

/// Index just after the first occurrence of `needle` in `hay` at or after `from`.
pub fn after(hay: &str, needle: &str, from: usize) -> Option<usize> {
    hay.get(from..)?.find(needle).map(|i| from + i + needle.len())
}

/// The last `n` bytes of `s` (at a character boundary).
pub fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_ignores_wrapping() {
        let whole = "GPU 0 has a total capacity of 79.11 GiB of which 1.12 GiB is free.";
        let wrapped = ["GPU 0 has a total capa", "city of 79.11 GiB of which", "1.12 GiB is free."];
        let mut joined = String::new();
        for part in wrapped {
            push_compact(&mut joined, part);
        }
        assert_eq!(compact(whole), joined);
        assert_eq!(after(&joined, "capacityof", 0), Some(23));
    }

    #[test]
    fn bounded_cuts_at_char_boundary() {
        let long = "é".repeat(MAX_LINE_BYTES);
        let b = bounded(&long);
        assert!(b.len() <= MAX_LINE_BYTES && b.len() >= MAX_LINE_BYTES - 1);
        assert_eq!(bounded("abc\r\n"), "abc");
        assert_eq!(tail("héllo", 4), "llo");
    }
}
