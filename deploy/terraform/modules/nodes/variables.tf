variable "f" {
  description = "Byzantine faults tolerated per group and among the database nodes: groups and the database tier have 2f+1 members."
  type        = number

  validation {
    condition     = var.f >= 0 && floor(var.f) == var.f
    error_message = "f must be a whole number, 0 or more."
  }
}

variable "groups" {
  description = "Number of groups of 2f+1 replicas (what the autoscaler changes)."
  type        = number

  validation {
    condition     = var.groups >= 1 && floor(var.groups) == var.groups
    error_message = "groups must be a whole number, 1 or more."
  }
}

variable "primaries" {
  description = "Primary candidates (1 to 9, as cloudbft keygen --candidates)."
  type        = number
  default     = 2

  validation {
    condition     = var.primaries >= 1 && var.primaries <= 9 && floor(var.primaries) == var.primaries
    error_message = "primaries must be a whole number from 1 to 9."
  }
}

variable "binary_url" {
  description = "HTTPS URL of the cloudbft binary every machine downloads at first boot (passed to ../cloud-init)."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 of the binary at binary_url (hex)."
  type        = string
}

variable "usig_pcr" {
  description = "The PCR (0-15) that holds each node's USIG chain."
  type        = number
  default     = 8
}
