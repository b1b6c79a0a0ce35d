-- name: oom_gpu_curve
-- description: Used and total memory of one GPU in a time window, downsampled to buckets of bucket_ms (the peak used and the largest total of each bucket), oldest first; the postmortem's GPU total and capacity line. Re-sent samples do not change a peak.
-- param: bucket_ms Int64 = 30000
-- param: cluster String = train-east
-- param: node String = gpu-node-01
-- param: gpu_index UInt32 = 0
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    ts_ms - ts_ms % ? AS bucket_ms,
    max(ifNull(memory_used_bytes, 0)) AS used_bytes,
    max(ifNull(memory_total_bytes, 0)) AS total_bytes
FROM {db}.gpu_samples
WHERE cluster = ? AND node = ? AND gpu_index = ? AND ts_ms >= ? AND ts_ms < ?
GROUP BY bucket_ms
ORDER BY bucket_ms
