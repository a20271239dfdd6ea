# A stand-in deployment for the tests of scaling through Terraform with the real terraform CLI
# (check.sh's `cloudbft place --scale-groups`, and crates/cloudbft/tests/terraform_scale.rs,
# which scales a local cluster with `--provider terraform`): one terraform_data resource per
# group (built into terraform, so it needs no provider and no network), driven by the
# variables cloudbft place writes, and a `nodes` output shaped like the cloud modules' whose
# machines are the ones `cloudbft keygen` lays a local cluster on.

variable "f" {
  description = "Faults tolerated per group."
  type        = number
}

variable "groups" {
  description = "Number of groups."
  type        = number
}

variable "primaries" {
  description = "Primary candidates."
  type        = number
}

variable "address" {
  description = "Every node's address (a local cluster's)."
  type        = string
  default     = "127.0.0.1"
}

variable "generation" {
  description = "Changing it replaces every group's resource, as a changed image replaces a cloud's instances."
  type        = number
  default     = 0
}

locals {
  n = 2 * var.f + 1
  # cloudbft keygen's layout: candidate 0 on m0, candidate c > 0 on m(2f+1+c); replica k of
  # every group and database node k on mk.
  primaries = {
    for c in range(var.primaries) : "node-${c}" => {
      id = c, role = "primary", group = null, machine = c == 0 ? "m0" : "m${local.n + c}"
    }
  }
  replicas = merge([
    for g in range(var.groups) : {
      for k in range(1, local.n + 1) : "node-${100 + 100 * g + k}" => {
        id = 100 + 100 * g + k, role = "replica", group = g, machine = "m${k}"
      }
    }
  ]...)
  dbnodes = {
    for k in range(1, local.n + 1) : "node-${10 + k}" => {
      id = 10 + k, role = "dbnode", group = null, machine = "m${k}"
    }
  }
}

resource "terraform_data" "group" {
  for_each         = toset([for g in range(var.groups) : "group-${g}"])
  input            = { group = each.key, members = local.n }
  triggers_replace = var.generation
}

output "nodes" {
  description = "node-<id> → { id, role, group, address, machine }, as the cloud modules' nodes output."
  value = {
    for name, node in merge(local.primaries, local.replicas, local.dbnodes) : name => merge(node, {
      address = var.address
      # Which resource stands for the node's machine.
      resource = node.group == null ? null : terraform_data.group["group-${node.group}"].id
    })
  }
}
