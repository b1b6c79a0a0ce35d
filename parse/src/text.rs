//! Text helpers shared by the parsers: the bounded view of a line and the *compact* form.
//!
//! The compact form of a message is its text lower-cased with every whitespace character removed.
//! A message hard-wrapped at 80 columns (at a space or in the middle of a word, the space kept,
//! moved or dropped) has the same compact form as the unwrapped message, so every extractor
//! matches phrases without spaces (`"totalcapacityof"`) and never cares where a wrap fell.
//!
//! Lines are *cleaned* before anything reads them: terminal escape sequences (colours that
//! loggers write even into files, cursor moves of progress bars) and other control characters
//! are removed, and of a line that carriage returns overwrote only what a terminal would show is
//! kept (the text after the last `\r`).

use std::borrow::Cow;

/// Most bytes of one line that are looked at (the rest is ignored, never buffered).
pub const MAX_LINE_BYTES: usize = 4096;

/// The first [`MAX_LINE_BYTES`] of `line` (cut at a character boundary), without a trailing `\r`.
pub fn bounded(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    oomlens_schema::text::clip(line, MAX_LINE_BYTES)
}

/// [`bounded`] `line` as a terminal would show it: without escape sequences (`ESC [ … m` colours,
/// `ESC ] … BEL` titles, two-byte escapes), without other control characters but tabs, with the
/// other spaces Unicode has as plain ones (a browser's copy gives no-break spaces, `20.00\u{a0}MiB`;
/// CJK text the ideographic space), with typographic quotes as ASCII ones (a forum's or a word
/// processor's copy turns `File "x.py"` into `File “x.py”`), with HTML's escapes of quotes, angle
/// brackets, ampersands and no-break spaces decoded (a page's copy: `reserved memory is &gt;&gt;
/// allocated`, `File &quot;x.py&quot;`), and of a line that carriage returns overwrote, the text
/// after the last one. Borrowed when there is nothing to change (the common case costs one scan).
pub fn clean(line: &str) -> Cow<'_, str> {
    let line = bounded(line);
    let line = match line.rfind('\r') {
        Some(i) if i + 1 < line.len() => &line[i + 1..],
        _ => line,
    };
    let line = match unescape_html(line) {
        Cow::Borrowed(line) => caret_escapes(line),
        Cow::Owned(line) => Cow::Owned(caret_escapes(&line).into_owned()),
    };
    match line {
        Cow::Borrowed(line) => as_shown(line),
        Cow::Owned(line) => Cow::Owned(as_shown(&line).into_owned()),
    }
}

/// Escape sequences a paste shows as text: `^[[1m` (`cat -v`, `less`, an editor's caret
/// notation) or `␛[1m` (the symbol for ESC), turned back into the ESC they stand for so that
/// [`as_shown`] removes them as a terminal would; borrowed when there are none.
fn caret_escapes(line: &str) -> Cow<'_, str> {
    if line.contains("^[[") || line.contains("\u{241b}[") {
        Cow::Owned(line.replace("^[[", "\x1b[").replace("\u{241b}[", "\x1b["))
    } else {
        Cow::Borrowed(line)
    }
}

/// HTML's character references a page's copy leaves in text, and what they stand for.
const HTML_ESCAPES: &[(&str, &str)] = &[
    ("&quot;", "\""),
    ("&#34;", "\""),
    ("&#39;", "'"),
    ("&#x27;", "'"),
    ("&apos;", "'"),
    ("&gt;", ">"),
    ("&lt;", "<"),
    ("&nbsp;", " "),
    ("&amp;", "&"),
];

/// `line` with [`HTML_ESCAPES`] decoded (one pass: `&amp;gt;` is `&gt;`); borrowed when it has none.
fn unescape_html(line: &str) -> Cow<'_, str> {
    if !line.contains('&') || !HTML_ESCAPES.iter().any(|(e, _)| line.contains(e)) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        match HTML_ESCAPES.iter().find(|(e, _)| tail.starts_with(e)) {
            Some((e, stands_for)) => {
                out.push_str(stands_for);
                rest = &tail[e.len()..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The terminal's view of [`clean`]: escape sequences, control characters, odd spaces and quotes.
fn as_shown(line: &str) -> Cow<'_, str> {
    let controls = line.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f);
    let odd = |c: char| odd_space(c) || ascii_quote(c).is_some() || (!c.is_ascii() && c.is_control());
    if !controls && (line.is_ascii() || !line.chars().any(odd)) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            if odd_space(c) {
                out.push(' ');
            } else if let Some(q) = ascii_quote(c) {
                out.push(q);
            } else if c == '\t' || !c.is_control() {
                out.push(c);
            }
            continue;
        }
        match chars.next() {
            // CSI: parameter and intermediate bytes, then one final byte.
            Some('[') => {
                while let Some(&n) = chars.peek() {
                    chars.next();
                    if ('\x40'..='\x7e').contains(&n) {
                        break;
                    }
                }
            }
            // OSC (window titles, hyperlinks): up to BEL or `ESC \`.
            Some(']') => {
                while let Some(n) = chars.next() {
                    if n == '\x07' || (n == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            // A two-byte escape (`ESC (B`, `ESC =`): the byte after it is its own.
            Some('(' | ')') => {
                chars.next();
            }
            _ => {}
        }
    }
    Cow::Owned(out)
}

/// A space other than the ASCII space and tab that is not a control character: no-break,
/// en / em / thin / figure spaces, the ideographic space, the line and paragraph separators.
fn odd_space(c: char) -> bool {
    !c.is_ascii() && c.is_whitespace() && !c.is_control()
}

/// The ASCII quote a typographic one stands for.
fn ascii_quote(c: char) -> Option<char> {
    match c {
        '\u{201c}' | '\u{201d}' | '\u{201e}' | '\u{201f}' => Some('"'),
        '\u{2018}' | '\u{2019}' | '\u{201a}' | '\u{201b}' => Some('\''),
        _ => None,
    }
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

/// Index of the first occurrence of `needle` in `hay`: `str::find`, quicker when it misses.
pub fn find(hay: &str, needle: &str) -> Option<usize> {
    // Most searches miss, and `find` sets up a two-way searcher before it looks (`has`).
    if has(hay, needle) { hay.find(needle) } else { None }
}

/// Index just after the first occurrence of `needle` in `hay` at or after `from`.
pub fn after(hay: &str, needle: &str, from: usize) -> Option<usize> {
    find(hay.get(from..)?, needle).map(|i| from + i + needle.len())
}

/// `hay.contains(needle)`, quicker when it misses. The standard library answers a needle of up to
/// `SHORT_NEEDLE` bytes with a vector scan, a longer one with a two-way searcher whose set-up
/// costs more than the search on the short lines of a log (a profile of the corpus put a quarter
/// of the parse in it). Most of the parser's searches miss: a long needle is first looked for by
/// its head, which the vector scan rules out.
pub fn has(hay: &str, needle: &str) -> bool {
    if needle.len() > SHORT_NEEDLE {
        let mut cut = SHORT_NEEDLE;
        while !needle.is_char_boundary(cut) {
            cut -= 1;
        }
        if !hay.contains(&needle[..cut]) {
            return false;
        }
    }
    hay.contains(needle)
}

/// Longest needle `str::contains` searches with vector instructions rather than a two-way
/// searcher (the standard library's limit on x86-64).
const SHORT_NEEDLE: usize = 32;

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
    fn long_needles_are_found_as_by_contains() {
        let needle = "islargerthanthemaximumnumberoftokensthatcanbestoredinkvcache";
        assert!(has(&format!("x{needle}y"), needle));
        assert!(!has(&format!("x{}", &needle[..40]), needle));
        assert!(has(&format!("é{}é", "ü".repeat(20)), &"ü".repeat(20)));
        assert_eq!(
            after("abcislargerthanthemaximumnumberoftokensthatcanbestoredinkvcache(", needle, 1),
            Some(63)
        );
        assert_eq!(after("abc", "b", 2), None);
        assert_eq!(after("abc", "b", 9), None);
    }

    proptest::proptest! {
        // Needles cut from the haystack itself (hits) and from other text (mostly misses), of
        // every length around the vector limit.
        #[test]
        fn has_and_after_agree_with_std(
            hay in "[a-cé:]{0,120}",
            other in "[a-cé:]{1,60}",
            start in 0usize..120,
            len in 1usize..60,
            from in 0usize..130,
        ) {
            let cut = |s: &str, a: usize, n: usize| {
                let chars: Vec<char> = s.chars().collect();
                let a = a.min(chars.len());
                chars[a..(a + n).min(chars.len())].iter().collect::<String>()
            };
            for needle in [cut(&hay, start, len), other.clone()] {
                if needle.is_empty() {
                    continue;
                }
                proptest::prop_assert_eq!(has(&hay, &needle), hay.contains(needle.as_str()));
                proptest::prop_assert_eq!(find(&hay, &needle), hay.find(needle.as_str()));
                let want = hay.get(from..).and_then(|h| h.find(needle.as_str())).map(|i| from + i + needle.len());
                proptest::prop_assert_eq!(after(&hay, &needle, from), want);
            }
        }
    }

    #[test]
    fn bounded_cuts_at_char_boundary() {
        let long = "é".repeat(MAX_LINE_BYTES);
        let b = bounded(&long);
        assert!(b.len() <= MAX_LINE_BYTES && b.len() >= MAX_LINE_BYTES - 1);
        assert_eq!(bounded("abc\r\n"), "abc");
        assert_eq!(tail("héllo", 4), "llo");
    }

    #[test]
    fn clean_removes_what_a_terminal_does_not_show() {
        assert!(matches!(clean("plain\tline\r\n"), Cow::Borrowed("plain\tline")));
        assert_eq!(
            clean("\x1b[1;31mERROR\x1b[0m 05-01 12:00:00 \x1b[38;5;196mCUDA out of memory\x1b[m"),
            "ERROR 05-01 12:00:00 CUDA out of memory"
        );
        assert_eq!(clean("\x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1b(B ok\x07"), "link ok");
        assert_eq!(
            clean(" 45%|####    | 9/20\rRuntimeError: CUDA out of memory."),
            "RuntimeError: CUDA out of memory."
        );
        assert_eq!(clean("cut \x1b[1;3"), "cut ");
        // Escapes pasted as text: caret notation (`cat -v`) and the ESC symbol.
        assert_eq!(
            clean("[0.3/1.1 82.8Gb] ^[[1m^[[91mchild process 108 exited^[[0m^[[0m"),
            "[0.3/1.1 82.8Gb] child process 108 exited"
        );
        assert_eq!(clean("\u{241b}[31mERROR\u{241b}[0m x"), "ERROR x");
        // A browser's copy: no-break spaces in the indent and between a number and its unit.
        assert_eq!(
            clean(
                "\u{a0}\u{a0}File \"x.py\", line 3, in f\u{a0}Tried to allocate 20.00\u{a0}MiB\u{3000}\u{2009}end"
            ),
            "  File \"x.py\", line 3, in f Tried to allocate 20.00 MiB  end"
        );
        assert!(matches!(clean("显存不足: out of memory"), Cow::Borrowed(_)));
        // A page's HTML escapes, decoded once; an ampersand that escapes nothing stays.
        assert_eq!(
            clean(
                "If reserved memory is &gt;&gt; allocated, File &quot;x.py&quot;, it&#39;s &amp;gt; R&D &x"
            ),
            "If reserved memory is >> allocated, File \"x.py\", it's &gt; R&D &x"
        );
        assert!(matches!(clean("R&D and &more"), Cow::Borrowed(_)));
        // A forum's typographic quotes.
        assert_eq!(
            clean("  File \u{201c}/x/train.py\u{201d}, line 3, in \u{2018}main\u{2019}"),
            "  File \"/x/train.py\", line 3, in 'main'"
        );
        // NEL is a control character: removed, not a space.
        assert_eq!(clean("a\u{85}b"), "ab");
        assert_eq!(clean("nul\0 and del\x7f"), "nul and del");
    }
}
