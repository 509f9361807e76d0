#!/bin/sh
# Slurm PrologSlurmctld: place the job's network paths with Railyard on the
# nodes Slurm allocated, before the job starts (no C plugin needed).
#   slurm.conf:  PrologSlurmctld=/etc/slurm/railyard-prolog.sh
# Environment (e.g. /etc/default/railyard-slurm, sourced below if present):
#   RAILYARD_TARGET          the controller replicas, HOST:PORT[,HOST:PORT...]
#   RAILYARD_GPUS_PER_NODE   GPUs (= rails) per node the job uses, default 8
#   RAILYARD_TLS_ARGS        e.g. "--ca /etc/railyard/pki/ca.crt --cert ... --key ..."
#   RAILYARD_REQUIRED=1      fail the job if Railyard cannot place it (default: log and go on)
#   RAILYARD_QPS_PER_CONNECTION  queue pairs per connection, as the jobs' NCCL_IB_QPS_PER_CONNECTION
#                            (default 1); one job sets its own with `sbatch --comment railyard-qps=N`
# The controller's --hosts map must name the nodes as Slurm does.
set -u
[ -r /etc/default/railyard-slurm ] && . /etc/default/railyard-slurm
: "${SLURM_JOB_ID:?}" "${SLURM_JOB_NODELIST:?}"
RAILYARD=${RAILYARD:-railyard}
per_node=${RAILYARD_GPUS_PER_NODE:-8}
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)
count=$(printf '%s\n' "$nodes" | tr ',' '\n' | grep -c .)
# The job's own word wins over the site's; the controller refuses a value out of 1-16, naming it.
qps=$(printf '%s\n' "${SLURM_JOB_COMMENT:-}" | tr ' ,;' '\n\n\n' | sed -n 's/^railyard-qps=//p' | tail -n 1)
qps=${qps:-${RAILYARD_QPS_PER_CONNECTION:-1}}
# shellcheck disable=SC2086 # RAILYARD_TLS_ARGS is a list of options
if $RAILYARD place "slurm-$SLURM_JOB_ID" --gpus $((count * per_node)) --gpus-per-server "$per_node" \
    --qps "$qps" --servers "$nodes" --request-id "slurm-$SLURM_JOB_ID" --target "${RAILYARD_TARGET:-127.0.0.1:50051}" \
    ${RAILYARD_TLS_ARGS:-} >/dev/null; then
    exit 0
fi
echo "railyard-prolog: job $SLURM_JOB_ID: Railyard could not place its paths on $nodes" >&2
[ "${RAILYARD_REQUIRED:-0}" = 1 ] && exit 1  # a non-zero PrologSlurmctld requeues/holds the job
exit 0
