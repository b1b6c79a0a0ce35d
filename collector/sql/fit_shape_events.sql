-- name: fit_shape_events
-- description: The stored OOM attributions of one job shape (oomlens fit --calibrate), one row per event (the latest attribution), newest first: where and when, the workload, the kind and the attributed scenario, the GPU's capacity, what the failing process needed alone at the failure (need_alone_bytes: context + allocated + requested) and its sampled floor and peak in the look-back window before it. The shape matches on params within [params_min, params_max], precision, optimizer ('' = none), micro-batch, sequence length, and the ZeRO stage, TP, PP, DP degrees, activation checkpointing and FlashAttention (0/1), an unreported value counting as its default (stage 0, degree 1, off).
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: params_min UInt64 = 1276520000
-- param: params_max UInt64 = 1355480000
-- param: precision String = bf16
-- param: optimizer String = adamw
-- param: batch_size UInt32 = 64
-- param: seq_len UInt32 = 2048
-- param: zero_stage UInt8 = 0
-- param: tensor_parallel UInt32 = 1
-- param: pipeline_parallel UInt32 = 1
-- param: data_parallel UInt32 = 1
-- param: activation_checkpointing UInt8 = 0
-- param: flash_attention UInt8 = 1
SELECT
    cluster, node, event_id, ts_ms, workload, kind, scenario, capacity_bytes, need_alone_bytes,
    own_samples, own_min_used, own_max_used
FROM
(
    SELECT
        cluster, node, event_id, ts_ms, workload, kind, scenario, capacity_bytes, need_alone_bytes,
        own_samples, own_min_used, own_max_used
    FROM {db}.oom_attributions
    WHERE ts_ms >= ? AND ts_ms < ?
        AND ifNull(params, 0) >= ? AND ifNull(params, 0) <= ?
        AND precision = ? AND optimizer = ?
        AND ifNull(batch_size, 0) = ? AND ifNull(seq_len, 0) = ?
        AND ifNull(zero_stage, 0) = ?
        AND ifNull(tensor_parallel, 1) = ? AND ifNull(pipeline_parallel, 1) = ?
        AND ifNull(data_parallel, 1) = ?
        AND ifNull(activation_checkpointing, 0) = ? AND ifNull(flash_attention, 0) = ?
    ORDER BY cluster, node, event_id, attributed_ms DESC, window_ms
    LIMIT 1 BY cluster, node, event_id
)
ORDER BY ts_ms DESC, cluster, node, event_id
