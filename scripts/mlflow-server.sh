#!/usr/bin/env bash
# An MLflow tracking server for Slurm runs: `mlflow-server.sh start|stop|status`.
#
# Many Slurm jobs writing one SQLite file on a shared filesystem is unsafe (SQLite's locks do not
# hold over NFS/Lustre), so on a cluster the jobs log over HTTP to one server, which alone writes
# the SQLite store. Start it on one node (the login node, or a long job), then export what it prints
# before `snakemake --profile slurm all`:
#
#   eval "$(scripts/mlflow-server.sh start)"      # prints: export MLFLOW_TRACKING_URI=http://<host>:<port>
#
# start   starts `mlflow server` with the SQLite store <dir>/mlflow.db and artifacts in
#         <dir>/mlartifacts, waits until a read-only API call (experiments/search) through the
#         exported URI succeeds, prints the export line; when the server of <dir> is already
#         running, prints its line again.
# stop    stops it; fine when it is not running.
# status  prints the export line; exits 1 when it is not running.
#
# Names and addresses. MLflow (3.x) answers API calls only when their Host header is one of its
# allowed hosts (`mlflow server --allowed-hosts`, env MLFLOW_SERVER_ALLOWED_HOSTS; default:
# localhost and private IP ranges, never a node name) and 403 "Invalid Host header" otherwise;
# /health is exempt, so a health check proves nothing. The jobs send the host of the exported URI,
# so the server allows this node's names (short and fully qualified), its addresses, loopback,
# MLFLOW_SERVER_HOST and whatever MLFLOW_SERVER_ALLOWED_HOSTS adds (a name without a port is
# allowed on any port). It listens on 0.0.0.0, not on MLFLOW_SERVER_HOST: a node name often
# resolves to a loopback address on its own node (Debian's 127.0.1.1 in /etc/hosts) or to one
# interface of several, so binding to it can leave the compute nodes unable to connect. The bind
# address only chooses interfaces (mlflow server --help: "NOT a security setting"); the allowed
# hosts are the check. When MLFLOW_SERVER_HOST is a loopback address (one machine), it listens
# there only; MLFLOW_SERVER_BIND picks another interface.
#
# Settings (environment): MLFLOW_SERVER_DIR (default results/mlflow-server), MLFLOW_SERVER_HOST
# (default this node's name, reachable from the compute nodes; 127.0.0.1 for one machine),
# MLFLOW_SERVER_BIND (default 0.0.0.0, or MLFLOW_SERVER_HOST when loopback),
# MLFLOW_SERVER_ALLOWED_HOSTS (more allowed Host headers, comma-separated),
# MLFLOW_SERVER_PORT (default 5000), MLFLOW_SERVER_READY_TIMEOUT_S (default 120).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${MLFLOW_SERVER_DIR:-$ROOT/results/mlflow-server}
HOST=${MLFLOW_SERVER_HOST:-$(hostname -f 2>/dev/null || hostname)}
PORT=${MLFLOW_SERVER_PORT:-5000}
case "$HOST" in
  localhost | 127.* | ::1) BIND=${MLFLOW_SERVER_BIND:-$HOST} ;;
  *) BIND=${MLFLOW_SERVER_BIND:-0.0.0.0} ;;
esac
READY_TIMEOUT_S=${MLFLOW_SERVER_READY_TIMEOUT_S:-120}
PID_FILE="$DIR/server.pid"
URI_FILE="$DIR/server.uri"
LOG_FILE="$DIR/server.log"

log() { echo "mlflow-server: $*" >&2; }
die() { log "error: $*"; exit 1; }

mlflow_command() {
  if [ -x "$ROOT/.venv/bin/mlflow" ]; then echo "$ROOT/.venv/bin/mlflow"
  elif command -v mlflow >/dev/null; then command -v mlflow
  else die "no mlflow found (neither $ROOT/.venv/bin/mlflow nor on PATH); run scripts/install.sh"
  fi
}

running() { [ -s "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

host_patterns() {  # host_patterns NAME...: the Host headers naming NAME, without and with a port
  local name
  for name in "$@"; do
    case "$name" in
      "") ;;
      *:*) echo "[$name]"; echo "[[]$name]:*" ;;  # IPv6; MLflow matches with fnmatch: [ escaped
      *) echo "$name"; echo "$name:*" ;;
    esac
  done
}

allowed_hosts() {  # the value of --allowed-hosts: this node's names and addresses, and the user's
  local extra name
  IFS=, read -ra extra <<<"${MLFLOW_SERVER_ALLOWED_HOSTS:-}"
  {
    # $(hostname -I) unquoted: one word per address
    host_patterns localhost 127.0.0.1 ::1 "$HOST" "$(hostname)" "$(hostname -s 2>/dev/null)" \
      "$(hostname -f 2>/dev/null)" $(hostname -I 2>/dev/null)
    for name in "${extra[@]}"; do
      case "$name" in
        *:*) echo "$name" ;;  # has a port (or is IPv6): as given
        *) host_patterns "$name" ;;
      esac
    done
  } | sort -u | paste -sd, -
}

ready() {  # ready URI: a read-only API call through URI succeeds; prints the answer of a refusal
  python3 - "$1/api/2.0/mlflow/experiments/search?max_results=1" <<'EOF'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=2).read()
except urllib.error.HTTPError as error:
    answer = error.read(200).decode(errors="replace").strip().splitlines()
    print(f"HTTP {error.code}: {answer[0] if answer else error.reason}")
    sys.exit(1)
except OSError:
    sys.exit(1)
EOF
}

start() {
  if running; then
    echo "export MLFLOW_TRACKING_URI=$(cat "$URI_FILE")"
    return
  fi
  mkdir -p "$DIR" || die "cannot create $DIR"
  local mlflow uri
  mlflow=$(mlflow_command)
  uri="http://$HOST:$PORT"
  # Its own session, so that it outlives the shell that started it.
  setsid "$mlflow" server --host "$BIND" --port "$PORT" --workers 1 \
    --allowed-hosts "$(allowed_hosts)" \
    --backend-store-uri "sqlite:///$DIR/mlflow.db" --artifacts-destination "$DIR/mlartifacts" \
    >"$LOG_FILE" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  echo "$uri" >"$URI_FILE"
  local waited=0 refusal
  until refusal=$(ready "$uri"); do
    if [ -n "$refusal" ]; then
      stop 2>/dev/null  # quietly: the error says so, in one line
      die "mlflow server refuses API calls through $uri ($refusal); stopped it; see $LOG_FILE"
    fi
    if ! running; then
      die "mlflow server exited; last lines of $LOG_FILE:"$'\n'"$(tail -n 20 "$LOG_FILE")"
    fi
    if [ "$waited" -ge "$READY_TIMEOUT_S" ]; then
      stop
      die "mlflow server at $uri did not answer within $READY_TIMEOUT_S s; see $LOG_FILE"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  log "serving $DIR on $uri (log: $LOG_FILE)"
  echo "export MLFLOW_TRACKING_URI=$uri"
}

stop() {
  if running; then
    local pid
    pid=$(cat "$PID_FILE")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"  # its session: gunicorn/uvicorn workers too
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    log "stopped"
  fi
  rm -f "$PID_FILE" "$URI_FILE"
}

status() {
  running || { log "not running ($DIR)"; exit 1; }
  echo "export MLFLOW_TRACKING_URI=$(cat "$URI_FILE")"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status" ;;
esac
