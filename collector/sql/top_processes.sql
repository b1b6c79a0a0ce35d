-- name: top_processes
-- description: The latest reading of every GPU process sampled in a time window (oomlens top), optionally of one cluster and / or node: its memory, workload and name, largest first.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: cluster String =
-- param: node String =
--
-- A process sample travels with the GPU sample of the same reading (same ts_ms): `oomlens top`
-- compares last_ts_ms with its GPU's to drop processes that have exited.
SELECT
    cluster, node, gpu_index, pid,
    max(ts_ms) AS last_ts_ms,
    ifNull(argMax(used_bytes, ts_ms), 0) AS used_bytes,
    toString(argMax(workload, ts_ms)) AS workload,
    toString(argMax(process_name, ts_ms)) AS process_name
FROM {db}.process_samples
WHERE ts_ms >= ? AND ts_ms < ? AND has(['', cluster], ?) AND has(['', node], ?)
GROUP BY cluster, node, gpu_index, pid
ORDER BY used_bytes DESC, cluster, node, gpu_index, pid
