-- name: capacity_headroom
-- description: GPU memory headroom per group (by = cluster, node, namespace or workload) in a time window of whole minutes (a minute counts when it starts in the window): GPUs, samples, p50/p95/p99 (to 0.1 %, rounded down) and max of used/total, samples at or above 90 %. A GPU sample belongs to the workload (namespace) holding the most memory on that GPU in its minute ('' when no process was seen). Reads the per-minute rollups gpu_minutes and process_minutes; GPU samples re-sent with the same time are counted once.
-- param: by String = node
-- param: gpus_since_ms Int64 = 0
-- param: gpus_until_ms Int64 = 9223372036854775807
-- param: processes_since_ms Int64 = 0
-- param: processes_until_ms Int64 = 9223372036854775807
--
-- Bind the same window twice (18.16 has no reusable parameters). FINAL merges the rollup states
-- of each (GPU, minute, 0.1 % bucket) that are still spread over parts — exact before background
-- merges: uniqExact of the sample times, so a re-sent sample counts once; the quantiles are then
-- weighted by those counts over the buckets (quantilesExactWeighted: no interpolation, bucket
-- lower bounds). The two rollups join on (gpu_key, minute); ties for the largest process in a
-- minute go to the greatest (workload, namespace).
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
    WITH ? AS by
    SELECT
        gpu_key, used_permille, n, bucket_max, bucket_first_ts, bucket_last_ts,
        multiIf(by = 'cluster', toString(cluster), by = 'node', toString(node), by = 'namespace', namespace, by = 'workload', workload, '') AS group_key
    FROM
    (
        SELECT
            cluster, node, gpu_key, minute_ms, used_permille,
            finalizeAggregation(samples) AS n,
            finalizeAggregation(used_max) AS bucket_max,
            finalizeAggregation(first_ts_ms) AS bucket_first_ts,
            finalizeAggregation(last_ts_ms) AS bucket_last_ts
        FROM {db}.gpu_minutes FINAL
        WHERE minute_ms >= ? AND minute_ms < ?
    ) AS gpu
    ALL LEFT JOIN
    (
        SELECT
            gpu_key, minute_ms,
            argMax(p_workload, (used, p_workload, p_namespace)) AS workload,
            argMax(p_namespace, (used, p_workload, p_namespace)) AS namespace
        FROM
        (
            SELECT
                gpu_key, minute_ms,
                toString(workload) AS p_workload,
                toString(namespace) AS p_namespace,
                finalizeAggregation(used_max) AS used
            FROM {db}.process_minutes FINAL
            WHERE minute_ms >= ? AND minute_ms < ?
        )
        GROUP BY gpu_key, minute_ms
    ) AS top_process USING (gpu_key, minute_ms)
)
GROUP BY group_key
ORDER BY group_key
