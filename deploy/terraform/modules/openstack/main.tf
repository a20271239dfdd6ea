# CloudBFT on OpenStack with one Nova server group with the anti-affinity policy per
# anti-affinity set (every BFT group, the primary candidates, the database nodes): Nova's
# scheduler (ServerGroupAntiAffinityFilter) puts the members of one set on distinct compute
# hosts and refuses to boot a member when no such host is left.

module "nodes" {
  source        = "../nodes"
  f             = var.f
  groups        = var.groups
  primaries     = var.primaries
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  usig_pcr      = var.usig_pcr
}

resource "openstack_compute_servergroup_v2" "anti_affinity" {
  for_each = module.nodes.spread_sets
  name     = "${var.cluster_name}-${each.key}"
  policies = ["anti-affinity"]
}

resource "openstack_compute_instance_v2" "node" {
  for_each = module.nodes.nodes

  name            = "${var.cluster_name}-${each.key}"
  image_id        = var.image_id
  flavor_name     = var.flavor_name
  key_pair        = var.key_pair
  security_groups = var.security_groups
  user_data       = module.nodes.user_data[each.key]

  network {
    uuid = var.network_id
  }

  scheduler_hints {
    group = openstack_compute_servergroup_v2.anti_affinity[each.value.spread_set].id
  }

  metadata = {
    "cloudbft:cluster"    = var.cluster_name
    "cloudbft:role"       = each.value.role
    "cloudbft:node-id"    = tostring(each.value.id)
    "cloudbft:spread-set" = each.value.spread_set
  }
}
