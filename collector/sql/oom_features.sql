-- name: oom_features
-- description: Attribution features of every OOM event in a time window, one row per event (re-sent duplicates collapsed), newest first: phase (reported or inferred from the process's curve), the allocator's numbers, the static estimate from the job shape, the attention matrix of one layer, the memory the job alone needed at the failure, the failing process's curve (samples, first/floor/peak/last) and the other processes on the GPU (memory at the failure, growth) in the window_ms before the failure. Parameters: the process-sample range (samples_since_ms = since_ms - window_ms, samples_until_ms = until_ms), the event range again for the GPUs to read (gpus_since_ms = since_ms, gpus_until_ms = until_ms), window_ms, then the event range [since_ms, until_ms).
-- param: samples_since_ms Int64 = -60000
-- param: samples_until_ms Int64 = 9223372036854775807
-- param: gpus_since_ms Int64 = 0
-- param: gpus_until_ms Int64 = 9223372036854775807
-- param: window_ms Int64 = 60000
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- Structure (ClickHouse 18.16 allows one JOIN per query, equality only, and a WITH is not seen in
-- subqueries, so a parameter is bound once per use): only the samples of the GPUs that have events
-- in the range are read (an IN on the sort key's prefix); the deduplicated events,
-- each repeated once per minute bucket its window touches, are the right side of one
-- `ALL RIGHT JOIN` on (cluster, node, GPU, minute bucket) with the process samples of the time
-- range, so every event keeps its row even without samples. Stage 1 aggregates per event and
-- process (pid 0 collects the rows outside the window), stage 2 per event; the outer SELECT derives
-- the features. Host OOM kills have no GPU: their GPU features are empty. Bytes are integers.
-- static_estimate_bytes = params / (tensor_parallel * pipeline_parallel) * (weights + gradients +
-- optimizer state bytes per parameter), ZeRO stage 1/2/3 dividing optimizer state/gradients/weights
-- by data_parallel: weights and gradients 4 B (fp32) or 2 B (16-bit), 1 B (fp8); Adam/AdamW state
-- 8 B (fp32) or 12 B (mixed: fp32 master weights + two moments); SGD 4 B or 8 B; no optimizer (''):
-- weights only (inference, or the optimizer is not known).
SELECT
    cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
    phase,
    if(phase NOT IN ('', 'unknown'), phase,
        if(own_samples = 0, '',
            if(own_first_ts >= ts_ms - window_ms + 5000 AND own_last_used >= own_max_used
                AND own_first_used * 4 <= own_max_used, 'startup', 'steady'))) AS phase_effective,
    multiIf(phase NOT IN ('', 'unknown'), 'reported', own_samples > 0, 'inferred', 'unknown') AS phase_source,
    requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes, process_used_bytes,
    xid, host_rss_bytes,
    params, batch_size, seq_len, hidden, layers, heads, precision, optimizer, zero_stage,
    tensor_parallel, pipeline_parallel, data_parallel, activation_checkpointing, flash_attention,
    -- Without a pid (a log line without one) the message's process list also names the failing
    -- process: the largest listed process holding at least the allocator's reserved bytes.
    toUInt64(if(isNull(pid), arrayReduce('max', arrayFilter(x -> x >= ifNull(reserved_bytes, 0), other_used_bytes)), 0))
        AS own_listed_bytes,
    if(coalesce(process_used_bytes, nullIf(own_listed_bytes, 0)) >= reserved_bytes,
        toUInt64(coalesce(process_used_bytes, nullIf(own_listed_bytes, 0)) - reserved_bytes), NULL) AS context_bytes,
    if(reserved_bytes >= allocated_bytes, toUInt64(reserved_bytes - allocated_bytes), NULL) AS cached_free_bytes,
    -- what the process alone needed: from the allocator's numbers or else (TensorFlow and JAX
    -- messages) from its GPU memory in the message or its last sample plus the request
    multiIf(isNotNull(allocated_bytes) AND isNotNull(requested_bytes), 'allocator',
        isNotNull(coalesce(process_used_bytes, nullIf(own_listed_bytes, 0))) AND isNotNull(requested_bytes), 'process',
        own_samples > 0 AND isNotNull(requested_bytes), 'samples', '') AS need_alone_from,
    toUInt64(multiIf(need_alone_from = 'allocator', ifNull(context_bytes, 0) + allocated_bytes + requested_bytes,
        need_alone_from = 'process', coalesce(process_used_bytes, nullIf(own_listed_bytes, 0)) + requested_bytes,
        need_alone_from = 'samples', own_last_used + requested_bytes, NULL)) AS need_alone_bytes,
    toUInt64(intDiv(params, greatest(ifNull(tensor_parallel, 1), 1) * greatest(ifNull(pipeline_parallel, 1), 1)))
        AS params_per_gpu,
    toUInt8(multiIf(precision = 'fp32', 4, precision IN ('bf16', 'fp16'), 2, precision = 'fp8', 1, NULL))
        AS weight_bytes_per_param,
    toUInt8(multiIf(optimizer = '', 0, optimizer IN ('adam', 'adamw'), if(precision = 'fp32', 8, 12),
        optimizer = 'sgd', if(precision = 'fp32', 4, 8), NULL)) AS optimizer_bytes_per_param,
    toUInt32(greatest(ifNull(data_parallel, 1), 1)) AS zero_divisor,
    toUInt64(intDiv(params_per_gpu * weight_bytes_per_param, if(ifNull(zero_stage, 0) >= 3, zero_divisor, 1))
        + if(optimizer = '', 0, intDiv(params_per_gpu * weight_bytes_per_param, if(ifNull(zero_stage, 0) >= 2, zero_divisor, 1)))
        + intDiv(params_per_gpu * optimizer_bytes_per_param, if(ifNull(zero_stage, 0) >= 1, zero_divisor, 1)))
        AS static_estimate_bytes,
    toUInt64(if(ifNull(flash_attention, 0) = 1, 0,
        2 * batch_size * intDiv(heads, greatest(ifNull(tensor_parallel, 1), 1)) * seq_len * seq_len
            * if(precision = 'fp32', 2, 1))) AS attention_bytes,
    toUInt64(length(other_pids) - (own_listed_bytes > 0)) AS others_listed,
    toUInt64(arraySum(other_used_bytes) - own_listed_bytes) AS others_listed_bytes,
    window_ms,
    own_samples, own_first_ts, own_first_used, own_min_used, own_max_used, own_last_used,
    if(own_samples > 0, toUInt64(own_max_used - own_min_used), NULL) AS own_swing_bytes,
    others_seen, others_first_bytes, others_last_bytes, own_sampled_bytes, others_growth_bytes,
    top_neighbour_growth_bytes,
    multiIf(others_listed > 0, others_listed_bytes, own_samples > 0 OR others_seen > 0,
        toUInt64(others_last_bytes - own_sampled_bytes), NULL) AS others_bytes
FROM
(
    SELECT
        cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
        phase, requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
        process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
        seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
        pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms,
        sumIf(n, p = ifNull(pid, 0) AND p != 0) AS own_samples,
        toInt64(sumIf(first_ts, p = ifNull(pid, 0) AND p != 0)) AS own_first_ts,
        sumIf(first_used, p = ifNull(pid, 0) AND p != 0) AS own_first_used,
        sumIf(min_used, p = ifNull(pid, 0) AND p != 0) AS own_min_used,
        sumIf(max_used, p = ifNull(pid, 0) AND p != 0) AS own_max_used,
        sumIf(last_used, p = ifNull(pid, 0) AND p != 0) AS own_last_used,
        countIf(p != ifNull(pid, 0) AND p != 0) AS others_seen,
        sumIf(first_used, p != ifNull(pid, 0) AND p != 0) AS others_first_bytes,
        -- a process last seen more than 5 s before the failure had left: it no longer held memory
        sumIf(last_used, p != ifNull(pid, 0) AND p != 0 AND last_ts + 5000 >= ts_ms) AS others_last_bytes,
        -- without a pid, the failing process is among them: the largest present one holding at
        -- least the allocator's reserved bytes
        maxIf(last_used, isNull(pid) AND p != 0 AND last_ts + 5000 >= ts_ms AND last_used >= ifNull(reserved_bytes, 0))
            AS own_sampled_bytes,
        sumIf(toInt64(last_used) - toInt64(first_used), p != ifNull(pid, 0) AND p != 0 AND last_ts + 5000 >= ts_ms)
            AS others_growth_bytes,
        maxIf(toInt64(last_used) - toInt64(first_used), p != ifNull(pid, 0) AND p != 0 AND last_ts + 5000 >= ts_ms)
            AS top_neighbour_growth_bytes
    FROM
    (
        SELECT
            cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
            phase, requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
            process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
            seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
            pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms,
            if(s_ts >= ts_ms - window_ms AND s_ts <= ts_ms, s_pid, toUInt32(0)) AS p,
            uniqExact(s_ts) AS n,
            min(s_ts) AS first_ts,
            max(s_ts) AS last_ts,
            argMin(s_used, s_ts) AS first_used,
            argMax(s_used, s_ts) AS last_used,
            min(s_used) AS min_used,
            max(s_used) AS max_used
        FROM
        (
            SELECT
                cluster, node, gpu_index AS j_gpu, intDiv(ts_ms, 60000) AS j_bucket,
                ts_ms AS s_ts, pid AS s_pid, assumeNotNull(used_bytes) AS s_used
            FROM {db}.process_samples
            WHERE ts_ms >= ? AND ts_ms < ? AND isNotNull(used_bytes)
                AND (cluster, node, gpu_index) IN
                (
                    SELECT cluster, node, assumeNotNull(gpu_index)
                    FROM {db}.oom_events
                    WHERE ts_ms >= ? AND ts_ms < ? AND isNotNull(gpu_index)
                )
        ) AS samples
        ALL RIGHT JOIN
        (
            SELECT
                *,
                ifNull(gpu_index, toUInt32(4294967295)) AS j_gpu,
                arrayJoin(arrayMap(i -> intDiv(ts_ms - window_ms, 60000) + i,
                    range(toUInt64(intDiv(ts_ms, 60000) - intDiv(ts_ms - window_ms, 60000) + 1)))) AS j_bucket
            FROM
            (
                SELECT
                    cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload,
                    truth_scenario, phase, requested_bytes, capacity_bytes, free_bytes, allocated_bytes,
                    reserved_bytes, process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes,
                    params, batch_size, seq_len, hidden, layers, heads, precision, optimizer, zero_stage,
                    tensor_parallel, pipeline_parallel, data_parallel, activation_checkpointing,
                    flash_attention, toInt64(?) AS window_ms
                FROM {db}.oom_events
                WHERE ts_ms >= ? AND ts_ms < ?
                ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
                LIMIT 1 BY cluster, node, event_id
            )
        ) AS events
        USING (cluster, node, j_gpu, j_bucket)
        GROUP BY
            cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
            phase, requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
            process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
            seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
            pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms, p
    )
    GROUP BY
        cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
        phase, requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
        process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
        seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
        pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms
)
ORDER BY ts_ms DESC, cluster, node, event_id
