-- name: table_counts
-- description: Rows per table, one row per table, each counted by its natural key so re-sent rows never count twice, merged or not: gpu_samples distinct (cluster, node, gpu_index, ts_ms), process_samples distinct (cluster, node, gpu_index, ts_ms, pid), oom_events distinct (cluster, node, event_id), agents distinct sessions (cluster, node, agent_id, boot_id).
SELECT `table`, rows
FROM
(
    SELECT 'gpu_samples' AS `table`, uniqExact(cluster, node, gpu_index, ts_ms) AS rows FROM {db}.gpu_samples
    UNION ALL
    SELECT 'process_samples' AS `table`, uniqExact(cluster, node, gpu_index, ts_ms, pid) AS rows FROM {db}.process_samples
    UNION ALL
    SELECT 'oom_events' AS `table`, uniqExact(cluster, node, event_id) AS rows FROM {db}.oom_events
    UNION ALL
    SELECT 'agents' AS `table`, uniqExact(cluster, node, agent_id, boot_id) AS rows FROM {db}.agents
)
ORDER BY `table`
