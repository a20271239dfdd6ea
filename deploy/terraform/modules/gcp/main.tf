# CloudBFT on Google Compute Engine with one spread placement policy per anti-affinity set
# (every BFT group, the primary candidates, the database nodes): the policy puts its VMs in
# distinct availability domains (separate hardware) of the zone, as many domains as the set
# has members (2 to 8). Every VM is a Shielded VM with a vTPM for usigd.

module "nodes" {
  source        = "../nodes"
  f             = var.f
  groups        = var.groups
  primaries     = var.primaries
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  usig_pcr      = var.usig_pcr
}

resource "google_compute_resource_policy" "spread" {
  for_each = module.nodes.spread_sets
  name     = "${var.cluster_name}-${each.key}"
  region   = var.region

  group_placement_policy {
    # One domain per member (the API wants 2 to 8; a lone candidate still gets a policy).
    availability_domain_count = min(8, max(2, length(each.value)))
  }
}

resource "google_compute_instance" "node" {
  for_each = module.nodes.nodes

  name              = "${var.cluster_name}-${each.key}"
  machine_type      = var.machine_type
  zone              = var.zone
  resource_policies = [google_compute_resource_policy.spread[each.value.spread_set].self_link]

  boot_disk {
    initialize_params {
      image = var.image
    }
  }

  network_interface {
    subnetwork = var.subnetwork
  }

  metadata = {
    user-data = module.nodes.user_data[each.key]
  }

  shielded_instance_config {
    enable_secure_boot          = true
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  scheduling {
    # Host maintenance live-migrates VMs; docs/operations.md says what the policy promises.
    on_host_maintenance = "MIGRATE"
    automatic_restart   = true
  }

  labels = {
    cloudbft-cluster    = var.cluster_name
    cloudbft-role       = each.value.role
    cloudbft-node-id    = tostring(each.value.id)
    cloudbft-spread-set = each.value.spread_set
  }
}
