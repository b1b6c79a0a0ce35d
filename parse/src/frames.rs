//! Tracebacks' frame lines, in every format a log or a paste carries them, and each frame's
//! active source line:
//!
//! * Python's own, `File "path", line N, in function` with its source line on the next line
//!   (loguru's `diagnose` marks the failing frame `> File "…"`);
//! * a frame line a terminal's hard wrap or a word wrap cut, joined again ([`join_cut_frames`]);
//! * IPython and Jupyter: `/path/module.py in function(args)`, `File ~/path.py:296, in
//!   Class.function(args)`, Colab's linked `[/path/module.py](https://…) in function(args)`, and
//!   the notebook's own cells (`<ipython-input-5-ae0b…> in <module>()`, `Input In [10], in <cell
//!   line: 24>()`, `Cell In[12], line 7`): their source lines are numbered and the active one is
//!   marked with an arrow (`---> 174     state["exp_avg"] = …`), which is the frame's source;
//! * `rich`'s boxed tracebacks: `│ /path/module.py:202 in forward │` (the function wrapped to the
//!   next box line when the path is long), the active source line marked `❱ 202 │ code` (`>` on a
//!   legacy Windows console), read as Python's own form ([`unbox`]).
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
    // loguru marks the frame that raised: `> File "…", line 5, in main`.
    let t = t.strip_prefix("> ").filter(|rest| rest.starts_with("File \"")).unwrap_or(t);
    if let Some(cell) = notebook_cell(t) {
        return Some(cell);
    }
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
        return ((file.ends_with(".py") && !file.contains(' ')) || file.starts_with(IPYTHON_INPUT))
            .then_some((file, function.trim()));
    }
    // IPython / Jupyter: `/path/module.py in function(args)`.
    let (file, tail) = t.split_once(".py in ")?;
    if file.contains(' ') {
        return None;
    }
    Some((&t[..file.len() + 3], tail))
}

/// How IPython 7 names a cell's code: `<ipython-input-5-ae0b49d61c11>`.
const IPYTHON_INPUT: &str = "<ipython-input-";

/// A notebook cell's frame line (`t` without its indent) as file and function: IPython 7's
/// `<ipython-input-5-ae0b49d61c11> in <module>()`, IPython 8.0's `Input In [10], in <cell line:
/// 24>()`, IPython 8.5's `Cell In[12], line 7` (the cell's top level: `<module>`) and `Cell
/// In[5], line 3, in f(x)`.
fn notebook_cell(t: &str) -> Option<(&str, &str)> {
    if t.starts_with(IPYTHON_INPUT) {
        let (cell, function) = t.split_once("> in ")?;
        return Some((&t[..=cell.len()], function.trim()));
    }
    if !(t.starts_with("Cell In[") || t.starts_with("Input In [")) {
        return None;
    }
    let (cell, rest) = t.split_once(']')?;
    let file = &t[..=cell.len()];
    if let Some(function) = rest.strip_prefix(", in ") {
        return Some((file, function.trim()));
    }
    let rest = rest.strip_prefix(", line ")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let after = rest.get(digits..)?.trim_end();
    match after.strip_prefix(", in ") {
        Some(function) if digits > 0 => Some((file, function.trim())),
        None if digits > 0 && after.is_empty() => Some((file, "<module>")),
        _ => None,
    }
}

/// The code of a notebook frame's active source line, which IPython and Jupyter mark with an
/// arrow before its number (`---> 174     state["exp_avg"] = torch.zeros_like(`, `----> 1
/// model.fit(x, y)`).
pub(crate) fn notebook_active(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = t.trim_start_matches('-');
    if rest.len() == t.len() {
        return None;
    }
    let rest = rest.strip_prefix('>')?.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0).then(|| rest[digits..].trim())
}

/// True when `line` is a notebook frame's numbered source line (`    173  # comment`, also
/// empty: `     174`) or its active one ([`notebook_active`]).
fn notebook_source(line: &str) -> bool {
    let t = line.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0 && t[digits..].chars().next().is_none_or(char::is_whitespace))
        || notebook_active(line).is_some()
}

/// How many lines after a notebook frame's line its active source line is looked for (IPython
/// shows a few lines of context around it).
const NOTEBOOK_CONTEXT: usize = 16;

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

/// `lines` as the frames are read from: `rich`'s boxed frames in Python's own form ([`unbox`]),
/// then the frame lines a wrap cut joined again ([`join_cut_frames`]).
pub(crate) fn readable<'a>(lines: &[&'a str]) -> Vec<Cow<'a, str>> {
    join_cut_frames(unbox(lines))
}

/// `rich`'s box border, which begins and ends every line of its traceback's panel.
const BORDER: char = '│';

/// The text inside `rich`'s box border (`│ /x/train.py:42 in main │`), trimmed; `None` for a line
/// outside a box. A paste may cut the closing border, or keep part of its bytes (read as U+FFFD).
fn boxed(line: &str) -> Option<&str> {
    let inner = line.trim_start().strip_prefix(BORDER)?;
    let inner = inner.trim_end().trim_end_matches('\u{FFFD}');
    Some(inner.strip_suffix(BORDER).unwrap_or(inner).trim())
}

/// True when `line` opens `rich`'s traceback panel: `╭──── Traceback (most recent call last)
/// ────╮` (`┌` on a legacy Windows console).
pub(crate) fn boxed_header(line: &str) -> bool {
    line.trim_start().starts_with(['╭', '┌']) && line.contains("Traceback (most recent call last)")
}

/// True when `line` is a line of `rich`'s traceback panel: inside its border, or its bottom edge.
pub(crate) fn boxed_line(line: &str) -> bool {
    line.trim_start().starts_with([BORDER, '╰', '└'])
}

/// True when `line` is one of `rich`'s frame lines (`│ /x/train.py:42 in main │`, also with its
/// function wrapped to the next box line).
pub(crate) fn boxed_frame(line: &str) -> bool {
    boxed(line).and_then(rich_frame).is_some()
}

/// A `rich` frame line's text (`/x/modeling_chatglm.py:202 in forward`, `<frozen runpy>:198 in
/// _run_module_as_main`) as file, line number and function — the function empty when a wrap moved
/// it to the next box line (`… .py:202 in`).
fn rich_frame(inner: &str) -> Option<(&str, &str, &str)> {
    let (location, function) = match inner.rsplit_once(" in ") {
        Some((location, function)) => (location, function.trim()),
        None => (inner.strip_suffix(" in")?, ""),
    };
    let (file, number) = location.trim().rsplit_once(':')?;
    (!number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && (file.ends_with(".py") || (file.starts_with('<') && file.ends_with('>')))
        && !function.contains(char::is_whitespace))
    .then_some((file, number, function))
}

/// The code of `rich`'s active source line (`❱ 202 │   │   t = torch.arange(…)`; `>` on a
/// legacy Windows console), without its indent guides.
fn rich_active(inner: &str) -> Option<&str> {
    let rest = inner.strip_prefix(['❱', '>'])?.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let code = rest[digits..].trim_start().strip_prefix(BORDER)?;
    Some(code.trim_start_matches([BORDER, ' ']).trim_end())
}

/// `lines` with `rich`'s boxed frames in Python's own form: each frame line as `  File "path",
/// line N, in function` (its path folded over two box lines or its function wrapped to the next
/// one joined again), each active source line after it; the box's other lines (the context
/// around the active line, blank rows, locals) dropped. Lines outside a box borrowed as they are.
pub(crate) fn unbox<'a>(lines: &[&'a str]) -> Vec<Cow<'a, str>> {
    if !lines.iter().any(|l| l.trim_start().starts_with(BORDER)) {
        return lines.iter().map(|l| Cow::Borrowed(*l)).collect();
    }
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let Some(inner) = boxed(line) else {
            out.push(Cow::Borrowed(line));
            continue;
        };
        if let Some(code) = rich_active(inner) {
            out.push(Cow::Owned(format!("    {code}")));
            continue;
        }
        let next_box = |at: usize| lines.get(at).and_then(|l| boxed(l)).filter(|b| !b.is_empty());
        let folded: String;
        let (found, mut used) = match rich_frame(inner) {
            Some(frame) => (Some(frame), 0),
            None => {
                folded = next_box(i).map(|next| format!("{inner}{next}")).unwrap_or_default();
                (rich_frame(&folded), 1)
            }
        };
        let Some((file, number, mut function)) = found else {
            continue;
        };
        if function.is_empty() {
            match next_box(i + used).filter(|word| !word.contains(char::is_whitespace)) {
                Some(word) => {
                    function = word;
                    used += 1;
                }
                None => continue,
            }
        }
        i += used;
        out.push(Cow::Owned(format!("  File \"{file}\", line {number}, in {function}")));
    }
    out
}

/// `lines` with each frame line a terminal's hard wrap cut joined again: a line that begins a
/// frame (`  File "/x/trainer.py",` / ` line 316, in run`) but does not read as one, joined with
/// the next one or two lines when that makes it one (with a space between them when a word wrap
/// cut it at one: `…, line 2759,` / `in wrapper`); a frame line that filled a terminal's width
/// (`MIN_WRAP_WIDTH`, 72 characters) with a single word after it, indented no deeper (`… line 5,
/// in for` / `ward`; a source line is indented deeper), joined with that word.
pub(crate) fn join_cut_frames(mut lines: Vec<Cow<'_, str>>) -> Vec<Cow<'_, str>> {
    let indent = |s: &str| s.len() - s.trim_start().len();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line: &str = &lines[i];
        let mut taken = 0;
        let mut joined = String::new();
        if line.trim_start().starts_with("File ") && frame_of(line).is_none() {
            joined.push_str(line);
            for (k, next) in lines.iter().enumerate().skip(i + 1).take(2) {
                // Cut inside a word by a terminal's hard wrap, or at a space by a word wrap.
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
            out.push(std::mem::take(&mut lines[i]));
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
            let notebook = !l.trim_start().starts_with("File \"")
                && lines.get(i + 1).is_some_and(|next| notebook_source(next));
            let source = if notebook {
                lines[i + 1..]
                    .iter()
                    .take(NOTEBOOK_CONTEXT)
                    .take_while(|next| frame_of(next).is_none())
                    .find_map(|next| notebook_active(next))
            } else {
                lines
                    .get(i + 1)
                    .map(|s| s.trim())
                    .filter(|s| !s.is_empty() && frame_of(s).is_none() && !s.starts_with("Traceback"))
            };
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
        let joined = join_cut_frames(lines.iter().map(|l| Cow::Borrowed(*l)).collect());
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

    /// The frames of `text` after [`readable`]: file name, function, source.
    fn read(text: &str) -> Vec<(String, String, Option<String>)> {
        let lines: Vec<&str> = text.lines().collect();
        let readable = readable(&lines);
        let readable: Vec<&str> = readable.iter().map(AsRef::as_ref).collect();
        frames(&readable)
            .iter()
            .map(|f| (file_name(f.file).to_owned(), f.function.to_owned(), f.source.map(str::to_owned)))
            .collect()
    }

    fn frame(file: &str, function: &str, source: Option<&str>) -> (String, String, Option<String>) {
        (file.to_owned(), function.to_owned(), source.map(str::to_owned))
    }

    #[test]
    fn rich_tracebacks() {
        // The function wrapped to the next box line, the closing border cut to half its bytes.
        let chatglm = "│ /home/u/.cache/huggingface/modules/transformers_modules/ChatGLM-6B/modeling_chatglm.py:202 in  │
│ forward                                                                                          │
│                                                                                                  │
│    201 │   │   │   self.max_seq_len_cached = None if self.learnable else seq_len                 │
│ ❱  202 │   │   │   t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)         \u{FFFD}
│    203 │   │   │   freqs = torch.einsum('i,j->ij', t, self.inv_freq)                             │
╰───────────────────────────────────
OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.";
        assert_eq!(
            read(chatglm),
            [frame(
                "modeling_chatglm.py",
                "forward",
                Some("t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)")
            )]
        );
        // Two frames; a path folded over two box lines; a frozen module; a locals panel.
        let two = "╭───────────────────── Traceback (most recent call last) ─────────────────────╮
│ <frozen runpy>:198 in _run_module_as_main                                     │
│                                                                               │
│ /home/u/miniconda3/envs/train/lib/python3.10/site-packages/transformers/train │
│ er.py:1662 in train                                                           │
│                                                                               │
│   1661 │   │   )                                                              │
│ ❱ 1662 │   │   return inner_training_loop(                                    │
│ ╭──────────── locals ────────────╮                                            │
│ │ self = <Trainer object>        │                                            │
│ ╰────────────────────────────────╯                                            │
│ C:\\H1111\\modules\\custom_offloading_utils.py:105 in weighs_to_device           │
│                                                                               │
│ > 105 │   │   │   module.weight.data = module.weight.data.to(device, non_bl   │
└───────────────────────────────────────────────────────────────────────────────┘";
        assert_eq!(
            read(two),
            [
                frame("<frozen runpy>", "_run_module_as_main", None),
                frame("trainer.py", "train", Some("return inner_training_loop(")),
                frame(
                    "custom_offloading_utils.py",
                    "weighs_to_device",
                    Some("module.weight.data = module.weight.data.to(device, non_bl")
                ),
            ]
        );
        assert!(boxed_header(two.lines().next().unwrap_or_default()));
        assert!(boxed_frame("│ /x/train.py:42 in main │"));
        // Other boxed text: no frames, and lines outside a box are left as they are.
        assert_eq!(
            read("│ epoch │ loss │\n│ 3 │ 0.25 │\n  File \"a.py\", line 1, in f\n    g()"),
            [frame("a.py", "f", Some("g()"))]
        );
        assert!(!boxed_frame("│ see train.py:42 in the docs │"));
    }

    #[test]
    fn notebook_frames_and_their_active_lines() {
        let ipython7 = "<ipython-input-10-14d8a96daa0b> in <module>()
      2 model = Net()
----> 3 model.to(device)
      4 train(model)

/usr/local/lib/python3.7/dist-packages/torch/nn/modules/module.py in to(self, *args, **kwargs)
    897             return t.to(device, dtype if t.is_floating_point() else None, non_blocking)
    898 
--> 899         return self._apply(convert)";
        assert_eq!(
            read(ipython7),
            [
                frame("<ipython-input-10-14d8a96daa0b>", "<module>", Some("model.to(device)")),
                frame("module.py", "to", Some("return self._apply(convert)")),
            ]
        );
        let ipython8 = "Cell In[36], line 1
----> 1 model.fit(x,y, batch_size=32, epochs=10)

Cell In[5], line 3, in train_one(model, batch)
      2 def train_one(model, batch):
----> 3     loss = model(batch).sum()

Input In [10], in <cell line: 24>()
     23 tick = time.time()
---> 24 out = model.generate(**inputs)

[<ipython-input-17-d55b04681e2c>](https://localhost:8080/#) in <module>()
---> 50 run()";
        assert_eq!(
            read(ipython8),
            [
                frame("Cell In[36]", "<module>", Some("model.fit(x,y, batch_size=32, epochs=10)")),
                frame("Cell In[5]", "train_one", Some("loss = model(batch).sum()")),
                frame("Input In [10]", "<cell line: 24>", Some("out = model.generate(**inputs)")),
                frame("<ipython-input-17-d55b04681e2c>", "<module>", Some("run()")),
            ]
        );
        // Not cells: prose, a cell without its line number.
        assert_eq!(frame_of("Cell In[3] was run twice"), None);
        assert_eq!(frame_of("Cell In[3], line x"), None);
        // A Python frame's source line that begins with a number is its source all the same.
        assert_eq!(read("  File \"a.py\", line 9, in f\n    100 * x"), [frame("a.py", "f", Some("100 * x"))]);
    }

    #[test]
    fn loguru_marks_the_frame_that_raised() {
        let loguru = "Traceback (most recent call last):
  File \"train.py\", line 10, in <module>
    main()
    └ <function main at 0x7f>
> File \"train.py\", line 5, in main
    model.cuda()
    │     └ <function Module.cuda at 0x7f>
    └ Net()";
        assert_eq!(
            read(loguru),
            [frame("train.py", "<module>", Some("main()")), frame("train.py", "main", Some("model.cuda()"))]
        );
    }
}
