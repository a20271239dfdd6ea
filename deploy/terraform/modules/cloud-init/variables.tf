variable "nodes" {
  description = "The cluster's nodes, keyed by name (node-<id>): id, role (primary, replica, dbnode) and group (replicas only), as the cloud modules compute them."
  type = map(object({
    id    = number
    role  = string
    group = optional(number)
  }))

  validation {
    condition     = alltrue([for n in values(var.nodes) : contains(["primary", "replica", "dbnode"], n.role)])
    error_message = "Every node's role must be primary, replica or dbnode."
  }
}

variable "binary_url" {
  description = "HTTPS URL of the cloudbft binary (linux x86_64) every machine downloads at first boot."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 of the binary at binary_url (hex): cloud-init refuses any other file."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.binary_sha256))
    error_message = "binary_sha256 must be 64 lowercase hex digits (sha256sum of the binary)."
  }
}

variable "usig_pcr" {
  description = "The PCR (0-15) that holds the node's USIG chain; no other software on the image may extend it (docs/operations.md, Choosing PCRs)."
  type        = number
  default     = 8

  validation {
    condition     = var.usig_pcr >= 0 && var.usig_pcr <= 15
    error_message = "usig_pcr must be one of the PCRs 0-15: 16-23 can be reset by software or are reserved."
  }
}

variable "metrics_port" {
  description = "Port of each node's Prometheus endpoint."
  type        = number
  default     = 9100
}
