# The variables cloudbft place writes to terraform.tfvars.json (f, groups, primaries) and
# the cloud's own, passed through to modules/gcp.

variable "project" {
  description = "Google Cloud project."
  type        = string
}

variable "cluster_name" {
  description = "Prefix of every resource name (lowercase letters, digits and dashes)."
  type        = string
  default     = "cloudbft"
}

variable "f" {
  description = "Byzantine faults tolerated per group and among the database nodes (from cloudbft place). A spread policy has at most 8 availability domains, so 2f+1 <= 8."
  type        = number

  validation {
    condition     = 2 * var.f + 1 <= 8
    error_message = "A spread placement policy has at most 8 availability domains: with f > 3 two members of a group would share one."
  }
}

variable "groups" {
  description = "Number of groups of 2f+1 replicas (from cloudbft place; the autoscaler changes it)."
  type        = number
}

variable "primaries" {
  description = "Primary candidates (from cloudbft place)."
  type        = number
  default     = 2
}

variable "region" {
  description = "Region of the spread policies."
  type        = string
}

variable "zone" {
  description = "Zone of every node (spread policies place VMs within one zone)."
  type        = string
}

variable "machine_type" {
  description = "Machine type (Shielded VM capable, for the vTPM)."
  type        = string
  default     = "n2-standard-2"
}

variable "image" {
  description = "Boot image with cloud-init and Shielded VM support, e.g. debian-cloud/debian-12."
  type        = string
  default     = "debian-cloud/debian-12"
}

variable "subnetwork" {
  description = "Subnetwork of every node."
  type        = string
}

variable "binary_url" {
  description = "HTTPS URL of the cloudbft binary."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 of the binary (hex)."
  type        = string
}

variable "usig_pcr" {
  description = "PCR (0-15) of each node's USIG chain."
  type        = number
  default     = 8
}

