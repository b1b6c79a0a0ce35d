#!/usr/bin/env python3
"""Times two versions of one built-in query (`collector/sql/*.sql` with `{db}` and `?` placeholders)
on the same running ClickHouse, interleaved run by run, and prints each one's median and the ratio
of the medians. Made for a change to `oom_features` (the window arguments of `FeatureWindow::args`
are bound in order); both versions must return the same number of rows.

    git show HEAD~1:collector/sql/oom_features.sql > /tmp/old.sql
    deploy/dev-clickhouse.sh start /tmp/oomlens-bench-ch      # the data attribution-data loaded
    benches/query-ab.py --url http://127.0.0.1:PORT --old /tmp/old.sql \\
        --new collector/sql/oom_features.sql --since-ms 1767657600000 --until-ms 1767679200000
"""
import argparse
import statistics
import sys
import time
import urllib.request


def render(path, db, args):
    sql = "".join(line for line in open(path, encoding="utf-8") if not line.startswith("--"))
    sql = sql.replace("{db}", db)
    parts = sql.split("?")
    if len(parts) - 1 != len(args):
        sys.exit(f"{path}: {len(parts) - 1} placeholders, {len(args)} arguments")
    return "".join(p + (str(a) if i < len(args) else "") for i, (p, a) in enumerate(zip(parts, args + [None]))) \
        + " FORMAT TSV"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="ClickHouse HTTP URL")
    p.add_argument("--db", default="oomlens")
    p.add_argument("--old", required=True, help="the query as it was (SQL file)")
    p.add_argument("--new", required=True, help="the query as it is (SQL file)")
    p.add_argument("--since-ms", type=int, required=True, help="event range start")
    p.add_argument("--until-ms", type=int, required=True, help="event range end")
    p.add_argument("--window-ms", type=int, default=60_000)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    s, u, w = a.since_ms, a.until_ms, a.window_ms
    args = [s - w, u, s, u, w, s, u]
    queries = {"old": render(a.old, a.db, args), "new": render(a.new, a.db, args)}
    times = {n: [] for n in queries}
    rows = {}
    for _ in range(a.runs):
        for name, q in queries.items():
            t = time.monotonic()
            with urllib.request.urlopen(urllib.request.Request(a.url, data=q.encode())) as r:
                rows[name] = r.read().count(b"\n")
            times[name].append(time.monotonic() - t)
    if rows["old"] != rows["new"]:
        sys.exit(f"row counts differ: {rows}")
    for name, ts in times.items():
        print(f"{name}: {rows[name]} rows, median {statistics.median(ts) * 1000:.0f} ms, "
              f"runs {[round(t * 1000) for t in ts]}")
    print(f"ratio new/old (medians): {statistics.median(times['new']) / statistics.median(times['old']):.2f}")


if __name__ == "__main__":
    main()
