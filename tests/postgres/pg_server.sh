#!/usr/bin/env bash
# A throw-away PostgreSQL server for tests, from Debian's package (postgresql-15).
#
#   pg_server.sh check        exit 0 when the server binaries are here; else exit 77 and say which
#                             are missing (the only case a test may skip)
#   pg_server.sh start DIR    initdb in DIR/pg, start on 127.0.0.1 on a free port of its own (and a
#                             Unix socket in DIR/pg/sock), create the database "fleetgate"; print
#                             "url=postgresql://..." and "pid=N" (also written to DIR/pg/url, pid)
#   pg_server.sh start DIR --watch PID
#                             the same, and stop the server when process PID ends (a backstop for
#                             a test process that crashes before its own stop)
#   pg_server.sh stop DIR     stop that server by its PID (fast shutdown, SIGKILL after 10 s)
#
# Run as root, the server runs as FLEETGATE_PG_USER (default: nobody): initdb refuses root.
# FLEETGATE_PG_BIN overrides the binaries' directory (default /usr/lib/postgresql/15/bin).
# Durability is traded for speed (fsync off): the tests kill gateways, never this server.
# Used by tests/integration/lib/postgres.mjs and tests/orchestrator/storage/pg_harness.cpp.
set -euo pipefail

PG_BIN="${FLEETGATE_PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_USER="${FLEETGATE_PG_USER:-nobody}"

die() {
  echo "pg_server.sh: $*" >&2
  exit 1
}

check() {
  local missing=()
  for b in initdb pg_ctl postgres psql; do
    [ -x "$PG_BIN/$b" ] || missing+=("$PG_BIN/$b")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "PostgreSQL server binaries missing (${missing[*]}): install Debian's postgresql package (./fleet test does)" >&2
    exit 77
  fi
}

# Runs a command as the server's user: as is when not root.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    local uid gid
    uid="$(id -u "$PG_USER")" || die "no user $PG_USER to run PostgreSQL as (set FLEETGATE_PG_USER)"
    gid="$(id -g "$PG_USER")"
    HOME="$PGDIR" setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"
  else
    "$@"
  fi
}

server_pid() {
  [ -f "$PGDIR/data/postmaster.pid" ] && head -n 1 "$PGDIR/data/postmaster.pid"
}

# Alive and not a zombie (the postmaster's parent is whoever adopted it after pg_ctl left).
alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

start() {
  check
  mkdir -p "$PGDIR"
  # The server's user must reach DIR/pg (mkdtemp makes DIR 0700).
  chmod 0755 "$1"
  if [ "$(id -u)" -eq 0 ]; then
    chown "$PG_USER" "$PGDIR"
  fi
  as_pg mkdir -p "$PGDIR/sock"
  as_pg "$PG_BIN/initdb" -D "$PGDIR/data" -U postgres --auth=trust --no-sync --no-locale -E UTF8 \
    >"$PGDIR/initdb.log" 2>&1 || { cat "$PGDIR/initdb.log" >&2; die "initdb failed"; }
  local port attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$((20000 + RANDOM % 40000))
    # A port another process holds makes the start fail at bind: take another.
    if as_pg "$PG_BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 \
      -o "-p $port -k $PGDIR/sock -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100" \
      start >"$PGDIR/pg_ctl.log" 2>&1; then
      break
    fi
    if ! grep -qE 'could not bind|Address already in use|could not create any TCP/IP sockets' "$PGDIR/server.log" 2>/dev/null; then
      cat "$PGDIR/pg_ctl.log" "$PGDIR/server.log" >&2 2>/dev/null || true
      die "the server did not start"
    fi
    port=""
    : >"$PGDIR/server.log"
  done
  [ -n "$port" ] || die "no free port after $attempt attempts"
  local pid
  pid="$(server_pid)"
  as_pg "$PG_BIN/psql" -X -q -h "$PGDIR/sock" -p "$port" -U postgres -d postgres \
    -c 'CREATE DATABASE fleetgate' >"$PGDIR/createdb.log" 2>&1 ||
    { cat "$PGDIR/createdb.log" >&2; stop_server; die "CREATE DATABASE failed"; }
  local url="postgresql://postgres@127.0.0.1:$port/fleetgate"
  echo "$url" >"$PGDIR/url"
  echo "$pid" >"$PGDIR/pid"
  if [ -n "$WATCH" ]; then
    (tail --pid="$WATCH" -f /dev/null; stop_server) </dev/null >/dev/null 2>&1 &
    disown
  fi
  echo "url=$url"
  echo "pid=$pid"
}

stop_server() {
  local pid
  pid="$(cat "$PGDIR/pid" 2>/dev/null || server_pid || true)"
  [ -n "$pid" ] || return 0
  alive "$pid" || return 0
  kill -INT "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 100); do
    alive "$pid" || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

case "${1:-}" in
check) check ;;
start)
  WATCH=""
  if [ $# -eq 4 ] && [ "$3" = --watch ]; then
    WATCH="$4"
  elif [ $# -ne 2 ]; then
    die "usage: pg_server.sh start DIR [--watch PID]"
  fi
  [ -d "$2" ] || die "start: $2 is not a directory"
  PGDIR="$2/pg"
  start "$2"
  ;;
stop)
  [ $# -eq 2 ] || die "usage: pg_server.sh stop DIR"
  PGDIR="$2/pg"
  stop_server
  ;;
*) die "usage: pg_server.sh check | start DIR | stop DIR" ;;
esac
