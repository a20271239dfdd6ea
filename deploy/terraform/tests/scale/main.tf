# A stand-in deployment for check.sh's test of `cloudbft place --scale-groups` with the real
# terraform CLI: one terraform_data resource per group (built into terraform, so it needs no
# provider and no network), driven by the variables cloudbft place writes.

variable "f" {
  description = "Faults tolerated per group."
  type        = number
}

variable "groups" {
  description = "Number of groups."
  type        = number
}

variable "primaries" {
  description = "Primary candidates."
  type        = number
}

resource "terraform_data" "group" {
  for_each = toset([for g in range(var.groups) : tostring(g)])
  input    = { group = each.key, members = 2 * var.f + 1 }
}
