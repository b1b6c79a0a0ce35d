-- name: capacity_headroom_gpu_model
-- description: GPU memory headroom per GPU model (the name the agents reported, '' when unknown) in a time window of whole minutes (a minute counts when it starts in the window): GPUs, sampled seconds, p50/p95/p99 (to 0.1 %, rounded down) and max of used/total, sampled seconds at or above 90 %. Reads the per-minute rollup gpu_minutes; GPU samples re-sent are counted once.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- The rollup states of each (GPU, minute, 1 % bucket) are merged first (exact before background
-- merges: OR-ed seconds masks); mask j counts the seconds in the 0.1 % bucket 10 × used_pct + j.
-- The seconds are summed per model and 1 % bucket before the quantiles. The GPU model joins on
-- gpu_key (the rollup's cityHash64(cluster, node, gpu_index)).
SELECT
    group_key,
    uniqExactMerge(bucket_gpus) AS gpus,
    sum(arraySum(seconds)) AS samples,
    arrayMap(b -> b / 1000, quantilesExactWeightedArray(0.5, 0.95, 0.99)(arrayMap(j -> toUInt16(used_pct * 10 + j), range(10)), seconds)) AS used_quantiles,
    max(bucket_max) AS used_max,
    sumIf(arraySum(seconds), used_pct >= 90) AS samples_above_90,
    min(bucket_first_ts) AS first_ts_ms,
    max(bucket_last_ts) AS last_ts_ms
FROM
(
    SELECT
        group_key,
        used_pct,
        uniqExactState(gpu_key) AS bucket_gpus,
        sumForEach(minute_seconds) AS seconds,
        max(minute_max) AS bucket_max,
        min(minute_first_ts) AS bucket_first_ts,
        max(minute_last_ts) AS bucket_last_ts
    FROM
    (
        SELECT
            gpu_key, minute_ms, used_pct,
            arrayMap(m -> toUInt64(length(bitmaskToArray(m))), groupBitOrForEachMerge(gpu_minutes.seconds)) AS minute_seconds,
            maxMerge(used_max) AS minute_max,
            minMerge(first_ts_ms) AS minute_first_ts,
            maxMerge(last_ts_ms) AS minute_last_ts
        FROM {db}.gpu_minutes
        WHERE minute_ms >= ? AND minute_ms < ?
        GROUP BY gpu_key, minute_ms, used_pct
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
    GROUP BY group_key, used_pct
)
GROUP BY group_key
ORDER BY group_key
