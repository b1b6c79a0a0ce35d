-- name: node_gpus_memory
-- description: Memory used (bytes) by every GPU of one node per time bucket (bucket_ms wide, start in epoch ms; the highest reading in the bucket), oldest first.
-- param: bucket_ms Int64 = 60000
-- param: cluster String = train-east
-- param: node String = gpu-node-01
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    bucket * any(bkt) AS bucket_start_ms,
    gpu_index,
    max(memory_used_bytes) AS used_bytes
FROM
(
    SELECT gpu_index, ts_ms, memory_used_bytes, ? AS bkt, intDiv(ts_ms, bkt) AS bucket
    FROM {db}.gpu_samples
    WHERE cluster = ? AND node = ? AND ts_ms >= ? AND ts_ms < ?
)
GROUP BY gpu_index, bucket
ORDER BY bucket_start_ms, gpu_index
