# terraform test with a mocked AWS provider (no credentials, no network): every BFT group's
# instances are in a spread placement group of their own, and the module's guards hold.

mock_provider "aws" {
  mock_data "aws_ami" {
    defaults = {
      tpm_support = "v2.0"
    }
  }
}

variables {
  f                  = 1
  groups             = 2
  primaries          = 2
  ami_id             = "ami-0123456789abcdef0"
  subnet_ids         = ["subnet-a", "subnet-b", "subnet-c"]
  security_group_ids = ["sg-0123"]
  binary_url         = "https://releases.example.org/cloudbft"
  binary_sha256      = "0000000000000000000000000000000000000000000000000000000000000000"
}

run "each_group_has_its_own_spread_group" {
  command = plan

  assert {
    condition     = length(aws_placement_group.spread) == 4
    error_message = "Expected spread groups for primaries, dbnodes, group-0 and group-1."
  }
  assert {
    condition     = alltrue([for pg in aws_placement_group.spread : pg.strategy == "spread" && pg.spread_level == "rack"])
    error_message = "Every placement group must be a rack-level spread group."
  }
  assert {
    condition     = length(aws_instance.node) == 2 + 2 * 3 + 3
    error_message = "Expected 2 candidates, 2 groups of 3 replicas and 3 database nodes."
  }
  assert {
    condition = alltrue([
      for name, i in aws_instance.node :
      i.placement_group == aws_placement_group.spread[i.tags["cloudbft:spread-set"]].name
    ])
    error_message = "Every instance must be in its set's spread group."
  }
  assert {
    condition = alltrue([
      for g in range(2) :
      length([for i in aws_instance.node : i if i.placement_group == "cloudbft-group-${g}"]) == 3
    ])
    error_message = "Every group's 2f+1 replicas must share one spread group of their own."
  }
}

run "node_ids_follow_keygen" {
  command = plan

  assert {
    condition = toset(keys(aws_instance.node)) == toset([
      "node-0", "node-1", "node-101", "node-102", "node-103", "node-201", "node-202", "node-203",
      "node-11", "node-12", "node-13",
    ])
    error_message = "Node names must be keygen's ids: candidates 0.., replicas 100+100g+k, database nodes 10+k."
  }
  assert {
    condition     = length(distinct([for name in ["node-101", "node-102", "node-103"] : aws_instance.node[name].subnet_id])) == 3
    error_message = "A group's members must be dealt over the three zones."
  }
}

run "scaling_out_adds_a_group_and_its_spread_group" {
  command = plan

  variables {
    groups = 3
  }

  assert {
    condition     = length(aws_placement_group.spread) == 5 && length(aws_instance.node) == 14
    error_message = "A third group adds one spread group and three instances."
  }
}

run "an_ami_without_nitrotpm_is_refused" {
  command = plan

  override_data {
    target = data.aws_ami.selected
    values = {
      tpm_support = ""
    }
  }

  expect_failures = [aws_instance.node]
}

run "more_than_seven_members_in_one_zone_are_refused" {
  command = plan

  variables {
    f          = 4
    subnet_ids = ["subnet-a"]
  }

  expect_failures = [aws_placement_group.spread]
}
