# Renders one cloud-init user-data document per node: it installs the cloudbft binary (checked
# against its SHA-256), the systemd units of deploy/systemd, the node's identity and, for
# nodes that warrant (primaries and replicas), the usigd configuration for the machine's TPM.
# Nothing starts until the operator installs /etc/cloudbft/cluster.toml (cloudbft-config.path).

locals {
  units = {
    for name in [
      "cloudbft-usigd.service", "cloudbft-primary.service", "cloudbft-replica.service",
      "cloudbft-dbnode.service", "cloudbft-gateway.service", "cloudbft.target", "cloudbft-config.path",
    ] : name => file("${path.module}/../../../systemd/${name}")
  }

  user_data = {
    for name, node in var.nodes : name => templatefile("${path.module}/user-data.yaml.tftpl", {
      node          = node
      usig_id       = 1000 + node.id
      usig_pcr      = var.usig_pcr
      warrants      = contains(["primary", "replica"], node.role)
      metrics_port  = var.metrics_port
      binary_url    = var.binary_url
      binary_sha256 = var.binary_sha256
      units         = local.units
    })
  }
}
