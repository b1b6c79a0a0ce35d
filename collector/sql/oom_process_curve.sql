-- name: oom_process_curve
-- description: GPU memory per process on one GPU in a time window, downsampled to buckets of bucket_ms (the peak of each process in each bucket), oldest first; the postmortem's stacked chart. Re-sent samples do not change a peak.
-- param: bucket_ms Int64 = 10000
-- param: cluster String = attr-lab
-- param: node String = gpu-node-21
-- param: gpu_index UInt32 = 3
-- param: since_ms Int64 = 1764571140000
-- param: until_ms Int64 = 1764571200001
SELECT
    ts_ms - ts_ms % ? AS bucket_ms,
    pid,
    argMax(workload, ts_ms) AS workload,
    argMax(process_name, ts_ms) AS process_name,
    max(ifNull(used_bytes, 0)) AS used_bytes
FROM {db}.process_samples
WHERE cluster = ? AND node = ? AND gpu_index = ? AND ts_ms >= ? AND ts_ms < ?
GROUP BY bucket_ms, pid
ORDER BY bucket_ms, pid
