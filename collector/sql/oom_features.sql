-- name: oom_features
-- description: The evidence of every OOM event in a time window, one row per event (re-sent duplicates collapsed), newest first: the event's stored fields (the message's numbers, the processes it lists, the phase and where it came from, the host-memory evidence, the message's own kind, the job shape) and the failing process's and the other processes' samples in the window_ms before the failure (the failing process's first/floor/peak/last memory and its largest rise between two readings; the others' memory at their first sample, at the failure, their growth). The collector derives the attribution features from these columns (docs/attribution.md). Parameters: the process-sample range (samples_since_ms = since_ms - window_ms, samples_until_ms = until_ms), the event range again for the GPUs to read (gpus_since_ms = since_ms, gpus_until_ms = until_ms), window_ms, then the event range [since_ms, until_ms).
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
-- process (pid 0 collects the rows outside the window), stage 2 per event. The labels the agent's
-- parser sets become columns: phase.source (phase_label), phase.clue, host_oom.evidence,
-- message.hint, capacity.source, and the hook's allocator summary (alloc.cached_free_bytes,
-- alloc.largest_free_block_bytes, alloc.static_bytes, alloc.activation_bytes; the alloc.site.N
-- values as alloc_sites, in order). Host OOM kills have no GPU: their sample columns are empty.
SELECT
    cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
    phase, phase_label, phase_clue, host_evidence, message_hint, capacity_source,
    alloc_cached_free_bytes, alloc_largest_free_bytes, alloc_static_bytes, alloc_activation_bytes, alloc_sites,
    requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes, process_used_bytes,
    other_pids, other_used_bytes, xid, host_rss_bytes,
    params, batch_size, seq_len, hidden, layers, heads, precision, optimizer, zero_stage,
    tensor_parallel, pipeline_parallel, data_parallel, activation_checkpointing, flash_attention,
    window_ms,
    own_samples, own_first_ts, own_first_used, own_min_used, own_max_used, own_last_used, own_max_rise,
    others_seen, others_first_bytes, others_last_bytes, own_sampled_bytes, others_growth_bytes,
    top_neighbour_growth_bytes
FROM
(
    SELECT
        cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
        phase, phase_label, phase_clue, host_evidence, message_hint, capacity_source,
    alloc_cached_free_bytes, alloc_largest_free_bytes, alloc_static_bytes, alloc_activation_bytes, alloc_sites,
        requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
        process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
        seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
        pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms,
        sumIf(n, p = ifNull(pid, 0) AND p != 0) AS own_samples,
        toInt64(sumIf(first_ts, p = ifNull(pid, 0) AND p != 0)) AS own_first_ts,
        sumIf(first_used, p = ifNull(pid, 0) AND p != 0) AS own_first_used,
        sumIf(min_used, p = ifNull(pid, 0) AND p != 0) AS own_min_used,
        sumIf(max_used, p = ifNull(pid, 0) AND p != 0) AS own_max_used,
        sumIf(last_used, p = ifNull(pid, 0) AND p != 0) AS own_last_used,
        -- its largest rise between two consecutive readings: a segment the allocator took at once
        if(own_samples > 0, toNullable(toUInt64(greatest(sumIf(max_rise, p = ifNull(pid, 0) AND p != 0), 0))), NULL)
            AS own_max_rise,
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
            phase, phase_label, phase_clue, host_evidence, message_hint, capacity_source,
    alloc_cached_free_bytes, alloc_largest_free_bytes, alloc_static_bytes, alloc_activation_bytes, alloc_sites,
            requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
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
            max(s_used) AS max_used,
            arrayReduce('max', arrayDifference(arrayMap(x -> toInt64(x.2), arraySort(groupArray((s_ts, s_used))))))
                AS max_rise
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
                    truth_scenario, phase,
                    if(has(label_keys, 'phase.source'), label_values[indexOf(label_keys, 'phase.source')], '') AS phase_label,
                    if(has(label_keys, 'phase.clue'), label_values[indexOf(label_keys, 'phase.clue')], '') AS phase_clue,
                    if(has(label_keys, 'host_oom.evidence'), label_values[indexOf(label_keys, 'host_oom.evidence')], '')
                        AS host_evidence,
                    if(has(label_keys, 'message.hint'), label_values[indexOf(label_keys, 'message.hint')], '') AS message_hint,
                    if(has(label_keys, 'capacity.source'), label_values[indexOf(label_keys, 'capacity.source')], '')
                        AS capacity_source,
                    toUInt64OrNull(if(has(label_keys, 'alloc.cached_free_bytes'),
                        label_values[indexOf(label_keys, 'alloc.cached_free_bytes')], '')) AS alloc_cached_free_bytes,
                    toUInt64OrNull(if(has(label_keys, 'alloc.largest_free_block_bytes'),
                        label_values[indexOf(label_keys, 'alloc.largest_free_block_bytes')], '')) AS alloc_largest_free_bytes,
                    toUInt64OrNull(if(has(label_keys, 'alloc.static_bytes'),
                        label_values[indexOf(label_keys, 'alloc.static_bytes')], '')) AS alloc_static_bytes,
                    toUInt64OrNull(if(has(label_keys, 'alloc.activation_bytes'),
                        label_values[indexOf(label_keys, 'alloc.activation_bytes')], '')) AS alloc_activation_bytes,
                    arrayFilter((v, k) -> substring(k, 1, 11) = 'alloc.site.', label_values, label_keys) AS alloc_sites,
                    requested_bytes, capacity_bytes, free_bytes, allocated_bytes,
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
            phase, phase_label, phase_clue, host_evidence, message_hint, capacity_source,
    alloc_cached_free_bytes, alloc_largest_free_bytes, alloc_static_bytes, alloc_activation_bytes, alloc_sites,
            requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
            process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
            seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
            pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms, p
    )
    GROUP BY
        cluster, node, event_id, ts_ms, kind, source, framework, gpu_index, pid, workload, truth_scenario,
        phase, phase_label, phase_clue, host_evidence, message_hint, capacity_source,
    alloc_cached_free_bytes, alloc_largest_free_bytes, alloc_static_bytes, alloc_activation_bytes, alloc_sites,
        requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes,
        process_used_bytes, other_pids, other_used_bytes, xid, host_rss_bytes, params, batch_size,
        seq_len, hidden, layers, heads, precision, optimizer, zero_stage, tensor_parallel,
        pipeline_parallel, data_parallel, activation_checkpointing, flash_attention, window_ms
)
ORDER BY ts_ms DESC, cluster, node, event_id
