-- name: capacity_headroom
-- description: GPU memory headroom per group (by = cluster, node, namespace or workload) in a time window of whole minutes (a minute counts when it starts in the window): GPUs, sampled seconds, p50/p95/p99 (to 0.1 %, rounded down) and max of used/total, sampled seconds at or above 90 %. A GPU second belongs to the workload (namespace) holding the most memory on that GPU in its minute ('' when no process was seen). Reads the per-minute rollups gpu_minutes and process_minutes; GPU samples re-sent are counted once.
-- param: by String = node
-- param: gpus_since_ms Int64 = 0
-- param: gpus_until_ms Int64 = 9223372036854775807
-- param: processes_since_ms Int64 = 0
-- param: processes_until_ms Int64 = 9223372036854775807
-- param: processes_by String = node
--
-- Bind the window twice and `by` twice (18.16 has no reusable parameters); processes_by = by
-- skips the process rollup for the cluster and node groupings. The rollup states of each (GPU,
-- minute, 1 % bucket) are merged first — exact before background merges: OR-ed seconds masks, so
-- a re-sent sample sets the same bit again. Mask j of a row holds the seconds spent in the 0.1 %
-- bucket 10 × used_pct + j; the seconds are summed per group and 1 % bucket, and the bucket
-- counts weigh quantilesExactWeightedArray (no interpolation: the quantiles are bucket lower
-- bounds). process_minutes holds the top process of each GPU minute (argMax by used bytes, ties
-- to the greatest (workload, namespace)). The rollups are grouped and joined on gpu_key
-- (cityHash64(cluster, node, gpu_index)).
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
    WITH ? AS by
    SELECT
        multiIf(by = 'cluster', cluster, by = 'node', node, by = 'namespace', namespace, by = 'workload', workload, '') AS group_key,
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
            any(toString(cluster)) AS cluster,
            any(toString(node)) AS node,
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
        SELECT
            gpu_key, minute_ms,
            argMaxMerge(top_workload) AS workload,
            argMaxMerge(top_namespace) AS namespace
        FROM {db}.process_minutes
        WHERE minute_ms >= ? AND minute_ms < ? AND ? IN ('namespace', 'workload')
        GROUP BY gpu_key, minute_ms
    ) AS top_process USING (gpu_key, minute_ms)
    GROUP BY group_key, used_pct
)
GROUP BY group_key
ORDER BY group_key
