-- name: headroom_over_time
-- description: Memory headroom over time per cluster: per time bucket (bucket_ms wide, start in epoch ms) the free share of the fleet's memory (percent, from each GPU's highest reading in the bucket) and of its fullest GPU; duplicates of a reading count once.
-- param: bucket_ms Int64 = 60000
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    bucket * width AS bucket_start_ms,
    cluster,
    round(100 * (1 - sum(used) / sum(total)), 2) AS fleet_headroom_pct,
    round(100 * (1 - max(used / total)), 2) AS fullest_gpu_headroom_pct
FROM
(
    SELECT cluster, node, gpu_index, intDiv(ts_ms, bkt) AS bucket, any(bkt) AS width,
        max(memory_used_bytes) AS used, max(memory_total_bytes) AS total
    FROM
    (
        SELECT cluster, node, gpu_index, ts_ms, memory_used_bytes, memory_total_bytes, ? AS bkt
        FROM {db}.gpu_samples
        WHERE ts_ms >= ? AND ts_ms < ? AND memory_total_bytes > 0 AND isNotNull(memory_used_bytes)
    )
    GROUP BY cluster, node, gpu_index, bucket
)
GROUP BY cluster, bucket, width
ORDER BY bucket_start_ms, cluster
