#!/usr/bin/env bash
# The machine hook of the autoscaler's Terraform provider (`cloudbft autoscale|scale --provider
# terraform --machine-hook deploy/terraform/machine-hook-ssh.sh`), over ssh to a machine that
# deploy/terraform/modules/cloud-init set up. docs/operations.md, "Autoscaling on a cloud with
# Terraform", says what the provider expects:
#
#   machine-hook-ssh.sh enroll  NODE_ID ADDRESS MACHINE
#       prints the machine's `cloudbft usigd enroll --epochs` (its TPM's evidence and epoch);
#   machine-hook-ssh.sh install NODE_ID ADDRESS MACHINE BUNDLE
#       copies BUNDLE/{replica.env,keys/node-NODE_ID.key,cluster.toml} to /etc/cloudbft, the
#       configuration last: cloudbft-config.path then starts usigd and the replica.
#
# Settings (environment): CLOUDBFT_SSH_USER (default admin, Debian's cloud images' user; it
# needs sudo), CLOUDBFT_SSH_OPTS (more ssh options, e.g. "-i ~/.ssh/cloudbft -J bastion").
# A new machine's host key is accepted on first use (StrictHostKeyChecking=accept-new): the
# first connection is as trustworthy as the network between here and the machine, as for the
# enrollment itself (docs/usig.md, "Which TPM"). Not exercised by the tests (no cloud here):
# crates/cloudbft/tests/terraform_scale.rs drives a local stand-in with the same contract.
set -euo pipefail

action="${1:?usage: $0 enroll|install NODE_ID ADDRESS MACHINE [BUNDLE]}"
id="${2:?node id}" address="${3:?address}"
user="${CLOUDBFT_SSH_USER:-admin}"
# shellcheck disable=SC2206 # word splitting of the options is wanted
opts=(-o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=accept-new ${CLOUDBFT_SSH_OPTS:-})
on_machine() { ssh "${opts[@]}" "$user@$address" "$@"; }

# A machine just created may not answer ssh yet, and cloud-init may still be installing the
# binary: wait for both (10 minutes at most).
for _ in $(seq 60); do on_machine true 2>/dev/null && break; sleep 10; done
on_machine 'cloud-init status --wait >/dev/null'

case "$action" in
enroll)
    # usigd must not run while enrolling (the TPM serves one client at a time); on a machine
    # the cluster does not use yet, stopping it is harmless.
    on_machine "sudo systemctl stop cloudbft.target cloudbft-usigd.service 2>/dev/null || true;
        sudo -u cloudbft /usr/local/bin/cloudbft usigd enroll --epochs --config /etc/cloudbft/usigd.toml"
    ;;
install)
    bundle="${5:?bundle directory}"
    [[ -f "$bundle/cluster.toml" && -f "$bundle/keys/node-$id.key" ]] || { echo "$bundle: incomplete" >&2; exit 1; }
    # Through a private temporary directory, then into place as the cloudbft user; the
    # configuration last, since its appearance starts the node.
    tar -C "$bundle" -cf - . | on_machine "set -e; t=\$(sudo mktemp -d); sudo tar -C \"\$t\" --no-same-owner -xf -;
        sudo install -o cloudbft -g cloudbft -m 0600 \"\$t/keys/node-$id.key\" /etc/cloudbft/keys/;
        sudo install -o cloudbft -g cloudbft -m 0644 \"\$t/replica.env\" /etc/cloudbft/replica.env;
        sudo install -o cloudbft -g cloudbft -m 0644 \"\$t/cluster.toml\" /etc/cloudbft/cluster.toml.new;
        sudo mv /etc/cloudbft/cluster.toml.new /etc/cloudbft/cluster.toml; sudo rm -rf \"\$t\""
    ;;
*)
    echo "$0: unknown action $action (enroll or install)" >&2
    exit 2
    ;;
esac
