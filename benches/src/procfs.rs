//! CPU time and memory of a process, read from `/proc/<pid>` (Linux): what the whole-pipeline
//! benchmarks report for the collector, ClickHouse and the load generator itself.
//!
//! CPU = `utime + stime` of `/proc/<pid>/stat` (all threads) over a wall-clock window, as a
//! percentage of one core; memory = `VmRSS` (now) and `VmHWM` (peak) of `/proc/<pid>/status`.

use std::time::Instant;

/// Reading `/proc` failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read (the process is gone, or not Linux).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file did not have the expected shape.
    #[error("malformed {0}")]
    Malformed(String),
}

/// Clock ticks per second of `/proc/<pid>/stat` (`sysconf(_SC_CLK_TCK)`).
#[allow(unsafe_code)]
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf takes an integer and has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

fn read(path: String) -> Result<String, ProcError> {
    std::fs::read_to_string(&path).map_err(|source| ProcError::Io { path, source })
}

/// `utime + stime` of every thread of `pid`, in clock ticks (fields 14 and 15 of `stat`).
pub fn cpu_ticks(pid: u32) -> Result<u64, ProcError> {
    let path = format!("/proc/{pid}/stat");
    let stat = read(path.clone())?;
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| ProcError::Malformed(path.clone()))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14 → index 11, stime → 12.
    let num = |i: usize| -> Result<u64, ProcError> {
        fields.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| ProcError::Malformed(path.clone()))
    };
    Ok(num(11)? + num(12)?)
}

/// Memory of a process, KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Memory {
    /// Resident set now (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set (`VmHWM`).
    pub peak_rss_kib: u64,
    /// Number of threads (`Threads`).
    pub threads: u64,
}

/// `VmRSS`, `VmHWM` and `Threads` of `/proc/<pid>/status`.
pub fn memory(pid: u32) -> Result<Memory, ProcError> {
    let path = format!("/proc/{pid}/status");
    let status = read(path.clone())?;
    let field = |key: &str| -> Result<u64, ProcError> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ProcError::Malformed(format!("{path} ({key})")))
    };
    Ok(Memory { rss_kib: field("VmRSS:")?, peak_rss_kib: field("VmHWM:")?, threads: field("Threads:")? })
}

/// CPU ticks of a process at one instant.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    pid: u32,
    ticks: u64,
    at: Instant,
}

impl CpuMark {
    /// Reads the process's CPU ticks now.
    pub fn now(pid: u32) -> Result<CpuMark, ProcError> {
        Ok(CpuMark { pid, ticks: cpu_ticks(pid)?, at: Instant::now() })
    }

    /// CPU used since this mark, as a percentage of one core (100 % = one core busy).
    pub fn pct_of_core_since(&self) -> Result<f64, ProcError> {
        let ticks = cpu_ticks(self.pid)?;
        let wall = self.at.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return Ok(0.0);
        }
        Ok(ticks.saturating_sub(self.ticks) as f64 / clock_ticks_per_second() / wall * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_readable_and_burning_cpu_shows() {
        let pid = std::process::id();
        let mem = memory(pid).unwrap();
        assert!(mem.rss_kib > 0 && mem.peak_rss_kib >= mem.rss_kib && mem.threads >= 1, "{mem:?}");
        let mark = CpuMark::now(pid).unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            std::hint::black_box(x);
        }
        let pct = mark.pct_of_core_since().unwrap();
        assert!(pct > 30.0 && pct < 250.0, "{pct}");
        assert!(cpu_ticks(u32::MAX).is_err());
    }
}
