# CloudBFT on AWS with one spread placement group per anti-affinity set: every BFT group, the
# primary candidates and the database nodes each get their own, so the 2f+1 members of a group
# run on distinct racks (distinct hardware, power and network). Spread groups do not separate
# members of different sets: two groups' replicas may share a rack, as the paper's machines
# host one replica of every group. At most 7 running instances per availability zone per
# spread group: sets larger than 7 (f >= 4) need subnets in several zones.

module "nodes" {
  source        = "../nodes"
  f             = var.f
  groups        = var.groups
  primaries     = var.primaries
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  usig_pcr      = var.usig_pcr
}

data "aws_ami" "selected" {
  filter {
    name   = "image-id"
    values = [var.ami_id]
  }
}

data "aws_subnet" "selected" {
  for_each = toset(var.subnet_ids)
  id       = each.value
}

locals {
  zones = distinct([for s in var.subnet_ids : data.aws_subnet.selected[s].availability_zone])
}

resource "aws_placement_group" "spread" {
  for_each     = module.nodes.spread_sets
  name         = "${var.cluster_name}-${each.key}"
  strategy     = "spread"
  spread_level = "rack"

  tags = {
    "cloudbft:cluster"    = var.cluster_name
    "cloudbft:spread-set" = each.key
  }

  lifecycle {
    precondition {
      condition     = length(local.zones) == length(var.subnet_ids)
      error_message = "subnet_ids must name one subnet per availability zone: members are dealt round-robin over the subnets, and the 7-per-zone limit counts zones."
    }
    precondition {
      condition     = ceil(length(each.value) / length(var.subnet_ids)) <= 7
      error_message = "Spread set ${each.key} has ${length(each.value)} members: a spread placement group holds at most 7 running instances per availability zone; give subnet_ids more zones."
    }
  }
}

resource "aws_instance" "node" {
  for_each = module.nodes.nodes

  ami                    = var.ami_id
  instance_type          = var.instance_type
  subnet_id              = var.subnet_ids[each.value.member % length(var.subnet_ids)]
  placement_group        = aws_placement_group.spread[each.value.spread_set].name
  vpc_security_group_ids = var.security_group_ids
  key_name               = var.key_name
  user_data              = module.nodes.user_data[each.key]

  metadata_options {
    http_tokens = "required"
  }

  tags = {
    Name                  = "${var.cluster_name}-${each.key}"
    "cloudbft:cluster"    = var.cluster_name
    "cloudbft:role"       = each.value.role
    "cloudbft:node-id"    = tostring(each.value.id)
    "cloudbft:spread-set" = each.value.spread_set
  }

  lifecycle {
    precondition {
      condition     = data.aws_ami.selected.tpm_support == "v2.0"
      error_message = "AMI ${var.ami_id} does not enable NitroTPM (tpm_support = v2.0): usigd needs the instance's TPM at /dev/tpmrm0."
    }
  }
}
