#!/usr/bin/env bash
# Three emulated Sparks on one machine: a Ray head and two more raylets, each with the custom resource
# infra/fleet-emulated.toml looks for (spark1, spark2, spark3). Every raylet gets its own ports (two
# raylets on one machine would otherwise fight over the defaults) and the cluster lives in its own temp dir.
#
#   infra/ray-emulated-fleet.sh up        # prints the address; then:
#   ray job submit --address http://127.0.0.1:8265 --working-dir . -- \   (LOADGEN_FLEET_DASHBOARD)
#       python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml
#   infra/ray-emulated-fleet.sh down      # stops exactly this cluster (found by its temp dir and GCS port)
set -euo pipefail
# a worker's flush (~370 KB at 50k frames/s) goes inline, not through the object store: ~2 ms CPU less a call
export RAY_max_direct_call_object_size=${RAY_max_direct_call_object_size:-4194304}  # = ray_setup.INLINE_ARGUMENT_BYTES
dir=${LOADGEN_FLEET_DIR:-/tmp/lgfleet}   # short: Ray's socket paths must fit in 107 bytes
gcs=${LOADGEN_FLEET_PORT:-46379}
dashboard=${LOADGEN_FLEET_DASHBOARD:-8265}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1   # Ray refuses several raylets on one host without it
ports() {  # distinct ports for raylet $1 (0, 1, 2)
  local b=$((47000 + $1 * 10))
  echo --node-manager-port=$b --object-manager-port=$((b + 1)) --dashboard-agent-listen-port=$((b + 2)) \
       --dashboard-agent-grpc-port=$((b + 3)) --runtime-env-agent-port=$((b + 4)) --metrics-export-port=$((b + 5)) \
       --min-worker-port=$((20000 + $1 * 1000)) --max-worker-port=$((20999 + $1 * 1000))
}
case ${1:-up} in
  up)
    # shellcheck disable=SC2046
    ray start --head --port="$gcs" --node-ip-address=127.0.0.1 --temp-dir="$dir" --dashboard-host=127.0.0.1 \
        --dashboard-port="$dashboard" --ray-client-server-port=$((gcs + 1)) \
        --num-cpus=2 --resources='{"spark1": 1}' --labels=loadgen-node=spark1 $(ports 0) --disable-usage-stats
    for i in 2 3; do
      # shellcheck disable=SC2046
      ray start --address="127.0.0.1:$gcs" --node-ip-address=127.0.0.1 --num-cpus=1 \
          --resources="{\"spark$i\": 1}" --labels="loadgen-node=spark$i" $(ports $((i - 1))) --disable-usage-stats
    done
    echo "emulated fleet up: ray job submit --address http://127.0.0.1:$dashboard ..." ;;
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
