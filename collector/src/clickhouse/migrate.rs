//! Idempotent migrations and the start-up schema check.
//!
//! [`Ch::migrate`] creates the database and every table of [`oomlens_schema::ddl::tables`]
//! (rendered for the detected server version), adds columns a newer collector writes but an older
//! table lacks, and runs [`Ch::check_schema`] before the rollups are created. The check reads
//! `system.columns` (same columns on 18.16 and modern servers, unlike `DESCRIBE TABLE`) and
//! compares every table with its Row struct: with schema validation off, a mismatched type would
//! otherwise decode to garbage silently.
//!
//! In cluster mode ([`Ch::topology`]) every table is a `<table>_local` storage table on each shard
//! replica plus a `Distributed` table `<table>` on each replica. With `on_cluster_ddl` a table or
//! column missing anywhere is created by one `ON CLUSTER` statement sent to the configured server
//! (ZooKeeper / Keeper runs it everywhere); otherwise the same idempotent steps run on every
//! replica directly. The schema check always reads every replica.
//!
//! The per-minute rollups ([`oomlens_schema::ddl::rollups`]) come after the tables: the rollup
//! table (per shard `<rollup>_local` plus a `Distributed` front in cluster mode), then the
//! materialized view that fills it from the sample table (`gpu_samples`, or `gpu_samples_local`
//! on each shard). When this migration creates a view, the rows stored before it existed are
//! rolled up once ([`Ch::backfill_rollups`]): one `INSERT … SELECT` per hour of source time, newest first.
//! Rows the view sees as well are counted once, because every rollup state is idempotent under
//! duplicates; so the backfill can be repeated (`oomlens-collector migrate --backfill-rollups`)
//! after an interrupted upgrade. A rollup table with other columns than this version's (an older
//! rollup design) is dropped with its view and rebuilt the same way: it holds derived data only.

use oomlens_schema::ddl::rollups::{RollupSpec, rollups};
use oomlens_schema::ddl::{
    ClusterDdl, DescribedColumn, LOCAL_SUFFIX, SchemaMismatch, ServerCaps, TableSpec, check_columns,
    create_database_sql, tables,
};

use super::client::{Ch, ChError};
use super::cluster::Topology;

/// What [`Ch::migrate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Tables created now.
    pub created: Vec<String>,
    /// Tables that already existed.
    pub existing: Vec<String>,
    /// Columns added to existing tables, as `table.column`.
    pub added_columns: Vec<String>,
    /// Rollup tables and materialized views created now (`gpu_minutes`, `gpu_minutes_mv`, …; in
    /// cluster mode `name@replica URL` or `name (ON CLUSTER c)`).
    pub rollups_created: Vec<String>,
    /// Rollups backfilled from the rows stored before their view existed, as `rollup: N hours`.
    pub backfilled: Vec<String>,
    /// Rollup tables of another version dropped to be rebuilt (created and backfilled again).
    pub rollups_rebuilt: Vec<String>,
}

impl std::fmt::Display for MigrateReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &[String]| if v.is_empty() { "-".to_owned() } else { v.join(", ") };
        write!(
            f,
            "created: {}; existing: {}; columns added: {}; rollups created: {}; rebuilt: {}; backfilled: {}",
            show(&self.created),
            show(&self.existing),
            show(&self.added_columns),
            show(&self.rollups_created),
            show(&self.rollups_rebuilt),
            show(&self.backfilled)
        )
    }
}

/// One backfill `INSERT … SELECT` covers this much source time: small enough to finish within the
/// request timeout at fleet scale (an hour of 48 GPUs × 3 processes at 1 Hz: ~0.7 M rows).
const BACKFILL_CHUNK_MS: i64 = 3_600_000;

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct ColumnInfo {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    default_kind: String,
}

/// One table of the cluster layout: the storage table or the `Distributed` one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Local,
    Distributed,
}

impl Part {
    fn table(self, spec: &TableSpec) -> String {
        match self {
            Part::Local => spec.local_name(),
            Part::Distributed => spec.name.to_owned(),
        }
    }

    /// The server's capabilities as they apply to this table: `Distributed` tables get no codecs.
    fn caps(self, caps: ServerCaps) -> ServerCaps {
        match self {
            Part::Local => caps,
            Part::Distributed => ServerCaps { codecs: false, ..caps },
        }
    }

    fn create_sql(self, ch: &Ch, spec: &TableSpec, ddl: &ClusterDdl) -> String {
        match self {
            Part::Local => spec.create_local_sql(ch.database(), ch.caps(), ch.retention(), ddl),
            Part::Distributed => spec.create_distributed_sql(ch.database(), ch.caps(), ddl),
        }
    }
}

const ON_CLUSTER_HINT: &str = "ON CLUSTER DDL (needs ZooKeeper or ClickHouse Keeper and <distributed_ddl> on \
                               every host; without them set clickhouse.on_cluster_ddl = false and the \
                               collector runs the DDL on every replica itself)";

impl Ch {
    /// Creates or upgrades the database and tables, then checks the schema. Idempotent.
    pub async fn migrate(&self) -> Result<MigrateReport, ChError> {
        match self.topology() {
            None => self.migrate_single().await,
            Some(topology) => self.migrate_cluster(topology).await,
        }
    }

    async fn migrate_single(&self) -> Result<MigrateReport, ChError> {
        let caps = self.caps();
        let mut report = MigrateReport::default();
        self.execute(&format!("CREATE DATABASE IF NOT EXISTS {}", self.database())).await?;
        for spec in tables() {
            let described = self.describe(spec.name).await?;
            if described.is_empty() {
                self.execute(&spec.create_sql(self.database(), caps, self.retention())).await?;
                tracing::info!(table = spec.name, "created table");
                report.created.push(spec.name.to_owned());
                continue;
            }
            report.existing.push(spec.name.to_owned());
            for col in spec.columns.iter().filter(|c| !described.iter().any(|d| d.name == c.name)) {
                let sql = format!(
                    "ALTER TABLE {} ADD COLUMN {}",
                    self.table(spec.name),
                    TableSpec::column_definition(col, caps)
                );
                self.execute(&sql).await?;
                tracing::info!(table = spec.name, column = col.name, "added column");
                report.added_columns.push(format!("{}.{}", spec.name, col.name));
            }
        }
        // The views read the sample tables: only once those are right.
        self.check_schema().await?;
        for rollup in rollups() {
            if self.drop_outdated_rollup(&rollup, "").await? {
                report.rollups_rebuilt.push(rollup.name.to_owned());
            }
            if self.describe(rollup.name).await?.is_empty() {
                self.execute(&rollup.create_sql(self.database(), caps, self.retention())).await?;
                tracing::info!(table = rollup.name, "created rollup table");
                report.rollups_created.push(rollup.name.to_owned());
            }
            let view = rollup.view_name();
            if self.describe(&view).await?.is_empty() {
                self.execute(&rollup.create_view_sql(self.database(), "", None)).await?;
                tracing::info!(view, "created materialized view");
                report.rollups_created.push(view);
                let hours = self.backfill_rollup(&rollup, "").await?;
                if hours > 0 {
                    report.backfilled.push(format!("{}: {hours} hours", rollup.name));
                }
            }
        }
        Ok(report)
    }

    /// Cluster mode: per rollup its `_local` table and `Distributed` front on every replica, then
    /// the view on every replica (reading `<source>_local`, writing `<rollup>_local`); a replica
    /// whose view is created now backfills its own shard's rows.
    async fn migrate_cluster_rollups(
        &self,
        topology: &Topology,
        report: &mut MigrateReport,
    ) -> Result<(), ChError> {
        let ddl = &topology.ddl;
        let (db, caps, retention) = (self.database(), self.caps(), self.retention());
        for rollup in rollups() {
            for r in &topology.replicas {
                if r.ch.drop_outdated_rollup(&rollup, LOCAL_SUFFIX).await? {
                    report.rollups_rebuilt.push(format!("{}@{}", rollup.name, r.ch.url()));
                }
            }
            let steps = [
                (rollup.local_name(), rollup.create_local_sql(db, caps, retention, ddl)),
                (rollup.name.to_owned(), rollup.create_distributed_sql(db, caps, ddl)),
                (
                    rollup.view_name(),
                    rollup.create_view_sql(db, LOCAL_SUFFIX, ddl.on_cluster.then_some(ddl.name.as_str())),
                ),
            ];
            for (i, (name, sql)) in steps.iter().enumerate() {
                let mut lacking = Vec::new();
                for r in &topology.replicas {
                    if r.ch.describe(name).await?.is_empty() {
                        lacking.push(r);
                    }
                }
                if lacking.is_empty() {
                    continue;
                }
                if ddl.on_cluster {
                    self.on_cluster(sql).await?;
                    tracing::info!(name, cluster = ddl.name, "created ON CLUSTER");
                    report.rollups_created.push(format!("{name} (ON CLUSTER {})", ddl.name));
                } else {
                    for r in &lacking {
                        // The statement names the configured database, as on every replica.
                        r.ch.execute(sql).await?;
                        tracing::info!(name, url = r.ch.url(), "created");
                        report.rollups_created.push(format!("{name}@{}", r.ch.url()));
                    }
                }
                // The view is the last step: backfill where it did not exist before.
                if i == steps.len() - 1 {
                    for r in &lacking {
                        let hours = r.ch.backfill_rollup(&rollup, LOCAL_SUFFIX).await?;
                        if hours > 0 {
                            report.backfilled.push(format!("{}@{}: {hours} hours", rollup.name, r.ch.url()));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A rollup table whose columns are not this version's (an older collector's rollup) holds
    /// derived data only: drops its view, its `Distributed` front (in cluster mode) and itself on
    /// this server, so the migration recreates and backfills them. Returns whether it did.
    async fn drop_outdated_rollup(&self, rollup: &RollupSpec, suffix: &str) -> Result<bool, ChError> {
        let table = format!("{}{suffix}", rollup.name);
        let described = self.describe(&table).await?;
        if described.is_empty() {
            return Ok(false);
        }
        let mut have: Vec<&str> = described.iter().map(|d| d.name.as_str()).collect();
        let mut want: Vec<&str> = rollup.columns.iter().map(|c| c.name).collect();
        have.sort_unstable();
        want.sort_unstable();
        if have == want {
            return Ok(false);
        }
        tracing::warn!(
            table,
            url = self.url(),
            ?have,
            ?want,
            "rollup table from another version: dropping it and its view to rebuild them from the samples"
        );
        let mut drop = vec![rollup.view_name()];
        if !suffix.is_empty() {
            drop.push(rollup.name.to_owned());
        }
        drop.push(table);
        for t in drop {
            self.execute(&format!("DROP TABLE IF EXISTS {}", self.table(&t))).await?;
        }
        Ok(true)
    }

    /// Rolls up every row of the sample tables into the rollups again (all of them; in cluster
    /// mode on every replica's `_local` tables), one hour of source time per `INSERT … SELECT`,
    /// newest first. The migration does this when it creates a view; run it again after a backfill was
    /// interrupted. Rows already rolled up are not counted twice (idempotent states). Returns
    /// `rollup: N hours` per rollup and replica.
    pub async fn backfill_rollups(&self) -> Result<Vec<String>, ChError> {
        let mut done = Vec::new();
        for rollup in rollups() {
            match self.topology() {
                None => {
                    let hours = self.backfill_rollup(&rollup, "").await?;
                    done.push(format!("{}: {hours} hours", rollup.name));
                }
                Some(topology) => {
                    for r in &topology.replicas {
                        let hours = r.ch.backfill_rollup(&rollup, LOCAL_SUFFIX).await?;
                        done.push(format!("{}@{}: {hours} hours", rollup.name, r.ch.url()));
                    }
                }
            }
        }
        Ok(done)
    }

    /// Backfills one rollup on this server from `<source><suffix>` into `<rollup><suffix>`, one
    /// `INSERT … SELECT` per hour that holds rows (newest first); returns the number of hours.
    async fn backfill_rollup(&self, rollup: &RollupSpec, suffix: &str) -> Result<u64, ChError> {
        let source = format!("{}{suffix}", rollup.source);
        let hours = self
            .run(
                "listing the hours of a sample table",
                self.client()
                    .query(&format!(
                        "SELECT DISTINCT intDiv(ts_ms, {BACKFILL_CHUNK_MS}) AS hour FROM {} ORDER BY hour DESC",
                        self.table(&source)
                    ))
                    .fetch_all::<i64>(),
            )
            .await?;
        if hours.is_empty() {
            return Ok(0);
        }
        tracing::info!(
            rollup = rollup.name,
            source,
            hours = hours.len(),
            url = self.url(),
            "backfilling the rollup from the rows stored before its view existed (newest hour first)"
        );
        for (done, hour) in hours.iter().enumerate() {
            let (since, until) = (hour * BACKFILL_CHUNK_MS, (hour + 1) * BACKFILL_CHUNK_MS);
            self.run(
                "backfilling a rollup",
                self.client().query(&rollup.backfill_sql(self.database(), suffix, since, until)).execute(),
            )
            .await?;
            tracing::debug!(
                rollup = rollup.name,
                since_ms = since,
                done = done + 1,
                of = hours.len(),
                "backfilled one hour"
            );
        }
        tracing::info!(rollup = rollup.name, hours = hours.len(), url = self.url(), "backfill done");
        Ok(hours.len() as u64)
    }

    /// Cluster mode: the storage and `Distributed` tables on every replica (see the module docs).
    async fn migrate_cluster(&self, topology: &Topology) -> Result<MigrateReport, ChError> {
        let ddl = &topology.ddl;
        let mut report = MigrateReport::default();
        if ddl.on_cluster {
            self.on_cluster(&create_database_sql(self.database(), Some(ddl))).await?;
        } else {
            for r in &topology.replicas {
                r.ch.execute(&create_database_sql(r.ch.database(), None)).await?;
            }
        }
        for spec in tables() {
            for part in [Part::Local, Part::Distributed] {
                let table = part.table(&spec);
                let mut lacking = Vec::new();
                for r in &topology.replicas {
                    if r.ch.describe(&table).await?.is_empty() {
                        lacking.push(r);
                    }
                }
                if ddl.on_cluster && !lacking.is_empty() {
                    self.on_cluster(&part.create_sql(self, &spec, ddl)).await?;
                    tracing::info!(table, cluster = ddl.name, "created table ON CLUSTER");
                    report.created.push(format!("{table} (ON CLUSTER {})", ddl.name));
                } else {
                    for r in &lacking {
                        r.ch.execute(&part.create_sql(&r.ch, &spec, ddl)).await?;
                        tracing::info!(table, url = r.ch.url(), "created table");
                        report.created.push(format!("{table}@{}", r.ch.url()));
                    }
                }
                if lacking.len() < topology.replicas.len() {
                    report.existing.push(table.clone());
                }
                self.add_missing_columns(topology, &spec, part, &mut report).await?;
            }
        }
        // The views read the sample tables: only once those are right.
        self.check_schema().await?;
        self.migrate_cluster_rollups(topology, &mut report).await?;
        Ok(report)
    }

    /// Cluster mode: adds the columns a table lacks on some replicas. Missing everywhere with
    /// `on_cluster_ddl`: one `ALTER … ON CLUSTER`; otherwise an `ALTER` on each replica that still
    /// lacks it (described again right before, since a replicated table's `ALTER` reaches the
    /// other replicas of its shard by itself).
    async fn add_missing_columns(
        &self,
        topology: &Topology,
        spec: &TableSpec,
        part: Part,
        report: &mut MigrateReport,
    ) -> Result<(), ChError> {
        let ddl = &topology.ddl;
        let table = part.table(spec);
        let table = table.as_str();
        for col in &spec.columns {
            let mut lacking = Vec::new();
            for r in &topology.replicas {
                if !r.ch.describe(table).await?.iter().any(|d| d.name == col.name) {
                    lacking.push(r);
                }
            }
            if lacking.is_empty() {
                continue;
            }
            if ddl.on_cluster && lacking.len() == topology.replicas.len() {
                let sql = TableSpec::add_column_sql(
                    &self.table(table),
                    col,
                    part.caps(self.caps()),
                    Some(&ddl.name),
                );
                self.on_cluster(&sql).await?;
                report.added_columns.push(format!("{table}.{} (ON CLUSTER {})", col.name, ddl.name));
                continue;
            }
            for r in lacking {
                if r.ch.describe(table).await?.iter().any(|d| d.name == col.name) {
                    continue;
                }
                let sql = TableSpec::add_column_sql(&r.ch.table(table), col, part.caps(r.ch.caps()), None);
                r.ch.execute(&sql).await?;
                tracing::info!(table, column = col.name, url = r.ch.url(), "added column");
                report.added_columns.push(format!("{table}.{}@{}", col.name, r.ch.url()));
            }
        }
        Ok(())
    }

    /// Runs one `ON CLUSTER` statement through this server, with a hint when the distributed DDL
    /// queue is missing.
    async fn on_cluster(&self, sql: &str) -> Result<(), ChError> {
        self.run(ON_CLUSTER_HINT, self.client().query(sql).execute()).await
    }

    /// Compares every table with the Row struct the collector writes; lists every problem. In
    /// cluster mode every replica's storage and `Distributed` tables are checked; a problem names
    /// the table as `<table>@<replica URL>`.
    pub async fn check_schema(&self) -> Result<(), ChError> {
        let mut problems: Vec<SchemaMismatch> = Vec::new();
        match self.topology() {
            None => {
                for spec in tables() {
                    let described = self.describe(spec.name).await?;
                    problems.extend(check_columns(&spec, &described));
                }
            }
            Some(topology) => {
                for r in &topology.replicas {
                    for spec in tables() {
                        for part in [Part::Local, Part::Distributed] {
                            let table = part.table(&spec);
                            let described = r.ch.describe(&table).await?;
                            let located = format!("{table}@{}", r.ch.url());
                            problems.extend(check_columns(&spec, &described).into_iter().map(|mut p| {
                                match &mut p {
                                    SchemaMismatch::Missing { table, .. }
                                    | SchemaMismatch::WrongType { table, .. } => table.clone_from(&located),
                                }
                                p
                            }));
                        }
                    }
                }
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(ChError::SchemaMismatch(problems)) }
    }

    /// The columns of one table of the configured database (empty when the table does not exist).
    pub async fn describe(&self, table: &str) -> Result<Vec<DescribedColumn>, ChError> {
        let rows = self
            .run(
                "reading system.columns",
                self.client()
                    .query("SELECT name, type, default_kind FROM system.columns WHERE database = ? AND table = ?")
                    .bind(self.database())
                    .bind(table)
                    .fetch_all::<ColumnInfo>(),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|c| DescribedColumn { name: c.name, ty: c.ty, default_kind: c.default_kind })
            .collect())
    }
}
