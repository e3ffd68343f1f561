#!/usr/bin/env bash
# Ray across a DGX Spark fleet: one raylet per Spark, each with a custom resource and a label named after the
# node, so infra/fleet-spark.toml can pin servers and workers to it (resource = "spark1").
#
#   on the head Spark:   infra/ray-spark-fleet.sh head   spark1            # generates the cluster's token
#   copy the token:      scp -p <head>:.ray/auth_token ~/.ray/auth_token && chmod 600 ~/.ray/auth_token
#   on every other one:  infra/ray-spark-fleet.sh worker spark2 <head-ip>
#   then, from anywhere with the token file:
#     RAY_AUTH_MODE=token ray job submit --address http://<head-ip>:8265 --working-dir . -- \
#       python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml
#   (with fleet.file = "../../infra/fleet-spark.toml" in the experiment)
#
# Ray's token authentication is always on: without the token, neither the job API (8265) nor the GCS (6379)
# accepts anything, so nobody who merely reaches these ports can run code on the Sparks. The token lives in a
# file only its owner can read (RAY_AUTH_TOKEN_PATH, default ~/.ray/auth_token); it is never put on a command
# line or in the environment. The dashboard listens on DASHBOARD_HOST (default 0.0.0.0: `ray job submit` from
# another machine), which the token protects; DASHBOARD_HOST=127.0.0.1 keeps it on the head only.
#
# Every Spark needs the same checkout/venv (the job ships the code, not the models; install it with the exact
# versions: python3 -m pip install -c constraints.txt -e '.[sglang]'), the target model and drafts at the paths
# the profiles name (/models/...), and sglang installed. Secrets of the servers (their
# api-key, HF_TOKEN for the hub) come from the environment of `ray start` or files on each Spark, never from
# the profiles (docs/fleets.md, "Securing a fleet").
set -euo pipefail
# a worker's flush (~370 KB at 50k frames/s) goes inline, not through the object store: ~2 ms CPU less a call
export RAY_max_direct_call_object_size=${RAY_max_direct_call_object_size:-4194304}  # = ray_setup.INLINE_ARGUMENT_BYTES
if [ "${RAY_AUTH_MODE:-token}" != token ]; then
  echo "error: RAY_AUTH_MODE=$RAY_AUTH_MODE would open the fleet to anyone who reaches it (fix: unset it)" >&2; exit 2
fi
token=${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token"
unset RAY_AUTH_TOKEN   # a token in the environment is readable in /proc/<pid>/environ of every Ray process
role=${1:?head|worker}; name=${2:?node name, e.g. spark1}
case $role in head|worker) ;; *) echo "usage: $0 head|worker NAME [HEAD_IP]" >&2; exit 2 ;; esac
case $role in
  head)
    if [ ! -e "$token" ]; then   # 256 random bits, as `ray get-auth-token --generate` makes, owner-only
      (umask 077 && mkdir -p "$(dirname "$token")" &&
       python3 -c 'import secrets, sys; sys.stdout.write(secrets.token_hex(32))' > "$token")
      echo "generated the cluster's token in $token: copy it (scp -p, chmod 600) to every Spark and client" >&2
    fi ;;
  worker)
    [ -e "$token" ] || { echo "error: no token at $token (fix: copy the head's, scp -p, chmod 600)" >&2; exit 2; } ;;
esac
if [ "$(stat -c '%u %a' "$token")" != "$(id -u) 600" ]; then
  echo "error: $token must be yours and readable by you only (fix: chmod 600 $token)" >&2; exit 2
fi
ip=${NODE_IP:-$(hostname -I | awk '{print $1}')}      # the address the other Sparks reach this one on
common=(--node-ip-address="$ip" --num-gpus=1           # one GB10 per Spark: fleet.server_resources = {GPU = 1}
        --resources="{\"$name\": 1}"                   # what the fleet file's `resource = "<name>"` matches
        --labels="loadgen-node=$name"                  # the same, for `labels = { loadgen-node = "<name>" }`
        --disable-usage-stats)
case $role in
  head)   ray start --head --port=6379 --dashboard-host="${DASHBOARD_HOST:-0.0.0.0}" "${common[@]}" ;;  # 8265
  worker) ray start --address="${3:?head ip}:6379" "${common[@]}" ;;
  *)      echo "usage: $0 head|worker NAME [HEAD_IP]" >&2; exit 2 ;;
esac
