//! Explaining a message offline (`oomlens explain`): an OOM message (a pasted traceback, a job log, a kernel log) parsed and
//! attributed offline — no agent, no ClickHouse. The message goes through the agent's own parser
//! (`oomlens-parse`), becomes the event the agent would send, and is attributed from its evidence
//! alone ([`OomFeatures::from_event`], the same derivation and rules as the pipeline: a test
//! checks that a message attributed here and through agent → collector → ClickHouse gives the
//! same answer).

use std::io::BufRead;

use oomlens_parse::{LineFormat, ParsedOom, command::parse_reader};
use oomlens_schema::OomEvent;

use crate::analysis::{Attribution, EventJson, OomFeatures, attribute};

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pasted_message_is_explained_and_its_document_says_where() {
        let v2 = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
            capacity of 79.32 GiB of which 20.00 MiB is free. Process 77 has 40.00 GiB memory in use. Including \
            non-PyTorch memory, this process has 39.00 GiB memory in use. Of the allocated memory 37.00 GiB is \
            allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.\n";
        let found = explain_text(v2);
        assert_eq!(found.len(), 1);
        let j = serde_json::to_value(found[0].to_json("-")).unwrap();
        assert_eq!(j["scenario"], "contention");
        assert_eq!(j["line"], 1);
        assert!(j["event_id"].is_string());
        assert_eq!(j["others_from"], "message");
    }
}
