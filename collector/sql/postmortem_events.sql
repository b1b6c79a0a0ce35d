-- name: postmortem_events
-- description: The OOM events a postmortem is about: events in [since_ms, until_ms) (re-sent duplicates collapsed), filtered by event id (0 = any), cluster, node, job (workload) and pod ('' = any) and GPU (-1 = any), newest first, at most max_events, with their labels.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: event_id UInt64 = 0
-- param: cluster String =
-- param: node String =
-- param: gpu_index Int64 = -1
-- param: workload String =
-- param: pod String =
-- param: max_events UInt64 = 100
--
-- The filters read fields every re-sent copy of an event shares, so they apply before the
-- deduplication (LIMIT 1 BY) and keep the scan small; pod is the `pod` label.
SELECT event_id, ts_ms, cluster, node, gpu_index, pid, workload, kind, pod, label_keys, label_values
FROM
(
    SELECT
        event_id, ts_ms, cluster, node, gpu_index, pid, workload, kind,
        label_values[indexOf(label_keys, 'pod')] AS pod, label_keys, label_values, received_ms
    FROM {db}.oom_events
    WHERE ts_ms >= ? AND ts_ms < ?
        AND has([toUInt64(0), event_id], ?)
        AND has(['', cluster], ?)
        AND has(['', node], ?)
        AND has([toInt64(-1), toInt64(ifNull(gpu_index, 4294967295))], ?)
        AND has(['', workload], ?)
        AND has(['', pod], ?)
    ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
    LIMIT 1 BY cluster, node, event_id
)
ORDER BY ts_ms DESC, cluster, node, event_id
LIMIT ?
