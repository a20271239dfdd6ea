# The variables cloudbft place writes to terraform.tfvars.json (f, groups, primaries) and
# the cloud's own, passed through to modules/aws.

variable "region" {
  description = "AWS region."
  type        = string
}

variable "cluster_name" {
  description = "Prefix of every resource name (placement groups must be unique per account and region)."
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

variable "ami_id" {
  description = "AMI with NitroTPM support (tpm_support = v2.0, UEFI boot) and cloud-init, e.g. Debian 12 or Ubuntu 24.04 for x86_64."
  type        = string
}

variable "instance_type" {
  description = "Nitro instance type with NitroTPM support (for example m6i.large)."
  type        = string
  default     = "m6i.large"
}

variable "subnet_ids" {
  description = "Subnets, one per availability zone; each anti-affinity set's members are dealt round-robin over them."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "subnet_ids needs at least one subnet."
  }
}

variable "security_group_ids" {
  description = "Security groups of every node: they must let nodes reach each other on the cluster's ports."
  type        = list(string)
}

variable "key_name" {
  description = "EC2 key pair for SSH (enrollment and installing cluster.toml), or null."
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

