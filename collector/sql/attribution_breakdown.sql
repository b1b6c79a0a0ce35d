-- name: attribution_breakdown
-- description: The fleet's OOM events of a time window per attributed scenario and kind, from the stored attributions (oom_attributions, filled by the collector's attributor; re-attributed events counted once, the latest attribution wins): events, nodes, workloads, the mean confidence (percent), the first and last failure, and the rule-set versions that scored them (the oomlens CLI re-runs the current rules on the stored features; this query shows the scenario as stored). Events the attributor has not reached yet (the last settle delay) are not counted. Most frequent first.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    scenario,
    kind,
    count() AS events,
    uniqExact(cluster, node) AS nodes,
    uniqExact(workload) AS workloads,
    round(avg(confidence_pct), 1) AS mean_confidence_pct,
    min(ts_ms) AS first_ts_ms,
    max(ts_ms) AS last_ts_ms,
    min(rules_version) AS min_rules_version,
    max(rules_version) AS max_rules_version
FROM
(
    SELECT cluster, node, event_id, ts_ms, kind, workload, scenario, confidence_pct, rules_version
    FROM {db}.oom_attributions
    WHERE ts_ms >= ? AND ts_ms < ?
    ORDER BY cluster, node, event_id, attributed_ms DESC, window_ms
    LIMIT 1 BY cluster, node, event_id
)
GROUP BY scenario, kind
ORDER BY events DESC, scenario, kind
