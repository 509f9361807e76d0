#!/bin/sh
# Slurm EpilogSlurmctld: release the job's network paths when it ends.
#   slurm.conf:  EpilogSlurmctld=/etc/slurm/railyard-epilog.sh
# Same environment as railyard-prolog.sh. A job Railyard never placed is fine.
set -u
[ -r /etc/default/railyard-slurm ] && . /etc/default/railyard-slurm
: "${SLURM_JOB_ID:?}"
RAILYARD=${RAILYARD:-railyard}
# shellcheck disable=SC2086
out=$($RAILYARD release "slurm-$SLURM_JOB_ID" --target "${RAILYARD_TARGET:-127.0.0.1:50051}" \
    ${RAILYARD_TLS_ARGS:-} 2>&1) || case $out in
    *NOT_FOUND*) ;;
    *) echo "railyard-epilog: job $SLURM_JOB_ID: $out" >&2 ;;
esac
exit 0  # never fail a job's end over its network paths
