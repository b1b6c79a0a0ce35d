//! RowBinary encoding of the two hot tables straight from a wire batch.
//!
//! `gpu_samples` and `process_samples` are almost every row the collector writes. Building an
//! owned row struct per sample (identity strings cloned, labels split into two `Vec<String>`) and
//! serialising it afterwards made the allocator the largest item in the collector's profile, so
//! [`encode_batch`] writes the RowBinary bytes of each row directly — the identity from the client
//! certificate, the readings from the batch — into one buffer per table, in the column order of
//! [`GpuSampleRow`] / [`ProcessSampleRow`] (the structs stay the schema: their column lists drive
//! the DDL and the start-up `DESCRIBE` check, and `tests/clickhouse_sink.rs` reads the encoded rows
//! back through them). `oom_events` and `agents` rows are few and keep the typed path.
//!
//! RowBinary, as ClickHouse reads it: integers little-endian; `String` = LEB128 length + bytes;
//! `Nullable(T)` = one byte (1 = NULL) then `T` when present; `Array(T)` = LEB128 count + items;
//! `LowCardinality(T)` = `T`.
//!
//! [`GpuSampleRow`]: oomlens_schema::rows::GpuSampleRow
//! [`ProcessSampleRow`]: oomlens_schema::rows::ProcessSampleRow

use oomlens_schema::{Batch, GpuSample, ProcessSample};

use super::convert::workload_str as workload;
use crate::identity::AgentIdentity;

/// RowBinary rows of one table, ready to be sent as the body of `INSERT … FORMAT RowBinary`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedRows {
    /// The encoded rows, back to back.
    pub bytes: Vec<u8>,
    /// How many rows `bytes` holds.
    pub rows: usize,
}

impl EncodedRows {
    /// Appends `other`'s rows.
    pub fn append(&mut self, other: &EncodedRows) {
        self.bytes.extend_from_slice(&other.bytes);
        self.rows += other.rows;
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
}

/// The sample rows of one batch, encoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedSamples {
    /// `gpu_samples` rows.
    pub gpu: EncodedRows,
    /// `process_samples` rows.
    pub process: EncodedRows,
}

/// Encodes the GPU and process samples of `batch`, stamped with `id`.
pub fn encode_batch(id: &AgentIdentity, batch: &Batch) -> EncodedSamples {
    let mut out = EncodedSamples::default();
    let ident = Identity::new(id);
    // Exact for GPU rows (fixed width but for the identity); a good first guess for processes.
    out.gpu.bytes.reserve(batch.gpu_samples.len() * (ident.encoded_len() + 60));
    for s in &batch.gpu_samples {
        gpu_sample(&mut out.gpu.bytes, &ident, s);
    }
    out.gpu.rows = batch.gpu_samples.len();
    out.process.bytes.reserve(batch.process_samples.len() * (ident.encoded_len() + 96));
    for p in &batch.process_samples {
        process_sample(&mut out.process.bytes, &ident, p);
    }
    out.process.rows = batch.process_samples.len();
    out
}

/// The identity columns, borrowed.
struct Identity<'a> {
    cluster: &'a str,
    node: &'a str,
    agent_id: &'a str,
}

impl<'a> Identity<'a> {
    fn new(id: &'a AgentIdentity) -> Self {
        Identity { cluster: &id.cluster, node: &id.node, agent_id: &id.agent_id }
    }

    fn encoded_len(&self) -> usize {
        self.cluster.len() + self.node.len() + self.agent_id.len() + 3
    }
}

/// `gpu_samples`: cluster, node, gpu_index, ts_ms, agent_id, then the readings.
fn gpu_sample(out: &mut Vec<u8>, id: &Identity<'_>, s: &GpuSample) {
    string(out, id.cluster);
    string(out, id.node);
    out.extend_from_slice(&s.gpu_index.to_le_bytes());
    out.extend_from_slice(&s.ts_ms.to_le_bytes());
    string(out, id.agent_id);
    nullable(out, s.memory_used_bytes.map(u64::to_le_bytes));
    nullable(out, s.memory_free_bytes.map(u64::to_le_bytes));
    nullable(out, s.memory_total_bytes.map(u64::to_le_bytes));
    nullable(out, s.memory_reserved_bytes.map(u64::to_le_bytes));
    nullable(out, s.util_gpu_pct.map(u8::to_le_bytes));
    nullable(out, s.util_mem_pct.map(u8::to_le_bytes));
    nullable(out, s.power_mw.map(u32::to_le_bytes));
    nullable(out, s.temperature_c.map(i16::to_le_bytes));
    nullable(out, s.sm_clock_mhz.map(u32::to_le_bytes));
    nullable(out, s.mem_clock_mhz.map(u32::to_le_bytes));
}

/// `process_samples`: cluster, node, gpu_index, ts_ms, pid, agent_id, process_name, used_bytes,
/// workload, label_keys, label_values.
fn process_sample(out: &mut Vec<u8>, id: &Identity<'_>, p: &ProcessSample) {
    string(out, id.cluster);
    string(out, id.node);
    out.extend_from_slice(&p.gpu_index.to_le_bytes());
    out.extend_from_slice(&p.ts_ms.to_le_bytes());
    out.extend_from_slice(&p.pid.to_le_bytes());
    string(out, id.agent_id);
    string(out, &p.name);
    nullable(out, p.used_bytes.map(u64::to_le_bytes));
    string(out, workload(&p.labels));
    uleb128(out, p.labels.len() as u64);
    for l in &p.labels {
        string(out, &l.key);
    }
    uleb128(out, p.labels.len() as u64);
    for l in &p.labels {
        string(out, &l.value);
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    uleb128(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn nullable<const N: usize>(out: &mut Vec<u8>, value: Option<[u8; N]>) {
    match value {
        Some(bytes) => {
            out.push(0);
            out.extend_from_slice(&bytes);
        }
        None => out.push(1),
    }
}

fn uleb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomlens_schema::Label;

    fn identity() -> AgentIdentity {
        AgentIdentity {
            cluster: "c".to_owned(),
            node: "n1".to_owned(),
            agent_id: "a".to_owned(),
            boot_id: 1,
            agent_version: "0".to_owned(),
            gpus: Vec::new(),
        }
    }

    #[test]
    fn leb128_lengths() {
        let enc = |v: u64| {
            let mut out = Vec::new();
            uleb128(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX).len(), 10);
    }

    #[test]
    fn gpu_row_bytes_by_hand() {
        let s = GpuSample {
            ts_ms: 2,
            gpu_index: 1,
            memory_used_bytes: Some(5),
            memory_free_bytes: None,
            memory_total_bytes: Some(7),
            memory_reserved_bytes: None,
            util_gpu_pct: Some(9),
            util_mem_pct: None,
            power_mw: None,
            temperature_c: Some(-3),
            sm_clock_mhz: None,
            mem_clock_mhz: Some(1),
        };
        let mut out = Vec::new();
        gpu_sample(&mut out, &Identity::new(&identity()), &s);
        let mut want = vec![1, b'c', 2, b'n', b'1'];
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&2i64.to_le_bytes());
        want.extend_from_slice(&[1, b'a']);
        want.push(0);
        want.extend_from_slice(&5u64.to_le_bytes());
        want.push(1);
        want.push(0);
        want.extend_from_slice(&7u64.to_le_bytes());
        want.push(1);
        want.extend_from_slice(&[0, 9]);
        want.push(1);
        want.push(1);
        want.push(0);
        want.extend_from_slice(&(-3i16).to_le_bytes());
        want.push(1);
        want.push(0);
        want.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(out, want);
    }

    #[test]
    fn process_row_bytes_by_hand() {
        let p = ProcessSample {
            ts_ms: 3,
            gpu_index: 0,
            pid: 42,
            name: "py".to_owned(),
            used_bytes: None,
            labels: vec![
                Label { key: "team".to_owned(), value: "x".to_owned() },
                Label { key: "job".to_owned(), value: "j7".to_owned() },
            ],
        };
        let mut out = Vec::new();
        process_sample(&mut out, &Identity::new(&identity()), &p);
        let mut want = vec![1, b'c', 2, b'n', b'1'];
        want.extend_from_slice(&0u32.to_le_bytes());
        want.extend_from_slice(&3i64.to_le_bytes());
        want.extend_from_slice(&42u32.to_le_bytes());
        want.extend_from_slice(&[1, b'a', 2, b'p', b'y', 1]);
        want.extend_from_slice(&[2, b'j', b'7']);
        want.extend_from_slice(&[2, 4, b't', b'e', b'a', b'm', 3, b'j', b'o', b'b']);
        want.extend_from_slice(&[2, 1, b'x', 2, b'j', b'7']);
        assert_eq!(out, want);
    }
}
