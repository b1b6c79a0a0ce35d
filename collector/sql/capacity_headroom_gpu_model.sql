-- name: capacity_headroom_gpu_model
-- description: GPU memory headroom per GPU model (the name the agents reported, '' when unknown) in a time window: GPUs, samples, p50/p95/p99 and max of used/total, samples at or above 90 %. GPU samples re-sent with the same key are collapsed.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- The GPU samples are first reduced per GPU and minute (the distinct (time, used/total) points of
-- the minute — re-sent samples collapse there — and the max), which keeps memory bounded at fleet scale.
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
    SELECT cluster, node, gpu_index, argMax(gpu_name, a_ts) AS group_key
    FROM
    (
        SELECT
            cluster, node, ts_ms AS a_ts,
            arrayJoin(arrayEnumerate(gpu_indices)) AS i,
            gpu_indices[i] AS gpu_index,
            gpu_names[i] AS gpu_name
        FROM {db}.agents
    )
    GROUP BY cluster, node, gpu_index
) AS model USING (cluster, node, gpu_index)
GROUP BY group_key
ORDER BY group_key
