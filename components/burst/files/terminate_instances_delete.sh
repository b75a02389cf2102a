# Ends every burst instance (tagged gpucluster:cluster=$CLUSTER and gpucluster:burst; the
# cluster's own EC2 hosts carry the first tag only) and waits until they are gone:
# run when the burst part of a stack is deleted, before its launch templates and network,
# so no instance Slurm started outlives `pulumi destroy`. The stack's own AWS credentials.
require CLUSTER REGION
aws_cli=${AWS_CLI:-aws}
# Also the project's venv (requirements.txt installs the CLI there): pulumi runs in its root.
PATH=$PATH:${HOME:-/root}/.local/bin:$PWD/venv/bin
command -v "$aws_cli" >/dev/null || die "the aws CLI is needed to end the cluster's burst instances"
live=pending,running,stopping,stopped,shutting-down
ids=$("$aws_cli" ec2 describe-instances --region "$REGION" --output text \
  --filters "Name=tag:gpucluster:cluster,Values=$CLUSTER" "Name=tag-key,Values=gpucluster:burst" \
  "Name=instance-state-name,Values=$live" \
  --query 'Reservations[].Instances[].InstanceId') || die "cannot list the instances of $CLUSTER"
ids=$(printf '%s' "$ids" | tr -s '\t ' '\n' | grep -v '^None$' || true)
if [ -z "$ids" ]; then
  log "no burst instance of $CLUSTER is running"
  exit 0
fi
log "terminating the burst instances of $CLUSTER: $(echo $ids)"
# shellcheck disable=SC2086 # one id per word
"$aws_cli" ec2 terminate-instances --region "$REGION" --instance-ids $ids >/dev/null
# shellcheck disable=SC2086
"$aws_cli" ec2 wait instance-terminated --region "$REGION" --instance-ids $ids
