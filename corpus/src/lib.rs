//! The corpus of real OOM messages (`corpus/README.md`): [`load`] reads `index.toml` and every
//! message it names. Used by the tests of the parser and of the attribution; nothing in the
//! agent or the collector depends on it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One message with its provenance and, when the thread established it, its cause.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// `<framework>-<owner>-<repo>-<number>[-suffix]`; the message is `messages/<id>.log`.
    pub id: String,
    /// `owner/repo#N` or `owner/repo:path`.
    pub source: String,
    /// The thread or file.
    #[serde(default)]
    pub url: String,
    /// What printed it, as the thread says.
    pub framework: String,
    /// The event kind the parser must find: `cuda_oom`, `host_oom_kill`, `xid`, or `none`.
    pub expect: String,
    /// The cause the thread established (`static`, `batch`, `sequence`, `contention`,
    /// `fragmentation`, `host_oom`).
    #[serde(default)]
    pub label: Option<String>,
    /// Who established the label and how (or why there is none).
    pub basis: String,
    /// What is notable about the format.
    #[serde(default)]
    pub notes: String,
    /// The rules version whose verdicts were already fixed when this record was collected: the
    /// record did not shape those rules, so for them (and no later version) it is a fresh test.
    /// Absent on the records the rules were derived with.
    #[serde(default)]
    pub collected_after_rules: Option<u32>,
    /// The message, read from `messages/<id>.log`.
    #[serde(skip)]
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Index {
    record: Vec<Record>,
}

/// The corpus could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// A file is missing or unreadable.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error from reading it.
        source: std::io::Error,
    },
    /// `index.toml` is not valid.
    #[error("corpus/index.toml: {0}")]
    Index(#[from] toml::de::Error),
    /// A record is inconsistent.
    #[error("record {id}: {problem}")]
    Record {
        /// The record.
        id: String,
        /// What is wrong.
        problem: String,
    },
}

/// The labels a record may carry.
pub const LABELS: [&str; 6] = ["static", "batch", "sequence", "contention", "fragmentation", "host_oom"];
/// The kinds a record may expect.
pub const EXPECT: [&str; 4] = ["cuda_oom", "host_oom_kill", "xid", "none"];

/// The corpus folder of this repository.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Every record of the corpus in `dir`, with its message, checked: ids unique and in order (so
/// additions from several branches merge without conflicts), labels and expected kinds known,
/// every message present and non-empty.
pub fn load_from(dir: &Path) -> Result<Vec<Record>, CorpusError> {
    let read =
        |path: PathBuf| std::fs::read_to_string(&path).map_err(|source| CorpusError::Read { path, source });
    let index: Index = toml::from_str(&read(dir.join("index.toml"))?)?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(index.record.len());
    for mut r in index.record {
        let bad = |problem: String| CorpusError::Record { id: r.id.clone(), problem };
        if !seen.insert(r.id.clone()) {
            return Err(bad("duplicate id".into()));
        }
        if let Some(previous) = out.last().map(|p: &Record| p.id.as_str())
            && previous > r.id.as_str()
        {
            return Err(bad(format!(
                "out of order: records are sorted by id, and {previous:?} comes before it"
            )));
        }
        if !EXPECT.contains(&r.expect.as_str()) {
            return Err(bad(format!("unknown expect {:?}", r.expect)));
        }
        if let Some(l) = &r.label
            && !LABELS.contains(&l.as_str())
        {
            return Err(bad(format!("unknown label {l:?}")));
        }
        if r.source.is_empty() || r.basis.is_empty() {
            return Err(bad("source and basis are required".into()));
        }
        r.text = read(dir.join("messages").join(format!("{}.log", r.id)))?;
        if r.text.trim().is_empty() {
            return Err(bad("empty message".into()));
        }
        // As a log holds it: a job's last line ends in a newline, and a follower reads only
        // complete lines (`explain_pipeline` replays every message through one).
        if !r.text.ends_with('\n') {
            return Err(bad("the message file must end with a newline".into()));
        }
        out.push(r);
    }
    Ok(out)
}

impl Record {
    /// Whether this record is fresh for rules version `rules_version`: collected after that
    /// version's verdicts were fixed, so it measures how the rules do on messages they were not
    /// derived from.
    pub fn fresh_for(&self, rules_version: u32) -> bool {
        self.collected_after_rules.is_some_and(|v| v >= rules_version)
    }
}

/// Every record of this repository's corpus.
pub fn load() -> Result<Vec<Record>, CorpusError> {
    load_from(&dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_loads_and_is_consistent() {
        let records = load().expect("corpus");
        assert!(records.len() >= 150, "{} records", records.len());
        let labelled = records.iter().filter(|r| r.label.is_some()).count();
        assert!(labelled >= 60, "{labelled} labelled");
        for l in LABELS {
            assert!(records.iter().any(|r| r.label.as_deref() == Some(l)), "no {l} record");
        }
        // Every message file belongs to a record.
        let ids: std::collections::HashSet<_> = records.iter().map(|r| format!("{}.log", r.id)).collect();
        for entry in std::fs::read_dir(dir().join("messages")).expect("messages") {
            let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
            assert!(ids.contains(&name), "messages/{name} has no record");
        }
    }

    #[test]
    fn records_out_of_order_or_repeated_are_refused() {
        let dir = std::env::temp_dir().join(format!("oomlens-corpus-order-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("messages")).expect("dir");
        let record = |id: &str| {
            std::fs::write(dir.join("messages").join(format!("{id}.log")), "CUDA out of memory.\n")
                .expect("write");
            format!(
                "[[record]]\nid = \"{id}\"\nsource = \"o/r#1\"\nurl = \"u\"\nframework = \"pytorch\"\nexpect = \"cuda_oom\"\nbasis = \"b\"\n\n"
            )
        };
        let check = |ids: &[&str]| {
            let index: String = ids.iter().map(|id| record(id)).collect();
            std::fs::write(dir.join("index.toml"), index).expect("write");
            load_from(&dir).map(|r| r.len()).map_err(|e| e.to_string())
        };
        assert_eq!(check(&["a-1", "b-2"]), Ok(2));
        let err = check(&["b-2", "a-1"]).unwrap_err();
        assert!(err.contains("a-1") && err.contains("out of order") && err.contains("\"b-2\""), "{err}");
        assert!(check(&["a-1", "a-1"]).unwrap_err().contains("duplicate id"));
        // A message cut before its line's end, as a follower would never read it.
        std::fs::write(dir.join("messages").join("c-3.log"), "Killed").expect("write");
        std::fs::write(
            dir.join("index.toml"),
            "[[record]]\nid = \"c-3\"\nsource = \"o/r#3\"\nurl = \"u\"\nframework = \"kernel\"\nexpect = \"host_oom_kill\"\nbasis = \"b\"\n",
        )
        .expect("write");
        let err = load_from(&dir).unwrap_err().to_string();
        assert!(err.contains("c-3") && err.contains("newline"), "{err}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
