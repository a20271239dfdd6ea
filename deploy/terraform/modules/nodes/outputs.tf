output "nodes" {
  description = "node-<id> → { id, role, group, spread_set, member }: member is the node's index within its set."
  value       = local.nodes
}

output "spread_sets" {
  description = "The anti-affinity sets: \"primaries\", \"dbnodes\" and \"group-<g>\" for every group, with their size."
  value       = { for name, node in local.nodes : node.spread_set => name... }
}

output "group_size" {
  description = "2f+1."
  value       = local.n
}

output "user_data" {
  description = "node-<id> → its cloud-init document (../cloud-init)."
  value       = module.cloud_init.user_data
}
