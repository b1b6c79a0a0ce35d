-- name: attributed_events
-- description: Every OOM event of a time window with its stored attribution (oom_attributions, filled by the collector's attributor once an event has settled; re-attributed events once, the latest attribution wins), newest first: where and when, the kind, the phase and where it came from, the scenario, the rule that fired, its confidence (percent), the alternatives it left open ("scenario percent", most likely first) and the rule-set version. Events the attributor has not reached yet (the last settle delay) are not listed; `oomlens postmortem` and `oomlens explain` give the full evidence.
-- param: since_ms Int64 = 0
-- param: until_ms Int64 = 9223372036854775807
SELECT
    ts_ms, cluster, node, event_id, gpu_index, pid, workload, kind, framework, phase_effective,
    phase_source, scenario, rule, confidence_pct,
    arrayStringConcat(arrayMap((s, p) -> concat(s, ' ', toString(p)), alternative_scenarios,
        alternative_confidence_pct), ', ') AS alternatives,
    rules_version
FROM
(
    SELECT
        ts_ms, cluster, node, event_id, gpu_index, pid, workload, kind, framework, phase_effective,
        phase_source, scenario, rule, confidence_pct, alternative_scenarios, alternative_confidence_pct,
        rules_version
    FROM {db}.oom_attributions
    WHERE ts_ms >= ? AND ts_ms < ?
    ORDER BY cluster, node, event_id, attributed_ms DESC, window_ms
    LIMIT 1 BY cluster, node, event_id
)
ORDER BY ts_ms DESC, cluster, node, event_id
