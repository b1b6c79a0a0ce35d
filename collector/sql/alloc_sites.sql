-- name: alloc_sites
-- description: The code holding the most memory at the fleet's CUDA OOMs in a time window, from the allocator summaries the hook (v2) sends (re-sent duplicates collapsed): per allocation site (file:line and function of the innermost user frame) and its phase (load / optimizer_* = weights and optimizer state, forward / backward / eval / inference = activations), the OOM events whose summary lists it, the share of all CUDA OOM events of the window (percent; "this line is in 40 % of this week's OOMs") and of those with a summary, the workloads and nodes, the live bytes it held (sum and largest), most events first. Parameters: the event range [since_ms, until_ms), the same range again for the totals (totals_since_ms = since_ms, totals_until_ms = until_ms), then how many sites.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: totals_since_ms Int64 = 0
-- param: totals_until_ms Int64 = 9223372036854775807
-- param: top_n UInt64 = 20
--
-- A site value is `bytes|blocks|phase|function|file:line` (agent/src/detect/allocator.rs; the
-- agent replaces `|` inside names). The totals come from the same deduplicated events, carried
-- into every site row by a one-row CROSS JOIN (18.16 has no window functions).
SELECT
    site,
    function,
    phase,
    uniqExact(cluster, node, event_id) AS ooms,
    round(100 * ooms / any(total_ooms), 1) AS share_pct,
    round(100 * ooms / any(snapshot_ooms), 1) AS share_of_snapshots_pct,
    uniqExact(workload) AS workloads,
    uniqExact(cluster, node) AS nodes,
    sum(bytes) AS bytes_held,
    max(bytes) AS max_bytes_held
FROM
(
    SELECT
        cluster, node, event_id, workload,
        toUInt64OrZero(parts[1]) AS bytes,
        parts[3] AS phase,
        parts[4] AS function,
        parts[5] AS site
    FROM
    (
        SELECT
            cluster, node, event_id, workload,
            splitByChar('|', arrayJoin(arrayFilter((v, k) -> substring(k, 1, 11) = 'alloc.site.', label_values, label_keys)))
                AS parts
        FROM
        (
            SELECT cluster, node, event_id, workload, label_keys, label_values
            FROM {db}.oom_events
            WHERE ts_ms >= ? AND ts_ms < ? AND kind = 'cuda_oom'
            ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
            LIMIT 1 BY cluster, node, event_id
        )
    )
    WHERE length(parts) >= 5
) AS sites
CROSS JOIN
(
    SELECT
        count() AS total_ooms,
        greatest(countIf(has(label_keys, 'alloc.site.1')), 1) AS snapshot_ooms
    FROM
    (
        SELECT cluster, node, event_id, label_keys
        FROM {db}.oom_events
        WHERE ts_ms >= ? AND ts_ms < ? AND kind = 'cuda_oom'
        ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
        LIMIT 1 BY cluster, node, event_id
    )
) AS totals
GROUP BY site, function, phase
ORDER BY ooms DESC, bytes_held DESC, site, function
LIMIT ?
