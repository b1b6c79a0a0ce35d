-- name: top_gpus
-- description: The latest reading of every GPU sampled in a time window (oomlens top), optionally of one cluster and / or node: used and total memory, utilisation and the time of the reading, by cluster, node and GPU.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: cluster String =
-- param: node String =
SELECT
    cluster, node, gpu_index,
    max(ts_ms) AS last_ts_ms,
    ifNull(argMax(memory_used_bytes, ts_ms), 0) AS used_bytes,
    ifNull(argMax(memory_total_bytes, ts_ms), 0) AS total_bytes,
    ifNull(argMax(util_gpu_pct, ts_ms), 0) AS util_pct
FROM {db}.gpu_samples
WHERE ts_ms >= ? AND ts_ms < ? AND has(['', cluster], ?) AND has(['', node], ?)
GROUP BY cluster, node, gpu_index
ORDER BY cluster, node, gpu_index
