//! Tracebacks' frame lines, in every format a log or a paste carries them: Python's own
//! (`File "path", line N, in function` and its source line), a frame line a terminal's wrap cut
//! (joined again), IPython's and Jupyter's, Colab's linked ones.
//!
//! What a frame says (which phase, which code) is read by `phase.rs` and `op.rs`.

use std::borrow::Cow;

use super::MIN_WRAP_WIDTH;

/// One Python frame: `File "path", line N, in function` (or the IPython / debugger form
/// `path in function(args)`), with its source line when the next line is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    pub(crate) file: &'a str,
    pub(crate) function: &'a str,
    pub(crate) source: Option<&'a str>,
}

/// A frame line: `File "path", line N, in function` (also with its start cut off by a paste:
/// `…path", line N, in function`), IPython's `File ~/path.py:296, in
/// Class.function(args)`, or Jupyter's `/path/module.py in function(args)`. Returns the file and
/// the function's own name (a method's class and its arguments dropped).
pub(crate) fn frame_of(line: &str) -> Option<(&str, &str)> {
    let (file, function) = frame_parts(line)?;
    let function = function.split('(').next().unwrap_or(function).trim();
    let function = function.rsplit('.').next().unwrap_or(function);
    (!function.is_empty()).then_some((file, function))
}

fn frame_parts(line: &str) -> Option<(&str, &str)> {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix("File \"") {
        let (file, tail) = rest.split_once('"')?;
        let function = tail.rsplit_once(" in ")?.1.trim();
        return Some((file, function));
    }
    if let Some(rest) = t.strip_prefix("File ") {
        // IPython: `File ~/x/y.py:296, in Params4bit._quantize(self, device)`.
        let (file, function) = rest.split_once(", in ")?;
        let file = file
            .rsplit_once(':')
            .map_or(file, |(f, line)| if line.bytes().all(|b| b.is_ascii_digit()) { f } else { file });
        return (!file.contains(' ')).then_some((file, function.trim()));
    }
    // A standard frame line whose start a paste cut off: `…/modeling_x.py", line 273, in forward`.
    if let Some((file, tail)) = t.split_once("\", line ")
        && file.ends_with(".py")
        && !file.contains(' ')
        && let Some((number, function)) = tail.split_once(", in ")
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
    {
        return Some((file, function.trim()));
    }
    // Colab links each IPython frame's file: `[/path/module.py](https://localhost:8080/#) in
    // function(args)`.
    if let Some(rest) = t.strip_prefix('[')
        && let Some((file, link)) = rest.split_once("](")
        && let Some((_, tail)) = link.split_once(')')
        && let Some(function) = tail.strip_prefix(" in ")
    {
        return (file.ends_with(".py") && !file.contains(' ')).then_some((file, function.trim()));
    }
    // IPython / Jupyter: `/path/module.py in function(args)`.
    let (file, tail) = t.split_once(".py in ")?;
    if file.contains(' ') {
        return None;
    }
    Some((file, tail))
}

/// True when `line` is the rest of a frame line a terminal's hard wrap cut: it begins with the
/// frame's line number (`line 541, in __call__`) or its function (`, in convert`, `in convert`: one
/// word, not prose), or ends its path (`…/asr_transformer.py", line 175, in`).
pub(crate) fn frame_piece(line: &str) -> bool {
    let numbered = |rest: &str| rest.starts_with(|c: char| c.is_ascii_digit());
    let rest = line.trim_end();
    let rest = rest.strip_prefix(',').map_or(rest, str::trim_start);
    rest.strip_prefix("line ").is_some_and(|rest| numbered(rest) && rest.contains(", in"))
        || rest
            .strip_prefix("in ")
            .is_some_and(|function| !function.is_empty() && !function.contains(char::is_whitespace))
        || line.split_once("\", line ").is_some_and(|(file, rest)| !file.contains(' ') && numbered(rest))
}

/// `lines` with each frame line a terminal's hard wrap cut joined again: a line that begins a
/// frame (`  File "/x/trainer.py",` / ` line 316, in run`) but does not read as one, joined with
/// the next one or two lines when that makes it one; a frame line that filled a terminal's width
/// (`MIN_WRAP_WIDTH`, 72 characters) with a single word after it, indented no deeper (`… line 5, in for` /
/// `ward`; a source line is indented deeper), joined with that word. Lines borrowed where nothing
/// was joined.
pub(crate) fn join_cut_frames<'a>(lines: &[&'a str]) -> Vec<Cow<'a, str>> {
    let indent = |s: &str| s.len() - s.trim_start().len();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let mut taken = 0;
        let mut joined = String::new();
        if line.trim_start().starts_with("File ") && frame_of(line).is_none() {
            joined.push_str(line);
            for (k, next) in lines.iter().enumerate().skip(i + 1).take(2) {
                // Cut inside a word by a terminal's hard wrap, or at a space by a word wrap
                // (`…/common_utils.py", line 2759,` / `in wrapper`).
                let spaced = format!("{} {}", joined.trim_end(), next.trim_start());
                joined.push_str(next);
                if frame_of(&joined).is_some() {
                    taken = k - i;
                    break;
                }
                if frame_of(&spaced).is_some() {
                    joined = spaced;
                    taken = k - i;
                    break;
                }
            }
        } else if frame_of(line).is_some()
            && line.chars().nth(MIN_WRAP_WIDTH - 1).is_some()
            && let Some(next) = lines.get(i + 1)
            && indent(next) <= indent(line)
            && let next = next.trim()
            && !next.is_empty()
            && !next.contains(|c: char| c.is_whitespace() || c == ':' || c == '(')
        {
            joined.push_str(line.trim_end());
            joined.push_str(next);
            taken = 1;
        }
        if taken > 0 {
            out.push(Cow::Owned(joined));
            i += taken + 1;
        } else {
            out.push(Cow::Borrowed(line));
            i += 1;
        }
    }
    out
}

/// The frames of `lines`, outermost first (what `phase.rs` places the failure by and `op.rs`
/// reads the failing code from).
pub(crate) fn frames<'a>(lines: &[&'a str]) -> Vec<Frame<'a>> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some((file, function)) = frame_of(l) {
            let source = lines
                .get(i + 1)
                .map(|s| s.trim())
                .filter(|s| !s.is_empty() && frame_of(s).is_none() && !s.starts_with("Traceback"));
            out.push(Frame { file, function, source });
        }
    }
    out
}

pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_lines_a_wrap_cut() {
        for piece in [
            "line 541, in __call__",
            ", in convert",
            "in convert",
            "/asr/e2e_asr_transformer.py\", line 175, in",
        ] {
            assert!(frame_piece(piece), "{piece}");
        }
        for prose in ["in a future release", "line 3 of the config", "see train.py, line 3", "in"] {
            assert!(!frame_piece(prose), "{prose}");
        }
        let lines = [
            "  File \"/x/torch/nn/modules/module.py\", ",
            "line 541, in __call__",
            "    result = self.forward(*input, **kwargs)",
            "  File \"/home/user/project/src/models/backbones/net.py\", line 175, in for",
            "ward",
            "  File \"/x/data/loader.py\", line 9, in load_everything_for_the_epoch_from_the_disk_at_once",
            "    name=name)",
            // A word wrap at the space before `in`.
            "  File \"/usr/local/lib/python3.10/dist-packages/torch/testing/_internal/common_utils.py\", line 2759,",
            "in wrapper",
        ];
        let joined = join_cut_frames(&lines);
        let joined: Vec<&str> = joined.iter().map(AsRef::as_ref).collect();
        assert_eq!(joined.len(), 6, "{joined:#?}");
        let found: Vec<_> = frames(&joined).iter().map(|f| (file_name(f.file), f.function)).collect();
        assert_eq!(
            found,
            [
                ("module.py", "__call__"),
                ("net.py", "forward"),
                ("loader.py", "load_everything_for_the_epoch_from_the_disk_at_once"),
                ("common_utils.py", "wrapper")
            ]
        );
        assert_eq!(frames(&joined)[0].source, Some("result = self.forward(*input, **kwargs)"));
    }
}
