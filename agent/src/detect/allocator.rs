//! The allocator summary of a hook v2 report (`"allocator"`, `docs/hook-protocol.md`): its
//! validation and the `alloc.*` labels it becomes on the event.
//!
//! The job's hook summarises PyTorch's allocator snapshot at the OOM in the job's process (the
//! raw snapshot never leaves it). The agent checks every field, classifies each allocation site
//! by the phase of its frame (weights and optimizer state vs activations, `oomlens_parse::phase`)
//! and keeps the result as labels of the event, so it travels the wire and lands in `oom_events`
//! like every other label; `oom_features.sql` lifts the numbers into the attribution's evidence.
//!
//! | label | value |
//! |---|---|
//! | `alloc.segments` | segments the allocator holds on the device |
//! | `alloc.reserved_bytes`, `alloc.allocated_bytes` | the snapshot's totals |
//! | `alloc.cached_free_bytes` | free bytes inside the allocator's segments |
//! | `alloc.largest_free_block_bytes` | the largest of those free blocks |
//! | `alloc.free_blocks` | how many free blocks |
//! | `alloc.free_block_histogram` | free blocks per size bucket, comma-separated (bounds in the protocol page) |
//! | `alloc.static_bytes`, `alloc.activation_bytes` | bytes of the listed sites whose frame is load / optimizer (weights, optimizer state) or forward / backward / eval / inference (activations) |
//! | `alloc.history_recorded` | `true` when the sites come from recorded allocation stacks |
//! | `alloc.site.<n>` | the n-th site by live bytes: `bytes|blocks|phase|function|file:line` |

use oomlens_schema::{Label, Phase};
use serde_json::{Map, Value};

/// Most sites kept (the hook sends at most 8).
pub const MAX_SITES: usize = 8;
/// Most buckets of the free-block histogram.
pub const MAX_BUCKETS: usize = 16;
/// Longest site or function string kept, bytes.
pub const MAX_SITE_TEXT: usize = 160;
/// Prefix of the labels.
pub const LABEL_PREFIX: &str = "alloc.";
/// Label prefix of the sites (`alloc.site.1`, …).
pub const SITE_LABEL_PREFIX: &str = "alloc.site.";

const KEYS: &[&str] = &[
    "device",
    "segments",
    "reserved_bytes",
    "allocated_bytes",
    "cached_free_bytes",
    "largest_free_block_bytes",
    "free_blocks",
    "free_block_histogram",
    "history_recorded",
    "requested_bytes",
    "sites",
];
const SITE_KEYS: &[&str] = &["site", "function", "bytes", "blocks"];

/// One allocation site: code holding live memory at the OOM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// `file:line` of the innermost user frame.
    pub site: String,
    /// Its function.
    pub function: String,
    /// Live bytes allocated there.
    pub bytes: u64,
    /// Live blocks allocated there.
    pub blocks: u64,
    /// The phase its frame belongs to, when the frame says.
    pub phase: Option<Phase>,
}

/// A validated allocator summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocatorSummary {
    /// The device the summary covers (the job's CUDA index).
    pub device: Option<u32>,
    /// Segments held.
    pub segments: Option<u64>,
    /// Bytes reserved (sum of segment sizes).
    pub reserved_bytes: Option<u64>,
    /// Bytes in live blocks.
    pub allocated_bytes: Option<u64>,
    /// Bytes in free blocks inside the segments.
    pub cached_free_bytes: Option<u64>,
    /// The largest free block.
    pub largest_free_block_bytes: Option<u64>,
    /// Free blocks.
    pub free_blocks: Option<u64>,
    /// Free blocks per size bucket.
    pub free_block_histogram: Vec<u64>,
    /// Whether the sites come from recorded stacks.
    pub history_recorded: Option<bool>,
    /// The request that failed, as the observer saw it.
    pub requested_bytes: Option<u64>,
    /// Sites by live bytes, largest first.
    pub sites: Vec<Site>,
}

/// Reads `"allocator"`; errors name the field (`allocator.sites[2].bytes`).
pub fn parse(obj: &Map<String, Value>) -> Result<AllocatorSummary, String> {
    refuse_unknown(obj, KEYS, "allocator.")?;
    let u64_of = |key: &str| -> Result<Option<u64>, String> {
        match obj.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("\"allocator.{key}\": expected a non-negative integer")),
        }
    };
    let device = match u64_of("device")? {
        None => None,
        Some(d) => Some(u32::try_from(d).map_err(|_| format!("\"allocator.device\": {d} is out of range"))?),
    };
    let free_block_histogram = match obj.get("free_block_histogram").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_BUCKETS => a
            .iter()
            .map(|v| v.as_u64().ok_or("\"allocator.free_block_histogram\": expected non-negative integers"))
            .collect::<Result<_, _>>()?,
        Some(Value::Array(_)) => {
            return Err(format!("\"allocator.free_block_histogram\": more than {MAX_BUCKETS} buckets"));
        }
        Some(_) => return Err("\"allocator.free_block_histogram\": expected an array".to_owned()),
    };
    let history_recorded = match obj.get("history_recorded").filter(|v| !v.is_null()) {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err("\"allocator.history_recorded\": expected true or false".to_owned()),
    };
    let sites = match obj.get("sites").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_SITES => {
            a.iter().enumerate().map(|(i, v)| parse_site(i, v)).collect::<Result<Vec<_>, _>>()?
        }
        Some(Value::Array(_)) => return Err(format!("\"allocator.sites\": more than {MAX_SITES} sites")),
        Some(_) => return Err("\"allocator.sites\": expected an array".to_owned()),
    };
    let mut summary = AllocatorSummary {
        device,
        segments: u64_of("segments")?,
        reserved_bytes: u64_of("reserved_bytes")?,
        allocated_bytes: u64_of("allocated_bytes")?,
        cached_free_bytes: u64_of("cached_free_bytes")?,
        largest_free_block_bytes: u64_of("largest_free_block_bytes")?,
        free_blocks: u64_of("free_blocks")?,
        free_block_histogram,
        history_recorded,
        requested_bytes: u64_of("requested_bytes")?,
        sites,
    };
    if let (Some(largest), Some(free)) = (summary.largest_free_block_bytes, summary.cached_free_bytes)
        && largest > free
    {
        return Err(format!(
            "\"allocator.largest_free_block_bytes\": {largest} is more than cached_free_bytes {free}"
        ));
    }
    summary.sites.sort_by_key(|s| std::cmp::Reverse(s.bytes));
    Ok(summary)
}

fn parse_site(i: usize, v: &Value) -> Result<Site, String> {
    let path = format!("allocator.sites[{i}].");
    let Value::Object(o) = v else { return Err(format!("\"allocator.sites[{i}]\": expected an object")) };
    refuse_unknown(o, SITE_KEYS, &path)?;
    let text = |key: &str| -> Result<String, String> {
        match o.get(key).filter(|v| !v.is_null()) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(clip_site(s)),
            Some(_) => Err(format!("\"{path}{key}\": expected a string")),
        }
    };
    let num = |key: &str| -> Result<u64, String> {
        match o.get(key).filter(|v| !v.is_null()) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| format!("\"{path}{key}\": expected a non-negative integer")),
        }
    };
    let (site, function) = (text("site")?, text("function")?);
    let file = site.rsplit_once(':').map_or(site.as_str(), |(f, _)| f);
    let phase = oomlens_parse::phase::phase_of_site(file, &function);
    Ok(Site { phase, site, function, bytes: num("bytes")?, blocks: num("blocks")? })
}

/// The tail of a long path (the file name matters most), without `|` (the label's separator).
fn clip_site(s: &str) -> String {
    let cleaned: String = s.chars().map(|c| if c == '|' || c.is_control() { '/' } else { c }).collect();
    if cleaned.len() <= MAX_SITE_TEXT {
        return cleaned;
    }
    let mut start = cleaned.len() - MAX_SITE_TEXT;
    while !cleaned.is_char_boundary(start) {
        start += 1;
    }
    cleaned[start..].to_owned()
}

fn refuse_unknown(obj: &Map<String, Value>, known: &[&str], path: &str) -> Result<(), String> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown field \"{path}{k}\" (known: {})", known.join(", "))),
        None => Ok(()),
    }
}

/// Whether a site's phase means weights or optimizer state (static) rather than activations.
fn holds_state(p: Phase) -> bool {
    matches!(p, Phase::Load | Phase::OptimizerInit | Phase::OptimizerStep)
}

impl AllocatorSummary {
    /// The summary as event labels (see the module table).
    pub fn labels(&self) -> Vec<Label> {
        let mut out = Vec::new();
        let mut push =
            |key: &str, value: String| out.push(Label { key: format!("{LABEL_PREFIX}{key}"), value });
        for (key, v) in [
            ("segments", self.segments),
            ("reserved_bytes", self.reserved_bytes),
            ("allocated_bytes", self.allocated_bytes),
            ("cached_free_bytes", self.cached_free_bytes),
            ("largest_free_block_bytes", self.largest_free_block_bytes),
            ("free_blocks", self.free_blocks),
        ] {
            if let Some(v) = v {
                push(key, v.to_string());
            }
        }
        if !self.free_block_histogram.is_empty() {
            let hist: Vec<String> = self.free_block_histogram.iter().map(u64::to_string).collect();
            push("free_block_histogram", hist.join(","));
        }
        if let Some(h) = self.history_recorded {
            push("history_recorded", h.to_string());
        }
        if !self.sites.is_empty() {
            let sum = |state: bool| -> u64 {
                self.sites
                    .iter()
                    .filter(|s| s.phase.is_some_and(|p| holds_state(p) == state))
                    .map(|s| s.bytes)
                    .fold(0u64, u64::saturating_add)
            };
            push("static_bytes", sum(true).to_string());
            push("activation_bytes", sum(false).to_string());
        }
        for (i, s) in self.sites.iter().enumerate() {
            let phase = s.phase.map_or("", |p| p.as_str());
            push(
                &format!("site.{}", i + 1),
                oomlens_schema::text::clip(
                    &format!("{}|{}|{phase}|{}|{}", s.bytes, s.blocks, s.function, s.site),
                    oomlens_schema::limits::MAX_STRING,
                )
                .to_owned(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(json: &str) -> Result<AllocatorSummary, String> {
        match serde_json::from_str::<Value>(json).unwrap() {
            Value::Object(o) => parse(&o),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_summary_becomes_labels_with_classified_sites() {
        let s = summary(
            r#"{"device":0,"segments":412,"reserved_bytes":80000,"allocated_bytes":70000,
               "cached_free_bytes":9000,"largest_free_block_bytes":2000,"free_blocks":37,
               "free_block_histogram":[30,5,2,0,0,0],"history_recorded":true,"requested_bytes":4096,
               "sites":[{"site":"/venv/lib/python3.11/site-packages/transformers/modeling_utils.py:3900","function":"from_pretrained","bytes":50000,"blocks":300},
                        {"site":"train.py:88","function":"forward","bytes":15000,"blocks":40},
                        {"site":"train.py:12","function":"helper|x","bytes":5000,"blocks":1}]}"#,
        )
        .unwrap();
        let labels: Vec<(String, String)> = s.labels().into_iter().map(|l| (l.key, l.value)).collect();
        let get = |k: &str| labels.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("alloc.segments"), Some("412"));
        assert_eq!(get("alloc.cached_free_bytes"), Some("9000"));
        assert_eq!(get("alloc.largest_free_block_bytes"), Some("2000"));
        assert_eq!(get("alloc.free_block_histogram"), Some("30,5,2,0,0,0"));
        assert_eq!(get("alloc.static_bytes"), Some("50000"));
        assert_eq!(get("alloc.activation_bytes"), Some("15000"));
        assert_eq!(get("alloc.site.2"), Some("15000|40|forward|forward|train.py:88"));
        assert_eq!(get("alloc.site.3"), Some("5000|1||helper/x|train.py:12"), "no | inside a field");
        assert!(get("alloc.site.1").unwrap().starts_with("50000|300|load|from_pretrained|"));
    }

    #[test]
    fn bad_summaries_name_the_field() {
        for (json, needle) in [
            (r#"{"segments":-1}"#, "allocator.segments"),
            (r#"{"segmnts":1}"#, "unknown field \"allocator.segmnts\""),
            (r#"{"sites":[{"site":"a.py:1","bytes":"big"}]}"#, "allocator.sites[0].bytes"),
            (r#"{"sites":[{"site":"a.py:1","line":3}]}"#, "allocator.sites[0].line"),
            (r#"{"free_block_histogram":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}"#, "buckets"),
            (r#"{"cached_free_bytes":10,"largest_free_block_bytes":11}"#, "more than cached_free_bytes"),
            (r#"{"history_recorded":"yes"}"#, "history_recorded"),
        ] {
            let err = summary(json).unwrap_err();
            assert!(err.contains(needle), "{json}: {err}");
        }
        let many = format!(r#"{{"sites":[{}]}}"#, [r#"{"site":"a.py:1"}"#; 9].join(","));
        assert!(summary(&many).unwrap_err().contains("more than 8 sites"));
    }

    #[test]
    fn long_sites_keep_their_tail() {
        let long = format!("/{}/train.py:7", "d".repeat(400));
        let s = summary(&format!(
            r#"{{"sites":[{{"site":"{long}","function":"forward","bytes":1,"blocks":1}}]}}"#
        ))
        .unwrap();
        assert!(s.sites[0].site.ends_with("/train.py:7") && s.sites[0].site.len() <= MAX_SITE_TEXT);
        assert!(s.labels().iter().all(|l| l.value.len() <= oomlens_schema::limits::MAX_STRING));
    }
}
