#!/usr/bin/env bash
# Ray across a DGX Spark fleet: one raylet per Spark, each with a custom resource and a label named after the
# node, so infra/fleet-spark.toml can pin servers and workers to it (resource = "spark1").
#
#   on the head Spark:   infra/ray-spark-fleet.sh head   spark1
#   on every other one:  infra/ray-spark-fleet.sh worker spark2 <head-ip>
#   then, from anywhere: ray job submit --address http://<head-ip>:8265 --working-dir . -- \
#                          python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml
#   (with fleet.file = "../../infra/fleet-spark.toml" in the experiment)
#
# Every Spark needs the same checkout/venv (the job ships the code, not the models), the target model and
# drafts at the paths the profiles name (/models/...), and sglang installed.
set -euo pipefail
# a worker's flush (~370 KB at 50k frames/s) goes inline, not through the object store: ~2 ms CPU less a call
export RAY_max_direct_call_object_size=${RAY_max_direct_call_object_size:-4194304}  # = ray_setup.INLINE_ARGUMENT_BYTES
role=${1:?head|worker}; name=${2:?node name, e.g. spark1}
ip=${NODE_IP:-$(hostname -I | awk '{print $1}')}      # the address the other Sparks reach this one on
common=(--node-ip-address="$ip" --num-gpus=1           # one GB10 per Spark: fleet.server_resources = {GPU = 1}
        --resources="{\"$name\": 1}"                   # what the fleet file's `resource = "<name>"` matches
        --labels="loadgen-node=$name"                  # the same, for `labels = { loadgen-node = "<name>" }`
        --disable-usage-stats)
case $role in
  head)   ray start --head --port=6379 --dashboard-host=0.0.0.0 "${common[@]}" ;;   # 8265: ray job submit
  worker) ray start --address="${3:?head ip}:6379" "${common[@]}" ;;
  *)      echo "usage: $0 head|worker NAME [HEAD_IP]" >&2; exit 2 ;;
esac
