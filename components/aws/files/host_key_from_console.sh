# The SSH host key an EC2 instance generated at its first boot, as cloud-init printed it to
# the instance's console: read through the EC2 API (aws ec2 get-console-output, the stack's
# credentials), a channel only AWS and the instance's root write to. Prints "TYPE KEY".
require REGION INSTANCE_ID KEY_TYPE
aws_cli=${AWS_CLI:-aws}
PATH=$PATH:${HOME:-/root}/.local/bin
command -v "$aws_cli" >/dev/null || die "the aws CLI is needed to read the instance's host key from its console"

# cloud-init prints the public keys between a BEGIN and an END line of $block.
block="SSH HOST KEY KEYS"
host_key() {
  tr -d '\r' | sed -n "/^-----BEGIN $block-----/,/^-----END $block-----/p" |
    awk -v type="$KEY_TYPE" '$1 == type && !found { print $1, $2; found = 1 }'
}

errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
deadline=$((SECONDS + ${CONSOLE_WAIT_S:-900}))
while :; do
  console=$("$aws_cli" ec2 get-console-output --region "$REGION" --instance-id "$INSTANCE_ID" --latest \
    --output text --query Output 2>"$errors") || console=
  key=$(printf '%s\n' "$console" | host_key)
  if [ -n "$key" ]; then
    printf '%s\n' "$key"
    exit 0
  fi
  [ "$SECONDS" -lt "$deadline" ] || die "no $KEY_TYPE host key on the console of $INSTANCE_ID after ${CONSOLE_WAIT_S:-900}s $(tail -n 3 "$errors")"
  sleep "${CONSOLE_POLL_S:-10}"
done
