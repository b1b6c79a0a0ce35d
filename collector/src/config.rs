//! The collector's configuration: one TOML file (`[collector]`, `[clickhouse]`, `[telemetry]`,
//! `[attribution]`, `[alerts]`), every field defaulted, unknown keys refused; `OOMLENS_<SECTION>__<KEY>`
//! variables override the file and flags (with their own `OOMLENS_*` variables) override both.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use oomlens_schema::tls::TlsFiles;
use serde::{Deserialize, Serialize};

pub use crate::alert::config::AlertsSection;
use crate::clickhouse::ChConfig;
use crate::ingest::server::ServerConfig;

pub use oomlens_schema::config::{Check, ConfigError, Valid};

/// `[collector]`: the QUIC listener.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorSection {
    /// UDP address for QUIC.
    pub listen: SocketAddr,
    /// Id of this collector (default: host name).
    pub collector_id: String,
    /// CA certificate (PEM) that signs agent certificates.
    pub ca: PathBuf,
    /// Collector certificate (PEM).
    pub cert: PathBuf,
    /// Collector key (PEM).
    pub key: PathBuf,
    /// Most concurrent agent connections (0: derived from `max_memory_bytes`, half of it for
    /// connections at [`CONNECTION_BYTES`] each).
    pub max_connections: usize,
    /// Most concurrent connections with one agent certificate (cluster, node): an agent needs
    /// one, two while it reconnects.
    pub max_connections_per_certificate: usize,
    /// Most batches of one connection being stored at once.
    pub max_batches_in_flight: usize,
    /// QUIC idle timeout, ms.
    pub idle_timeout_ms: u64,
    /// Time for TLS + Hello, ms.
    pub handshake_timeout_ms: u64,
    /// Clusters (agent certificate OU) allowed to connect; empty: any cluster signed by the CA.
    pub allowed_clusters: Vec<String>,
    /// How often the CA, certificate and key files are checked for changes, ms (0: only on
    /// SIGHUP). Changed files are used for new connections without a restart.
    pub tls_reload_interval_ms: u64,
    /// Memory budget of the collector in bytes: `BASE_MEMORY_BYTES` + `max_connections` ×
    /// [`CONNECTION_BYTES`] + `IN_FLIGHT_EXPANSION` × `max_bytes_in_flight` must fit in it. Sizes
    /// whichever of the two is 0.
    pub max_memory_bytes: u64,
    /// Cap on frame bytes accepted from all connections but not yet stored (0: derived from
    /// `max_memory_bytes`). When it is reached, connections stop reading their streams.
    pub max_bytes_in_flight: u64,
    /// Cap on frame bytes accepted from one connection but not yet stored.
    pub max_connection_bytes_in_flight: u64,
    /// How long a stopping collector keeps trying to store the batches it has taken, ms. After it
    /// the collector exits without them: they were never acknowledged, so their agents send them
    /// again (to this collector once it is back, or to another).
    pub shutdown_flush_timeout_ms: u64,
}

/// Smallest accepted byte cap (a frame larger than a cap is charged the whole cap).
pub const MIN_BYTES_IN_FLIGHT: u64 = 64 << 10;
/// Memory the collector needs besides the frames in flight (runtime, TLS, QUIC endpoint, client).
pub const BASE_MEMORY_BYTES: u64 = 96 << 20;
/// Upper bound of the collector's memory per frame byte in flight: the frame buffer, the decoded
/// batch, its rows (each stamped with cluster, node and agent id) and the insert buffers.
pub const IN_FLIGHT_EXPANSION: u64 = 6;
/// Upper bound of one open connection's memory beyond its frames in flight: the data its peer
/// sent that is not read yet (at most the QUIC receive window,
/// [`oomlens_schema::tls::RECEIVE_WINDOW_BYTES`]) plus the connection's TLS and QUIC state and its
/// session task (about 70 KiB measured in `tests/memory_bound.rs`; 128 KiB budgeted).
pub const CONNECTION_BYTES: u64 = oomlens_schema::tls::RECEIVE_WINDOW_BYTES as u64 + (128 << 10);

impl Default for CollectorSection {
    fn default() -> Self {
        CollectorSection {
            listen: SocketAddr::from(([0, 0, 0, 0], 4433)),
            collector_id: String::new(),
            ca: PathBuf::from("/etc/oomlens/ca.pem"),
            cert: PathBuf::from("/etc/oomlens/collector.pem"),
            key: PathBuf::from("/etc/oomlens/collector.key"),
            max_connections: 0,
            max_connections_per_certificate: 4,
            max_batches_in_flight: 64,
            idle_timeout_ms: 15_000,
            handshake_timeout_ms: 10_000,
            allowed_clusters: Vec::new(),
            tls_reload_interval_ms: 30_000,
            max_memory_bytes: 2 << 30,
            max_bytes_in_flight: 0,
            max_connection_bytes_in_flight: 32 << 20,
            shutdown_flush_timeout_ms: 20_000,
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

/// `[attribution]`: the attributor that stores each OOM event's attribution once
/// (`oom_attributions`, [`crate::analysis::store`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttributionSection {
    /// Run the attributor in this collector.
    pub enabled: bool,
    /// Time between passes, ms.
    pub interval_ms: u64,
    /// An event is attributed once it failed, and its latest copy arrived, this long ago, ms.
    pub settle_ms: u64,
    /// Each pass looks for unattributed events this far back, ms (older ones: `oomlens attribute`).
    pub lookback_ms: u64,
    /// Look-back before each failure for the features and neighbours, ms (readers asking for
    /// another look-back compute live).
    pub window_ms: u64,
    /// Most events per chunk (one features and one neighbours query).
    pub chunk_events: usize,
    /// Longest time span of one chunk, ms.
    pub chunk_span_ms: u64,
}

impl Default for AttributionSection {
    fn default() -> Self {
        use crate::analysis::store;
        AttributionSection {
            enabled: true,
            interval_ms: 60_000,
            settle_ms: store::DEFAULT_SETTLE_MS as u64,
            lookback_ms: 7 * 86_400_000,
            window_ms: crate::analysis::features::DEFAULT_WINDOW_MS as u64,
            chunk_events: store::DEFAULT_CHUNK_EVENTS,
            chunk_span_ms: store::DEFAULT_CHUNK_SPAN_MS as u64,
        }
    }
}

impl AttributionSection {
    /// The attributor's settings (values beyond `i64::MAX` ms are clamped).
    pub fn settings(&self) -> crate::analysis::store::AttributorSettings {
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        crate::analysis::store::AttributorSettings {
            interval: Duration::from_millis(self.interval_ms),
            settle_ms: ms(self.settle_ms),
            lookback_ms: ms(self.lookback_ms),
            window_ms: ms(self.window_ms),
            chunk_events: self.chunk_events,
            chunk_span_ms: ms(self.chunk_span_ms),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.interval_ms == 0 || self.chunk_events == 0 || self.chunk_span_ms == 0 || self.lookback_ms == 0
        {
            return Err(ConfigError::Invalid(
                "attribution.interval_ms, attribution.chunk_events, attribution.chunk_span_ms and \
                 attribution.lookback_ms must be > 0"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

/// The whole collector configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorConfig {
    /// QUIC listener.
    pub collector: CollectorSection,
    /// `[clickhouse]`: where rows are stored and how inserts are batched.
    pub clickhouse: ChConfig,
    /// Telemetry endpoint.
    pub telemetry: TelemetrySection,
    /// The attributor (stored attributions).
    pub attribution: AttributionSection,
    /// Alerts of attributed OOM events (Alertmanager, webhooks).
    pub alerts: AlertsSection,
}

impl CollectorConfig {
    /// Defaults with the collector's listener, id and TLS files from a development PKI, storing
    /// into `clickhouse` (tests, the demo, the benchmarks; not finished yet).
    pub fn with_dev_pki(
        pki: &crate::ingest::certs::DevPki,
        listen: std::net::SocketAddr,
        collector_id: &str,
        clickhouse: ChConfig,
    ) -> CollectorConfig {
        let mut cfg = CollectorConfig::default();
        cfg.collector.listen = listen;
        cfg.collector.ca = pki.ca.clone();
        cfg.collector.cert = pki.collector.cert.clone();
        cfg.collector.key = pki.collector.key.clone();
        cfg.collector.collector_id = collector_id.to_owned();
        cfg.clickhouse = clickhouse;
        cfg
    }

    /// Reads a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        oomlens_schema::config::load_toml(path)
    }

    /// The layered configuration before [`Self::finish`]: defaults, then the TOML file when
    /// given, then every `OOMLENS_<SECTION>__<KEY>` variable among `vars` (e.g.
    /// `OOMLENS_CLICKHOUSE__INSERT_MAX_ROWS=50000`, `OOMLENS_CLICKHOUSE__RETENTION__SAMPLES_DAYS=7`).
    /// Command-line flags are applied on top by the binary.
    pub fn load_layered<I>(path: Option<&Path>, vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        oomlens_schema::config::load_layered(path, vars)
    }

    /// The configuration as TOML (`print-config`), with a non-empty `clickhouse.password`, the
    /// alerts' header values and webhook URL paths replaced by `<redacted>`.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        let mut shown = self.clone();
        if !shown.clickhouse.password.is_empty() {
            shown.clickhouse.password = "<redacted>".to_owned();
        }
        shown.alerts = shown.alerts.redacted();
        toml::to_string_pretty(&shown)
            .map_err(|e| ConfigError::Invalid(format!("cannot render the configuration: {e}")))
    }

    /// Checks the layered configuration (see [`Check`] for what it does).
    pub fn finish(self) -> Result<ValidConfig, ConfigError> {
        Valid::new(self)
    }
}

/// The collector configuration after its check: what the service takes.
pub type ValidConfig = Valid<CollectorConfig>;

impl Check for CollectorConfig {
    /// Fills derived defaults (collector id, connection limits) and checks ranges.
    fn check(mut self) -> Result<Self, ConfigError> {
        if self.collector.collector_id.is_empty() {
            self.collector.collector_id = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "collector".to_owned());
        }
        if self.collector.max_batches_in_flight == 0 || self.collector.max_connections_per_certificate == 0 {
            return Err(ConfigError::Invalid(
                "collector.max_connections_per_certificate and collector.max_batches_in_flight must be > 0"
                    .to_owned(),
            ));
        }
        if self.collector.idle_timeout_ms < 300 {
            return Err(ConfigError::Invalid("collector.idle_timeout_ms must be at least 300".to_owned()));
        }
        let c = &self.collector;
        for (key, path) in [("collector.ca", &c.ca), ("collector.cert", &c.cert), ("collector.key", &c.key)] {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::Invalid(format!("{key} must name a PEM file")));
            }
        }
        if self.collector.handshake_timeout_ms == 0 {
            return Err(ConfigError::Invalid("collector.handshake_timeout_ms must be > 0".to_owned()));
        }
        if self.collector.allowed_clusters.iter().any(|c| c.trim().is_empty()) {
            return Err(ConfigError::Invalid(
                "collector.allowed_clusters must not contain empty names".to_owned(),
            ));
        }
        self.clickhouse.validate().map_err(ConfigError::Invalid)?;
        self.attribution.validate()?;
        self.alerts.validate().map_err(ConfigError::Invalid)?;
        if self.alerts.enabled() && !self.attribution.enabled {
            return Err(ConfigError::Invalid(
                "alerts.alertmanager_urls / alerts.webhooks need attribution.enabled = true: alerts start \
                 when the attributor attributes an event"
                    .to_owned(),
            ));
        }
        let c = &mut self.collector;
        let available = c.max_memory_bytes.saturating_sub(BASE_MEMORY_BYTES);
        if c.max_connections == 0 {
            c.max_connections =
                usize::try_from((available / 2 / CONNECTION_BYTES).max(1)).unwrap_or(usize::MAX);
        }
        let connections = (c.max_connections as u64).saturating_mul(CONNECTION_BYTES);
        if c.max_bytes_in_flight == 0 {
            c.max_bytes_in_flight = available.saturating_sub(connections) / IN_FLIGHT_EXPANSION;
        }
        if c.max_bytes_in_flight < MIN_BYTES_IN_FLIGHT
            || c.max_connection_bytes_in_flight < MIN_BYTES_IN_FLIGHT
        {
            return Err(ConfigError::Invalid(format!(
                "collector.max_bytes_in_flight ({}, derived from max_memory_bytes {} less {} connections × \
                 {CONNECTION_BYTES} bytes when 0) and collector.max_connection_bytes_in_flight ({}) must be at \
                 least {MIN_BYTES_IN_FLIGHT}: raise max_memory_bytes or lower max_connections",
                c.max_bytes_in_flight,
                c.max_memory_bytes,
                c.max_connections,
                c.max_connection_bytes_in_flight
            )));
        }
        let needed = BASE_MEMORY_BYTES
            .saturating_add(connections)
            .saturating_add(c.max_bytes_in_flight.saturating_mul(IN_FLIGHT_EXPANSION));
        if needed > c.max_memory_bytes {
            return Err(ConfigError::Invalid(format!(
                "collector.max_memory_bytes ({}) is below what the other limits may use: {BASE_MEMORY_BYTES} base + \
                 max_connections {} × {CONNECTION_BYTES} + {IN_FLIGHT_EXPANSION} × max_bytes_in_flight {} = {needed} \
                 bytes; raise it, or lower max_connections / max_bytes_in_flight (0 derives them)",
                c.max_memory_bytes, c.max_connections, c.max_bytes_in_flight
            )));
        }
        Ok(self)
    }
}

impl CollectorConfig {
    /// The QUIC server settings.
    pub fn server(&self) -> ServerConfig {
        let c = &self.collector;
        ServerConfig {
            listen: c.listen,
            tls: TlsFiles { ca: c.ca.clone(), cert: c.cert.clone(), key: c.key.clone() },
            idle_timeout: Duration::from_millis(c.idle_timeout_ms),
            handshake_timeout: Duration::from_millis(c.handshake_timeout_ms),
            max_connections: c.max_connections,
            max_connections_per_certificate: c.max_connections_per_certificate,
            max_batches_in_flight: c.max_batches_in_flight,
            max_bytes_in_flight: c.max_bytes_in_flight,
            max_connection_bytes_in_flight: c.max_connection_bytes_in_flight,
            collector_id: c.collector_id.clone(),
            allowed_clusters: c.allowed_clusters.clone(),
            tls_reload_interval: (c.tls_reload_interval_ms > 0)
                .then(|| Duration::from_millis(c.tls_reload_interval_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_and_tls_reload_settings() {
        let cfg = toml::from_str::<CollectorConfig>("").unwrap().finish().unwrap();
        assert!(cfg.server().allowed_clusters.is_empty());
        assert_eq!(cfg.server().tls_reload_interval, Some(Duration::from_secs(30)));
        let cfg: CollectorConfig =
            toml::from_str("[collector]\nallowed_clusters = [\"prod-a\"]\ntls_reload_interval_ms = 0\n")
                .unwrap();
        let server = cfg.finish().unwrap().server();
        assert_eq!(server.allowed_clusters, vec!["prod-a".to_owned()]);
        assert_eq!(server.tls_reload_interval, None, "0 turns polling off (SIGHUP still reloads)");
        let bad: CollectorConfig = toml::from_str("[collector]\nallowed_clusters = [\"\"]\n").unwrap();
        assert!(bad.finish().is_err());
    }

    #[test]
    fn defaults_and_unknown_keys() {
        let cfg: CollectorConfig = toml::from_str("").unwrap();
        let cfg = cfg.finish().unwrap();
        assert_eq!(cfg.collector.listen.port(), 4433);
        assert!(!cfg.collector.collector_id.is_empty());
        assert!(toml::from_str::<CollectorConfig>("[collector]\nlisten_addr = \"x\"\n").is_err());
        let cfg: CollectorConfig = toml::from_str("[clickhouse]\nurl = \"http://h:8123\"\n").unwrap();
        assert_eq!(cfg.clickhouse.url, "http://h:8123");
    }

    #[test]
    fn every_key_is_documented_with_its_default() {
        fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
            for (k, v) in table {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match v {
                    toml::Value::Table(t) => walk(&key, t, out),
                    _ => out.push(key),
                }
            }
        }
        let docs = include_str!("../../docs/configuration.md");
        let value = toml::Value::try_from(CollectorConfig::default()).unwrap();
        let mut keys = Vec::new();
        walk("", value.as_table().unwrap(), &mut keys);
        assert!(keys.len() > 25, "{keys:?}");
        let missing: Vec<_> = keys.iter().filter(|k| !docs.contains(&format!("| `{k}` |"))).collect();
        assert!(
            missing.is_empty(),
            "keys without a row `| `key` | default | …` in docs/configuration.md: {missing:?}"
        );
        // The collector's rows come after the agent's (telemetry.listen is in both tables).
        let docs_collector = &docs[docs.find("## Collector").unwrap()..];
        let wrong: Vec<_> = keys
            .iter()
            .filter_map(|k| {
                let v = k.split('.').try_fold(&value, |v, part| v.get(part))?;
                let row = docs_collector.lines().find(|l| l.starts_with(&format!("| `{k}` |")))?;
                let cell = row.split('|').nth(2)?;
                (!oomlens_schema::config::documented_default_matches(cell, v))
                    .then(|| format!("{k}: docs {cell:?}, code {v}"))
            })
            .collect();
        assert!(wrong.is_empty(), "defaults in docs/configuration.md differ from the code: {wrong:?}");
        assert!(docs.contains("| `telemetry.listen` |"));
    }

    #[test]
    fn every_section_refuses_unknown_keys_and_empty_tls_paths() {
        for table in ["collector", "clickhouse", "clickhouse.retention", "telemetry", "attribution", "alerts"]
        {
            let text = format!("[{table}]\nno_such_key_x = 1\n");
            let err = toml::from_str::<CollectorConfig>(&text).unwrap_err().to_string();
            assert!(err.contains("no_such_key_x"), "[{table}] accepted an unknown key: {err}");
        }
        for key in ["ca", "cert", "key"] {
            let cfg: CollectorConfig = toml::from_str(&format!("[collector]\n{key} = ''\n")).unwrap();
            let err = cfg.finish().unwrap_err().to_string();
            assert!(err.contains(&format!("collector.{key}")), "{err}");
        }
    }

    #[test]
    fn environment_variables_override_the_file_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collector.toml");
        std::fs::write(&path, "[clickhouse]\nurl = 'http://file:8123'\ninsert_max_rows = 10\n").unwrap();
        let env = |v: &[(&str, &str)]| {
            v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect::<Vec<_>>()
        };
        let cfg = CollectorConfig::load_layered(
            Some(&path),
            env(&[
                ("OOMLENS_CLICKHOUSE__INSERT_MAX_ROWS", "50000"),
                ("OOMLENS_CLICKHOUSE__RETENTION__SAMPLES_DAYS", "7"),
                ("OOMLENS_COLLECTOR__ALLOWED_CLUSTERS", "prod-a,prod-b"),
                ("OOMLENS_COLLECTOR__LISTEN", "[::]:4433"),
                ("OOMLENS_TELEMETRY__LISTEN", "0.0.0.0:9102"),
            ]),
        )
        .unwrap()
        .finish()
        .unwrap();
        assert_eq!(cfg.clickhouse.url, "http://file:8123");
        assert_eq!(cfg.clickhouse.insert_max_rows, 50_000);
        assert_eq!(cfg.clickhouse.retention.samples_days, 7);
        assert_eq!(cfg.clickhouse.retention.events_days, 365);
        assert_eq!(cfg.collector.allowed_clusters, ["prod-a", "prod-b"]);
        assert_eq!(cfg.collector.listen, "[::]:4433".parse::<SocketAddr>().unwrap());
        assert_eq!(cfg.telemetry.listen, Some("0.0.0.0:9102".parse().unwrap()));
        for (var, value, needle) in [
            ("OOMLENS_CLICKHOUSE__URLL", "http://x", "urll"),
            ("OOMLENS_CLICKHOUSE__RETENTION__DAYS", "1", "days"),
            ("OOMLENS_COLLECTOR__MAX_CONNECTIONS", "-5", "OOMLENS_COLLECTOR__MAX_CONNECTIONS"),
            ("OOMLENS_UPLINK__COLLECTORS", "a:1", "uplink"),
        ] {
            let err = CollectorConfig::load_layered(None, env(&[(var, value)])).unwrap_err().to_string();
            assert!(err.contains(var) && err.contains(needle), "{var}: {err}");
        }
        let err = CollectorConfig::load_layered(None, env(&[("OOMLENS_CLICKHOUSE__URL", "clickhouse:8123")]))
            .unwrap()
            .finish()
            .unwrap_err()
            .to_string();
        assert!(err.contains("clickhouse.url"), "{err}");
    }

    #[test]
    fn printed_configuration_parses_back_and_hides_the_password() {
        let cfg = CollectorConfig::load_layered(None, Vec::new()).unwrap().finish().unwrap();
        let text = cfg.to_toml().unwrap();
        let back: CollectorConfig = toml::from_str(&text).unwrap();
        assert_eq!(back.finish().unwrap(), cfg);
        let mut cfg = cfg.into_raw();
        cfg.clickhouse.password = "s3cret".to_owned();
        let text = cfg.to_toml().unwrap();
        assert!(!text.contains("s3cret") && text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn attribution_settings() {
        let cfg = toml::from_str::<CollectorConfig>("").unwrap().finish().unwrap();
        assert!(cfg.attribution.enabled);
        let s = cfg.attribution.settings();
        assert_eq!((s.interval, s.settle_ms, s.window_ms), (Duration::from_secs(60), 120_000, 60_000));
        let cfg: CollectorConfig =
            toml::from_str("[attribution]\nenabled = false\nsettle_ms = 5000\nchunk_events = 10\n").unwrap();
        let cfg = cfg.finish().unwrap();
        assert!(!cfg.attribution.enabled);
        assert_eq!(
            (cfg.attribution.settings().settle_ms, cfg.attribution.settings().chunk_events),
            (5000, 10)
        );
        for bad in ["interval_ms = 0", "chunk_events = 0", "chunk_span_ms = 0", "lookback_ms = 0"] {
            let cfg: CollectorConfig = toml::from_str(&format!("[attribution]\n{bad}\n")).unwrap();
            assert!(cfg.finish().unwrap_err().to_string().contains("attribution."), "{bad}");
        }
    }

    #[test]
    fn alerts_are_checked_with_the_rest_and_need_the_attributor() {
        let cfg = toml::from_str::<CollectorConfig>("").unwrap().finish().unwrap();
        assert!(!cfg.alerts.enabled());
        let cfg: CollectorConfig = toml::from_str(
            "[alerts]\nalertmanager_urls = ['http://am:9093']\nscenarios = ['batch']\nmin_confidence = 0.5\n",
        )
        .unwrap();
        let cfg = cfg.finish().unwrap();
        assert!(cfg.alerts.enabled());
        let bad: CollectorConfig = toml::from_str("[alerts]\nqueue_capacity = 0\n").unwrap();
        assert!(bad.finish().unwrap_err().to_string().contains("alerts.queue_capacity"));
        let off: CollectorConfig = toml::from_str(
            "[attribution]\nenabled = false\n[alerts]\nalertmanager_urls = ['http://am:9093']\n",
        )
        .unwrap();
        assert!(off.finish().unwrap_err().to_string().contains("attribution.enabled"));
        let env =
            vec![("OOMLENS_ALERTS__ALERTMANAGER_URLS".to_owned(), "http://a:9093,http://b:9093".to_owned())];
        let cfg = CollectorConfig::load_layered(None, env).unwrap().finish().unwrap();
        assert_eq!(cfg.alerts.alertmanager_urls, ["http://a:9093", "http://b:9093"]);
        let mut raw = cfg.into_raw();
        raw.alerts.webhooks.push(crate::alert::WebhookConfig {
            url: "https://hooks.example/T/B/s3cret".into(),
            format: crate::alert::WebhookFormat::Slack,
            headers: [("Authorization".to_owned(), "Bearer t0ken".to_owned())].into(),
        });
        let text = raw.to_toml().unwrap();
        assert!(
            !text.contains("s3cret") && !text.contains("t0ken") && text.contains("[[alerts.webhooks]]"),
            "{text}"
        );
    }

    #[test]
    fn byte_caps_are_derived_from_the_memory_budget() {
        // Half of what the base leaves for connections, the rest for frames in flight.
        let cfg = toml::from_str::<CollectorConfig>("").unwrap().finish().unwrap();
        let available = (2u64 << 30) - BASE_MEMORY_BYTES;
        let connections = available / 2 / CONNECTION_BYTES;
        assert_eq!(cfg.collector.max_connections as u64, connections);
        assert_eq!(
            cfg.collector.max_bytes_in_flight,
            (available - connections * CONNECTION_BYTES) / IN_FLIGHT_EXPANSION
        );
        // Explicit limits that do not fit the budget are refused, naming the numbers.
        let over: CollectorConfig = toml::from_str("[collector]\nmax_connections = 10000\n").unwrap();
        let err = over.finish().unwrap_err().to_string();
        assert!(err.contains("raise max_memory_bytes or lower max_connections"), "{err}");
        let over: CollectorConfig =
            toml::from_str("[collector]\nmax_connections = 100\nmax_bytes_in_flight = 1073741824\n").unwrap();
        let err = over.finish().unwrap_err().to_string();
        assert!(err.contains("is below what the other limits may use"), "{err}");
        let cfg: CollectorConfig =
            toml::from_str("[collector]\nmax_memory_bytes = 1000000000\nmax_bytes_in_flight = 1048576\n")
                .unwrap();
        let cfg = cfg.finish().unwrap();
        assert_eq!(cfg.server().max_bytes_in_flight, 1 << 20);
        let tiny: CollectorConfig = toml::from_str("[collector]\nmax_memory_bytes = 1000\n").unwrap();
        assert!(tiny.finish().is_err(), "a budget below the base memory leaves no room for frames");
        let tiny: CollectorConfig =
            toml::from_str("[collector]\nmax_connection_bytes_in_flight = 10\n").unwrap();
        assert!(tiny.finish().is_err());
    }
}
