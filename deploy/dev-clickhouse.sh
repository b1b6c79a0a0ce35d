#!/usr/bin/env bash
# Start a throw-away ClickHouse server on a free loopback port with its own config and data dir.
#
#   deploy/dev-clickhouse.sh start [DIR]   # prints OOMLENS_CLICKHOUSE_URL=http://127.0.0.1:PORT
#   deploy/dev-clickhouse.sh stop  [DIR]
#
# Uses `clickhouse server` from a modern single binary when `clickhouse` is on PATH, else Debian's
# `clickhouse-server` (18.16). DIR defaults to ${TMPDIR:-/tmp}/oomlens-dev-clickhouse.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-start}
dir=${2:-${TMPDIR:-/tmp}/oomlens-dev-clickhouse}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

server_cmd() {
  if command -v clickhouse >/dev/null 2>&1; then
    echo "clickhouse server"
  elif command -v clickhouse-server >/dev/null 2>&1; then
    echo "clickhouse-server"
  elif [ -x /usr/sbin/clickhouse-server ]; then
    echo "/usr/sbin/clickhouse-server"
  else
    echo "no ClickHouse server found: install it with 'apt-get install -y clickhouse-server clickhouse-client' or put a 'clickhouse' binary on PATH" >&2
    return 1
  fi
}

case "$cmd" in
  start)
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "OOMLENS_CLICKHOUSE_URL=http://127.0.0.1:$(cat "$dir/http_port")"
      exit 0
    fi
    server=$(server_cmd)
    mkdir -p "$dir"/{data,tmp,log,user_files,format_schemas}
    http_port=$(free_port); tcp_port=$(free_port)
    sed -e "s#@DIR@#$dir#g" -e "s#@HTTP_PORT@#$http_port#g" -e "s#@TCP_PORT@#$tcp_port#g" \
      "$here/clickhouse/dev-config.xml" > "$dir/config.xml"
    cp "$here/clickhouse/dev-users.xml" "$dir/users.xml"
    echo "$http_port" > "$dir/http_port"
    # shellcheck disable=SC2086
    # Started directly in the background (no wrapper), so $! is the server's own pid.
    cd "$dir"
    nohup $server --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 </dev/null &
    echo $! > "$dir/pid"
    cd - >/dev/null
    for _ in $(seq 1 300); do
      if [ "$(curl -fsS "http://127.0.0.1:$http_port/ping" 2>/dev/null)" = "Ok." ]; then
        echo "OOMLENS_CLICKHOUSE_URL=http://127.0.0.1:$http_port"
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "ClickHouse exited during start-up; see $dir/log/" >&2
        tail -20 "$dir/log/clickhouse-server.err.log" "$dir/log/stdout.log" >&2 || true
        exit 1
      fi
      sleep 0.1
    done
    echo "ClickHouse did not answer /ping within 30 s; see $dir/log/" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/pid" ]; then
      pid=$(cat "$dir/pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/pid"
    fi
    ;;
  *)
    echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
