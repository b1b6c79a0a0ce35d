//! `oomlens explain`: an OOM message (a pasted traceback, a job log, a kernel log) parsed and
//! attributed offline — no agent, no ClickHouse. The message goes through the agent's own parser
//! (`oomlens-parse`), becomes the event the agent would send, and is attributed from its evidence
//! alone ([`OomFeatures::from_event`], the same derivation and rules as the pipeline: a test
//! checks that a message attributed here and through agent → collector → ClickHouse gives the
//! same answer).

use std::io::BufRead;

use oomlens_parse::{LineFormat, ParsedOom, command::parse_reader};
use oomlens_schema::OomEvent;

use crate::attribution::{Attribution, EventJson, OomFeatures, attribute};

/// One failure found in the input, explained.
#[derive(Debug, Clone)]
pub struct Explained {
    /// What the parser found (its lines, numbers, phase).
    pub parsed: ParsedOom,
    /// The event the agent would have sent for it.
    pub event: OomEvent,
    /// Its features (message only: no samples, no job shape).
    pub features: OomFeatures,
    /// The rules' answer.
    pub attribution: Attribution,
}

impl Explained {
    /// Explains one parsed failure.
    pub fn new(parsed: ParsedOom) -> Explained {
        let event = parsed.to_event(0);
        let features = OomFeatures::from_event(&event);
        let attribution = attribute(&features);
        Explained { parsed, event, features, attribution }
    }
}

/// Every failure in `r`, in the order of their first lines.
pub fn explain_reader(r: &mut dyn BufRead, format: LineFormat) -> std::io::Result<Vec<Explained>> {
    let mut found = Vec::new();
    parse_reader(r, format, &mut |e| {
        found.push(e);
        Ok(())
    })?;
    found.sort_by_key(|e| e.line);
    Ok(found.into_iter().map(Explained::new).collect())
}

/// Every failure in `text`.
pub fn explain_text(text: &str) -> Vec<Explained> {
    // Reading from memory cannot fail.
    explain_reader(&mut std::io::Cursor::new(text.as_bytes()), LineFormat::Auto).unwrap_or_default()
}

/// The `--json` document of one explained failure: the attributed event (the fields of the
/// postmortem's document) and where it was found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExplainJson {
    /// The file it was read from (`-` for stdin).
    pub input: String,
    /// Its first line in that input (1-based).
    pub line: u64,
    /// The event, its evidence and attribution.
    #[serde(flatten)]
    pub event: EventJson,
}

impl Explained {
    /// The labels the event carries as pairs.
    pub fn labels(&self) -> Vec<(String, String)> {
        self.event.labels.iter().map(|l| (l.key.clone(), l.value.clone())).collect()
    }

    /// The `--json` document.
    pub fn to_json(&self, input: &str) -> ExplainJson {
        ExplainJson {
            input: input.to_owned(),
            line: self.parsed.line,
            event: EventJson::new(&self.features, &self.attribution, &self.labels()),
        }
    }

    /// The human report: the verdict with its alternatives, the triage evidence, what would
    /// decide, the remedy.
    pub fn write_text(&self, input: &str, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let f = &self.features;
        let a = &self.attribution;
        writeln!(
            out,
            "{input}:{}: {} {}{}",
            self.parsed.line,
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
                    e.write_text(name, out).and_then(|()| writeln!(out))
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
        /// Why.
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
        e.write_text("-", &mut text).unwrap();
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
