//! Retention on servers without table `TTL` (ClickHouse < 19.6, e.g. Debian's 18.16).
//!
//! Data tables are partitioned by UTC day (`toYYYYMMDD`, partition id `YYYYMMDD`). Where the
//! server has no `TTL`, [`Ch::drop_expired_partitions`] lists the active parts in `system.parts`
//! and drops every day partition that lies entirely before the table's retention horizon. On
//! TTL-capable servers the DDL carries the `TTL` clause and this is a no-op.
//!
//! In cluster mode the data lives in the `<table>_local` storage tables of every shard replica:
//! the partitions are listed and dropped on each replica directly (a `DROP PARTITION` of a
//! partition another replica already dropped through replication is a no-op).
//!
//! The per-minute rollups (`gpu_minutes`, `process_minutes`) are partitioned by the UTC day of
//! their minute and expire with the samples (`retention.samples_days`).

use std::time::Duration;

use oomlens_schema::ddl::rollups::rollups;
use oomlens_schema::ddl::{LOCAL_SUFFIX, Partition, tables};

use super::client::{Ch, ChError};

const DAY_MS: i64 = 86_400_000;

/// What [`Ch::drop_expired_partitions`] dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// `(table, partition id)` pairs dropped; in cluster mode the table reads
    /// `<table>_local@<replica URL>`.
    pub dropped: Vec<(String, String)>,
    /// True when the server has `TTL` and nothing was done.
    pub ttl_managed: bool,
}

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct PartitionInfo {
    table: String,
    partition_id: String,
}

/// The `YYYYMMDD` number of the UTC day containing `ms` (epoch ms).
pub fn yyyymmdd(ms: i64) -> u32 {
    // Howard Hinnant's civil_from_days.
    let z = ms.div_euclid(DAY_MS) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    u32::try_from(y * 10_000 + m * 100 + d).unwrap_or(0)
}

/// Day partitions strictly before this `YYYYMMDD` hold only rows older than `days` at `now_ms`.
pub fn horizon(now_ms: i64, days: u32) -> u32 {
    yyyymmdd(now_ms.saturating_sub(i64::from(days).saturating_mul(DAY_MS)))
}

impl Ch {
    /// Drops day partitions older than the retention (servers without `TTL` only); in cluster
    /// mode on every replica's storage tables.
    pub async fn drop_expired_partitions(&self, now_ms: i64) -> Result<RetentionReport, ChError> {
        let Some(topology) = self.topology() else { return self.drop_expired_in(now_ms, "").await };
        let mut report = RetentionReport { dropped: Vec::new(), ttl_managed: true };
        for r in &topology.replicas {
            let one = r.ch.drop_expired_in(now_ms, LOCAL_SUFFIX).await?;
            report.ttl_managed &= one.ttl_managed;
            let url = r.ch.url();
            report.dropped.extend(one.dropped.into_iter().map(|(t, p)| (format!("{t}@{url}"), p)));
        }
        Ok(report)
    }

    /// [`Self::drop_expired_partitions`] on this server's tables named `<table><suffix>`.
    async fn drop_expired_in(&self, now_ms: i64, suffix: &str) -> Result<RetentionReport, ChError> {
        if self.caps().ttl {
            return Ok(RetentionReport { dropped: Vec::new(), ttl_managed: true });
        }
        let parts = self
            .run(
                "listing partitions",
                self.client()
                    .query(
                        "SELECT table, partition_id FROM system.parts WHERE database = ? AND active \
                         GROUP BY table, partition_id ORDER BY table, partition_id",
                    )
                    .bind(self.database())
                    .fetch_all::<PartitionInfo>(),
            )
            .await?;
        let mut report = RetentionReport::default();
        // Day-partitioned tables with their retention: the tables, then the rollups.
        let expiring = tables()
            .into_iter()
            .filter(|spec| spec.partition == Partition::Day)
            .map(|spec| (spec.name, spec.retention_days(self.retention())))
            .chain(rollups().into_iter().map(|r| (r.name, r.retention_days(self.retention()))));
        for (name, days) in expiring {
            if days == 0 {
                continue;
            }
            let limit = horizon(now_ms, days);
            let table = format!("{name}{suffix}");
            for part in parts.iter().filter(|p| p.table == table) {
                let Ok(day) = part.partition_id.parse::<u32>() else { continue };
                if day >= limit {
                    continue;
                }
                self.run(
                    "dropping an expired partition",
                    self.client()
                        .query(&format!("ALTER TABLE {} DROP PARTITION ID ?", self.table(&table)))
                        .bind(part.partition_id.as_str())
                        .execute(),
                )
                .await?;
                tracing::info!(table, url = self.url(), partition = %part.partition_id, "dropped expired partition");
                report.dropped.push((table.clone(), part.partition_id.clone()));
            }
        }
        Ok(report)
    }

    /// Runs [`Ch::drop_expired_partitions`] every `every` until the task is aborted (no-op task
    /// when every server has `TTL`). Failures are logged and retried at the next tick.
    pub fn spawn_retention(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let ch = self.clone();
        tokio::spawn(async move {
            let all_ttl = match ch.topology() {
                Some(t) => t.replicas.iter().all(|r| r.ch.caps().ttl),
                None => ch.caps().ttl,
            };
            if all_ttl {
                return;
            }
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if let Err(e) = ch.drop_expired_partitions(crate::clickhouse::sink::now_ms()).await {
                    tracing::warn!(error = %e, "retention: dropping expired partitions failed");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(yyyymmdd(0), 19_700_101);
        assert_eq!(yyyymmdd(-1), 19_691_231);
        assert_eq!(yyyymmdd(951_782_400_000), 20_000_229); // 2000-02-29
        assert_eq!(yyyymmdd(1_735_689_599_999), 20_241_231);
        assert_eq!(yyyymmdd(1_735_689_600_000), 20_250_101);
    }

    #[test]
    fn horizon_keeps_the_partial_day() {
        let now = 1_735_689_600_000 + 5 * DAY_MS + 3_600_000; // 2025-01-06 01:00
        assert_eq!(horizon(now, 5), 20_250_101);
        assert_eq!(horizon(now, 0), 20_250_106);
    }
}
