-- name: attribution_pending
-- description: The OOM events of a time window without a stored attribution (oom_attributions) computed with look-back window_ms, re-sent duplicates collapsed, oldest first: what the collector's attributor computes next and what reports compute live. Only events that failed before settled_ts_before_ms and whose latest copy arrived before settled_received_before_ms (so the samples up to the failure have arrived); force = 1 lists every such event, stored or not (re-attribution). Parameters: the event range [since_ms, until_ms), the two settle bounds, force, the event range again for the stored rows (stored_since_ms = since_ms, stored_until_ms = until_ms) and window_ms.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: settled_ts_before_ms Int64 = 9223372036854775807
-- param: settled_received_before_ms Int64 = 9223372036854775807
-- param: force UInt8 = 0
-- param: stored_since_ms Int64 = 0
-- param: stored_until_ms Int64 = 9223372036854775807
-- param: window_ms Int64 = 60000
--
-- The stored keys are read by the sort key's prefix (cluster, ts_ms) of the same time range: an
-- attribution row carries its event's ts_ms. Several rows of one event (re-attributed, not merged
-- yet) are one key here.
SELECT cluster, node, event_id, ts_ms
FROM
(
    SELECT cluster, node, event_id, ts_ms, received_ms
    FROM {db}.oom_events
    WHERE ts_ms >= ? AND ts_ms < ?
    ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
    LIMIT 1 BY cluster, node, event_id
)
WHERE ts_ms < ? AND received_ms < ?
    AND (? = 1 OR (cluster, node, event_id) NOT IN
        (
            SELECT cluster, node, event_id
            FROM {db}.oom_attributions
            WHERE ts_ms >= ? AND ts_ms < ? AND window_ms = ?
        ))
ORDER BY ts_ms, cluster, node, event_id
