#!/usr/bin/env bash
# A local fleet over real inference: two fleetgate-agents, each starting and supervising its own
# llama.cpp llama-server, and the gateway in front of them with config/local-llama.yaml.
#
#   scripts/llama/run-local.sh [--model FILE.gguf] [--threads N] [--parallel N] [--ctx-size N]
#
#   --model FILE     the GGUF both llama-servers load (default: the tiny random-weight test model,
#                    .cache/llama/models/tiny-qwen2.gguf, made when missing)
#   --threads N      llama-server --threads per engine (default: half the cores each, at least 1)
#   --parallel N     llama-server --parallel: slots per agent (default 2)
#   --ctx-size N     llama-server --ctx-size, shared by the slots (default 4096)
#
# Ports (fixed, as in config/local-llama.yaml): gateway 127.0.0.1:8080 (admin 9090), agents
# 127.0.0.1:8181 and 8182, their llama-servers 127.0.0.1:8281 and 8282. The agents' output (and
# llama-server's, which the agents pass through) goes to .cache/llama/run/agent-{1,2}.log.
# Ctrl-C stops the gateway, then the agents (which stop their llama-servers).
#
# Needs: build/bin/fleetgate and build/bin/fleetgate-agent (./fleet build) and llama-server
# (scripts/llama/build.sh; run here when missing, about 10 minutes the first time).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${FLEETGATE_LLAMA_CACHE:-$ROOT/.cache/llama}"
BIN_DIR="${FLEETGATE_BIN_DIR:-$ROOT/build/bin}"
CONFIG="$ROOT/config/local-llama.yaml"
MODEL_NAME=local-llama            # models[0].name in config/local-llama.yaml
AGENT_PORTS=(8181 8182)           # models[0].endpoints in config/local-llama.yaml
ENGINE_PORTS=(8281 8282)

say() { printf '\033[1m[llama]\033[0m %s\n' "$*" >&2; }
die() { printf '[llama] error: %s\n' "$*" >&2; exit 1; }

model="" threads="" parallel=2 ctx=4096
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --ctx-size) ctx="$2"; shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done
[ -n "$threads" ] || threads=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))

if [ ! -x "$BIN_DIR/fleetgate" ] || [ ! -x "$BIN_DIR/fleetgate-agent" ]; then
  die "no fleetgate binaries in $BIN_DIR: run ./fleet build first"
fi
"$ROOT/scripts/llama/build.sh"
LLAMA_SERVER="$CACHE/bin/llama-server"
if [ -z "$model" ]; then
  model="$CACHE/models/tiny-qwen2.gguf"
  "$ROOT/scripts/llama/make_tiny_model.py" --out "$model"
fi
[ -f "$model" ] || die "no model file at $model"
model="$(cd "$(dirname "$model")" && pwd)/$(basename "$model")"

run_dir="$CACHE/run"
mkdir -p "$run_dir"
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# JSON strings are valid YAML strings: paths with spaces or quotes stay one argument.
q() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

for i in 0 1; do
  n=$((i + 1))
  cfg="$run_dir/agent-$n.yaml"
  cat >"$cfg" <<YAML
# written by scripts/llama/run-local.sh
listen: 127.0.0.1:${AGENT_PORTS[$i]}
model: $MODEL_NAME
engine:
  kind: llama-server
  url: http://127.0.0.1:${ENGINE_PORTS[$i]}
  command: [$(q "$LLAMA_SERVER"), --model, $(q "$model"), --alias, $MODEL_NAME, --host, 127.0.0.1,
            --port, "${ENGINE_PORTS[$i]}", --parallel, "$parallel", --ctx-size, "$ctx",
            --threads, "$threads", --metrics, --no-webui]
drain_timeout: 10s
YAML
  "$BIN_DIR/fleetgate-agent" --config "$cfg" >"$run_dir/agent-$n.log" 2>&1 &
  pids+=($!)
  say "agent $n on 127.0.0.1:${AGENT_PORTS[$i]} (llama-server on :${ENGINE_PORTS[$i]}; log $run_dir/agent-$n.log)"
done

# Wait until both agents say their llama-server is ready (a big model takes a while to load).
for i in 0 1; do
  for _ in $(seq 1 600); do
    kill -0 "${pids[$i]}" 2>/dev/null || die "agent $((i + 1)) exited; see $run_dir/agent-$((i + 1)).log"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${AGENT_PORTS[$i]}/health" || true)
    [ "$code" = 200 ] && break
    sleep 0.5
  done
  [ "$code" = 200 ] || die "agent $((i + 1)) not ready after 5 minutes; see $run_dir/agent-$((i + 1)).log"
done
say "both llama-servers ready ($(basename "$model"), $parallel slots and $threads threads each)"

cat >&2 <<MSG

  Fleetgate over two real llama.cpp servers (config/local-llama.yaml).
    OpenAI-compatible URL:  http://127.0.0.1:8080/v1     (model "$MODEL_NAME")
    Admin:                  http://127.0.0.1:9090/admin/v1/fleet   /metrics

  Try (in another terminal):
    curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model":"$MODEL_NAME","max_tokens":32,"messages":[{"role":"user","content":"Is this transaction risky?"}]}'

  Ctrl-C stops the gateway, the agents and their llama-servers.

MSG
"$BIN_DIR/fleetgate" --config "$CONFIG" &
pids=($! "${pids[@]}")
wait "${pids[0]}"
