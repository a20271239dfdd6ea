# Deploys a CloudBFT cluster with modules/openstack. terraform.tfvars.json comes from
# `cloudbft place` (see README.md); `cloudbft::terraform::scale_groups` rewrites its groups.

# Credentials come from the usual OS_* environment variables (openrc).
provider "openstack" {}

module "cloudbft" {
  source = "../../modules/openstack"

  cluster_name    = var.cluster_name
  f               = var.f
  groups          = var.groups
  primaries       = var.primaries
  image_id        = var.image_id
  flavor_name     = var.flavor_name
  network_id      = var.network_id
  security_groups = var.security_groups
  key_pair        = var.key_pair
  binary_url      = var.binary_url
  binary_sha256   = var.binary_sha256
  usig_pcr        = var.usig_pcr
}
