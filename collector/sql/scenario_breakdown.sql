-- name: scenario_breakdown
-- description: OOM events per ground-truth scenario and kind in a time window (re-sent duplicates collapsed), most frequent first; truth_scenario is '' for real (non-simulated) events.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    truth_scenario,
    kind,
    count() AS events,
    uniqExact(cluster, node) AS nodes,
    min(ts_ms) AS first_ts_ms,
    max(ts_ms) AS last_ts_ms
FROM
(
    SELECT cluster, node, event_id, ts_ms, kind, truth_scenario
    FROM {db}.oom_events
    WHERE ts_ms >= ? AND ts_ms < ?
    ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
    LIMIT 1 BY cluster, node, event_id
)
GROUP BY truth_scenario, kind
ORDER BY events DESC, truth_scenario, kind
