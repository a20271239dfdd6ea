#!/usr/bin/env bash
# Checks deploy/terraform: terraform fmt -check, then init + validate (+ terraform test where a
# module has tests/) for every module and example whose providers can be installed without the
# network, from a local provider mirror (TF_PLUGIN_MIRROR, default /opt/tf-plugins). Prints
# which checks ran and which could not, and why; never skips silently. The HCL structure tests
# (every BFT group's instances tied to an anti-affinity construct) are Rust tests that need no
# terraform: cargo test -p cloudbft-placement --test terraform.
#
# Exit status: 1 if a check that ran failed; 0 otherwise, even when checks could not run,
# unless CHECK_STRICT=1 (then a check that could not run fails too).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mirror="${TF_PLUGIN_MIRROR:-/opt/tf-plugins}"
ran=() failed=() could_not=()

banner() { printf '\n==== %s ====\n' "$*"; }
not_run() { could_not+=("$1: $2"); printf '!!!! COULD NOT RUN: %s: %s\n' "$1" "$2"; }
run_check() {
    local name="$1"; shift
    printf -- '---- %s\n' "$name"
    if "$@"; then ran+=("$name"); else failed+=("$name"); printf 'FAILED: %s\n' "$name"; fi
}

summary() {
    banner "deploy/terraform checks"
    printf 'RAN and PASSED (%d):\n' "${#ran[@]}"; printf '  %s\n' "${ran[@]+"${ran[@]}"}"
    printf 'FAILED (%d):\n' "${#failed[@]}"; printf '  %s\n' "${failed[@]+"${failed[@]}"}"
    printf 'COULD NOT RUN (%d):\n' "${#could_not[@]}"; printf '  %s\n' "${could_not[@]+"${could_not[@]}"}"
    if ((${#failed[@]})); then exit 1; fi
    if ((${#could_not[@]})) && [[ "${CHECK_STRICT:-0}" == 1 ]]; then
        echo "CHECK_STRICT=1: checks that could not run count as failures"; exit 1
    fi
    exit 0
}

modules_and_examples() {
    for d in "$here"/modules/* "$here"/examples/*; do [[ -f "$d/versions.tf" ]] && echo "${d#"$here"/}"; done
}

if ! command -v terraform >/dev/null 2>&1; then
    for d in $(modules_and_examples); do
        not_run "terraform fmt/init/validate/test of $d" "no terraform CLI on PATH (install terraform >= 1.7)"
    done
    summary
fi

banner "terraform $(terraform version | head -n1)"
run_check "terraform fmt -check -recursive deploy/terraform" \
    terraform fmt -check -recursive -diff "$here"

# Work on a copy: init writes .terraform/ and lock files, which do not belong in the tree.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/.." "$work/deploy"
cat > "$work/terraformrc" <<RC
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["registry.terraform.io/*/*"]
  }
}
RC
export TF_CLI_CONFIG_FILE="$work/terraformrc" TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1

for d in $(modules_and_examples); do
    dir="$work/deploy/terraform/$d"
    missing=()
    for source in $(sed -n 's/^ *source *= *"\([^"]*\)".*/\1/p' "$dir/versions.tf"); do
        [[ -d "$mirror/registry.terraform.io/$source" ]] || missing+=("$source")
    done
    if ((${#missing[@]})); then
        not_run "terraform init/validate/test of $d" \
            "provider ${missing[*]} is not in the local mirror $mirror and there is no network for providers"
        continue
    fi
    if ! (cd "$dir" && terraform init -backend=false -input=false -no-color >"$work/init.log" 2>&1); then
        failed+=("terraform init of $d"); printf 'FAILED: terraform init of %s\n' "$d"; cat "$work/init.log"
        continue
    fi
    run_check "terraform validate of $d" bash -c "cd '$dir' && terraform validate -no-color"
    if [[ -d "$dir/tests" ]]; then
        run_check "terraform test of $d ($(ls "$dir/tests" | paste -sd " "))" \
            bash -c "cd '$dir' && terraform test -no-color"
    fi
done

# cloudbft place --scale-groups (cloudbft::terraform::scale_groups) against the real CLI, on a
# stand-in deployment of terraform_data resources (no provider needed).
bin="${CLOUDBFT_BIN:-$here/../../target/debug/cloudbft}"
if [[ ! -x "$bin" ]]; then
    not_run "cloudbft place --scale-groups with terraform" "no cloudbft binary at $bin (cargo build -p cloudbft, or set CLOUDBFT_BIN)"
else
    scale_test() {
        local dir="$work/deploy/terraform/tests/scale" out
        "$bin" place --f 1 --groups 2 --candidates 2 --tfvars "$dir" >/dev/null &&
            (cd "$dir" && terraform init -input=false -no-color >/dev/null && terraform apply -input=false -auto-approve -no-color >/dev/null) &&
            out="$("$bin" place --scale-groups 4 --terraform-dir "$dir")" &&
            grep -q '^groups 2 -> 4: 2 to create, 0 to update, 0 to delete (planned only)' <<<"$out" &&
            grep -q '"groups": 2' "$dir/cloudbft.auto.tfvars.json" &&
            out="$("$bin" place --scale-groups 3 --terraform-dir "$dir" --apply)" &&
            grep -q '^groups 2 -> 3: 1 to create, 0 to update, 0 to delete (applied)' <<<"$out" &&
            out="$("$bin" place --scale-groups 1 --terraform-dir "$dir" --apply)" &&
            grep -q '^groups 3 -> 1: 0 to create, 0 to update, 2 to delete (applied)' <<<"$out" &&
            [[ "$(cd "$dir" && terraform state list | wc -l)" == 1 ]] || { echo "last output: ${out:-}"; return 1; }
    }
    run_check "cloudbft place --scale-groups plan/apply with terraform (tests/scale)" scale_test
fi
summary
