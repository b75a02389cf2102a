"""Put the cluster's munge key (stdin) in its Secrets Manager secret, with the controller's
key: the burst nodes' role reads it at boot. The key never passes through argv, the Pulumi
state, a launch template or user data."""

import json
import sys
from pathlib import Path

from burst_common import load_config


def main(secret_id: str) -> int:
    import boto3

    config = load_config()
    key = sys.stdin.buffer.read()
    if len(key) < 32:
        print("store_munge_key: no munge key on stdin", file=sys.stderr)
        return 1
    credentials = json.loads(Path(config["credentials_file"]).read_text())
    client = boto3.session.Session(region_name=config["region"], **credentials).client(
        "secretsmanager", endpoint_url=config.get("endpoint_url") or None
    )
    # Put at every install (the controller may not read the secret back): the latest wins.
    client.put_secret_value(SecretId=secret_id, SecretBinary=key)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
