-- name: attribution_timeline
-- description: The fleet's OOM events of a time window per time bucket and attributed scenario, from the stored attributions (oom_attributions; re-attributed events counted once, the latest attribution wins): the bucket's start (epoch ms), the scenario, events and nodes. The same rows as attribution_breakdown, over time; events the attributor has not reached yet (the last settle delay) are not counted. Oldest bucket first.
-- param: bucket_ms Int64 = 3600000
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    bucket_start_ms,
    scenario,
    count() AS events,
    uniqExact(cluster, node) AS nodes
FROM
(
    SELECT cluster, node, event_id, intDiv(ts_ms, bucket) * bucket AS bucket_start_ms, scenario
    FROM
    (
        SELECT cluster, node, event_id, ts_ms, scenario, toInt64(greatest(?, 1)) AS bucket
        FROM {db}.oom_attributions
        WHERE ts_ms >= ? AND ts_ms < ?
        ORDER BY cluster, node, event_id, attributed_ms DESC, window_ms
        LIMIT 1 BY cluster, node, event_id
    )
)
GROUP BY bucket_start_ms, scenario
ORDER BY bucket_start_ms, scenario
