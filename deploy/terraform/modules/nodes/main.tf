# The cluster's nodes with the ids cloudbft keygen gives them (crates/cloudbft/src/keygen.rs):
# primary candidates 0.., replica k (1..2f+1) of group g is 100 + 100 g + k, database node k is
# 10 + k. Each node belongs to one anti-affinity set: "primaries", "dbnodes" or "group-<g>";
# the cloud modules make one anti-affinity construct per set, so every BFT group's members
# are kept apart by one of their own. Each node's first-boot document comes from ../cloud-init.

locals {
  n = 2 * var.f + 1

  primaries = {
    for c in range(var.primaries) : "node-${c}" => {
      id = c, role = "primary", group = null, spread_set = "primaries", member = c
    }
  }
  replicas = merge([
    for g in range(var.groups) : {
      for k in range(1, local.n + 1) : "node-${100 + 100 * g + k}" => {
        id = 100 + 100 * g + k, role = "replica", group = g, spread_set = "group-${g}", member = k - 1
      }
    }
  ]...)
  dbnodes = {
    for k in range(1, local.n + 1) : "node-${10 + k}" => {
      id = 10 + k, role = "dbnode", group = null, spread_set = "dbnodes", member = k - 1
    }
  }
  nodes = merge(local.primaries, local.replicas, local.dbnodes)
}

module "cloud_init" {
  source        = "../cloud-init"
  nodes         = { for name, n in local.nodes : name => { id = n.id, role = n.role, group = n.group } }
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  usig_pcr      = var.usig_pcr
}
