-- name: capacity_headroom_gpu_model
-- description: GPU memory headroom per GPU model (the name the agents reported, '' when unknown) in a time window: GPUs, samples, p50/p95/p99 and max of used/total, samples at or above 90 %. GPU samples re-sent with the same key are collapsed.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- The GPU samples are first reduced per GPU and minute (exact distinct sample times, exact max,
-- mergeable quantile states), which keeps memory bounded at fleet scale; a re-sent sample can weigh
-- twice in the quantile estimate, never in the counts or the max.
SELECT
    group_key,
    uniqExact(cluster, node, gpu_index) AS gpus,
    sum(minute_samples) AS samples,
    quantilesMerge(0.5, 0.95, 0.99)(minute_quantiles) AS used_quantiles,
    max(minute_max) AS used_max,
    sum(minute_above_90) AS samples_above_90,
    min(minute_first_ts) AS first_ts_ms,
    max(minute_last_ts) AS last_ts_ms
FROM
(
    SELECT
        cluster, node, gpu_index, intDiv(ts_ms, 60000) AS minute,
        uniqExact(ts_ms) AS minute_samples,
        uniqExactIf(ts_ms, ratio >= 0.9) AS minute_above_90,
        quantilesState(0.5, 0.95, 0.99)(ratio) AS minute_quantiles,
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
