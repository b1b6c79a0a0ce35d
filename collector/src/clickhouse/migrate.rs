//! Idempotent migrations and the start-up schema check.
//!
//! [`Ch::migrate`] creates the database and every table of [`oomlens_schema::ddl::tables`]
//! (rendered for the detected server version), adds columns a newer collector writes but an older
//! table lacks, and ends with [`Ch::check_schema`]. The check reads `system.columns` (same columns on
//! 18.16 and modern servers, unlike `DESCRIBE TABLE`) and compares every table with its Row struct:
//! with schema validation off, a mismatched type would otherwise decode to garbage silently.

use oomlens_schema::ddl::{DescribedColumn, SchemaMismatch, TableSpec, check_columns, tables};

use super::client::{Ch, ChError};

/// What [`Ch::migrate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Tables created now.
    pub created: Vec<String>,
    /// Tables that already existed.
    pub existing: Vec<String>,
    /// Columns added to existing tables, as `table.column`.
    pub added_columns: Vec<String>,
}

impl std::fmt::Display for MigrateReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &[String]| if v.is_empty() { "-".to_owned() } else { v.join(", ") };
        write!(
            f,
            "created: {}; existing: {}; columns added: {}",
            show(&self.created),
            show(&self.existing),
            show(&self.added_columns)
        )
    }
}

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct ColumnInfo {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    default_kind: String,
}

impl Ch {
    /// Creates or upgrades the database and tables, then checks the schema. Idempotent.
    pub async fn migrate(&self) -> Result<MigrateReport, ChError> {
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
        self.check_schema().await?;
        Ok(report)
    }

    /// Compares every table with the Row struct the collector writes; lists every problem.
    pub async fn check_schema(&self) -> Result<(), ChError> {
        let mut problems: Vec<SchemaMismatch> = Vec::new();
        for spec in tables() {
            let described = self.describe(spec.name).await?;
            problems.extend(check_columns(&spec, &described));
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
