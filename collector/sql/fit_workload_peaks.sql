-- name: fit_workload_peaks
-- description: The sampled GPU memory of the workloads that ran one job shape (oomlens fit --calibrate): per workload with an attributed OOM event of the shape in the window (the shape as in fit_shape_events), its process samples in the window: distinct processes (node, GPU, pid), distinct samples, the largest and the smallest memory one of its processes held on a GPU. Parameters: the sample window, then the event window and the shape as in fit_shape_events.
-- param: samples_since_ms Int64 = 0
-- param: samples_until_ms Int64 = 9223372036854775807
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: params_min UInt64 = 67900000000
-- param: params_max UInt64 = 72100000000
-- param: precision String = fp32
-- param: optimizer String = adamw
-- param: batch_size UInt32 = 8
-- param: seq_len UInt32 = 4096
-- param: zero_stage UInt8 = 1
-- param: tensor_parallel UInt32 = 1
-- param: pipeline_parallel UInt32 = 4
-- param: data_parallel UInt32 = 1
-- param: activation_checkpointing UInt8 = 0
-- param: flash_attention UInt8 = 0
--
-- Samples are aggregated with max / min / uniqExact over their natural key, which re-sent
-- duplicates do not change. GLOBAL IN: on a cluster a workload's samples may sit on other shards
-- than its events, so the workloads are read once, on the initiator.
SELECT
    workload,
    uniqExact(cluster, node, gpu_index, pid) AS processes,
    uniqExact(cluster, node, gpu_index, pid, ts_ms) AS samples,
    max(ifNull(used_bytes, 0)) AS peak_bytes,
    min(ifNull(used_bytes, 0)) AS floor_bytes
FROM {db}.process_samples
WHERE ts_ms >= ? AND ts_ms < ? AND isNotNull(used_bytes) AND workload != ''
    AND workload GLOBAL IN
    (
        SELECT workload
        FROM {db}.oom_attributions
        WHERE ts_ms >= ? AND ts_ms < ?
            AND ifNull(params, 0) >= ? AND ifNull(params, 0) <= ?
            AND precision = ? AND optimizer = ?
            AND ifNull(batch_size, 0) = ? AND ifNull(seq_len, 0) = ?
            AND ifNull(zero_stage, 0) = ?
            AND ifNull(tensor_parallel, 1) = ? AND ifNull(pipeline_parallel, 1) = ?
            AND ifNull(data_parallel, 1) = ?
            AND ifNull(activation_checkpointing, 0) = ? AND ifNull(flash_attention, 0) = ?
    )
GROUP BY workload
ORDER BY workload
