-- name: postmortem_event_count
-- description: How many distinct OOM events match a postmortem's selection (the filters of postmortem_events, without its max_events cut), so a report can say "showing N of M".
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: event_id UInt64 = 0
-- param: cluster String =
-- param: node String =
-- param: gpu_index Int64 = -1
-- param: workload String =
-- param: pod String =
--
-- Same filters as postmortem_events; an event re-sent by its agent counts once.
SELECT count() AS matched
FROM
(
    SELECT cluster, node, event_id
    FROM {db}.oom_events
    WHERE ts_ms >= ? AND ts_ms < ?
        AND has([toUInt64(0), event_id], ?)
        AND has(['', cluster], ?)
        AND has(['', node], ?)
        AND has([toInt64(-1), toInt64(ifNull(gpu_index, 4294967295))], ?)
        AND has(['', workload], ?)
        AND has(['', label_values[indexOf(label_keys, 'pod')]], ?)
    GROUP BY cluster, node, event_id
)
ORDER BY matched
