//! The agent's configuration: one TOML file, every field defaulted, unknown keys refused;
//! command-line flags and `OOMLENS_*` environment variables override it (see `main.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::source::sim::SimConfig;

pub use oomlens_schema::config::{Check, ConfigError, Valid};

/// Which source feeds the sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Real GPUs through NVML.
    #[default]
    Nvml,
    /// The deterministic fleet simulator.
    Simulator,
    /// No GPU readings: only the job logs, the kernel log and the hook (CPU nodes, testing). No
    /// samples, no vanished-process detection, no flight recorder, no capacity for events whose
    /// message has none.
    None,
}

/// `[agent]`: identity.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Node name (default: the host name). The collector uses the certificate's CN instead.
    pub node: String,
    /// Cluster name (used when the certificate has no OU).
    pub cluster: String,
    /// Stable installation id (default: the node name).
    pub agent_id: String,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection { node: String::new(), cluster: "default".to_owned(), agent_id: String::new() }
    }
}

/// `[source]`: what to sample and how often.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceSection {
    /// `nvml`, `simulator` or `none`.
    pub kind: SourceKind,
    /// Milliseconds between readings.
    pub interval_ms: u64,
    /// Simulator only: real-time multiplier.
    pub speed: f64,
    /// Simulator only: stop after this many simulated seconds (0: run until stopped).
    pub duration_s: u64,
    /// Simulator only: first timestamp (Unix epoch ms; 0: now).
    pub start_ms: i64,
    /// NVML only: timeout of each driver call, ms.
    pub nvml_call_timeout_ms: u64,
}

impl Default for SourceSection {
    fn default() -> Self {
        SourceSection {
            kind: SourceKind::Nvml,
            interval_ms: 1000,
            speed: 1.0,
            duration_s: 0,
            start_ms: 0,
            nvml_call_timeout_ms: 2000,
        }
    }
}

/// `[uplink]`: where and how to send.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UplinkSection {
    /// Collector endpoints `host:port`, tried in turn.
    pub collectors: Vec<String>,
    /// Name the collector certificate must carry.
    pub server_name: String,
    /// CA certificate (PEM) that signed the collector's certificate.
    pub ca: PathBuf,
    /// This agent's certificate (PEM); its CN is the node identity.
    pub cert: PathBuf,
    /// This agent's private key (PEM).
    pub key: PathBuf,
    /// Send a batch at least this often, ms.
    pub batch_interval_ms: u64,
    /// Send a batch as soon as it holds this many rows.
    pub batch_max_rows: usize,
    /// Most batches in flight without acknowledgement.
    pub max_in_flight: u64,
    /// Former name of `spool.max_bytes`, still read (with a warning) so older files load; the
    /// check moves it there and clears it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool_max_bytes: Option<u64>,
    /// Connect timeout, ms.
    pub connect_timeout_ms: u64,
    /// QUIC idle timeout, ms.
    pub idle_timeout_ms: u64,
    /// Longest reconnect back-off, ms.
    pub backoff_max_ms: u64,
    /// On shutdown, wait this long for pending batches to be acknowledged, ms.
    pub drain_timeout_ms: u64,
}

impl Default for UplinkSection {
    fn default() -> Self {
        UplinkSection {
            collectors: Vec::new(),
            server_name: "localhost".to_owned(),
            ca: PathBuf::from("/etc/oomlens/ca.pem"),
            cert: PathBuf::from("/etc/oomlens/agent.pem"),
            key: PathBuf::from("/etc/oomlens/agent.key"),
            batch_interval_ms: 1000,
            batch_max_rows: 50_000,
            max_in_flight: 32,
            spool_max_bytes: None,
            connect_timeout_ms: 5000,
            idle_timeout_ms: 15_000,
            backoff_max_ms: 5000,
            drain_timeout_ms: 30_000,
        }
    }
}

/// `[recorder]`: the flight recorder and adaptive sampling (see `recorder.rs`). The normal
/// interval is `source.interval_ms`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecorderSection {
    /// Off: the source is read at `source.interval_ms` and every sample is sent.
    pub enabled: bool,
    /// Seconds of fast samples kept per GPU.
    pub window_s: u64,
    /// Milliseconds between readings of the source (below `source.interval_ms`).
    pub fast_interval_ms: u64,
    /// A GPU with at least this share of its memory used (percent) streams at the fast rate.
    pub hot_threshold_pct: f64,
}

impl Default for RecorderSection {
    fn default() -> Self {
        RecorderSection { enabled: true, window_s: 120, fast_interval_ms: 100, hot_threshold_pct: 90.0 }
    }
}

impl UplinkSection {
    /// One collector endpoint and the TLS files to reach it, trusting `server_name` as the
    /// collector's certificate name.
    pub fn to_collector(&mut self, collector: &str, server_name: &str, ca: &Path, cert: &Path, key: &Path) {
        self.collectors = vec![collector.to_owned()];
        self.server_name = server_name.to_owned();
        self.ca = ca.to_owned();
        self.cert = cert.to_owned();
        self.key = key.to_owned();
    }
}

impl AgentConfig {
    /// The flight recorder's settings (`[recorder]` with `source.interval_ms` as the normal interval).
    pub fn recorder_settings(&self) -> crate::pipeline::recorder::RecorderSettings {
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        crate::pipeline::recorder::RecorderSettings {
            enabled: self.recorder.enabled,
            window_ms: ms(self.recorder.window_s.saturating_mul(1000)),
            fast_interval_ms: ms(self.recorder.fast_interval_ms),
            normal_interval_ms: ms(self.source.interval_ms),
            hot_threshold_pct: self.recorder.hot_threshold_pct,
            event_delay_ms: ms(self.detect.merge_grace_ms),
        }
    }
}

/// Default cap of the memory spool (no `spool.dir`), bytes.
pub const MEMORY_SPOOL_DEFAULT_BYTES: u64 = 256 * 1024 * 1024;
/// Default cap of the disk spool, bytes.
pub const DISK_SPOOL_DEFAULT_BYTES: u64 = 1024 * 1024 * 1024;

/// `[spool]`: where batches wait for their acknowledgement.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpoolSection {
    /// Directory of the on-disk spool (unset: batches are kept in memory, capped by
    /// `max_bytes`, and lost when the agent stops).
    pub dir: Option<PathBuf>,
    /// Cap of un-acknowledged batches, bytes: on disk with `dir`, else in memory (oldest samples
    /// are dropped beyond it; events never). Unset: [`MEMORY_SPOOL_DEFAULT_BYTES`] in memory,
    /// [`DISK_SPOOL_DEFAULT_BYTES`] on disk; the check fills it in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// `always`, `interval` (at most once a second) or `never`.
    pub fsync: crate::spool::FsyncPolicy,
    /// Memory for batches the disk refuses (full, read-only, I/O errors), bytes: they wait here
    /// and go to disk once it takes writes again; beyond it the oldest samples are dropped
    /// (events never).
    pub memory_fallback_bytes: usize,
}

impl Default for SpoolSection {
    fn default() -> Self {
        SpoolSection {
            dir: None,
            max_bytes: None,
            fsync: crate::spool::FsyncPolicy::Interval,
            memory_fallback_bytes: 64 * 1024 * 1024,
        }
    }
}

/// `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// Address of `/metrics`, `/healthz`, `/readyz` (unset: disabled).
    pub listen: Option<SocketAddr>,
}

/// The whole agent configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// `[agent]`: node name, cluster and installation id this agent reports as.
    pub agent: AgentSection,
    /// Source and sampling.
    pub source: SourceSection,
    /// Simulator settings (`source.kind = "simulator"`).
    pub simulator: SimConfig,
    /// `[uplink]`: collectors to send batches to, TLS files and batching.
    pub uplink: UplinkSection,
    /// Telemetry endpoint.
    pub telemetry: TelemetrySection,
    /// The job-report socket.
    pub hook: crate::detect::hook::HookConfig,
    /// pid → workload labels.
    pub workload: crate::workload::WorkloadConfig,
    /// Flight recorder and adaptive sampling.
    pub recorder: RecorderSection,
    /// Job logs to follow.
    pub logs: crate::detect::follow::LogsConfig,
    /// The kernel log.
    pub kmsg: crate::detect::kmsg::KmsgConfig,
    /// Suspected OOMs and event merging.
    pub detect: crate::detect::merge::DetectConfig,
    /// Spool (memory or disk).
    pub spool: SpoolSection,
    /// The kubelet pod-resources API (GPU → pod names on Kubernetes nodes).
    pub pod_resources: crate::workload::podresources::PodResourcesConfig,
}

impl AgentConfig {
    /// Reads a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path)
    }

    /// Parses TOML text (`path` only names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        oomlens_schema::config::parse_toml(text, path)
    }

    /// The layered configuration before [`Self::finish`]: defaults, then the TOML file when
    /// given, then every `OOMLENS_<SECTION>__<KEY>` variable among `vars` (e.g.
    /// `OOMLENS_UPLINK__BATCH_MAX_ROWS=20000`, `OOMLENS_SIMULATOR__MIX__BATCH=3`). Command-line
    /// flags are applied on top by the binary.
    pub fn load_layered<I>(path: Option<&Path>, vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        oomlens_schema::config::load_layered(path, vars)
    }

    /// The configuration as TOML (`print-config`).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string_pretty(self)
            .map_err(|e| ConfigError::Invalid(format!("cannot render the configuration: {e}")))
    }

    /// Checks the layered configuration (see [`Check`] for what it does).
    pub fn finish(self) -> Result<ValidConfig, ConfigError> {
        Valid::new(self)
    }

    /// Millisecond fields as durations.
    pub fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
}

/// The agent configuration after its check: what the runner takes.
pub type ValidConfig = Valid<AgentConfig>;

impl SpoolSection {
    /// The cap of the spool, bytes (resolved by the check; the mode's default before it).
    pub fn cap_bytes(&self) -> u64 {
        self.max_bytes.unwrap_or(if self.dir.is_some() {
            DISK_SPOOL_DEFAULT_BYTES
        } else {
            MEMORY_SPOOL_DEFAULT_BYTES
        })
    }
}

impl Check for AgentConfig {
    /// Fills derived defaults (host name, agent id, the spool cap), moves the former
    /// `uplink.spool_max_bytes` to `spool.max_bytes`, and checks ranges.
    fn check(mut self) -> Result<Self, ConfigError> {
        if let Some(old) = self.uplink.spool_max_bytes.take() {
            match self.spool.max_bytes {
                Some(new) if new != old => {
                    return Err(ConfigError::Invalid(format!(
                        "uplink.spool_max_bytes ({old}) and spool.max_bytes ({new}) disagree: \
                         uplink.spool_max_bytes is the former name of spool.max_bytes; keep only spool.max_bytes"
                    )));
                }
                _ => {
                    tracing::warn!(
                        "uplink.spool_max_bytes is the former name of spool.max_bytes; it still applies, rename it"
                    );
                    self.spool.max_bytes = Some(old);
                }
            }
        }
        self.spool.max_bytes = Some(self.spool.cap_bytes());
        if self.agent.node.is_empty() {
            self.agent.node = hostname();
        }
        if self.agent.agent_id.is_empty() {
            self.agent.agent_id = self.agent.node.clone();
        }
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.source.interval_ms == 0 {
            return bad("source.interval_ms must be > 0");
        }
        if !(self.source.speed.is_finite() && self.source.speed > 0.0) {
            return bad("source.speed must be a positive number");
        }
        if self.uplink.max_in_flight == 0 {
            return bad("uplink.max_in_flight must be > 0");
        }
        if self.uplink.batch_interval_ms == 0 || self.uplink.batch_max_rows == 0 {
            return bad("uplink.batch_interval_ms and uplink.batch_max_rows must be > 0");
        }
        if self.spool.cap_bytes() < 1024 * 1024 {
            return bad("spool.max_bytes must be at least 1 MiB");
        }
        for (key, path) in [
            ("uplink.ca", &self.uplink.ca),
            ("uplink.cert", &self.uplink.cert),
            ("uplink.key", &self.uplink.key),
        ] {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::Invalid(format!("{key} must name a PEM file")));
            }
        }
        if self.spool.dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            return bad("spool.dir must not be empty (leave it unset for the memory spool)");
        }
        if self.uplink.idle_timeout_ms < 300 {
            return bad("uplink.idle_timeout_ms must be at least 300");
        }
        self.hook.validate().map_err(ConfigError::Invalid)?;
        self.workload.validate().map_err(ConfigError::Invalid)?;
        self.recorder_settings().validate().map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.logs.validate().map_err(ConfigError::Invalid)?;
        self.kmsg.validate().map_err(ConfigError::Invalid)?;
        self.detect.validate().map_err(ConfigError::Invalid)?;
        self.pod_resources.validate().map_err(ConfigError::Invalid)?;
        for (what, v) in [("agent.node", &self.agent.node), ("agent.cluster", &self.agent.cluster)] {
            if v.len() > oomlens_schema::limits::MAX_STRING {
                return Err(ConfigError::Invalid(format!(
                    "{what} is longer than {} bytes",
                    oomlens_schema::limits::MAX_STRING
                )));
            }
        }
        Ok(self)
    }
}

/// The host name (`/proc/sys/kernel/hostname`), or `localhost`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_unknown_keys_are_refused() {
        let cfg = AgentConfig::parse("", Path::new("x.toml")).unwrap().finish().unwrap();
        assert_eq!(cfg.source.interval_ms, 1000);
        assert!(!cfg.agent.node.is_empty());
        let err = AgentConfig::parse("[uplink]\ncolectors = []\n", Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("colectors"), "{err}");
        let err = AgentConfig::parse("[source]\ninterval_ms = 0\n", Path::new("x.toml"))
            .unwrap()
            .finish()
            .unwrap_err();
        assert!(err.to_string().contains("interval_ms"), "{err}");
    }

    #[test]
    fn the_spool_cap_is_one_key_with_a_default_per_mode() {
        let check = |text: &str| AgentConfig::parse(text, Path::new("x.toml")).unwrap().finish();
        let memory = check("").unwrap();
        assert_eq!(memory.spool.max_bytes, Some(MEMORY_SPOOL_DEFAULT_BYTES));
        let disk = check("[spool]\ndir = \"/var/lib/oomlens/spool\"\n").unwrap();
        assert_eq!(disk.spool.max_bytes, Some(DISK_SPOOL_DEFAULT_BYTES));
        let set = check("[spool]\nmax_bytes = 5242880\n").unwrap();
        assert_eq!(set.spool.cap_bytes(), 5 << 20);
        // The former key still applies, moves to spool.max_bytes and is not printed again.
        let old = check("[uplink]\nspool_max_bytes = 3145728\n").unwrap();
        assert_eq!((old.spool.max_bytes, old.uplink.spool_max_bytes), (Some(3 << 20), None));
        assert!(!old.to_toml().unwrap().contains("spool_max_bytes"));
        assert!(check("[uplink]\nspool_max_bytes = 3145728\n[spool]\nmax_bytes = 3145728\n").is_ok());
        let err = check("[uplink]\nspool_max_bytes = 3145728\n[spool]\nmax_bytes = 5242880\n").unwrap_err();
        assert!(err.to_string().contains("keep only spool.max_bytes"), "{err}");
        let err = check("[spool]\nmax_bytes = 1000\n").unwrap_err();
        assert!(err.to_string().contains("at least 1 MiB"), "{err}");
        // A checked configuration checks again to itself (print-config output loads unchanged).
        let again = check(&disk.to_toml().unwrap()).unwrap();
        assert_eq!(again, disk);
    }

    /// Every key of the default configuration, dotted (`uplink.batch_max_rows`); tables whose
    /// keys are data (maps such as `simulator.mix`) count as one key.
    fn default_keys() -> Vec<String> {
        fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
            for (k, v) in table {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match v {
                    toml::Value::Table(_) if MAP_KEYS.contains(&key.as_str()) => out.push(key),
                    toml::Value::Table(t) => walk(&key, t, out),
                    _ => out.push(key),
                }
            }
        }
        const MAP_KEYS: &[&str] = &["simulator.mix"];
        let value = toml::Value::try_from(AgentConfig::default()).unwrap();
        let mut out = Vec::new();
        walk("", value.as_table().unwrap(), &mut out);
        out
    }

    #[test]
    fn every_key_is_documented_with_its_default() {
        let docs = include_str!("../../docs/configuration.md");
        let keys = default_keys();
        assert!(keys.len() > 60, "{keys:?}");
        let missing: Vec<_> = keys.iter().filter(|k| !docs.contains(&format!("| `{k}` |"))).collect();
        assert!(
            missing.is_empty(),
            "keys without a row `| `key` | default | …` in docs/configuration.md: {missing:?}"
        );
        let defaults = toml::Value::try_from(AgentConfig::default()).unwrap();
        let docs_agent = &docs[..docs.find("## Collector").unwrap()];
        let wrong: Vec<_> = keys
            .iter()
            .filter_map(|k| {
                let value = k.split('.').try_fold(&defaults, |v, part| v.get(part))?;
                let row = docs_agent.lines().find(|l| l.starts_with(&format!("| `{k}` |")))?;
                let cell = row.split('|').nth(2)?;
                (!oomlens_schema::config::documented_default_matches(cell, value))
                    .then(|| format!("{k}: docs {cell:?}, code {value}"))
            })
            .collect();
        assert!(wrong.is_empty(), "defaults in docs/configuration.md differ from the code: {wrong:?}");
        // Options without a default value are not in the rendered defaults; they are documented too.
        for k in [
            "agent.node",
            "agent.agent_id",
            "spool.dir",
            "spool.max_bytes",
            "telemetry.listen",
            "simulator.log_dir",
        ] {
            assert!(docs.contains(&format!("| `{k}` |")), "{k}");
        }
    }

    #[test]
    fn every_section_refuses_unknown_keys() {
        let value = toml::Value::try_from(AgentConfig::default()).unwrap();
        let mut tables = Vec::new();
        for (name, v) in value.as_table().unwrap() {
            if let toml::Value::Table(t) = v {
                tables.push(name.clone());
                for (sub, v) in t {
                    if v.is_table() {
                        tables.push(format!("{name}.{sub}"));
                    }
                }
            }
        }
        assert!(tables.len() >= 13, "{tables:?}");
        for table in tables {
            let text = format!("[{table}]\nno_such_key_x = 1\n");
            let err = AgentConfig::parse(&text, Path::new("x.toml")).unwrap_err().to_string();
            assert!(err.contains("no_such_key_x"), "[{table}] accepted an unknown key: {err}");
        }
    }

    #[test]
    fn empty_tls_paths_are_refused() {
        for key in ["ca", "cert", "key"] {
            let text = format!("[uplink]\n{key} = ''\n");
            let err = AgentConfig::parse(&text, Path::new("x.toml")).unwrap().finish().unwrap_err();
            assert!(err.to_string().contains(&format!("uplink.{key}")), "{err}");
        }
    }

    #[test]
    fn environment_variables_override_the_file_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, "[uplink]\nbatch_max_rows = 10\ncollectors = ['a:1']\n").unwrap();
        let env = |v: &[(&str, &str)]| {
            v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect::<Vec<_>>()
        };
        let cfg = AgentConfig::load_layered(
            Some(&path),
            env(&[
                ("OOMLENS_UPLINK__BATCH_MAX_ROWS", "20000"),
                ("OOMLENS_UPLINK__COLLECTORS", "c1:4433,c2:4433"),
                ("OOMLENS_SPOOL__DIR", "/var/lib/oomlens/spool"),
                ("OOMLENS_RECORDER__ENABLED", "false"),
                ("OOMLENS_SOURCE__KIND", "simulator"),
                ("OOMLENS_TELEMETRY__LISTEN", "127.0.0.1:9101"),
                ("OOMLENS_NODE", "not a key path"),
            ]),
        )
        .unwrap()
        .finish()
        .unwrap();
        assert_eq!(cfg.uplink.batch_max_rows, 20_000);
        assert_eq!(cfg.uplink.collectors, ["c1:4433", "c2:4433"]);
        assert_eq!(cfg.spool.dir.as_deref(), Some(Path::new("/var/lib/oomlens/spool")));
        assert!(!cfg.recorder.enabled);
        assert_eq!(cfg.source.kind, SourceKind::Simulator);
        assert_eq!(cfg.telemetry.listen, Some("127.0.0.1:9101".parse().unwrap()));
        let err = AgentConfig::load_layered(Some(&path), env(&[("OOMLENS_UPLINK__BATCH_MAX_ROWZ", "1")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("OOMLENS_UPLINK__BATCH_MAX_ROWZ") && err.contains("batch_max_rowz"), "{err}");
        let err =
            AgentConfig::load_layered(None, env(&[("OOMLENS_SOURCE__KIND", "gpu")])).unwrap_err().to_string();
        assert!(err.contains("OOMLENS_SOURCE__KIND"), "{err}");
        // Ranges are checked after the variables are applied.
        let err = AgentConfig::load_layered(None, env(&[("OOMLENS_SOURCE__INTERVAL_MS", "0")]))
            .unwrap()
            .finish()
            .unwrap_err()
            .to_string();
        assert!(err.contains("source.interval_ms"), "{err}");
        let err = AgentConfig::load_layered(Some(&dir.path().join("missing.toml")), env(&[])).unwrap_err();
        assert!(err.to_string().contains("missing.toml"), "{err}");
    }

    #[test]
    fn printed_configuration_parses_back_to_itself() {
        let cfg = AgentConfig::load_layered(None, Vec::new()).unwrap().finish().unwrap();
        let text = cfg.to_toml().unwrap();
        let back = AgentConfig::parse(&text, Path::new("printed.toml")).unwrap().finish().unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn recorder_section_defaults_and_ranges() {
        let cfg = AgentConfig::parse("", Path::new("x.toml")).unwrap().finish().unwrap();
        let r = cfg.recorder_settings();
        assert_eq!(
            (r.enabled, r.window_ms, r.fast_interval_ms, r.normal_interval_ms),
            (true, 120_000, 100, 1000)
        );
        assert_eq!(r.hot_threshold_pct, 90.0);
        let err = AgentConfig::parse("[recorder]\nfast_interval_ms = 1000\n", Path::new("x.toml"))
            .unwrap()
            .finish()
            .unwrap_err();
        assert!(err.to_string().contains("recorder.fast_interval_ms"), "{err}");
        let off = "[source]\ninterval_ms = 50\n[recorder]\nenabled = false\n";
        let cfg = AgentConfig::parse(off, Path::new("x.toml")).unwrap().finish().unwrap();
        assert_eq!(cfg.recorder_settings().sample_interval_ms(), 50);
    }
}
