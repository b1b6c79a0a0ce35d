-- name: capacity_headroom_gpu_model
-- description: GPU memory headroom per GPU model (the name the agents reported, '' when unknown) in a time window of whole minutes (a minute counts when it starts in the window): GPUs, samples, p50/p95/p99 (to 0.1 %, rounded down) and max of used/total, samples at or above 90 %. Reads the per-minute rollup gpu_minutes; GPU samples re-sent with the same time are counted once.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- FINAL merges the rollup states of each (GPU, minute, 0.1 % bucket) still spread over parts
-- (exact before background merges); the quantiles are weighted by the distinct sample counts.
-- The GPU model joins on gpu_key (the rollup's cityHash64(cluster, node, gpu_index)).
SELECT
    group_key,
    uniqExact(gpu_key) AS gpus,
    sum(n) AS samples,
    arrayMap(b -> b / 1000, quantilesExactWeighted(0.5, 0.95, 0.99)(used_permille, n)) AS used_quantiles,
    max(bucket_max) AS used_max,
    sumIf(n, used_permille >= 900) AS samples_above_90,
    min(bucket_first_ts) AS first_ts_ms,
    max(bucket_last_ts) AS last_ts_ms
FROM
(
    SELECT
        gpu_key, used_permille,
        finalizeAggregation(samples) AS n,
        finalizeAggregation(used_max) AS bucket_max,
        finalizeAggregation(first_ts_ms) AS bucket_first_ts,
        finalizeAggregation(last_ts_ms) AS bucket_last_ts
    FROM {db}.gpu_minutes FINAL
    WHERE minute_ms >= ? AND minute_ms < ?
) AS gpu
ALL LEFT JOIN
(
    SELECT cityHash64(cluster, node, gpu_index) AS gpu_key, argMax(gpu_name, a_ts) AS group_key
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
) AS model USING (gpu_key)
GROUP BY group_key
ORDER BY group_key
