# The node list: keygen's ids and one anti-affinity set per group (no provider needed).

variables {
  binary_url    = "https://releases.example.org/cloudbft"
  binary_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

run "ids_and_sets" {
  command = apply

  variables {
    f         = 1
    groups    = 2
    primaries = 3
  }

  assert {
    condition     = length(output.nodes) == 3 + 6 + 3
    error_message = "3 candidates, 2 groups of 3, 3 database nodes."
  }
  assert {
    condition     = output.nodes["node-203"].group == 1 && output.nodes["node-203"].spread_set == "group-1" && output.nodes["node-203"].member == 2
    error_message = "Replica 3 of group 1 is node 203 in set group-1."
  }
  assert {
    condition     = output.nodes["node-13"].role == "dbnode" && output.nodes["node-2"].role == "primary"
    error_message = "Database node 3 is node 13; candidate 2 is node 2."
  }
  assert {
    condition     = keys(output.spread_sets) == ["dbnodes", "group-0", "group-1", "primaries"]
    error_message = "One set per group plus the candidates' and the database nodes'."
  }
  assert {
    condition     = alltrue([for g in ["group-0", "group-1"] : length(output.spread_sets[g]) == output.group_size])
    error_message = "Every group set has 2f+1 members."
  }
  assert {
    condition     = keys(output.user_data) == keys(output.nodes) && strcontains(output.user_data["node-203"], "NODE_ID=203")
    error_message = "Every node has its own first-boot document."
  }
}

run "groups_must_be_positive" {
  command = plan

  variables {
    f      = 1
    groups = 0
  }

  expect_failures = [var.groups]
}
