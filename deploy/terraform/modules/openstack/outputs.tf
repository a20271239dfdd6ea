output "nodes" {
  description = "node-<id> → { id, role, group, address, machine, spread_set }: machine is the server's id (its compute host is visible to admins only: openstack server show -c OS-EXT-SRV-ATTR:host)."
  value = {
    for name, n in module.nodes.nodes : name => {
      id         = n.id
      role       = n.role
      group      = n.group
      address    = openstack_compute_instance_v2.node[name].access_ip_v4
      machine    = openstack_compute_instance_v2.node[name].id
      spread_set = n.spread_set
    }
  }
}

output "server_groups" {
  description = "Anti-affinity set → server group id."
  value       = { for set, sg in openstack_compute_servergroup_v2.anti_affinity : set => sg.id }
}
