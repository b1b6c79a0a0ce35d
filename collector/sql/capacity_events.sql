-- name: capacity_events
-- description: The OOM events of a time window for the capacity report (re-sent duplicates collapsed), with what they are grouped by: cluster, node, GPU and its model (as the agents reported it, '' when unknown), namespace label and workload; newest first.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT cluster, node, event_id, ts_ms, gpu_index, gpu_model, namespace, workload
FROM
(
    SELECT cluster, node, event_id, ts_ms, gpu_index, namespace, workload, toUInt32(ifNull(gpu_index, 4294967295)) AS gpu_key
    FROM
    (
        SELECT
            cluster, node, event_id, ts_ms, gpu_index, received_ms,
            label_values[indexOf(label_keys, 'namespace')] AS namespace,
            toString(workload) AS workload
        FROM {db}.oom_events
        WHERE ts_ms >= ? AND ts_ms < ?
        ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
        LIMIT 1 BY cluster, node, event_id
    )
) AS events
ALL LEFT JOIN
(
    SELECT cluster, node, gpu_key, argMax(gpu_name, a_ts) AS gpu_model
    FROM
    (
        SELECT
            cluster, node, ts_ms AS a_ts,
            arrayJoin(arrayEnumerate(gpu_indices)) AS i,
            gpu_indices[i] AS gpu_key,
            gpu_names[i] AS gpu_name
        FROM {db}.agents
    )
    GROUP BY cluster, node, gpu_key
) AS model USING (cluster, node, gpu_key)
ORDER BY ts_ms DESC, cluster, node, event_id
