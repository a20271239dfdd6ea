# CloudBFT on AWS Dedicated Hosts: one host per physical machine of the plan that cloudbft place
# made, so the paper's rule is kept exactly: each group's 2f+1 replicas on distinct physical
# machines, primary candidates on machines without group replicas (2f+2 machines at least).
# auto_placement is off, so no other instance lands on these hosts, and every node is pinned to
# its machine's host (tenancy = host, host_id).

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

locals {
  # The plan's machine for every node, by the node's role and index in its set (null when the
  # placement does not cover the node: a precondition below says so).
  machine_of = {
    for name, n in module.nodes.nodes : name => try(
      n.role == "primary" ? var.placement.primaries[n.member] :
      n.role == "dbnode" ? var.placement.db_nodes[n.member] :
      var.placement.groups[n.group][n.member],
      null
    )
  }
}

resource "aws_ec2_host" "machine" {
  for_each          = var.machines
  availability_zone = each.value.zone
  instance_type     = var.host_instance_type
  auto_placement    = "off"
  host_recovery     = "on"

  tags = {
    Name               = "${var.cluster_name}-${each.key}"
    "cloudbft:cluster" = var.cluster_name
    "cloudbft:machine" = each.key
  }
}

resource "aws_instance" "node" {
  for_each = module.nodes.nodes

  ami                    = var.ami_id
  instance_type          = var.host_instance_type
  tenancy                = "host"
  host_id                = try(aws_ec2_host.machine[local.machine_of[each.key]].id, null)
  subnet_id              = try(var.subnet_by_zone[var.machines[local.machine_of[each.key]].zone], null)
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
    "cloudbft:machine"    = local.machine_of[each.key]
    "cloudbft:spread-set" = each.value.spread_set
  }

  lifecycle {
    precondition {
      condition     = length(var.placement.groups) == var.groups && alltrue([for g in var.placement.groups : length(g) == 2 * var.f + 1])
      error_message = "placement does not match f and groups: run cloudbft place again (cloudbft::terraform::scale_groups re-plans for you)."
    }
    precondition {
      condition     = local.machine_of[each.key] != null && contains(keys(var.machines), coalesce(local.machine_of[each.key], "-"))
      error_message = "placement names no machine of var.machines for ${each.key}: run cloudbft place again with the machine list."
    }
    precondition {
      condition     = try(var.subnet_by_zone[var.machines[local.machine_of[each.key]].zone], null) != null
      error_message = "subnet_by_zone has no subnet for the zone of ${each.key}'s machine."
    }
    precondition {
      condition     = alltrue([for members in concat(var.placement.groups, [var.placement.primaries, var.placement.db_nodes]) : length(distinct(members)) == length(members)])
      error_message = "placement puts two members of one group (or two candidates, or two database nodes) on one machine: check it with cloudbft place --check."
    }
    precondition {
      condition     = length(setintersection(toset(var.placement.primaries), toset(flatten(var.placement.groups)))) == 0
      error_message = "placement puts a primary candidate on a machine with group replicas."
    }
    precondition {
      condition     = data.aws_ami.selected.tpm_support == "v2.0"
      error_message = "AMI ${var.ami_id} does not enable NitroTPM (tpm_support = v2.0): usigd needs the instance's TPM at /dev/tpmrm0."
    }
  }
}
