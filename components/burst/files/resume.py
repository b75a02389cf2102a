"""Slurm's ResumeProgram: start an EC2 instance for each node, and return at once.

slurmctld runs it with the nodes' hostlist and SLURM_RESUME_FILE (read first: Slurm wants it
read within ten seconds). Each node gets one instant CreateFleet over its partition's types x
subnets in order of preference, with the node's name in that launch's user data and tags and
an idempotency token. It never waits for a boot (that would hold slurmctld's script daemon):
slurmd registers when the instance is up. A launch that gets no instance marks the node DOWN
with the error as its reason, so the job is requeued, and a type that had no capacity is
skipped for capacity_skip_s, so the next try goes to the next type."""

import base64
import hashlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError
from burst_common import CAPACITY_ERRORS, Slurm, StateFile, ec2_client, load_config, logger, skip_types, skipped_types

NODE_PLACEHOLDER = "@NODE_NAME@"


def partition_of(config: dict, node: str) -> dict | None:
    return next((p for p in config["partitions"] if node in p["nodes"]), None)


def fleet_request(config: dict, partition: dict, node: str, types: list[dict], token: str) -> dict:
    """One instant fleet of one instance: each type's template with every subnet, prioritized
    in the configured order (type first, then subnet)."""
    user_data = base64.b64encode(config["user_data"].replace(NODE_PLACEHOLDER, node).encode()).decode()
    subnets = config["subnets"]
    configs = [
        {
            "LaunchTemplateSpecification": {
                "LaunchTemplateName": t["template"],
                "Version": "$Latest",
                "LaunchTemplateSpecificationUserData": user_data,
            },
            "Overrides": [
                {"SubnetId": subnet, "Priority": float(i * len(subnets) + j)} for j, subnet in enumerate(subnets)
            ],
        }
        for i, t in enumerate(types)
    ]
    spot = partition["capacity"] == "spot"
    tags = {
        "Name": f"{config['cluster']}-{node}",
        "gpucluster:cluster": config["cluster"],
        "gpucluster:burst": partition["name"],
        "gpucluster:node": node,
    }
    return {
        "Type": "instant",
        "ClientToken": token,
        "LaunchTemplateConfigs": configs,
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "spot" if spot else "on-demand",
        },
        **(
            {"SpotOptions": {"AllocationStrategy": "capacity-optimized-prioritized"}}
            if spot
            else {"OnDemandOptions": {"AllocationStrategy": "prioritized"}}
        ),
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    }


def client_token(cluster: str, node: str, started: float) -> str:
    """CreateFleet's idempotency token (64 characters at most): one per node and resume. The
    node's name is hashed, so a long partition name never cuts the time off (every later
    resume of the node would replay the first fleet)."""
    return f"{cluster}-{hashlib.sha256(node.encode()).hexdigest()[:20]}-{int(started)}"


def _error_type(error: dict, by_template: dict[str, str]) -> str | None:
    launch = error.get("LaunchTemplateAndOverrides") or {}
    overrides = launch.get("Overrides") or {}
    spec = launch.get("LaunchTemplateSpecification") or {}
    return overrides.get("InstanceType") or by_template.get(spec.get("LaunchTemplateName", ""))


def launch(config: dict, ec2, slurm: Slurm, node: str, started: float, log) -> str | None:
    """Start the node's instance; its id, or None after marking the node DOWN."""
    partition = partition_of(config, node)
    if partition is None:
        slurm.update([node], state="down", reason="burst: not a node of any burst partition")
        return None
    skipped = skipped_types(config)
    types = [t for t in partition["types"] if t["name"] not in skipped]
    if not types:
        until = time.strftime("%H:%M:%S", time.gmtime(min(skipped.values())))
        reason = f"burst: no capacity for {', '.join(t['name'] for t in partition['types'])}; next try {until} UTC"
        log.warning("%s: %s", node, reason)
        slurm.update([node], state="down", reason=reason)
        return None
    token = client_token(config["cluster"], node, started)
    try:
        response = ec2.create_fleet(**fleet_request(config, partition, node, types, token))
    except (BotoCoreError, ClientError) as error:  # an API error: the node goes DOWN with it, the others go on
        code = getattr(error, "response", {}).get("Error", {}).get("Code", type(error).__name__)
        log.error("%s: CreateFleet failed: %s", node, error)
        if code in CAPACITY_ERRORS:
            skip_types(config, [types[0]["name"]])
        slurm.update([node], state="down", reason=f"burst: (Code:{code}) {str(error)[:120]}")
        return None
    by_template = {t["template"]: t["name"] for t in partition["types"]}
    errors = response.get("Errors", [])
    no_capacity = sorted(
        {name for e in errors if e.get("ErrorCode") in CAPACITY_ERRORS if (name := _error_type(e, by_template))}
    )
    if no_capacity:
        skip_types(config, no_capacity)
        log.warning("%s: no capacity for %s: skipped for %ss", node, ", ".join(no_capacity), config["capacity_skip_s"])
    ids = [i for launched in response.get("Instances", []) for i in launched.get("InstanceIds", [])]
    if ids:
        kind = response["Instances"][0].get("InstanceType", "?")
        log.info("%s: launched %s (%s), fleet %s", node, ids[0], kind, response.get("FleetId"))
        return ids[0]
    codes = sorted({e.get("ErrorCode", "?") for e in errors}) or ["NoInstance"]
    detail = "; ".join(f"{_error_type(e, by_template)}: {e.get('ErrorMessage', '')}" for e in errors)[:160]
    reason = f"burst: (Code:{','.join(codes)}) {detail}".strip()
    log.warning("%s: no instance: %s", node, reason)
    slurm.update([node], state="down", reason=reason)
    return None


def main(argv: list[str], slurm: Slurm | None = None, ec2=None) -> int:
    resume_file = os.environ.get("SLURM_RESUME_FILE")
    jobs = Path(resume_file).read_text() if resume_file else ""  # first: Slurm may remove it soon
    config = load_config()
    log = logger(config, "resume")
    slurm = slurm or Slurm(config)
    started = time.time()
    nodes = slurm.hostnames(argv[1])
    log.info("resume %s (jobs: %s)", ",".join(nodes), jobs.strip()[:500])
    ec2 = ec2 or ec2_client(config)
    # Recorded before any CreateFleet, under the state's lock: the reconciler (every minute)
    # sees these nodes as launching from now, not since epoch, while the fleets are on their way.
    with StateFile(config, "launches.json").locked() as launches:
        launches.update(dict.fromkeys(nodes, started))
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: launch(config, ec2, slurm, n, started, log), nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
