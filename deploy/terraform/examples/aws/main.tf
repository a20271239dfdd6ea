# Deploys a CloudBFT cluster with modules/aws. terraform.tfvars.json comes from
# `cloudbft place` (see README.md); `cloudbft::terraform::scale_groups` rewrites its groups.

provider "aws" {
  region = var.region
}

module "cloudbft" {
  source = "../../modules/aws"

  cluster_name       = var.cluster_name
  f                  = var.f
  groups             = var.groups
  primaries          = var.primaries
  ami_id             = var.ami_id
  instance_type      = var.instance_type
  subnet_ids         = var.subnet_ids
  security_group_ids = var.security_group_ids
  key_name           = var.key_name
  binary_url         = var.binary_url
  binary_sha256      = var.binary_sha256
  usig_pcr           = var.usig_pcr
}
