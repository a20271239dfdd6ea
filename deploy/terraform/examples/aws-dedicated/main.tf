# Deploys a CloudBFT cluster with modules/aws-dedicated. terraform.tfvars.json comes from
# `cloudbft place` (see README.md); `cloudbft::terraform::scale_groups` rewrites its groups.

provider "aws" {
  region = var.region
}

module "cloudbft" {
  source = "../../modules/aws-dedicated"

  cluster_name       = var.cluster_name
  f                  = var.f
  groups             = var.groups
  primaries          = var.primaries
  machines           = var.machines
  placement          = var.placement
  host_instance_type = var.host_instance_type
  ami_id             = var.ami_id
  subnet_by_zone     = var.subnet_by_zone
  security_group_ids = var.security_group_ids
  key_name           = var.key_name
  binary_url         = var.binary_url
  binary_sha256      = var.binary_sha256
  usig_pcr           = var.usig_pcr
}
