#!/usr/bin/env bash
# Three emulated Sparks on one machine: a Ray head and two more raylets, each with the custom resource
# infra/fleet-emulated.toml looks for (spark1, spark2, spark3). Every raylet gets its own ports (two
# raylets on one machine would otherwise fight over the defaults) and the cluster lives in its own temp dir.
# Ray's token authentication is on: `up` generates the cluster's token into a file only its owner can read
# (LOADGEN_FLEET_TOKEN, default ~/.ray/lgfleet-<gcs port>.token); every raylet and `ray job` reads it from there.
#
#   infra/ray-emulated-fleet.sh up        # prints the address and how to submit; then:
#   RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=~/.ray/lgfleet-46379.token \
#     ray job submit --address http://127.0.0.1:8265 --working-dir . -- \   (LOADGEN_FLEET_DASHBOARD)
#       python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml
#   infra/ray-emulated-fleet.sh down      # stops exactly this cluster (found by its temp dir and GCS port)
set -euo pipefail
# a worker's flush (~370 KB at 50k frames/s) goes inline, not through the object store: ~2 ms CPU less a call
export RAY_max_direct_call_object_size=${RAY_max_direct_call_object_size:-4194304}  # = ray_setup.INLINE_ARGUMENT_BYTES
dir=${LOADGEN_FLEET_DIR:-/tmp/lgfleet}   # short: Ray's socket paths must fit in 107 bytes
gcs=${LOADGEN_FLEET_PORT:-46379}
dashboard=${LOADGEN_FLEET_DASHBOARD:-8265}
base=${LOADGEN_FLEET_PORT_BASE:-47000}   # raylet i uses base + 10 i .. + 5
workers=${LOADGEN_FLEET_WORKER_PORTS:-20000}   # raylet i's workers: + 1000 i .. + 999
token=${LOADGEN_FLEET_TOKEN:-$HOME/.ray/lgfleet-$gcs.token}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1   # Ray refuses several raylets on one host without it
ports() {  # distinct ports for raylet $1 (0, 1, 2)
  local b=$((base + $1 * 10))
  echo --node-manager-port=$b --object-manager-port=$((b + 1)) --dashboard-agent-listen-port=$((b + 2)) \
       --dashboard-agent-grpc-port=$((b + 3)) --runtime-env-agent-port=$((b + 4)) --metrics-export-port=$((b + 5)) \
       --min-worker-port=$((workers + $1 * 1000)) --max-worker-port=$((workers + 999 + $1 * 1000))
}
private_token() {  # generate the token once (256 random bits, as `ray get-auth-token --generate` does), owner-only
  if [ ! -e "$token" ]; then
    (umask 077 && mkdir -p "$(dirname "$token")" &&
     python3 -c 'import secrets, sys; sys.stdout.write(secrets.token_hex(32))' > "$token")
  fi
  if [ "$(stat -c '%u %a' "$token")" != "$(id -u) 600" ]; then
    echo "error: $token must be yours and readable by you only (fix: chmod 600 $token)" >&2; exit 2
  fi
}
case ${1:-up} in
  up)
    private_token
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token"   # the path, never the token, in the environment
    unset RAY_AUTH_TOKEN
    # shellcheck disable=SC2046
    ray start --head --port="$gcs" --node-ip-address=127.0.0.1 --temp-dir="$dir" --dashboard-host=127.0.0.1 \
        --dashboard-port="$dashboard" --ray-client-server-port=$((gcs + 1)) \
        --num-cpus=2 --resources='{"spark1": 1}' --labels=loadgen-node=spark1 $(ports 0) --disable-usage-stats
    for i in 2 3; do
      # shellcheck disable=SC2046
      ray start --address="127.0.0.1:$gcs" --node-ip-address=127.0.0.1 --num-cpus=1 \
          --resources="{\"spark$i\": 1}" --labels="loadgen-node=spark$i" $(ports $((i - 1))) --disable-usage-stats
    done
    echo "emulated fleet up (token auth): RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$token" \
         "ray job submit --address http://127.0.0.1:$dashboard ..." ;;
  down)
    python3 - "$dir" "$gcs" <<'PY'
import os, sys, psutil
d, port = sys.argv[1], f":{sys.argv[2]}"
roots = [p for p in psutil.process_iter(["cmdline"]) if p.pid != os.getpid()
         and any(d in a or port in a for a in p.info["cmdline"] or [])]
victims = set(roots)
for r in roots:
    try: victims.update(r.children(recursive=True))
    except psutil.NoSuchProcess: pass
for v in victims:
    try: v.kill()
    except psutil.NoSuchProcess: pass
psutil.wait_procs(list(victims), timeout=10)
print(f"stopped {len(victims)} processes")
PY
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
