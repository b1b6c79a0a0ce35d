-- name: capacity_headroom_gpu_model
-- description: GPU memory headroom per GPU model (the name the agents reported, '' when unknown) in a time window: GPUs, samples, p50/p95/p99 and max of used/total, samples at or above 90 %. GPU samples re-sent with the same key are collapsed.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    group_key,
    uniqExact(cluster, node, gpu_index) AS gpus,
    count() AS samples,
    quantiles(0.5, 0.95, 0.99)(ratio) AS used_quantiles,
    max(ratio) AS used_max,
    countIf(ratio >= 0.9) AS samples_above_90,
    min(ts_ms) AS first_ts_ms,
    max(ts_ms) AS last_ts_ms
FROM
(
    SELECT
        cluster, node, gpu_index, ts_ms,
        toFloat64(ifNull(max(memory_used_bytes), 0)) / toFloat64(ifNull(max(memory_total_bytes), 1)) AS ratio
    FROM {db}.gpu_samples
    WHERE ts_ms >= ? AND ts_ms < ? AND memory_total_bytes > 0 AND isNotNull(memory_used_bytes)
    GROUP BY cluster, node, gpu_index, ts_ms
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
