# terraform test with a mocked AWS provider: every node runs on its plan machine's Dedicated
# Host, and plans that break the anti-affinity rules are refused.

mock_provider "aws" {
  mock_data "aws_ami" {
    defaults = {
      tpm_support = "v2.0"
    }
  }
}

variables {
  f         = 1
  groups    = 2
  primaries = 1
  machines = {
    m0 = { zone = "eu-west-1a", slots = 4 }
    m1 = { zone = "eu-west-1a", slots = 4 }
    m2 = { zone = "eu-west-1b", slots = 4 }
    m3 = { zone = "eu-west-1c", slots = 4 }
  }
  placement = {
    primaries = ["m0"]
    groups    = [["m1", "m2", "m3"], ["m1", "m2", "m3"]]
    db_nodes  = ["m0", "m2", "m3"]
  }
  ami_id             = "ami-0123456789abcdef0"
  subnet_by_zone     = { "eu-west-1a" = "subnet-a", "eu-west-1b" = "subnet-b", "eu-west-1c" = "subnet-c" }
  security_group_ids = ["sg-0123"]
  binary_url         = "https://releases.example.org/cloudbft"
  binary_sha256      = "0000000000000000000000000000000000000000000000000000000000000000"
}

run "the_papers_2f_plus_2_machines" {
  command = plan

  assert {
    condition     = length(aws_ec2_host.machine) == 4 && alltrue([for h in aws_ec2_host.machine : h.auto_placement == "off"])
    error_message = "One Dedicated Host per machine, closed to other instances."
  }
  assert {
    condition     = alltrue([for i in aws_instance.node : i.tenancy == "host"])
    error_message = "Every node runs on a Dedicated Host."
  }
  assert {
    condition     = [for k in [101, 102, 103] : aws_instance.node["node-${k}"].tags["cloudbft:machine"]] == ["m1", "m2", "m3"]
    error_message = "Group 0's replicas run on the plan's machines."
  }
  assert {
    condition     = aws_instance.node["node-11"].subnet_id == "subnet-a" && aws_instance.node["node-12"].subnet_id == "subnet-b"
    error_message = "A node's subnet is its machine's zone's."
  }
}

run "two_members_on_one_machine_are_refused" {
  command = plan

  variables {
    placement = {
      primaries = ["m0"]
      groups    = [["m1", "m1", "m3"], ["m1", "m2", "m3"]]
      db_nodes  = ["m0", "m2", "m3"]
    }
  }

  expect_failures = [aws_instance.node]
}

run "a_candidate_with_replicas_is_refused" {
  command = plan

  variables {
    placement = {
      primaries = ["m1"]
      groups    = [["m1", "m2", "m3"], ["m0", "m2", "m3"]]
      db_nodes  = ["m0", "m2", "m3"]
    }
  }

  expect_failures = [aws_instance.node]
}

run "a_stale_placement_is_refused" {
  command = plan

  variables {
    groups = 3
  }

  expect_failures = [aws_instance.node]
}
