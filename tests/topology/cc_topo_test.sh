#!/bin/bash
# cc-topo on this machine and on the shipped topology files: the tree, the plan, --dot,
# --dump (whose output must load again), and clear errors for bad flags.
# usage: cc_topo_test.sh path/to/cc-topo tests/topology/files
set -u
topo=$1
files=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_ok DESCRIPTION PATTERN -- command...: exit 0 and stdout matching PATTERN.
expect_ok() {
  local what=$1 pattern=$2
  shift 3
  if ! "$@" >"$scratch/out" 2>"$scratch/err"; then
    fail "$what: exit $? ($(cat "$scratch/err"))"
  elif ! grep -Eq -- "$pattern" "$scratch/out"; then
    fail "$what: output lacks /$pattern/"; head -20 "$scratch/out"
  fi
}

# expect_error DESCRIPTION PATTERN -- command...: exit 2 and stderr matching PATTERN.
expect_error() {
  local what=$1 pattern=$2
  shift 3
  "$@" >"$scratch/out" 2>"$scratch/err"
  local status=$?
  if [ "$status" -ne 2 ]; then
    fail "$what: exit $status, expected 2"
  elif ! grep -Eq -- "$pattern" "$scratch/err"; then
    fail "$what: stderr lacks /$pattern/: $(cat "$scratch/err")"
  fi
}

expect_ok "detected" "^host 0 .*NUMA node" -- "$topo"
expect_ok "detected, 8 ranks" "plan for 8 ranks on 1 host" -- "$topo" -n 8
expect_ok "help" "usage: cc-topo" -- "$topo" --help
for file in "$files"/*.json; do
  name=$(basename "$file")
  expect_ok "$name" "ring 0" -- "$topo" --file "$file"
  expect_ok "$name -n 13" "plan for 13 ranks" -- "$topo" --file "$file" -n 13
  expect_ok "$name --dot" "^graph cc_topology" -- "$topo" --file "$file" --dot
  expect_ok "$name --dump" "wrote" -- "$topo" --file "$file" --dump "$scratch/$name"
  expect_ok "$name dumped, loaded" "ring 0" -- "$topo" --file "$scratch/$name"
  # Everything but the first line (which names the file) must be the same.
  if ! cmp -s <("$topo" --file "$file" | tail -n +2) <("$topo" --file "$scratch/$name" | tail -n +2); then
    fail "$name: the dumped file describes a different system"
  fi
done
expect_ok "four hosts: two rings" "ring 1 \(NIC slot 1\)" -- "$topo" --file "$files/four_hosts_2s_2nic.json" -n 16
expect_ok "CC_TOPO_FILE" "host 0 laptop" -- env CC_TOPO_FILE="$files/laptop.json" "$topo"
expect_ok "dump of the detected host" "wrote" -- "$topo" --dump "$scratch/here.json"
expect_ok "detected host, loaded back" "ring 0" -- "$topo" --file "$scratch/here.json"

expect_error "unknown flag" 'unknown argument "--frobnicate"' -- "$topo" --frobnicate
expect_error "missing value" "-n needs a value" -- "$topo" -n
expect_error "bad count" '-n: "zero" is not an integer' -- "$topo" -n zero
expect_error "zero ranks" '-n: "0" is not an integer in \[1' -- "$topo" -n 0
expect_error "bad max rings" "--max-rings" -- "$topo" --max-rings 0
expect_error "missing file" "/nonexistent.json" -- "$topo" --file /nonexistent.json
echo '{"format": "cc-topology", "version": 1, "hosts": [{"name": "x", "sockets": [{}], "numa_nodes": [{"socket": 3, "cpus": "0", "cores": 1}]}]}' >"$scratch/bad.json"
expect_error "bad file" "bad.json: hosts\[0\].numa_nodes\[0\].socket" -- "$topo" --file "$scratch/bad.json"
expect_error "unwritable dump" "cannot create" -- "$topo" --dump /nonexistent/dir/x.json

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "cc-topo: all checks passed"
