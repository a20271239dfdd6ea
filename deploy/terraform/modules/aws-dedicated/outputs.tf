output "nodes" {
  description = "node-<id> → { id, role, group, address, machine, host_id }: machine is the plan's machine (the Dedicated Host), as cluster.toml's machine fields must say."
  value = {
    for name, n in module.nodes.nodes : name => {
      id      = n.id
      role    = n.role
      group   = n.group
      address = aws_instance.node[name].private_ip
      machine = local.machine_of[name]
      host_id = try(aws_ec2_host.machine[local.machine_of[name]].id, null)
    }
  }
}

output "hosts" {
  description = "machine id → Dedicated Host id."
  value       = { for m, h in aws_ec2_host.machine : m => h.id }
}
