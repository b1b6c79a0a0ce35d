-- name: table_counts
-- description: Rows per table, one row per table. oom_events counts distinct events (cluster, node, event_id) and agents distinct sessions (cluster, node, agent_id, boot_id), so re-sent rows never count twice, merged or not.
SELECT `table`, rows
FROM
(
    SELECT 'gpu_samples' AS `table`, count() AS rows FROM {db}.gpu_samples
    UNION ALL
    SELECT 'process_samples' AS `table`, count() AS rows FROM {db}.process_samples
    UNION ALL
    SELECT 'oom_events' AS `table`, uniqExact(cluster, node, event_id) AS rows FROM {db}.oom_events
    UNION ALL
    SELECT 'agents' AS `table`, uniqExact(cluster, node, agent_id, boot_id) AS rows FROM {db}.agents
)
ORDER BY `table`
