output "nodes" {
  description = "node-<id> → { id, role, group, address, machine, spread_set }: machine is the instance id."
  value = {
    for name, n in module.nodes.nodes : name => {
      id         = n.id
      role       = n.role
      group      = n.group
      address    = google_compute_instance.node[name].network_interface[0].network_ip
      machine    = google_compute_instance.node[name].instance_id
      spread_set = n.spread_set
    }
  }
}

output "placement_policies" {
  description = "Anti-affinity set → spread policy self link."
  value       = { for set, p in google_compute_resource_policy.spread : set => p.self_link }
}
