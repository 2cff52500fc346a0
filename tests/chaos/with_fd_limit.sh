#!/bin/sh
# Runs a command with the soft file descriptor limit raised to 4096 (or the hard limit when that
# is lower): the chaos suite opens over 1,000 connections, and the gateway it starts inherits the
# limit (and raises its own soft limit to the hard one).
hard=$(ulimit -H -n)
if [ "$hard" = unlimited ] || [ "$hard" -ge 4096 ]; then
  ulimit -S -n 4096
else
  ulimit -S -n "$hard"
fi
exec "$@"
