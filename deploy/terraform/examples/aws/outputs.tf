output "nodes" {
  description = "node-<id> → address, machine, role: feed it to cloudbft place --addresses (terraform output -json nodes)."
  value       = module.cloudbft.nodes
}
