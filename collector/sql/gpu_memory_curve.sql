-- name: gpu_memory_curve
-- description: Memory curve of one GPU in a time window: used and total bytes per sample time, oldest first (samples re-sent with the same timestamp are collapsed).
-- param: cluster String = train-east
-- param: node String = gpu-node-01
-- param: gpu_index UInt32 = 0
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    ts_ms,
    max(memory_used_bytes) AS used,
    max(memory_total_bytes) AS total
FROM {db}.gpu_samples
WHERE cluster = ? AND node = ? AND gpu_index = ? AND ts_ms >= ? AND ts_ms < ?
GROUP BY ts_ms
ORDER BY ts_ms
