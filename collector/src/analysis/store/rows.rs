//! A stored attribution row and the event it describes: the conversions between an event's
//! evidence and its `oom_attributions` row (exhaustive both ways), its stored neighbours, and
//! reading and writing the table.

use oomlens_schema::rows::{OomAttributionRow, TableRow};

use super::{RankedNeighbour, latest_per_event};
use crate::analysis::AttributionError;
use crate::analysis::features::{EventEvidence, OomFeatures};
use crate::analysis::queries::{self, QueryError};
use crate::analysis::rules::{RULES_VERSION, attribute};

/// Conversions between [`EventEvidence`] and [`OomAttributionRow`]: the list names every field of
/// `EventEvidence` once; both struct literals are exhaustive, so a field added to one struct and
/// not to the other does not compile. The derived columns are written for SQL readers and never
/// read back: the features are derived again from the evidence ([`OomFeatures::derive`]), so
/// a rules or derivation upgrade applies to stored rows at once.
macro_rules! evidence_fields {
    ($($field:ident),* $(,)?) => {
        /// The stored row of one event: its evidence and derived features, the rules' answer,
        /// its neighbours.
        pub fn to_row(
            f: OomFeatures,
            neighbours: &[RankedNeighbour],
            attributed_ms: i64,
        ) -> OomAttributionRow {
            let a = attribute(&f);
            let OomFeatures {
                evidence: e,
                phase_effective,
                phase_source,
                context_bytes,
                cached_free_bytes,
                outside_bytes,
                others_bytes,
                others_from,
                need_alone_bytes,
                need_alone_from,
                static_estimate_bytes,
                attention_bytes,
                ..
            } = f;
            OomAttributionRow {
                phase_effective,
                phase_source,
                context_bytes,
                cached_free_bytes,
                outside_bytes,
                others_bytes,
                others_from,
                need_alone_bytes,
                need_alone_from,
                static_estimate_bytes,
                attention_bytes,
                scenario: a.scenario.as_str().to_owned(),
                rule: a.rule.id().to_owned(),
                confidence_pct: a.confidence_pct,
                alternative_scenarios: a.alternatives.iter().map(|x| x.scenario.as_str().to_owned()).collect(),
                alternative_confidence_pct: a.alternatives.iter().map(|x| x.confidence_pct).collect(),
                rules_version: RULES_VERSION,
                attributed_ms,
                neighbour_workloads: neighbours.iter().map(|n| n.workload.clone()).collect(),
                neighbour_pids: neighbours.iter().map(|n| n.pid).collect(),
                neighbour_used_bytes: neighbours.iter().map(|n| n.used_bytes).collect(),
                neighbour_growth_bytes: neighbours.iter().map(|n| n.growth_bytes).collect(),
                $($field: e.$field,)*
            }
        }

        /// The features of a stored row, derived again from its evidence.
        pub fn features_of(r: &OomAttributionRow) -> OomFeatures {
            OomFeatures::derive(EventEvidence { $($field: r.$field.clone(),)* })
        }

        /// A stored row taken apart into its features and (with `neighbours`) its ranked
        /// neighbours, without copying.
        pub(super) fn into_parts(r: OomAttributionRow, neighbours: bool) -> (OomFeatures, Vec<RankedNeighbour>) {
            let ranked = if neighbours { neighbours_of(&r) } else { Vec::new() };
            (OomFeatures::derive(EventEvidence { $($field: r.$field,)* }), ranked)
        }

        #[cfg(test)]
        const EVIDENCE_FIELDS: &[&str] = &[$(stringify!($field)),*];
    };
}

evidence_fields!(
    cluster,
    node,
    event_id,
    ts_ms,
    kind,
    source,
    framework,
    gpu_index,
    pid,
    workload,
    truth_scenario,
    phase,
    phase_label,
    phase_clue,
    host_evidence,
    message_hint,
    capacity_source,
    alloc_cached_free_bytes,
    alloc_largest_free_bytes,
    alloc_static_bytes,
    alloc_activation_bytes,
    alloc_sites,
    requested_bytes,
    capacity_bytes,
    free_bytes,
    allocated_bytes,
    reserved_bytes,
    process_used_bytes,
    other_pids,
    other_used_bytes,
    xid,
    host_rss_bytes,
    params,
    batch_size,
    seq_len,
    hidden,
    layers,
    heads,
    precision,
    optimizer,
    zero_stage,
    tensor_parallel,
    pipeline_parallel,
    data_parallel,
    activation_checkpointing,
    flash_attention,
    window_ms,
    own_samples,
    own_first_ts,
    own_first_used,
    own_min_used,
    own_max_used,
    own_last_used,
    own_max_rise,
    others_seen,
    others_first_bytes,
    others_last_bytes,
    own_sampled_bytes,
    others_growth_bytes,
    top_neighbour_growth_bytes
);

/// The stored neighbours of a row, best first.
pub fn neighbours_of(r: &OomAttributionRow) -> Vec<RankedNeighbour> {
    zip_neighbours(
        (&r.cluster, &r.node, r.event_id),
        &r.neighbour_workloads,
        &r.neighbour_pids,
        &r.neighbour_used_bytes,
        &r.neighbour_growth_bytes,
    )
}

/// One event's neighbours from its parallel columns (as stored and as queried), best first; a
/// ragged set of columns gives the neighbours all of them describe.
pub(super) fn zip_neighbours(
    (cluster, node, event_id): (&str, &str, u64),
    workloads: &[String],
    pids: &[u32],
    used_bytes: &[u64],
    growth_bytes: &[i64],
) -> Vec<RankedNeighbour> {
    workloads
        .iter()
        .zip(pids)
        .zip(used_bytes)
        .zip(growth_bytes)
        .map(|(((workload, &pid), &used_bytes), &growth_bytes)| RankedNeighbour {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            event_id,
            workload: workload.clone(),
            pid,
            used_bytes,
            growth_bytes,
        })
        .collect()
}

/// `<db>.oom_attributions`, refusing a database name that is not an identifier.
pub(super) fn table(db: &str) -> Result<String, QueryError> {
    if queries::is_identifier(db) {
        Ok(format!("{db}.{}", OomAttributionRow::TABLE))
    } else {
        Err(QueryError::BadDatabase(db.to_owned()))
    }
}

/// Inserts `rows` into the table (nothing for none).
pub(super) async fn insert_rows(
    client: &clickhouse::Client,
    db: &str,
    rows: &[OomAttributionRow],
) -> Result<(), AttributionError> {
    if rows.is_empty() {
        return Ok(());
    }
    let table = table(db)?;
    let mut insert = client.insert_unescaped::<OomAttributionRow>(&table).await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await?;
    Ok(())
}

/// The stored rows of the events of `[since_ms, until_ms)` computed with `window_ms`, one per
/// event (before merges several rows of one event may exist: the latest `attributed_ms` wins).
pub async fn fetch_stored(
    client: &clickhouse::Client,
    db: &str,
    since_ms: i64,
    until_ms: i64,
    window_ms: i64,
) -> Result<Vec<OomAttributionRow>, AttributionError> {
    let columns = <OomAttributionRow as clickhouse::Row>::COLUMN_NAMES.join(", ");
    let sql =
        format!("SELECT {columns} FROM {} WHERE ts_ms >= ? AND ts_ms < ? AND window_ms = ?", table(db)?);
    let rows = client
        .query(&sql)
        .bind(since_ms)
        .bind(until_ms)
        .bind(window_ms)
        .fetch_all::<OomAttributionRow>()
        .await?;
    Ok(latest_per_event(rows, |r| r.attributed_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::features::EventEvidence;

    #[test]
    fn stored_row_holds_the_evidence_in_order() {
        let evidence = <EventEvidence as clickhouse::Row>::COLUMN_NAMES;
        assert_eq!(EVIDENCE_FIELDS, evidence);
        let row = <OomAttributionRow as clickhouse::Row>::COLUMN_NAMES;
        assert_eq!(&row[..evidence.len()], evidence, "the row starts with the evidence, in order");
    }

    #[test]
    fn the_latest_row_of_each_event_wins() {
        let row = |node: &str, id: u64, at: i64| OomAttributionRow {
            cluster: "c".into(),
            node: node.into(),
            event_id: id,
            attributed_ms: at,
            ..OomAttributionRow::default()
        };
        let rows = vec![row("a", 1, 5), row("b", 1, 1), row("a", 1, 9), row("a", 2, 3), row("a", 1, 7)];
        let kept: Vec<(String, u64, i64)> = latest_per_event(rows, |r| r.attributed_ms)
            .into_iter()
            .map(|r| (r.node, r.event_id, r.attributed_ms))
            .collect();
        assert_eq!(kept, [("a".to_owned(), 1, 9), ("a".to_owned(), 2, 3), ("b".to_owned(), 1, 1)]);
    }

    #[test]
    fn rows_round_trip_features_and_neighbours() {
        let f = OomFeatures::derive(EventEvidence {
            cluster: "c".into(),
            node: "n".into(),
            event_id: 7,
            ts_ms: 1000,
            kind: "host_oom_kill".into(),
            host_rss_bytes: Some(5),
            other_pids: vec![3],
            other_used_bytes: vec![4],
            window_ms: 60_000,
            ..EventEvidence::default()
        });
        let n = vec![RankedNeighbour {
            cluster: "c".into(),
            node: "n".into(),
            event_id: 7,
            workload: "w".into(),
            pid: 9,
            used_bytes: 10,
            growth_bytes: -3,
        }];
        let row = to_row(f.clone(), &n, 42);
        assert_eq!(
            (row.scenario.as_str(), row.rule.as_str(), row.rules_version),
            ("host_oom", "host_oom_kill", RULES_VERSION)
        );
        assert_eq!(row.attributed_ms, 42);
        assert_eq!(features_of(&row), f);
        assert_eq!(neighbours_of(&row), n);
    }
}
