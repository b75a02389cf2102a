#!/usr/bin/env bash
# Print today's AMI id for an EC2 host, to pin it as aws.ami in a stack file. The id is looked
# up here, never in the program's graph: a new AMI release then shows in a preview only when
# someone changes aws.ami (and it replaces the instances: the user data runs on a new disk).
#
#   tools/aws-ami.sh REGION [debian-12|ubuntu-22.04]
#
# debian-12: Debian's own AMI (the OS the scripts are tested on), from the SSM parameter
# Debian publishes. ubuntu-22.04: AWS's "Deep Learning Base OSS Nvidia Driver GPU AMI
# (Ubuntu 22.04)", with the NVIDIA driver. Needs the AWS CLI and credentials (ssm:GetParameter).
set -euo pipefail
region=${1:-}
os=${2:-debian-12}
[[ "$region" =~ ^[a-z]{2}(-[a-z]+)+-[0-9]$ ]] || { echo "usage: $0 REGION [debian-12|ubuntu-22.04]" >&2; exit 2; }
case "$os" in
  debian-12) parameter=/aws/service/debian/release/bookworm/latest/amd64 ;;
  ubuntu-22.04) parameter=/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id ;;
  *) echo "unknown OS '$os': debian-12 or ubuntu-22.04" >&2; exit 2 ;;
esac
command -v aws >/dev/null || { echo "the AWS CLI (aws) is missing" >&2; exit 1; }
ami=$(aws ssm get-parameter --region "$region" --name "$parameter" --query Parameter.Value --output text)
[[ "$ami" =~ ^ami-[0-9a-f]{8,17}$ ]] || { echo "unexpected answer for $parameter: $ami" >&2; exit 1; }
echo "$ami"
