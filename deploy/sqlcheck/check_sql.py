#!/usr/bin/env python3
"""Runs every built-in query on a modern engine (chdb-core, ClickHouse 26.x in-process) and, when a
server URL is given, on a real ClickHouse server (18.16 in CI), over the same fixture rows, and
compares the answers row by row.

    check_sql.py --ddl-modern FILE --ddl-old FILE --fixtures DIR --queries DIR [--queries DIR …]
                 [--grafana DASHBOARD.json] [--clickhouse-url URL]

* --ddl-modern: DDL rendered for a modern server (`oomlens-collector ddl --server-version 26.9.1`), run in chdb-core.
* --ddl-old:    DDL rendered for the server behind --clickhouse-url (`oomlens-collector ddl --server-version 18.16.1`).
  Statements are separated by ";\\n" and create tables (and the materialized views filling the
  rollups, created before the fixtures are inserted) in the database `oomlens`.
* --fixtures:   one `<table>.jsonl` (JSONEachRow) per table.
* --queries:    the built-in `*.sql` files with their `-- name/description/param` header (repeatable:
  collector/sql and the dashboard's deploy/grafana/sql; names must be unique).
* --grafana:    a dashboard JSON (deploy/grafana/oomlens-dashboard.json): the SQL of every panel
  target, query variable and annotation runs too, with the Grafana macros replaced by the fixture
  values in GRAFANA_FIXTURE_VALUES; any other `$` macro left in the SQL is a failure.

Every query runs twice per engine: on the rows as inserted (re-sent duplicates still separate; the
modern insert uses optimize_on_insert = 0) and after OPTIMIZE TABLE … FINAL. All runs must give the
same answer, so a query that only deduplicates after merges fails. Retention TTLs in the modern DDL
are paused (SYSTEM STOP TTL MERGES) since the fixture timestamps are fixed.

The database `oomlens` is DROPPED and re-created on the server: point it at a throw-away server
(deploy/dev-clickhouse.sh). Each query runs with its header's example parameter values, quoted the
way the Rust client's `?` bind quotes them. Prints one line per query and `N passed, M failed`; the
exit code is non-zero when anything failed. Needs only the standard library and chdb-core.
"""
from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

DB = "oomlens"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
INT_RANGES = {
    "Int8": (-(2**7), 2**7 - 1), "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1), "Int64": (-(2**63), 2**63 - 1),
    "UInt8": (0, 2**8 - 1), "UInt16": (0, 2**16 - 1), "UInt32": (0, 2**32 - 1), "UInt64": (0, 2**64 - 1),
}
FLOATS = {"Float32", "Float64"}


class CheckError(Exception):
    """A setup or query failure with a readable message."""


# ---------------------------------------------------------------- query files (mirror of queries.rs)

@dataclass
class Param:
    name: str
    ty: str
    example: str


@dataclass
class Query:
    name: str
    description: str
    params: list[Param] = field(default_factory=list)
    sql: str = ""
    path: Path | None = None


def parse_query(path: Path) -> Query:
    """Parses the `-- key: value` header the same way collector/src/analysis/queries.rs does."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    q = Query(name="", description="", path=path)
    body_start = len(lines)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("--"):
            body_start = i
            break
        m = re.match(r"--\s*(name|description|param):\s*(.*)\Z", stripped)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "name":
            q.name = value
        elif key == "description":
            q.description = value
        else:
            pm = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z0-9]+)\s*=\s*(.*)\Z", value)
            if not pm:
                raise CheckError(f"{path.name}: line {i + 1}: expected `-- param: NAME TYPE = EXAMPLE`")
            p = Param(pm.group(1), pm.group(2), pm.group(3).strip())
            if p.ty not in INT_RANGES and p.ty not in FLOATS and p.ty != "String":
                raise CheckError(f"{path.name}: param {p.name}: unsupported type {p.ty}")
            q.params.append(p)
    q.sql = "\n".join(lines[body_start:]).strip().rstrip(";").strip()
    if not q.name:
        raise CheckError(f"{path.name}: missing `-- name:` header")
    if q.name != path.stem:
        raise CheckError(f"{path.name}: `-- name: {q.name}` differs from the file name")
    if not q.description:
        raise CheckError(f"{path.name}: missing `-- description:` header")
    if not q.sql:
        raise CheckError(f"{path.name}: no SQL after the header")
    if "FORMAT" in re.findall(r"[A-Za-z]+", q.sql)[-2:]:
        raise CheckError(f"{path.name}: no FORMAT clause please; the client chooses the format")
    return q


def quote_string(s: str) -> str:
    """Quotes like the clickhouse crate's client-side bind (`sql::escape::string`)."""
    out = []
    for ch in s:
        if ch in "\\'`\t\n":
            out.append("\\")
        out.append(ch)
    return "'" + "".join(out) + "'"


def literal(p: Param, value: str) -> str:
    if p.ty == "String":
        return quote_string(value)
    if p.ty in FLOATS:
        try:
            return repr(float(value))
        except ValueError:
            raise CheckError(f"param {p.name}: {value!r} is not a {p.ty}") from None
    try:
        v = int(value, 10)
    except ValueError:
        raise CheckError(f"param {p.name}: {value!r} is not a {p.ty}") from None
    lo, hi = INT_RANGES[p.ty]
    if not lo <= v <= hi:
        raise CheckError(f"param {p.name}: {v} is out of range for {p.ty}")
    return str(v)


def render(q: Query, db: str, values: list[str]) -> str:
    """`{db}` → database, each `?` → the quoted value (`??` → `?`), like `Query::bind` in Rust."""
    if not IDENT.match(db):
        raise CheckError(f"bad database name {db!r}")
    sql = q.sql.replace("{db}", db)
    out, n, i = [], 0, 0
    while i < len(sql):
        ch = sql[i]
        if ch == "?":
            if sql.startswith("??", i):
                out.append("?")
                i += 2
                continue
            if n >= len(q.params):
                raise CheckError(f"{q.name}: more `?` placeholders than `-- param:` lines")
            out.append(literal(q.params[n], values[n]))
            n += 1
        else:
            out.append(ch)
        i += 1
    if n != len(q.params):
        raise CheckError(f"{q.name}: {n} `?` placeholders but {len(q.params)} `-- param:` lines")
    return "".join(out)


# ------------------------------------------------------------------------------------------ engines

def split_statements(ddl: str) -> list[str]:
    return [s.strip() for s in re.split(r";\s*\n", ddl) if s.strip().rstrip(";").strip()]


def table_names(statements: list[str]) -> list[str]:
    names = []
    for s in statements:
        m = re.match(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:\w+\.)?(\w+)", s, re.I)
        if m:
            names.append(m.group(1))
    return names


class Chdb:
    """ClickHouse 26.x in-process (chdb-core)."""

    def __init__(self) -> None:
        try:
            from chdb import _chdb  # noqa: PLC0415
            import chdb  # noqa: PLC0415
        except ImportError as e:
            raise CheckError(f"chdb-core is not installed ({e}); pip install chdb-core") from None
        self.dir = tempfile.mkdtemp(prefix="oomlens-sqlcheck-chdb-")
        self.conn = _chdb.connect(self.dir)
        self.name = f"chdb-core {getattr(chdb, '__version__', '?')}"

    def run(self, sql: str, fmt: str = "TabSeparated") -> str:
        try:
            res = self.conn.query(sql, fmt)
        except Exception as e:  # chdb raises RuntimeError for most SQL errors …
            raise CheckError(str(e).strip()) from None
        if res.has_error():  # … and reports some through the result
            raise CheckError(res.error_message().strip())
        return res.bytes().decode("utf-8")

    def insert(self, table: str, data: str) -> None:
        # optimize_on_insert (modern only, on by default) would collapse the ReplacingMergeTree
        # duplicates inside the insert; keep them, like rows re-sent in separate inserts.
        self.run(f"INSERT INTO {DB}.{table} SETTINGS optimize_on_insert = 0 FORMAT JSONEachRow\n{data}")

    def version(self) -> str:
        return self.run("SELECT version()").strip()

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Http:
    """A ClickHouse server over HTTP (the 18.16 dev server in CI)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/"
        self.name = f"server {url}"

    def _post(self, body: bytes, query: str | None = None) -> str:
        url = self.url + ("?" + urllib.parse.urlencode({"query": query}) if query else "")
        req = urllib.request.Request(url, data=body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            raise CheckError(e.read().decode("utf-8", "replace").strip() or str(e)) from None
        except OSError as e:
            raise CheckError(f"cannot reach {self.url}: {e}") from None

    def run(self, sql: str, fmt: str = "TabSeparated") -> str:
        is_select = re.match(r"\s*(SELECT|WITH|SHOW|DESCRIBE)\b", sql, re.I)
        return self._post(((sql + f"\nFORMAT {fmt}") if is_select else sql).encode("utf-8"))

    def insert(self, table: str, data: str) -> None:
        self._post(data.encode("utf-8"), f"INSERT INTO {DB}.{table} FORMAT JSONEachRow")

    def version(self) -> str:
        return self.run("SELECT version()").strip()

    def close(self) -> None:
        pass


def view_targets(statements: list[str]) -> list[str]:
    """Tables filled by a `CREATE MATERIALIZED VIEW … TO <table>` (the rollups): no fixture file."""
    targets = []
    for s in statements:
        m = re.match(r"CREATE\s+MATERIALIZED\s+VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?\S+\s+TO\s+(?:\w+\.)?(\w+)", s, re.I)
        if m:
            targets.append(m.group(1))
    return targets


def set_up(engine, ddl: str, fixtures: Path) -> None:
    statements = split_statements(ddl)
    tables = table_names(statements)
    targets = view_targets(statements)
    if not tables or len(tables) + len(targets) != len(statements):
        raise CheckError(
            "the DDL must be CREATE TABLE and CREATE MATERIALIZED VIEW … TO statements only, separated by ';\\n'"
        )
    engine.run(f"DROP DATABASE IF EXISTS {DB}")
    engine.run(f"CREATE DATABASE {DB}")
    # The views come after their tables in the DDL and exist before the fixtures are inserted, so
    # the inserts fill the rollups as the collector's inserts do.
    for s in statements:
        table = table_names([s])
        try:
            engine.run(s)
            if table and re.search(r"^TTL\b", s, re.M):
                # The fixture rows have fixed timestamps that a retention TTL would delete in a
                # background merge (on modern servers only): keep them; the queries are under test.
                engine.run(f"SYSTEM STOP TTL MERGES {DB}.{table[0]}")
        except CheckError as e:
            raise CheckError(f"DDL failed: {e}\n--- statement:\n{s}") from None
    for table in tables:
        path = fixtures / f"{table}.jsonl"
        if table in targets:
            if path.exists():
                raise CheckError(f"{path}: {table} is filled by a materialized view, not by a fixture")
            continue
        if not path.exists():
            print(f"warning: no fixture {path} for table {table}", file=sys.stderr)
            continue
        try:
            engine.insert(table, path.read_text(encoding="utf-8"))
        except CheckError as e:
            raise CheckError(f"loading {path} failed: {e}") from None
    extra = sorted(p.stem for p in fixtures.glob("*.jsonl") if p.stem not in tables)
    if extra:
        raise CheckError(f"fixtures for tables the DDL does not create: {', '.join(extra)}")


# ---------------------------------------------------------------------------------------- comparing

NUM = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\Z")


def normalise_field(f: str) -> str:
    if NUM.match(f):
        if re.fullmatch(r"-?\d+", f):
            return str(int(f))
        return format(float(f), ".12g")
    if f in ("nan", "-nan", "inf", "-inf", "+inf"):
        return f.lstrip("+").replace("-nan", "nan")
    return f


def normalise(tsv: str) -> list[str]:
    return ["\t".join(normalise_field(f) for f in line.split("\t")) for line in tsv.splitlines()]


def optimize(engine, tables: list[str]) -> None:
    """Merges every part (collapsing ReplacingMergeTree duplicates) so the queries see both states."""
    for table in tables:
        engine.run(f"OPTIMIZE TABLE {DB}.{table} FINAL")


def run_all(engines, queries: list[tuple[Query, str]], phase: str, results: dict, errors: dict) -> None:
    for q, sql in queries:
        for e in engines:
            t0 = time.monotonic()
            try:
                rows = normalise(e.run(sql))
            except CheckError as err:
                errors.setdefault(q.name, []).append(f"  {e.name} ({phase}): {err}")
                continue
            results.setdefault(q.name, []).append((f"{e.name} ({phase})", rows, time.monotonic() - t0))


# ------------------------------------------------------------------------------------------ Grafana

# Grafana macros and template variables -> literal values that select the fixture rows.
GRAFANA_FIXTURE_VALUES = {
    "${__from}": "0",
    "${__to}": "9223372036854775807",
    "${__interval_ms}": "60000",
    "${cluster:sqlstring}": "'train-east'",
    "${node:sqlstring}": "'gpu-node-01'",
    "${gpu}": "0",
}


def grafana_queries(path: Path) -> list[tuple[Query, str]]:
    """(name, SQL with the macros replaced) for every panel target, query variable and annotation."""
    import json  # noqa: PLC0415

    try:
        dash = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckError(f"cannot read {path}: {e}") from None
    found: list[tuple[str, str]] = []
    for p in dash.get("panels", []):
        for t in p.get("targets", []):
            if "rawSql" in t:
                found.append((f"panel {p.get('id')} {p.get('title')!r} {t.get('refId', '')}", t["rawSql"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            found.append((f"variable {v.get('name')}", q.get("rawSql", "") if isinstance(q, dict) else q))
    for a in dash.get("annotations", {}).get("list", []):
        if "rawSql" in a.get("target", {}):
            found.append((f"annotation {a.get('name')!r}", a["target"]["rawSql"]))
    out = []
    for name, sql in found:
        for macro, value in GRAFANA_FIXTURE_VALUES.items():
            sql = sql.replace(macro, value)
        if "$" in sql:
            raise CheckError(f"grafana {name}: unknown macro left in: {sql[sql.index('$'):][:40]!r}")
        out.append((Query(name=f"grafana {name}", description=name, sql=sql), sql))
    if not out:
        raise CheckError(f"{path}: no SQL found in the dashboard")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ddl-modern", required=True, type=Path)
    ap.add_argument("--ddl-old", type=Path, help="required with --clickhouse-url")
    ap.add_argument("--fixtures", required=True, type=Path)
    ap.add_argument("--queries", required=True, type=Path, action="append")
    ap.add_argument("--grafana", type=Path, help="a Grafana dashboard JSON whose SQL runs too")
    ap.add_argument("--clickhouse-url", help="a throw-away server, e.g. http://127.0.0.1:8123")
    args = ap.parse_args()
    if args.clickhouse_url and not args.ddl_old:
        ap.error("--clickhouse-url needs --ddl-old")

    started = time.monotonic()
    passed, failed = 0, 0
    files = sorted(f for d in args.queries for f in d.glob("*.sql"))
    if not files:
        print(f"no *.sql files in {', '.join(map(str, args.queries))}")
        print("0 passed, 1 failed")
        return 1

    engines = []
    try:
        try:
            modern = Chdb()
            engines.append(modern)
            ddl = args.ddl_modern.read_text(encoding="utf-8")
            tables = table_names(split_statements(ddl))
            set_up(modern, ddl, args.fixtures)
            if args.clickhouse_url:
                old = Http(args.clickhouse_url)
                engines.append(old)
                set_up(old, args.ddl_old.read_text(encoding="utf-8"), args.fixtures)
            names = [f"{e.name} ({e.version()})" for e in engines]
        except (CheckError, OSError) as e:
            name = engines[-1].name if engines else "chdb-core"
            print(f"FAIL setup on {name}: {e}")
            print(f"0 passed, {len(files)} failed")
            return 1
        alone = "" if len(engines) > 1 else " (no --clickhouse-url: nothing to compare with)"
        print("engines: " + "; ".join(names) + alone)

        queries, bad = [], {}
        for path in files:
            try:
                q = parse_query(path)
                queries.append((q, render(q, DB, [p.example for p in q.params])))
            except CheckError as e:
                bad[path.stem] = str(e)
        names = [path.stem for path in files]
        dupes = sorted({n for n in names if names.count(n) > 1})
        for n in dupes:
            bad[n] = "the same query name in more than one --queries directory"
        if args.grafana:
            try:
                for q, sql in grafana_queries(args.grafana):
                    queries.append((q, sql))
                    names.append(q.name)
            except CheckError as e:
                bad["grafana"] = str(e)
                names.append("grafana")

        # Every query runs on the rows as inserted (re-sent duplicates in separate parts) and again
        # after OPTIMIZE … FINAL: the answers must not depend on whether merges have happened.
        results: dict = {}
        errors: dict = {}
        run_all(engines, queries, "as inserted", results, errors)
        try:
            for e in engines:
                optimize(e, tables)
        except CheckError as e:
            print(f"FAIL OPTIMIZE … FINAL: {e}")
            print(f"0 passed, {len(files)} failed")
            return 1
        run_all(engines, queries, "merged", results, errors)

        sql_of = {q.name: sql for q, sql in queries}
        for name in dict.fromkeys(names):
            if name in bad:
                print(f"FAIL {name}: {bad[name]}")
                failed += 1
                continue
            if name in errors:
                print(f"FAIL {name}: error\n" + "\n".join(errors[name]) + "\n  --- SQL:\n" + sql_of[name])
                failed += 1
                continue
            runs = results[name]
            base_name, base, _ = runs[0]
            diffs = []
            for other_name, rows, _ in runs[1:]:
                if rows != base:
                    diff = difflib.unified_diff(base, rows, base_name, other_name, lineterm="", n=1)
                    diffs.append("\n".join("  " + line for line in list(diff)[:60]))
            slowest = max(t for _, _, t in runs) * 1000
            if diffs:
                print(f"FAIL {name}: results differ ({len(base)} rows on {base_name})\n" + "\n".join(diffs))
                failed += 1
            elif not base:
                # Two empty answers agree on nothing: every query must select fixture rows.
                print(f"FAIL {name}: 0 rows on every engine: extend the fixtures or the example parameters so it is exercised")
                failed += 1
            else:
                print(f"ok   {name}: {len(base)} rows, identical in {len(runs)} runs (slowest {slowest:.0f} ms)")
                passed += 1
    finally:
        for e in engines:
            e.close()
    print(f"checked {passed + failed} queries in {time.monotonic() - started:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
