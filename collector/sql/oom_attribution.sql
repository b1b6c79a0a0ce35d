-- name: oom_attribution
-- description: The attribution of every OOM event in a time window, newest first: the ordered rule set of docs/attribution.md (the same rules as the oomlens CLI) applied to the oom_features row of each event, giving scenario, the rule that fired, confidence (percent) and what data was missing. Parameters as oom_features: samples_since_ms = since_ms - window_ms, samples_until_ms = until_ms, gpus_since_ms = since_ms, gpus_until_ms = until_ms, window_ms, then the event range [since_ms, until_ms).
-- param: samples_since_ms Int64 = -60000
-- param: samples_until_ms Int64 = 9223372036854775807
-- param: gpus_since_ms Int64 = 0
-- param: gpus_until_ms Int64 = 9223372036854775807
-- param: window_ms Int64 = 60000
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
--
-- The FROM clause is the body of oom_features.sql, verbatim (a unit test keeps them equal). Rules,
-- first match wins (confidence = base - penalties for missing data on GPU rules, within 5..99):
--   1 host_oom_kill      kind host_oom_kill                                    host_oom      95
--   2 xid_error          kind xid                                              unknown       30
--   3 static_estimate    context + static estimate from the job shape > capacity static      95
--   4 static_at_startup  load / optimizer init / startup and need alone > cap  static        75
--   5 sequence_attention need alone > cap and request = one layer's attention  sequence      90
--   6 sequence_single_request need alone > cap, no shape, request >= 1/4 cap and > its swing   sequence   60
--   7 batch_activations  need alone > cap                                      batch         85
--   8 cache_could_serve  reserved - allocated >= requested                     fragmentation 90
--   9 neighbours_took_it others hold memory and context + reserved + request <= cap contention 85
--                        (without allocator numbers: need alone <= cap)
--  10 fragmented_cache   allocator numbers known and need alone <= cap         fragmentation 75
--  11 neighbour_growth   no allocator numbers, neighbours grew >= 10 % of cap  contention    50
--  12 no_evidence        otherwise                                             unknown       20
-- need alone = context (process used - reserved) + allocated + requested; without allocator
-- numbers, the process's GPU memory (message or last sample) + requested.
-- Penalties (GPU rules 3-12): no job shape -10, no process samples -10, no allocator numbers -15,
-- phase unknown -5.
SELECT
    cluster, node, event_id, ts_ms, kind, gpu_index, pid, workload, truth_scenario,
    phase_effective, phase_source,
    toUInt8(kind NOT IN ('host_oom_kill', 'xid')) AS gpu_rule,
    toUInt8(isNull(params) AND isNull(batch_size) AND isNull(seq_len)) AS no_shape,
    toUInt8(own_samples = 0) AS no_samples,
    toUInt8(isNull(allocated_bytes) OR isNull(reserved_bytes)) AS no_allocator,
    toUInt8(phase_source = 'unknown') AS no_phase,
    ifNull(context_bytes, 0) AS ctx_bytes,
    ifNull(need_alone_bytes > capacity_bytes, 0) AS too_big_alone,
    multiIf(
        kind = 'host_oom_kill', 'host_oom_kill',
        kind = 'xid', 'xid_error',
        ifNull(ctx_bytes + static_estimate_bytes > capacity_bytes, 0), 'static_estimate',
        phase_effective IN ('load', 'optimizer_init', 'startup') AND too_big_alone, 'static_at_startup',
        too_big_alone AND ifNull(attention_bytes > 0
            AND requested_bytes + greatest(toUInt64(2097152), intDiv(attention_bytes, 20)) >= attention_bytes
            AND requested_bytes <= attention_bytes + greatest(toUInt64(2097152), intDiv(attention_bytes, 20)), 0),
            'sequence_attention',
        too_big_alone AND isNull(attention_bytes) AND ifNull(requested_bytes * 4 >= capacity_bytes, 0)
            AND ifNull(requested_bytes > own_swing_bytes, 1),
            'sequence_single_request',
        too_big_alone, 'batch_activations',
        ifNull(cached_free_bytes >= requested_bytes, 0), 'cache_could_serve',
        ifNull(others_bytes > 0 AND ifNull(ctx_bytes + coalesce(reserved_bytes, allocated_bytes) + requested_bytes,
            need_alone_bytes) <= capacity_bytes, 0), 'neighbours_took_it',
        NOT no_allocator AND ifNull(need_alone_bytes <= capacity_bytes, 0), 'fragmented_cache',
        no_allocator AND ifNull(others_growth_bytes * 10 >= capacity_bytes, 0), 'neighbour_growth',
        'no_evidence') AS rule,
    multiIf(
        rule = 'host_oom_kill', 'host_oom',
        rule IN ('static_estimate', 'static_at_startup'), 'static',
        rule IN ('sequence_attention', 'sequence_single_request'), 'sequence',
        rule = 'batch_activations', 'batch',
        rule IN ('cache_could_serve', 'fragmented_cache'), 'fragmentation',
        rule IN ('neighbours_took_it', 'neighbour_growth'), 'contention',
        'unknown') AS scenario,
    toUInt8(greatest(5, least(99,
        multiIf(rule = 'host_oom_kill', 95, rule = 'xid_error', 30, rule = 'static_estimate', 95,
            rule = 'static_at_startup', 75, rule = 'sequence_attention', 90, rule = 'sequence_single_request', 60,
            rule = 'batch_activations', 85, rule = 'cache_could_serve', 90, rule = 'neighbours_took_it', 85,
            rule = 'fragmented_cache', 75, rule = 'neighbour_growth', 50, 20)
        - gpu_rule * (no_shape * 10 + no_samples * 10 + no_allocator * 15 + no_phase * 5)))) AS confidence_pct,
    arrayFilter(x -> x != '', [
        if(gpu_rule AND no_shape, 'job shape', ''),
        if(gpu_rule AND no_samples, 'process samples', ''),
        if(gpu_rule AND no_allocator, 'allocator numbers', ''),
        if(gpu_rule AND no_phase, 'phase', ''),
        if(gpu_rule AND isNull(capacity_bytes), 'capacity', ''),
        if(gpu_rule AND isNull(others_bytes), 'other processes', '')]) AS missing
FROM
(
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
)
ORDER BY ts_ms DESC, cluster, node, event_id
