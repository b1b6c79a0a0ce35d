-- name: capacity_peaks
-- description: Capacity per cluster in the time range: GPUs seen, their memory (bytes), how many peaked at 90 % and at 99 % of their memory, the median and 95th percentile of the per-GPU peak (percent), and the share of readings at 90 % or more.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    cluster,
    count() AS gpus,
    sum(total) AS total_bytes,
    countIf(peak_pct >= 90) AS gpus_peak_90,
    countIf(peak_pct >= 99) AS gpus_peak_99,
    round(quantileExact(0.5)(peak_pct), 2) AS median_peak_pct,
    round(quantileExact(0.95)(peak_pct), 2) AS p95_peak_pct,
    round(100 * sum(hot) / sum(readings), 2) AS readings_at_90_pct
FROM
(
    SELECT cluster, node, gpu_index,
        max(total_gpu) AS total,
        round(100 * max(used / total_gpu), 2) AS peak_pct,
        countIf(used >= 0.9 * total_gpu) AS hot,
        count() AS readings
    FROM
    (
        SELECT cluster, node, gpu_index, ts_ms,
            max(memory_used_bytes) AS used, max(memory_total_bytes) AS total_gpu
        FROM {db}.gpu_samples
        WHERE ts_ms >= ? AND ts_ms < ? AND memory_total_bytes > 0 AND isNotNull(memory_used_bytes)
        GROUP BY cluster, node, gpu_index, ts_ms
    )
    GROUP BY cluster, node, gpu_index
)
GROUP BY cluster
ORDER BY cluster
