-- name: oom_events
-- description: OOM events in a time window, one row per event id (re-sent duplicates collapsed, merged or not; the latest received copy wins), newest first.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    event_id, ts_ms, cluster, node, gpu_index, pid, workload, kind, source, framework, phase,
    requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes, process_used_bytes,
    truth_scenario
FROM
(
    SELECT
        event_id, ts_ms, cluster, node, gpu_index, pid, workload, kind, source, framework, phase,
        requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes, process_used_bytes,
        truth_scenario, received_ms
    FROM {db}.oom_events
    WHERE ts_ms >= ? AND ts_ms < ?
    ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
    LIMIT 1 BY cluster, node, event_id
)
ORDER BY ts_ms DESC, cluster, node, event_id
