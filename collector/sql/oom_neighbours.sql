-- name: oom_neighbours
-- description: The noisy neighbours of every OOM event in a time window: the other processes on the failing GPU (for a host OOM kill: on any GPU of the node) in the window_ms before the failure, ranked per event by how much GPU memory they took in that window (growth = last - first sample), at most top_n per event; present = seen in the last 5 s before the failure. Parameters: the process-sample range (samples_since_ms = since_ms - window_ms, samples_until_ms = until_ms), the event range again for the nodes to read (nodes_since_ms = since_ms, nodes_until_ms = until_ms), window_ms, the event range [since_ms, until_ms) and top_n.
-- param: samples_since_ms Int64 = -60000
-- param: samples_until_ms Int64 = 9223372036854775807
-- param: nodes_since_ms Int64 = 0
-- param: nodes_until_ms Int64 = 9223372036854775807
-- param: window_ms Int64 = 60000
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
-- param: top_n UInt32 = 5
--
-- Same structure as oom_features: the deduplicated events, once per minute bucket of their window,
-- are the right side of one ALL INNER JOIN with the process samples on (cluster, node, GPU, bucket);
-- every sample also joins under the GPU 4294967295, the key of host events (whole node).
SELECT
    cluster, node, event_id, ts_ms, kind, gpu_index, pid AS failed_pid,
    neighbour_gpu, neighbour_pid, neighbour_workload, neighbour_name,
    samples, first_ts, last_ts, first_used_bytes, last_used_bytes, max_used_bytes,
    toInt64(last_used_bytes) - toInt64(first_used_bytes) AS growth_bytes,
    toUInt8(last_ts + 5000 >= ts_ms) AS present
FROM
(
    SELECT
        cluster, node, event_id, ts_ms, kind, gpu_index, pid,
        s_gpu AS neighbour_gpu, s_pid AS neighbour_pid,
        argMax(s_workload, s_ts) AS neighbour_workload,
        argMax(s_name, s_ts) AS neighbour_name,
        uniqExact(s_ts) AS samples,
        min(s_ts) AS first_ts,
        max(s_ts) AS last_ts,
        argMin(s_used, s_ts) AS first_used_bytes,
        argMax(s_used, s_ts) AS last_used_bytes,
        max(s_used) AS max_used_bytes
    FROM
    (
        SELECT
            cluster, node, arrayJoin([gpu_index, toUInt32(4294967295)]) AS j_gpu,
            intDiv(ts_ms, 60000) AS j_bucket, gpu_index AS s_gpu, ts_ms AS s_ts, pid AS s_pid,
            workload AS s_workload, process_name AS s_name, assumeNotNull(used_bytes) AS s_used
        FROM {db}.process_samples
        WHERE ts_ms >= ? AND ts_ms < ? AND isNotNull(used_bytes)
            AND (cluster, node) IN (SELECT cluster, node FROM {db}.oom_events WHERE ts_ms >= ? AND ts_ms < ?)
    ) AS samples
    ALL INNER JOIN
    (
        SELECT
            *,
            ifNull(gpu_index, toUInt32(4294967295)) AS j_gpu,
            arrayJoin(arrayMap(i -> intDiv(ts_ms - window_ms, 60000) + i,
                range(toUInt64(intDiv(ts_ms, 60000) - intDiv(ts_ms - window_ms, 60000) + 1)))) AS j_bucket
        FROM
        (
            SELECT cluster, node, event_id, ts_ms, kind, gpu_index, pid, toInt64(?) AS window_ms
            FROM {db}.oom_events
            WHERE ts_ms >= ? AND ts_ms < ?
            ORDER BY cluster, node, event_id, received_ms DESC, ts_ms DESC
            LIMIT 1 BY cluster, node, event_id
        )
    ) AS events
    USING (cluster, node, j_gpu, j_bucket)
    WHERE s_ts >= ts_ms - window_ms AND s_ts <= ts_ms AND s_pid != ifNull(pid, 0)
    GROUP BY cluster, node, event_id, ts_ms, kind, gpu_index, pid, s_gpu, s_pid
)
ORDER BY ts_ms DESC, cluster, node, event_id, present DESC, growth_bytes DESC, last_used_bytes DESC, neighbour_gpu,
    neighbour_pid
LIMIT ? BY cluster, node, event_id
