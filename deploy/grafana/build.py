#!/usr/bin/env python3
"""Builds the oomlens Grafana dashboard (deploy/grafana/oomlens-dashboard.json) from the shipped SQL.

    build.py            # (re)write the dashboard JSON
    build.py --check    # exit 1 when the committed JSON differs from what this script builds

Every panel's SQL is a query file, never hand-written JSON: the built-in queries of the collector
(collector/sql/*.sql: attributed_events, oom_neighbours, oom_events, gpu_memory_curve, …) and the
dashboard's own (deploy/grafana/sql/*.sql: fleet headroom, capacity, per-node curves), in the same
`-- name/description/param` format. Each `?` is bound to a Grafana expression instead of a literal:
the dashboard time range `${__from}` / `${__to}` (epoch ms), `${__interval_ms}` for buckets,
the template variables `${cluster:sqlstring}`, `${node:sqlstring}`, `${gpu}`. A panel may wrap the
query as a subquery (`{query}`) to add a `time` column or aggregate it. deploy/sqlcheck/check_sql.py
(--grafana) runs every panel's, variable's and annotation's SQL, with these macros replaced by
fixture values, on ClickHouse 18.16 and on chdb-core.

Data source: the official ClickHouse plugin (`grafana-clickhouse-datasource`, v4), chosen with the
`datasource` variable. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "deploy" / "sqlcheck"))
from check_sql import CheckError, parse_query  # noqa: E402

OUT = HERE / "oomlens-dashboard.json"
DB = "oomlens"
DS = {"type": "grafana-clickhouse-datasource", "uid": "${datasource}"}
FORMAT_TIMESERIES, FORMAT_TABLE = 0, 1
WINDOW_MS = 60000  # attribution look-back before each OOM: features::DEFAULT_WINDOW_MS, as the CLI and the stored rows

# Parameter name -> Grafana expression. A query's parameters must all be here (or in the panel's own
# `bind`), so a new parameter in a shipped query fails the build instead of rendering a bad panel.
BIND = {
    "since_ms": "${__from}",
    "until_ms": "${__to}",
    "samples_since_ms": f"(${{__from}} - {WINDOW_MS})",
    "samples_until_ms": "${__to}",
    "gpus_since_ms": "${__from}",
    "gpus_until_ms": "${__to}",
    "nodes_since_ms": "${__from}",
    "nodes_until_ms": "${__to}",
    "processes_since_ms": "${__from}",
    "processes_until_ms": "${__to}",
    "window_ms": str(WINDOW_MS),
    "top_n": "5",
    "bucket_ms": "${__interval_ms}",
    "cluster": "${cluster:sqlstring}",
    "node": "${node:sqlstring}",
    "gpu_index": "${gpu}",
}

SOURCES = {"collector": ROOT / "collector" / "sql", "dashboard": HERE / "sql"}


def query_sql(source: str, name: str, bind: dict[str, str] | None = None) -> str:
    """The query file's SQL with `{db}` and every `?` replaced (`??` is a literal `?`)."""
    q = parse_query(SOURCES[source] / f"{name}.sql")
    values = {**BIND, **(bind or {})}
    missing = [p.name for p in q.params if p.name not in values]
    if missing:
        raise CheckError(f"{name}: no Grafana binding for parameter(s) {', '.join(missing)}")
    sql = q.sql.replace("{db}", DB)
    out, n, i = [], 0, 0
    while i < len(sql):
        if sql.startswith("??", i):
            out.append("?")
            i += 2
        elif sql[i] == "?":
            out.append(values[q.params[n].name])
            n += 1
            i += 1
        else:
            out.append(sql[i])
            i += 1
    if n != len(q.params):
        raise CheckError(f"{name}: {n} placeholders for {len(q.params)} parameters")
    return "".join(out)


def wrap(template: str, inner: str) -> str:
    """`template` with `{query}` replaced by `inner` on its own lines (inner may end in a comment)."""
    return template.replace("{query}", "\n" + inner + "\n")


def target(sql: str, fmt: int, ref: str = "A") -> dict:
    return {
        "datasource": DS,
        "editorType": "sql",
        "format": fmt,
        "queryType": "timeseries" if fmt == FORMAT_TIMESERIES else "table",
        "rawSql": sql.strip(),
        "refId": ref,
    }


PANELS: list[dict] = []


def row(title: str, y: int) -> None:
    PANELS.append({"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})


def panel(kind: str, title: str, desc: str, pos: tuple[int, int, int, int], sql: str, fmt: int, **extra) -> None:
    x, y, w, h = pos
    p = {
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [target(sql, fmt)],
        "fieldConfig": {"defaults": extra.pop("defaults", {}), "overrides": []},
        "options": extra.pop("options", {}),
    }
    p.update(extra)
    PANELS.append(p)


TIME_OF = "toDateTime(intDiv({col}, 1000)) AS time"

# ------------------------------------------------------------------------------------------ fleet
row("Fleet", 0)
panel(
    "stat", "Fleet memory headroom",
    "Free share of all GPU memory per cluster, from each GPU's latest reading in the range "
    "(deploy/grafana/sql/fleet_headroom.sql).",
    (0, 1, 6, 6),
    query_sql("dashboard", "fleet_headroom"), FORMAT_TABLE,
    defaults={"unit": "percent", "min": 0, "max": 100,
              "thresholds": {"mode": "absolute", "steps": [
                  {"color": "red", "value": None}, {"color": "orange", "value": 10}, {"color": "green", "value": 25}]}},
    options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "/^headroom_pct$/", "values": True},
             "textMode": "value_and_name", "colorMode": "background"},
)
panel(
    "timeseries", "Memory headroom over time",
    "Per cluster: free share of the fleet's memory and of its fullest GPU per interval "
    "(deploy/grafana/sql/headroom_over_time.sql).",
    (6, 1, 18, 6),
    wrap(f"SELECT {TIME_OF.format(col='bucket_start_ms')}, cluster, fleet_headroom_pct, fullest_gpu_headroom_pct\n"
         "FROM ({query})\nORDER BY time, cluster",
         query_sql("dashboard", "headroom_over_time")), FORMAT_TIMESERIES,
    defaults={"unit": "percent", "min": 0, "max": 100},
    interval="10s",
)
panel(
    "timeseries", "OOMs by scenario",
    "OOM events per attributed scenario and interval, from the stored attributions: the collector "
    "attributes each OOM with the rule set of docs/attribution.md once it has settled (~2 min), so "
    "this stays fast over weeks; the latest minutes are not counted yet "
    "(collector/sql/attribution_timeline.sql).",
    (0, 7, 12, 8),
    wrap(f"SELECT {TIME_OF.format(col='bucket_start_ms')}, scenario, events AS ooms\n"
         "FROM ({query})\nORDER BY time, scenario",
         query_sql("collector", "attribution_timeline", {"bucket_ms": "${__interval_ms}"})), FORMAT_TIMESERIES,
    defaults={"custom": {"drawStyle": "bars", "stacking": {"mode": "normal"}, "fillOpacity": 80}, "unit": "short"},
    interval="1m",
)
panel(
    "table", "Top noisy neighbours",
    "Workloads that took GPU memory next to a failing process in the 60 s before its OOM, by "
    "the number of OOMs they were ranked in and the memory they took (collector/sql/oom_neighbours.sql, top 5 per OOM; "
    "computed from the samples of the range: keep the range to days).",
    (12, 7, 12, 8),
    wrap("SELECT neighbour_workload, uniqExact(cluster, node, event_id) AS ooms, max(growth_bytes) AS max_growth_bytes,\n"
         "    max(max_used_bytes) AS max_used_bytes, uniqExact(cluster, node) AS nodes\n"
         "FROM ({query})\nWHERE neighbour_workload != ''\nGROUP BY neighbour_workload\n"
         "ORDER BY ooms DESC, max_growth_bytes DESC, neighbour_workload\nLIMIT 20",
         query_sql("collector", "oom_neighbours")), FORMAT_TABLE,
    defaults={"unit": "bytes"},
)
panel(
    "table", "OOM attribution",
    "Every OOM of the range with its scenario, the rule that fired, its confidence and the alternatives "
    "it left open, from the stored attributions (collector/sql/attributed_events.sql: each OOM is "
    "attributed once it has settled, ~2 min), newest first. oomlens postmortem gives the evidence.",
    (0, 15, 24, 8),
    wrap("SELECT toDateTime(intDiv(ts_ms, 1000)) AS time, cluster, node, gpu_index, pid, workload, kind, scenario,\n"
         "    confidence_pct, alternatives, rule, phase_effective AS phase\nFROM ({query})\nLIMIT 500",
         query_sql("collector", "attributed_events")), FORMAT_TABLE,
)
# ---------------------------------------------------------------------------------- drill-down
row("Node and GPU: ${cluster} / ${node} / GPU ${gpu}", 23)
panel(
    "timeseries", "GPU memory: ${node} GPU ${gpu}",
    "Used and total memory of the chosen GPU, every reading (collector/sql/gpu_memory_curve.sql); "
    "OOMs of the node are annotations.",
    (0, 24, 12, 8),
    wrap(f"SELECT {TIME_OF.format(col='ts_ms')}, used, total\nFROM ({{query}})\nORDER BY time",
         query_sql("collector", "gpu_memory_curve")), FORMAT_TIMESERIES,
    defaults={"unit": "bytes", "min": 0},
)
panel(
    "timeseries", "Memory of every GPU on ${node}",
    "Highest used memory per GPU and interval (deploy/grafana/sql/node_gpus_memory.sql).",
    (12, 24, 12, 8),
    wrap(f"SELECT {TIME_OF.format(col='bucket_start_ms')}, concat('GPU ', toString(gpu_index)) AS gpu, used_bytes\n"
         "FROM ({query})\nORDER BY time, gpu",
         query_sql("dashboard", "node_gpus_memory")), FORMAT_TIMESERIES,
    defaults={"unit": "bytes", "min": 0},
    interval="10s",
)
panel(
    "table", "OOMs on ${node}",
    "The node's OOMs with their stored attribution (collector/sql/attributed_events.sql).",
    (0, 32, 24, 7),
    wrap("SELECT toDateTime(intDiv(ts_ms, 1000)) AS time, gpu_index, pid, workload, kind, scenario, confidence_pct,\n"
         "    alternatives, rule\nFROM ({query})\nWHERE cluster = ${cluster:sqlstring} AND node = ${node:sqlstring}\n"
         "LIMIT 200",
         query_sql("collector", "attributed_events")), FORMAT_TABLE,
)
# ------------------------------------------------------------------------------------- capacity
row("Capacity", 39)


def headroom_panel(title: str, desc: str, pos: tuple[int, int, int, int], by: str, order: str, limit: int) -> None:
    """A table of the capacity report's headroom by `by` (collector/sql/capacity_headroom.sql)."""
    panel(
        "table", title, desc, pos,
        wrap(f"SELECT group_key AS {by}, gpus, round(samples / 3600, 1) AS gpu_hours,\n"
             "    round(100 * used_quantiles[1], 1) AS p50_used_pct, round(100 * used_quantiles[2], 1) AS p95_used_pct,\n"
             "    round(100 * used_quantiles[3], 1) AS p99_used_pct, round(100 * used_max, 1) AS max_used_pct,\n"
             "    if(samples = 0, 0, round(100 * samples_above_90 / samples, 1)) AS time_above_90_pct\n"
             f"FROM ({{query}})\nORDER BY {order}\nLIMIT {limit}",
             query_sql("collector", "capacity_headroom", {"by": f"'{by}'", "processes_by": f"'{by}'"})), FORMAT_TABLE,
    )


headroom_panel(
    "Capacity per cluster",
    "The capacity report's headroom (oomlens report capacity --by cluster): GPUs, GPU hours sampled, "
    "p50/p95/p99 and max of used/total, share of the time at 90 % or more "
    "(collector/sql/capacity_headroom.sql on the per-minute rollups).",
    (0, 40, 16, 7), "cluster", "cluster", 100,
)
panel(
    "barchart", "OOMs per kind and ground truth",
    "Events per kind and, for simulated fleets, ground-truth scenario (collector/sql/scenario_breakdown.sql).",
    (16, 40, 8, 7),
    wrap("SELECT concat(kind, if(truth_scenario = '', '', concat(' / ', truth_scenario))) AS what, events\n"
         "FROM ({query})\nORDER BY events DESC, what",
         query_sql("collector", "scenario_breakdown")), FORMAT_TABLE,
    options={"orientation": "horizontal", "xField": "what"},
)
panel(
    "barchart", "OOMs per attributed scenario (stored)",
    "Events per attributed scenario and kind from the stored attributions: the collector attributes "
    "each OOM once it has settled (~2 min) into oom_attributions, so this stays fast over weeks of a "
    "fleet; the latest minutes are not counted yet (collector/sql/attribution_breakdown.sql).",
    (0, 47, 24, 7),
    wrap("SELECT concat(scenario, ' / ', kind) AS what, events\n"
         "FROM ({query})\nORDER BY events DESC, what",
         query_sql("collector", "attribution_breakdown")), FORMAT_TABLE,
    options={"orientation": "horizontal", "xField": "what"},
)

headroom_panel(
    "Workloads closest to the edge",
    "The capacity report by workload (oomlens report capacity --by workload): a GPU second belongs "
    "to the workload holding the most memory on that GPU in its minute; highest p99 of used/total "
    "first (collector/sql/capacity_headroom.sql on the per-minute rollups).",
    (0, 54, 24, 8), "workload", "p99_used_pct DESC, max_used_pct DESC, workload", 20,
)


# ------------------------------------------------------------------------- variables, annotations
def query_variable(name: str, label: str, sql: str) -> dict:
    return {
        "type": "query", "name": name, "label": label, "datasource": DS,
        "query": sql, "definition": sql, "refresh": 2, "sort": 0,
        "includeAll": False, "multi": False, "current": {}, "options": [],
    }


VARIABLES = [
    {"type": "datasource", "name": "datasource", "label": "ClickHouse", "query": "grafana-clickhouse-datasource",
     "current": {}, "options": [], "refresh": 1},
    query_variable("cluster", "Cluster", f"SELECT DISTINCT cluster FROM {DB}.agents ORDER BY cluster"),
    query_variable("node", "Node",
                   f"SELECT DISTINCT node FROM {DB}.agents WHERE cluster = ${{cluster:sqlstring}} ORDER BY node"),
    query_variable("gpu", "GPU",
                   f"SELECT DISTINCT gpu_index FROM {DB}.gpu_samples WHERE cluster = ${{cluster:sqlstring}} "
                   f"AND node = ${{node:sqlstring}} AND ts_ms >= ${{__from}} AND ts_ms < ${{__to}} ORDER BY gpu_index"),
]

ANNOTATIONS = [
    {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
     "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
    {"name": "OOMs on ${node}", "enable": True, "iconColor": "red", "datasource": DS,
     "target": target(wrap(
         "SELECT toDateTime(intDiv(ts_ms, 1000)) AS time,\n"
         "    concat(kind, ' GPU ', toString(gpu_index), ' pid ', toString(pid), ' ', workload) AS text,\n"
         "    kind AS tags\nFROM ({query})\nWHERE cluster = ${cluster:sqlstring} AND node = ${node:sqlstring}\nORDER BY time",
         query_sql("collector", "oom_events")), FORMAT_TABLE)},
]


def dashboard() -> dict:
    panels = []
    for i, p in enumerate(PANELS, start=1):
        panels.append({"id": i, **p})
    return {
        "title": "oomlens — GPU memory and OOMs",
        "uid": "oomlens-overview",
        "description": "Fleet headroom, OOMs by attributed scenario, noisy neighbours, per-node/GPU drill-down "
                       "and capacity, from the oomlens ClickHouse tables. Generated by deploy/grafana/build.py.",
        "tags": ["oomlens", "gpu", "clickhouse"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "timezone": "utc",
        "templating": {"list": VARIABLES},
        "annotations": {"list": ANNOTATIONS},
        "panels": panels,
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "grafana-clickhouse-datasource", "name": "ClickHouse", "version": "4.0.0"},
        ],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed JSON instead of writing it")
    args = ap.parse_args()
    try:
        text = render()
    except CheckError as e:
        print(f"build.py: {e}", file=sys.stderr)
        return 1
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT.relative_to(ROOT)} is not what deploy/grafana/build.py builds: run it and commit the result",
                  file=sys.stderr)
            return 1
        print(f"ok   {OUT.relative_to(ROOT)} = build.py output ({len(PANELS)} panels)")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(PANELS)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
