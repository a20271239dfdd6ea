output "user_data" {
  description = "cloud-init user-data per node name."
  value       = local.user_data
}
