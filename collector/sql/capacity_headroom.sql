-- name: capacity_headroom
-- description: GPU memory headroom per group (by = cluster, node, namespace or workload) in a time window of whole minutes (a minute counts when it starts in the window): GPUs, samples, p50/p95/p99 (to 0.1 %, rounded down) and max of used/total, samples at or above 90 %. A GPU sample belongs to the workload (namespace) holding the most memory on that GPU in its minute ('' when no process was seen). Reads the per-minute rollups gpu_minutes and process_minutes; GPU samples re-sent with the same time are counted once.
-- param: by String = node
-- param: gpus_since_ms Int64 = 0
-- param: gpus_until_ms Int64 = 9223372036854775807
-- param: processes_since_ms Int64 = 0
-- param: processes_until_ms Int64 = 9223372036854775807
--
-- Bind the same window twice (18.16 has no reusable parameters); the group key picks one of the
-- candidate columns by name with indexOf, so one placeholder serves every grouping. The rollup
-- states are merged per GPU, minute and 0.1 % bucket first (exact before background merges:
-- uniqExact of the sample times, so a re-sent sample counts once); the quantiles are then weighted
-- by those counts over the buckets (quantilesExactWeighted: no interpolation, bucket lower bounds).
-- Ties for the largest process in a minute go to the greatest (workload, namespace).
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
        cluster, node, gpu_index, used_permille, n, bucket_max, bucket_first_ts, bucket_last_ts,
        [toString(cluster), toString(node), namespace, workload][indexOf(['cluster', 'node', 'namespace', 'workload'], ?)] AS group_key
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
        SELECT
            cluster, node, gpu_index, minute_ms,
            argMax(p_workload, (used, p_workload, p_namespace)) AS workload,
            argMax(p_namespace, (used, p_workload, p_namespace)) AS namespace
        FROM
        (
            SELECT
                cluster, node, gpu_index, minute_ms,
                toString(workload) AS p_workload,
                toString(namespace) AS p_namespace,
                maxMerge(used_max) AS used
            FROM {db}.process_minutes
            WHERE minute_ms >= ? AND minute_ms < ?
            GROUP BY cluster, node, gpu_index, minute_ms, p_workload, p_namespace
        )
        GROUP BY cluster, node, gpu_index, minute_ms
    ) AS top_process USING (cluster, node, gpu_index, minute_ms)
)
GROUP BY group_key
ORDER BY group_key
