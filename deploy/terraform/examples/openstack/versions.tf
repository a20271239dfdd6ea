terraform {
  required_version = ">= 1.7"

  required_providers {
    openstack = {
      source  = "terraform-provider-openstack/openstack"
      version = ">= 2.0, < 4.0"
    }
  }
}
