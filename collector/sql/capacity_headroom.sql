-- name: capacity_headroom
-- description: GPU memory headroom per group (by = cluster, node, namespace or workload) in a time window: GPUs, samples, p50/p95/p99 and max of used/total, samples at or above 90 %. A GPU sample belongs to the workload (namespace) holding the most memory on that GPU in its minute ('' when no process was seen). GPU samples re-sent with the same key are collapsed.
-- param: by String = node
-- param: gpus_since_ms Int64 = 0
-- param: gpus_until_ms Int64 = 9223372036854775807
-- param: processes_since_ms Int64 = 0
-- param: processes_until_ms Int64 = 9223372036854775807
--
-- Bind the same window twice (18.16 has no reusable parameters); the group key picks one of the
-- candidate columns by name with indexOf, so one placeholder serves every grouping. The GPU samples
-- are first reduced per GPU and minute (the distinct (time, used/total) points of the minute — re-sent samples
-- collapse there — and the max), which keeps memory bounded at fleet scale (100 M samples).
SELECT
    group_key,
    uniqExact(cluster, node, gpu_index) AS gpus,
    sum(length(minute_points)) AS samples,
    quantilesArray(0.5, 0.95, 0.99)(arrayMap(p -> tupleElement(p, 2), minute_points)) AS used_quantiles,
    max(minute_max) AS used_max,
    sum(arrayCount(p -> tupleElement(p, 2) >= 0.9, minute_points)) AS samples_above_90,
    min(minute_first_ts) AS first_ts_ms,
    max(minute_last_ts) AS last_ts_ms
FROM
(
    SELECT
        cluster, node, gpu_index,
        [toString(cluster), toString(node), namespace, workload][indexOf(['cluster', 'node', 'namespace', 'workload'], ?)] AS group_key,
        minute_points, minute_max, minute_first_ts, minute_last_ts
    FROM
    (
        SELECT
            cluster, node, gpu_index, intDiv(ts_ms, 60000) AS minute,
            arrayDistinct(groupArray((ts_ms, ratio))) AS minute_points,
            max(ratio) AS minute_max,
            min(ts_ms) AS minute_first_ts,
            max(ts_ms) AS minute_last_ts
        FROM
        (
            SELECT cluster, node, gpu_index, ts_ms, toFloat64(assumeNotNull(memory_used_bytes)) / toFloat64(assumeNotNull(memory_total_bytes)) AS ratio
            FROM {db}.gpu_samples
            WHERE ts_ms >= ? AND ts_ms < ? AND memory_total_bytes > 0 AND isNotNull(memory_used_bytes)
        )
        GROUP BY cluster, node, gpu_index, minute
    ) AS gpu
    ALL LEFT JOIN
    (
        SELECT cluster, node, gpu_index, minute, argMax(p_workload, used) AS workload, argMax(p_namespace, used) AS namespace
        FROM
        (
            SELECT
                cluster, node, gpu_index, intDiv(ts_ms, 60000) AS minute,
                toString(workload) AS p_workload,
                label_values[indexOf(label_keys, 'namespace')] AS p_namespace,
                max(ifNull(used_bytes, 0)) AS used
            FROM {db}.process_samples
            WHERE ts_ms >= ? AND ts_ms < ?
            GROUP BY cluster, node, gpu_index, minute, p_workload, p_namespace
        )
        GROUP BY cluster, node, gpu_index, minute
    ) AS top_process USING (cluster, node, gpu_index, minute)
)
GROUP BY group_key
ORDER BY group_key
