# What each role's first boot installs (no provider needed).

variables {
  nodes = {
    "node-0"   = { id = 0, role = "primary" }
    "node-101" = { id = 101, role = "replica", group = 0 }
    "node-11"  = { id = 11, role = "dbnode" }
  }
  binary_url    = "https://releases.example.org/cloudbft"
  binary_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

run "roles" {
  command = apply

  assert {
    condition     = strcontains(output.user_data["node-101"], "systemctl, enable, cloudbft-replica.service, cloudbft-config.path")
    error_message = "A replica enables its role unit."
  }
  assert {
    condition     = strcontains(output.user_data["node-101"], "id = 1101") && strcontains(output.user_data["node-101"], "socket = \"/run/cloudbft/usigd/node-101.sock\"")
    error_message = "A replica's usigd serves usig 1000 + id on the socket its unit uses."
  }
  assert {
    condition     = strcontains(output.user_data["node-0"], "systemctl, enable, cloudbft-usigd.service")
    error_message = "A primary candidate enables usigd."
  }
  assert {
    condition     = !strcontains(output.user_data["node-11"], "path: /etc/cloudbft/usigd.toml") && !strcontains(output.user_data["node-11"], "enable, cloudbft-usigd")
    error_message = "A database node has no usigd."
  }
  assert {
    condition     = alltrue([for u in values(output.user_data) : startswith(u, "#cloud-config\n") && strcontains(u, "sha256sum -c")])
    error_message = "Every document is cloud-config and checks the binary's hash."
  }
  assert {
    condition     = alltrue([for u in values(output.user_data) : can(yamldecode(u))])
    error_message = "Every document is valid YAML."
  }
}

run "a_wrong_hash_format_is_refused" {
  command = plan

  variables {
    binary_sha256 = "not-a-hash"
  }

  expect_failures = [var.binary_sha256]
}
