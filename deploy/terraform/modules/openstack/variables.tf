variable "cluster_name" {
  description = "Prefix of every resource name."
  type        = string
  default     = "cloudbft"
}

variable "f" {
  description = "Byzantine faults tolerated per group and among the database nodes (from cloudbft place)."
  type        = number
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

variable "image_id" {
  description = "Glance image with cloud-init; with hw_tpm_version=2.0 (or a flavor with hw:tpm_version) so that Nova gives each server a vTPM."
  type        = string
}

variable "flavor_name" {
  description = "Nova flavor; for a vTPM it (or the image) must set hw:tpm_version=2.0 and hw:tpm_model=tpm-crb."
  type        = string
}

variable "network_id" {
  description = "Neutron network of every node."
  type        = string
}

variable "security_groups" {
  description = "Security group names of every node."
  type        = list(string)
  default     = ["default"]
}

variable "key_pair" {
  description = "Nova key pair for SSH, or null."
  type        = string
  default     = null
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
