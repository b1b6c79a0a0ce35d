//! `oomlens explain`: every failure in the given files (stdin when none) explained offline, as the
//! human report or JSON Lines (`oomlens_collector::analysis::explain` does the parsing and
//! attribution; this module reads the inputs and renders).

use std::io::BufRead;

use oomlens_collector::analysis::explain::{Explained, explain_reader};
use oomlens_parse::LineFormat;

/// The human report of one explained failure: the verdict with its alternatives, the triage
/// evidence, what would decide, the remedy.
pub fn write_text(e: &Explained, input: &str, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let f = &e.features;
    let a = &e.attribution;
    writeln!(
        out,
        "{input}:{}: {} {}{}",
        e.parsed.line,
        f.framework,
        f.kind,
        f.gpu_index.map_or_else(String::new, |g| format!(" on GPU {g}"))
    )?;
    let alternatives: Vec<String> =
        a.alternatives.iter().map(|x| format!("{} {} %", x.scenario, x.confidence_pct)).collect();
    writeln!(
        out,
        "  verdict:  {} ({} %, rule {}){}",
        a.scenario,
        a.confidence_pct,
        a.rule.id(),
        if alternatives.is_empty() { String::new() } else { format!("; or {}", alternatives.join(", ")) }
    )?;
    for line in &a.evidence {
        writeln!(out, "    - {line}")?;
    }
    if !a.decide.is_empty() {
        writeln!(out, "  would decide:")?;
        for d in &a.decide {
            writeln!(out, "    - {d}")?;
        }
    }
    writeln!(out, "  remedy:   {}", a.remedy)
}

/// Runs `oomlens explain` over `files` (stdin when empty): every failure found, explained, as text
/// or JSON Lines. Returns how many were found.
pub fn run(
    files: &[std::path::PathBuf],
    format: LineFormat,
    json: bool,
    out: &mut dyn std::io::Write,
) -> Result<u64, ExplainError> {
    let mut found = 0u64;
    let mut one =
        |name: &str, r: &mut dyn BufRead, out: &mut dyn std::io::Write| -> Result<(), ExplainError> {
            let explained = explain_reader(r, format)
                .map_err(|source| ExplainError::Read { path: name.to_owned(), source })?;
            for e in &explained {
                found += 1;
                let res = if json {
                    serde_json::to_writer(&mut *out, &e.to_json(name))
                        .map_err(std::io::Error::other)
                        .and_then(|()| writeln!(out))
                } else {
                    write_text(e, name, out).and_then(|()| writeln!(out))
                };
                res.map_err(ExplainError::Write)?;
            }
            Ok(())
        };
    if files.is_empty() {
        let stdin = std::io::stdin();
        one("-", &mut stdin.lock(), out)?;
    } else {
        for path in files {
            let name = path.display().to_string();
            let file = std::fs::File::open(path)
                .map_err(|source| ExplainError::Read { path: name.clone(), source })?;
            one(&name, &mut std::io::BufReader::new(file), out)?;
        }
    }
    out.flush().map_err(ExplainError::Write)?;
    Ok(found)
}

/// `oomlens explain` failed.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// An input could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file (`-` for stdin).
        path: String,
        /// The I/O error from opening or reading it.
        #[source]
        source: std::io::Error,
    },
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Write(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomlens_collector::analysis::explain::explain_text;

    const V2: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
        capacity of 79.32 GiB of which 20.00 MiB is free. Process 77 has 40.00 GiB memory in use. Including \
        non-PyTorch memory, this process has 39.00 GiB memory in use. Of the allocated memory 37.00 GiB is \
        allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.\n";

    #[test]
    fn a_pasted_message_is_explained_as_text_and_json() {
        let found = explain_text(V2);
        assert_eq!(found.len(), 1);
        let e = &found[0];
        assert_eq!(e.attribution.scenario.as_str(), "contention", "{:?}", e.attribution);
        let mut text = Vec::new();
        write_text(e, "-", &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("verdict:  contention"), "{text}");
        assert!(text.contains("remedy:"), "{text}");
        let j = serde_json::to_value(e.to_json("-")).unwrap();
        assert_eq!(j["scenario"], "contention");
        assert_eq!(j["line"], 1);
        assert!(j["event_id"].is_string());
        assert_eq!(j["others_from"], "message");
    }

    #[test]
    fn files_are_read_and_errors_name_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        std::fs::write(&path, format!("step 1 loss 2.0\n{V2}Killed\n")).unwrap();
        let mut out = Vec::new();
        assert_eq!(run(std::slice::from_ref(&path), LineFormat::Auto, true, &mut out).unwrap(), 2);
        let lines: Vec<serde_json::Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines[1]["scenario"], "host_oom");
        let err =
            run(&[dir.path().join("missing.log")], LineFormat::Auto, false, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().starts_with("cannot read "), "{err}");
    }
}
