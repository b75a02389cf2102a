"""The typed `aws` config and EC2 connections: each class of bad value is refused by name,
before anything is made."""

import copy

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.program_harness import stack_config


def ec2_cluster() -> dict:
    return copy.deepcopy(stack_config("ec2"))


def error_of(change) -> str:
    config = ec2_cluster()
    change(config["cluster"])
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return str(caught.value)


def accepted(change):
    config = ec2_cluster()
    change(config["cluster"])
    return parse_stack_config(config).cluster


def _aws(**fields):
    return lambda c: c["aws"].update(fields)


def _vpc(**fields):
    return lambda c: c["aws"]["vpc"].update(fields)


def _ec2(host: int, **fields):
    return lambda c: c["hosts"][host]["connection"].update(fields)


@pytest.mark.parametrize(
    "cidrs",
    [
        ["0.0.0.0/0"],
        ["0.0.0.0/1", "128.0.0.0/1"],
        ["128.0.0.0/1", "0.0.0.0/2", "64.0.0.0/2"],
        ["203.0.113.0/24", "0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/2"],
    ],
)
def test_admin_networks_that_add_up_to_the_internet_need_the_opt_in(cidrs):
    message = error_of(_aws(admin_cidrs=cidrs))
    assert "cluster.aws.admin_cidrs: " in message and "opens SSH to the whole internet" in message, message
    assert accepted(_aws(admin_cidrs=cidrs, allow_ssh_from_anywhere=True)).aws.allow_ssh_from_anywhere


@pytest.mark.parametrize("cidrs", [["0.0.0.0/1"], ["203.0.113.0/24", "198.51.100.0/24"], ["128.0.0.0/1", "0.0.0.0/2"]])
def test_admin_networks_short_of_the_internet_are_accepted(cidrs):
    assert [str(c) for c in accepted(_aws(admin_cidrs=cidrs)).aws.admin_cidrs] == cidrs


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ({"g5.xlarge": -1.0}, "cluster.aws.prices.g5.xlarge: Input should be greater than 0"),
        ({"g5.xlarge": 0}, "cluster.aws.prices.g5.xlarge: Input should be greater than 0"),
        ({"g5.xlarge": "1.0"}, "cluster.aws.prices.g5.xlarge: Input should be a valid number"),
        ({"g5.xlarge": "cheap"}, "cluster.aws.prices.g5.xlarge: Input should be a valid number"),
        ({"g5.xlarge": True}, "cluster.aws.prices.g5.xlarge: Input should be a valid number"),
        ({"G5 xlarge": 1.0}, "cluster.aws.prices.G5 xlarge.[key]: String should match pattern"),
    ],
)
def test_prices_are_positive_numbers_by_instance_type(prices, message):
    assert message in error_of(_aws(prices=prices))


@pytest.mark.parametrize(
    "ami",
    ["ami-0a1b2c3", "ami-0a1b2c3d4e", "ami-0a1b2c3d4e5f6789", "ami-0a1b2c3d4e5f678901", "ami-0A1B2C3D", "ami0a1b2c3d"],
)
def test_ami_ids_are_ami_and_8_or_17_hex_digits(ami):
    assert "cluster.aws.ami: String should match pattern" in error_of(_aws(ami=ami))


@pytest.mark.parametrize("ami", ["ami-0a1b2c3d", "ami-0a1b2c3d4e5f67890"])
def test_both_ami_id_lengths_are_accepted(ami):
    assert accepted(_aws(ami=ami)).aws.ami == ami


@pytest.mark.parametrize(
    ("field", "value"),
    [("vpc_id", "vpc-0a1b2c3d4e"), ("subnet_id", "subnet-0a1b2c3"), ("route_table_id", "rtb-0a1b2c3d4e5f678")],
)
def test_existing_vpc_ids_are_8_or_17_hex_digits(field, value):
    existing = {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d", "subnet_cidr": "10.80.1.0/24",
                "route_table_id": "rtb-0a1b2c3d4e5f67890"}  # fmt: skip
    assert accepted(_aws(vpc=existing)).aws.vpc.vpc_id == "vpc-0a1b2c3d"
    message = error_of(_aws(vpc={**existing, field: value}))
    assert f"cluster.aws.vpc.existing.{field}: String should match pattern" in message


@pytest.mark.parametrize(
    ("region", "zone"), [("us-east-1", "us-west-2a"), ("us-east-1", "us-east-2a"), ("eu-west-1", "us-east-1a")]
)
def test_the_availability_zone_is_one_of_the_region(region, zone):
    message = error_of(_aws(region=region, vpc={"cidr": "10.80.0.0/16", "subnet_cidr": "10.80.1.0/24",
                                                "availability_zone": zone}))  # fmt: skip
    assert f"cluster.aws.vpc.availability_zone: {zone} is not a zone of aws.region {region}" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cidr", "10.0.0.0/8"),
        ("cidr", "10.80.0.0/15"),
        ("subnet_cidr", "10.80.1.0/29"),
        ("subnet_cidr", "10.80.1.4/30"),
        ("subnet_cidr", "10.80.1.1/32"),
    ],
)
def test_vpc_and_subnet_sizes_are_the_ones_aws_allows(field, value):
    message = error_of(_vpc(**{field: value}))
    assert f"cluster.aws.vpc.new.{field}: AWS allows VPC and subnet sizes from /16 to /28" in message


def test_a_vpc_error_names_only_the_branch_the_user_wrote():
    """Issue 35 item 3: a new VPC's error came with the existing VPC's missing fields beside it."""
    message = error_of(_vpc(cidr="10.0.0.0/8"))
    assert "cluster.aws.vpc.new.cidr: AWS allows VPC and subnet sizes" in message
    assert "vpc_id" not in message and "Existing" not in message and "Field required" not in message
    existing = error_of(_aws(vpc={"vpc_id": "vpc-0a1b2c3d", "subnet_cidr": "10.80.1.0/24"}))
    assert "cluster.aws.vpc.existing.subnet_id: Field required" in existing
    assert "cluster.aws.vpc.existing.route_table_id: Field required" in existing
    assert ".new." not in existing and "cidr: " not in existing.replace("subnet_cidr", "")


def test_the_smallest_and_largest_sizes_are_accepted():
    vpc = accepted(_vpc(cidr="10.80.0.0/16", subnet_cidr="10.80.1.0/28")).aws.vpc
    assert (vpc.cidr.prefixlen, vpc.subnet_cidr.prefixlen) == (16, 28)


@pytest.mark.parametrize("price", ["0", "0.0", "0.000000", "0000"])
def test_a_spot_max_price_of_zero_is_refused(price):
    message = error_of(_ec2(1, spot={"max_price": price}))
    assert "cluster.hosts[1].connection.ec2.spot.max_price: a spot max price must be above 0" in message


@pytest.mark.parametrize("price", [0.5, 1, -1])
def test_a_spot_max_price_is_text(price):
    assert "cluster.hosts[1].connection.ec2.spot.max_price: Input should be a valid string" in error_of(
        _ec2(1, spot={"max_price": price})
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_aws(allow_ssh_from_anywhere="yes"), "cluster.aws.allow_ssh_from_anywhere: Input should be a valid boolean"),
        (_aws(allow_ssh_from_anywhere=1), "cluster.aws.allow_ssh_from_anywhere: Input should be a valid boolean"),
        (_aws(placement_group="true"), "cluster.aws.placement_group: Input should be a valid boolean"),
        (_aws(placement_group="no"), "cluster.aws.placement_group: Input should be a valid boolean"),
        (_aws(admin_cidrs=[3405803776]), "cluster.aws.admin_cidrs[0]: Input should be a network written as text"),
        (_aws(prices={"g5.xlarge": "5"}), "cluster.aws.prices.g5.xlarge: Input should be a valid number"),
        (
            _ec2(0, root_volume_gib="200"),
            "cluster.hosts[0].connection.ec2.root_volume_gib: Input should be a valid integer",
        ),
        (
            _ec2(0, root_volume_gib=200.0),
            "cluster.hosts[0].connection.ec2.root_volume_gib: Input should be a valid integer",
        ),
        (
            _ec2(0, state_volume_gib="5"),
            "cluster.hosts[0].connection.ec2.state_volume_gib: Input should be a valid integer",
        ),
        (
            _ec2(0, dial_error_limit="5"),
            "cluster.hosts[0].connection.ec2.dial_error_limit: Input should be a valid integer",
        ),
        (_vpc(cidr=167772160), "cluster.aws.vpc.new.cidr: Input should be a network written as text"),
    ],
)
def test_numbers_and_flags_are_taken_as_written(change, message):
    assert message in error_of(change)


@pytest.mark.parametrize("interruption", ["stop", "hibernate"])
def test_spot_capacity_is_a_one_time_request(interruption):
    # A persistent request outlives the instance and launches untracked ones after a destroy.
    message = error_of(_ec2(1, spot={"interruption": interruption}))
    assert "cluster.hosts[1].connection.ec2.spot.interruption: Input should be 'terminate'" in message
