-- name: capacity_headroom_gpu_model
-- description: GPU memory headroom per GPU model (the name the agents reported, '' when unknown) in a time window of whole minutes (a minute counts when it starts in the window): GPUs, samples, p50/p95/p99 (to 0.1 %, rounded down) and max of used/total, samples at or above 90 %. Reads the per-minute rollup gpu_minutes; GPU samples re-sent with the same time are counted once.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- The rollup states are merged per GPU, minute and 0.1 % bucket first (exact before background
-- merges); the quantiles are weighted by the distinct sample counts over the buckets.
SELECT
    group_key,
    uniqExact(cluster, node, gpu_index) AS gpus,
    sum(n) AS samples,
    arrayMap(b -> b / 1000, quantilesExactWeighted(0.5, 0.95, 0.99)(used_permille, n)) AS used_quantiles,
    max(bucket_max) AS used_max,
    sumIf(n, used_permille >= 900) AS samples_above_90,
    min(bucket_first_ts) AS first_ts_ms,
    max(bucket_last_ts) AS last_ts_ms
FROM
(
    SELECT
        cluster, node, gpu_index, minute_ms, used_permille,
        uniqExactMerge(samples) AS n,
        maxMerge(used_max) AS bucket_max,
        minMerge(first_ts_ms) AS bucket_first_ts,
        maxMerge(last_ts_ms) AS bucket_last_ts
    FROM {db}.gpu_minutes
    WHERE minute_ms >= ? AND minute_ms < ?
    GROUP BY cluster, node, gpu_index, minute_ms, used_permille
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
