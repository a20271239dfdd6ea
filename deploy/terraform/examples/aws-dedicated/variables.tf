# The variables cloudbft place writes to terraform.tfvars.json (f, groups, primaries, machines, placement) and
# the cloud's own, passed through to modules/aws-dedicated.

variable "region" {
  description = "AWS region."
  type        = string
}

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
  description = "Number of groups of 2f+1 replicas (from cloudbft place; the autoscaler changes it together with placement)."
  type        = number
}

variable "primaries" {
  description = "Primary candidates (from cloudbft place)."
  type        = number
  default     = 2
}

variable "machines" {
  description = "The physical machines: one Dedicated Host each, keyed by machine id (from cloudbft place, which also checked that the plan keeps every group on distinct machines). zone is the host's availability zone."
  type = map(object({
    zone  = string
    slots = number
  }))
}

variable "placement" {
  description = "Which machine runs each node (from cloudbft place): primaries[c], groups[g][k], db_nodes[k]."
  type = object({
    primaries = list(string)
    groups    = list(list(string))
    db_nodes  = list(string)
  })
}

variable "host_instance_type" {
  description = "Instance type the Dedicated Hosts are allocated for; every node runs this type (it must support NitroTPM)."
  type        = string
  default     = "m6i.large"
}

variable "ami_id" {
  description = "AMI with NitroTPM support (tpm_support = v2.0, UEFI boot) and cloud-init."
  type        = string
}

variable "subnet_by_zone" {
  description = "One subnet per availability zone the machines are in."
  type        = map(string)
}

variable "security_group_ids" {
  description = "Security groups of every node."
  type        = list(string)
}

variable "key_name" {
  description = "EC2 key pair for SSH, or null."
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

