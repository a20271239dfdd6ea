# Deploys a CloudBFT cluster with modules/gcp. terraform.tfvars.json comes from
# `cloudbft place` (see README.md); `cloudbft::terraform::scale_groups` rewrites its groups.

provider "google" {
  project = var.project
  region  = var.region
}

module "cloudbft" {
  source = "../../modules/gcp"

  cluster_name  = var.cluster_name
  f             = var.f
  groups        = var.groups
  primaries     = var.primaries
  region        = var.region
  zone          = var.zone
  machine_type  = var.machine_type
  image         = var.image
  subnetwork    = var.subnetwork
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  usig_pcr      = var.usig_pcr
}
