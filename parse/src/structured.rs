//! Structured log records: a line that holds a JSON object carries the job's text in its string
//! values, its newlines escaped — a JSON logger's record (python-json-logger, structlog, loguru's
//! `serialize`, a Go service's JSON handler) with the message and the traceback in fields, or a
//! server's error response (`{"error": {"code": 500, "message": "CUDA out of memory. …"}}`).
//! Read as one line, such a record gives a message with `\n` in it and a traceback the frame
//! grammar cannot see. [`expand`] gives back the lines the record's values carry, in order, so
//! they are read as if printed. So it does for text whose newlines are escaped outside JSON, as a
//! `repr` prints them (`RuntimeError('CUDA out of memory.\nTried to allocate …')`, a dict logged
//! whole), and for a line that is one string literal (a committed notebook's output, a line per
//! element): see [`escaped`].
//!
//! * The object may follow a prefix (`ERROR 12:00:01 api: {"detail": "…"}`): the prefix is kept
//!   in front of the first line.
//! * Keys are not text; the values of the record's metadata keys ([`METADATA_KEYS`]: level, time,
//!   logger, thread, file and line, …) are skipped. Other scalars are kept as `key: value`
//!   (`exitCode: 137` is a host-memory kill's evidence).
//! * A record a paste cut short (no closing quote or brace) is read as far as it goes.
//! * Escapes are decoded as JSON defines them (`\\` is one backslash, so a Windows path's
//!   `torch\nn\modules` is never a line break).
//! * Bounded: at most [`MAX_RECORD_BYTES`] of the line are read and [`MAX_LINES`] lines returned.

/// Most bytes of one record that are read (a larger record is read to there, as if cut).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// Most lines one record expands to.
pub const MAX_LINES: usize = 512;

/// Keys whose values say where and when a record was logged, not what: skipped.
pub const METADATA_KEYS: &[&str] = &[
    "@timestamp",
    "asctime",
    "caller",
    "created",
    "filename",
    "func_name",
    "funcname",
    "host",
    "hostname",
    "level",
    "levelname",
    "levelno",
    "lineno",
    "logger",
    "logger_name",
    "lvl",
    "module",
    "msecs",
    "pathname",
    "pid",
    "process",
    "processname",
    "relativecreated",
    "severity",
    "source",
    "stream",
    "taskname",
    "thread",
    "thread_name",
    "threadname",
    "tid",
    "time",
    "timestamp",
    "ts",
];

/// The lines `line` carries, in order: a JSON record's ([`record`]), else those of text whose
/// newlines are escaped ([`escaped`]); `None` when it carries no other lines.
pub fn expand(line: &str) -> Option<Vec<String>> {
    // Escaped text that holds a JSON-like object after its first newline (a traceback's source
    // line `f({"params": p})` in a `repr`) is escaped text; a record's own escapes come after its
    // first brace.
    let escaped_first = line.contains("\\n")
        && object_start(line).zip(newline_escape(line)).is_some_and(|(object, newline)| newline < object);
    if escaped_first {
        escaped(line).or_else(|| record(line))
    } else {
        record(line).or_else(|| escaped(line))
    }
}

/// The lines a JSON record on `line` carries, in order; `None` when `line` holds no JSON object
/// (`{` then a key: `"…":`) or the object carries no text.
fn record(line: &str) -> Option<Vec<String>> {
    let start = object_start(line)?;
    let prefix = line[..start].trim();
    let mut end = line.len().min(start + MAX_RECORD_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let values = values(&line[start..end])?;
    let mut out: Vec<String> = Vec::new();
    for (key, value) in values {
        if METADATA_KEYS.iter().any(|k| k.eq_ignore_ascii_case(&key)) {
            continue;
        }
        let text = match value {
            Value::Text(t) => t,
            Value::Scalar(s) => format!("{key}: {s}"),
        };
        let text = text.strip_suffix('\n').unwrap_or(&text);
        for l in text.split('\n') {
            if out.len() == MAX_LINES {
                return Some(out);
            }
            let l = l.strip_suffix('\r').unwrap_or(l);
            if out.is_empty() && !prefix.is_empty() {
                out.push(format!("{prefix} {l}"));
            } else {
                out.push(l.to_owned());
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The lines of a line whose text carries its newlines escaped, as a program's `repr` or a string
/// literal prints them — an exception kept in a task's result (`… Finish task with error: CUDA out
/// of memory. …\n`), a dict logged whole (`{'code': 1, 'msg': 'CUDA out of memory.\nTried to
/// allocate …'}`), `RuntimeError('…\nTraceback …')`: each `\n` ends a line, the other escapes
/// Python and JSON define are decoded. A quoted literal that holds the newlines is read alone: what
/// comes before it is a line of its own (`RuntimeError(`), and what follows it is read on (another
/// literal) or, when it has words, a line of its own — closing quotes and brackets are not glued to
/// the text's last line (`Killed')`). A line that is one string literal (a notebook's traceback
/// lines, each an element of a list, their colours escaped) is decoded too, newline or not.
/// `None` when the line has no `\n` and is no such literal, or has a backslash that
/// begins no such escape: then it is not escaped text (a Windows path's `torch\nn\modules` has
/// `\m`, `C:\Users` has `\U` without its digits). Read to [`MAX_RECORD_BYTES`], at most
/// [`MAX_LINES`] lines.
fn escaped(line: &str) -> Option<Vec<String>> {
    let element = string_element(line);
    if !element && !line.contains("\\n") {
        return None;
    }
    let mut end = line.len().min(MAX_RECORD_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let mut rest = &line[..end];
    if element && valid_escapes(rest) {
        let literal = rest.trim();
        let literal = literal.strip_suffix(',').unwrap_or(literal);
        let (lines, used) = decode(&literal[1..], literal.chars().next());
        // Closed by its last character: one literal, not two (`"a" and "b"`).
        if used + 1 == literal.len() {
            return Some(lines);
        }
    }
    if newline_escape(rest).is_none() || !valid_escapes(rest) {
        return None;
    }
    let mut out: Vec<String> = Vec::new();
    while out.len() < MAX_LINES {
        let Some(first) = newline_escape(rest) else {
            let words = rest.trim_matches(|c: char| !c.is_alphanumeric());
            if !words.is_empty() {
                out.push(rest.trim().to_owned());
            }
            break;
        };
        let (from, quote) = match opening_quote(&rest[..first]) {
            Some((at, quote)) => {
                let before = rest[..at].trim();
                if !before.is_empty() {
                    out.push(before.to_owned());
                }
                (at + 1, Some(quote))
            }
            None => (0, None),
        };
        let (lines, used) = decode(&rest[from..], quote);
        out.extend(lines);
        rest = &rest[from + used..];
    }
    out.truncate(MAX_LINES);
    (!out.is_empty()).then_some(out)
}

/// True when `line` is one string literal, as a list's element (a notebook's error output, one
/// traceback line per element, its colours escaped: `"\u001b[0;31mOutOfMemoryError\u001b[0m: …",`).
fn string_element(line: &str) -> bool {
    let t = line.trim();
    let t = t.strip_suffix(',').unwrap_or(t);
    t.len() >= 2 && ['"', '\''].iter().any(|&q| t.starts_with(q) && t.ends_with(q))
}

/// True when every backslash of `text` begins an escape Python or JSON defines (a lone one at the
/// end counts: a cut line).
fn valid_escapes(text: &str) -> bool {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                None | Some('n' | 'r' | 'a' | 'b' | 'f' | 'v' | '0' | 't' | '\\' | '\'' | '"' | '/') => {}
                Some('x') => {
                    if hex_char(&mut chars, 2).is_none() {
                        return false;
                    }
                }
                Some('u') => {
                    if hex_char(&mut chars, 4).is_none() {
                        return false;
                    }
                }
                Some('U') => {
                    if hex_char(&mut chars, 8).is_none() {
                        return false;
                    }
                }
                Some(_) => return false,
            }
        }
    }
    true
}

/// Where the first `\n` escape of `text` begins (a `\\n` is an escaped backslash, not one).
fn newline_escape(text: &str) -> Option<usize> {
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' && chars.next()?.1 == 'n' {
            return Some(i);
        }
    }
    None
}

/// The quote that opens the literal still open at the end of `text`, and where: a `'` or `"` after
/// the line's start, a blank or an opening bracket, `:`, `=` or `,` (an apostrophe inside a word
/// opens nothing), closed by the same quote unescaped.
fn opening_quote(text: &str) -> Option<(usize, char)> {
    let mut open: Option<(usize, char)> = None;
    let mut prev = ' ';
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match (c, open) {
            ('\\', _) => {
                chars.next();
            }
            (q, Some((_, quote))) if q == quote => open = None,
            ('\'' | '"', None) if prev.is_whitespace() || "([{:=,".contains(prev) => open = Some((i, c)),
            _ => {}
        }
        prev = c;
    }
    open
}

/// The lines of the escaped text at the start of `text` up to its closing `quote` (to the end
/// without one, or when the literal is cut short), decoded; and the bytes it took, the quote
/// included.
fn decode(text: &str, quote: Option<char>) -> (Vec<String>, usize) {
    let mut lines = vec![String::new()];
    let mut chars = text.char_indices();
    let mut used = text.len();
    while let Some((i, c)) = chars.next() {
        if Some(c) == quote {
            used = i + c.len_utf8();
            break;
        }
        let decoded =
            if c == '\\' {
                match chars.next().map(|(_, e)| e) {
                    Some('n') => {
                        lines.push(String::new());
                        continue;
                    }
                    Some('t') => '\t',
                    Some('x') => hex_char(&mut chars.by_ref().map(|(_, c)| c), 2)
                        .unwrap_or(char::REPLACEMENT_CHARACTER),
                    Some('u') => hex_char(&mut chars.by_ref().map(|(_, c)| c), 4)
                        .unwrap_or(char::REPLACEMENT_CHARACTER),
                    Some('U') => hex_char(&mut chars.by_ref().map(|(_, c)| c), 8)
                        .unwrap_or(char::REPLACEMENT_CHARACTER),
                    Some(e @ ('\\' | '\'' | '"' | '/')) => e,
                    _ => continue,
                }
            } else {
                c
            };
        if let Some(l) = lines.last_mut() {
            l.push(decoded);
        }
    }
    // The newline that ends the text ends its last line.
    if lines.len() > 1 && lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    (lines, used)
}

/// The character whose code is the next `digits` hexadecimal digits of `chars` (U+FFFD for a code
/// that is none); `None` when they are not hexadecimal digits.
fn hex_char(chars: &mut impl Iterator<Item = char>, digits: usize) -> Option<char> {
    let hex: String = chars.by_ref().take(digits).collect();
    let code = (hex.len() == digits).then(|| u32::from_str_radix(&hex, 16).ok()).flatten()?;
    Some(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER))
}

/// A value of the record: text (a string), or a number, `true`, `false`, `null` as printed.
#[derive(Debug, PartialEq)]
enum Value {
    Text(String),
    Scalar(String),
}

/// Longest key read (bytes, its quotes included): a longer "key" is text, not a record's key, and
/// the bound keeps a line full of `{"` linear to read.
const MAX_KEY_BYTES: usize = 256;

/// Where a JSON object begins: a `{` followed (after blanks) by a key — a string of at most
/// [`MAX_KEY_BYTES`] followed by `:`.
fn object_start(line: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = line[from..].find('{').map(|i| from + i) {
        let after = line[i + 1..].trim_start();
        let mut end = after.len().min(MAX_KEY_BYTES);
        while !after.is_char_boundary(end) {
            end -= 1;
        }
        let window = &after[..end];
        if let Some((_, used)) = string(window)
            && used < window.len()
            && window[used..].trim_start().starts_with(':')
        {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// The (key, value) pairs of the object at the start of `text`, nested objects and arrays
/// flattened in order (a value in an array takes the array's key). `None` when nothing is read.
fn values(text: &str) -> Option<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let mut key = String::new();
    let mut i = 0;
    let b = text.as_bytes();
    while i < b.len() {
        match b[i] {
            b'"' => {
                let (s, used) = string(&text[i..])?;
                i += used;
                let after = text[i..].trim_start();
                if after.starts_with(':') {
                    key = s;
                    i = text.len() - after.len() + 1;
                } else {
                    out.push((key.clone(), Value::Text(s)));
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let len = text[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')))
                    .unwrap_or(text.len() - i);
                let token = &text[i..i + len];
                if matches!(token, "true" | "false" | "null") || token.parse::<f64>().is_ok() {
                    out.push((key.clone(), Value::Scalar(token.to_owned())));
                }
                i += len.max(1);
            }
            _ => i += 1,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The JSON string literal at the start of `text` (which begins with `"`), decoded, and the bytes
/// it took; a literal cut short (no closing quote) is decoded to the end of `text`. `None` when
/// `text` does not begin with `"`.
fn string(text: &str) -> Option<(String, usize)> {
    let mut chars = text.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, 'r')) => out.push('\r'),
                Some((_, 'b' | 'f')) => {}
                Some((_, 'u')) => {
                    let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                    let Ok(unit) = u16::from_str_radix(&hex, 16) else { continue };
                    out.push(utf16_char(unit, &mut chars));
                }
                Some((_, other)) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    Some((out, text.len()))
}

/// The character of a `\uXXXX` escape whose unit is `unit`, reading the low half of a surrogate
/// pair from `chars` (`\uD83D\uDE00`); a lone surrogate is U+FFFD.
fn utf16_char(unit: u16, chars: &mut std::str::CharIndices<'_>) -> char {
    if !(0xD800..0xDC00).contains(&unit) {
        return char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER);
    }
    let rest = chars.as_str();
    let low = rest
        .strip_prefix("\\u")
        .and_then(|r| r.get(..4))
        .and_then(|h| u16::from_str_radix(h, 16).ok())
        .filter(|l| (0xDC00..0xE000).contains(l));
    match low {
        Some(low) => {
            for _ in 0..6 {
                chars.next();
            }
            let c = 0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
            char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
        }
        None => char::REPLACEMENT_CHARACTER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(s: &str) -> Vec<String> {
        expand(s).unwrap_or_default()
    }

    #[test]
    fn a_loggers_record_gives_its_message_and_traceback_lines() {
        let record = r#"{"asctime": "2024-05-01 12:00:01", "levelname": "ERROR", "name": "train", "message": "step failed", "exc_info": "Traceback (most recent call last):\n  File \"C:\\env\\torch\\nn\\modules\\module.py\", line 1501, in _call_impl\n    return forward_call(*args)\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}"#;
        assert_eq!(
            lines(record),
            [
                "train",
                "step failed",
                "Traceback (most recent call last):",
                r#"  File "C:\env\torch\nn\modules\module.py", line 1501, in _call_impl"#,
                "    return forward_call(*args)",
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            ]
        );
    }

    #[test]
    fn a_servers_error_response_after_a_prefix_and_its_scalars() {
        let line = r#"ERR Server error {"error":{"code":500,"message":"could not load model: CUDA out of memory","type":""}}"#;
        assert_eq!(
            lines(line),
            ["ERR Server error code: 500", "could not load model: CUDA out of memory", ""]
        );
        assert_eq!(lines(r#"{"exitCode": 137, "reason": "OOMKilled"}"#), ["exitCode: 137", "OOMKilled"]);
    }

    #[test]
    fn escapes_decode_as_json_defines_them() {
        assert_eq!(lines(r#"{"msg": "a\"b\\c\td\u00e9\ud83d\ude00\u0041"}"#), ["a\"b\\c\td\u{e9}\u{1F600}A"]);
        // A lone surrogate, a bad escape.
        assert_eq!(lines(r#"{"msg": "x\ud83dy\uZZZZz"}"#), ["x\u{FFFD}yz"]);
    }

    #[test]
    fn a_record_cut_short_is_read_as_far_as_it_goes() {
        assert_eq!(
            lines(r#"{"log":"RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchro"#),
            ["RuntimeError: CUDA error: out of memory", "CUDA kernel errors might be asynchro"]
        );
    }

    #[test]
    fn lines_that_hold_no_record_are_left_alone() {
        for line in [
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
            "ValueError: {'a': 1}",
            "sizes {1, 2, 3}",
            "format {} and {\"x\" but no colon",
            "{}",
            r#"{"level": "info"}"#,
            "",
        ] {
            assert_eq!(expand(line), None, "{line}");
        }
    }

    #[test]
    fn escaped_text_gives_its_lines() {
        // A dict logged whole; an exception's repr, the text's last line not glued to `')`.
        assert_eq!(
            lines(r"{'code': 1, 'msg': 'CUDA out of memory.\nTried to allocate 2.00 GiB'}"),
            ["{'code': 1, 'msg':", "CUDA out of memory.", "Tried to allocate 2.00 GiB"]
        );
        assert_eq!(
            lines(
                r#"ERROR task failed: RuntimeError('Traceback (most recent call last):\n  File "C:\\env\\torch\\nn\\modules\\module.py", line 3, in f\nKilled')"#
            ),
            [
                "ERROR task failed: RuntimeError(",
                "Traceback (most recent call last):",
                r#"  File "C:\env\torch\nn\modules\module.py", line 3, in f"#,
                "Killed",
            ]
        );
        // Two literals; words after the last one are a line of their own.
        assert_eq!(
            lines(r#"{'error': "don't\nstop", 'tb': 'a\nb', 'code': 7}"#),
            ["{'error':", "don't", "stop", ", 'tb':", "a", "b", ", 'code': 7}"]
        );
        // Unquoted text that ends with an escaped newline (a task queue's error).
        assert_eq!(
            lines(r"[Task Queue] Finish task with error: CUDA out of memory., job_id=3a\n"),
            ["[Task Queue] Finish task with error: CUDA out of memory., job_id=3a"]
        );
        // Escapes decoded: a tab, a quote, hexadecimal and Unicode ones.
        assert_eq!(lines(r"x('a\tb\'\x41\u00e9\U0001F600\nc')"), ["x(", "a\tb'A\u{e9}\u{1F600}", "c"]);
    }

    #[test]
    fn text_that_is_not_escaped_is_left_alone() {
        for line in [
            // A Windows path: `\m`, `\U` begin no escape.
            r#"  File "C:\Users\x\torch\nn\modules\module.py", line 1501, in _call_impl"#,
            r"E:\models\new\notes.txt: failed",
            // An escaped backslash before `n` is no newline.
            r"path a\\nb",
            r"regex \d+\n",
            "plain text",
        ] {
            assert_eq!(expand(line), None, "{line}");
        }
    }

    #[test]
    fn a_notebooks_string_elements_are_decoded() {
        // A notebook's error output: one traceback line per element, colours escaped.
        assert_eq!(
            lines(
                r#"      "\u001b[0;31mOutOfMemoryError\u001b[0m: CUDA out of memory. Tried to allocate 2.00 GiB","#
            ),
            ["\u{1b}[0;31mOutOfMemoryError\u{1b}[0m: CUDA out of memory. Tried to allocate 2.00 GiB"]
        );
        // Its stream output: one line per element, each ending in an escaped newline.
        assert_eq!(
            lines(r#"      "  File \"train.py\", line 3, in <module>\n","#),
            [r#"  File "train.py", line 3, in <module>"#]
        );
        assert_eq!(lines(r#""""#), [""]);
        // Not one literal, or not escaped text.
        for line in [r#""a" and "b""#, r#""C:\Users\x""#, r#"""#, "\"x"] {
            assert_eq!(expand(line), None, "{line}");
        }
    }

    #[test]
    fn a_json_like_object_inside_escaped_text_is_text() {
        assert_eq!(
            lines(r#"RuntimeError('Traceback:\n    output = trainer.train({"params": params})\nOOM')"#),
            ["RuntimeError(", "Traceback:", r#"    output = trainer.train({"params": params})"#, "OOM"]
        );
    }

    #[test]
    fn a_key_is_short_and_closed() {
        // A "key" longer than a key is text; so is one never closed. A line full of `{"` is read
        // once per brace within a key's bound, never to its end.
        let long_key = format!("{{\"{}\": \"x\"}}", "k".repeat(MAX_KEY_BYTES));
        assert_eq!(expand(&long_key), None);
        assert_eq!(expand(&"{\"".repeat(20_000)), None);
        let junk = "{\"".repeat(100);
        // The record after them is found; what came before it is its prefix.
        assert_eq!(
            lines(&format!("{junk}{{\"msg\": \"out of memory\"}}")),
            [format!("{junk} out of memory")]
        );
    }

    #[test]
    fn the_expansion_is_bounded() {
        let many = format!("{{\"msg\": \"{}\"}}", "x\\n".repeat(3 * MAX_LINES));
        assert_eq!(lines(&many).len(), MAX_LINES);
        let long = format!("{{\"msg\": \"{}\"}}", "é".repeat(MAX_RECORD_BYTES));
        let got = lines(&long);
        assert!(got[0].len() < MAX_RECORD_BYTES && got[0].chars().all(|c| c == 'é'));
    }

    proptest! {
        #[test]
        fn escaped_text_round_trips(text_lines in proptest::collection::vec("[a-zA-Z0-9 .:()\\[\\]'\"\\\\]{0,20}", 2..6)) {
            let text = text_lines.join("\n");
            let escaped = text.replace('\\', "\\\\").replace('\n', "\\n").replace('\'', "\\'");
            let got = lines(&format!("RuntimeError('{escaped}')"));
            let mut want = vec!["RuntimeError(".to_owned()];
            want.extend(text_lines.iter().cloned());
            // The newline that ends the text ends its last line.
            if want.last().is_some_and(String::is_empty) {
                want.pop();
            }
            prop_assert_eq!(got, want);
        }

        #[test]
        fn never_panics_and_round_trips_what_serde_writes(text in "\\PC{0,120}", cut in 0usize..200, junk in "\\PC{0,60}") {
            let record = serde_json::json!({"level": "error", "message": text}).to_string();
            let want: Vec<String> = text.strip_suffix('\n').unwrap_or(&text).split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned()).collect();
            prop_assert_eq!(expand(&record), Some(want));
            let mut at = cut.min(record.len());
            while !record.is_char_boundary(at) { at -= 1; }
            let _ = expand(&record[..at]);
            let _ = expand(&format!("{junk}{}", &record[..at]));
            let _ = expand(&junk);
        }
    }
}
