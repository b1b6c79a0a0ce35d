-- name: fleet_headroom
-- description: Fleet memory headroom per cluster from each GPU's latest reading in the time range: GPUs, memory used and total (bytes) and the free share (percent); duplicates of a reading (re-sent) count once.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    cluster,
    count() AS gpus,
    sum(used) AS used_bytes,
    sum(total) AS total_bytes,
    round(100 * (1 - sum(used) / sum(total)), 2) AS headroom_pct
FROM
(
    SELECT cluster, node, gpu_index,
        argMax(memory_used_bytes, ts_ms) AS used,
        argMax(memory_total_bytes, ts_ms) AS total
    FROM {db}.gpu_samples
    WHERE ts_ms >= ? AND ts_ms < ? AND memory_total_bytes > 0 AND isNotNull(memory_used_bytes)
    GROUP BY cluster, node, gpu_index
)
GROUP BY cluster
ORDER BY cluster
