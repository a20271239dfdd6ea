output "nodes" {
  description = "node-<id> → { id, role, group, address, machine, zone, spread_set }: address is the private IP (cloudbft place --addresses puts it into cluster.toml), machine the instance id (each instance is its own machine; spread_set is what keeps a group's instances on distinct racks)."
  value = {
    for name, n in module.nodes.nodes : name => {
      id         = n.id
      role       = n.role
      group      = n.group
      address    = aws_instance.node[name].private_ip
      machine    = aws_instance.node[name].id
      zone       = aws_instance.node[name].availability_zone
      spread_set = n.spread_set
    }
  }
}

output "placement_groups" {
  description = "Anti-affinity set → spread placement group name."
  value       = { for set, pg in aws_placement_group.spread : set => pg.name }
}
