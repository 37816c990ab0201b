#!/usr/bin/env bash
# The main job: build uwf and run a demo on a fresh, throwaway storage root.
# Usage: bash scripts/demo.sh            (keeps nothing; set UWF_DEMO_ROOT=DIR to keep the store)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --bin uwf
uwf=target/debug/uwf
root=${UWF_DEMO_ROOT:-$(mktemp -d)}
export UWF_STORAGE_ROOT=$root
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; "$@"; }

echo "uwf demo, storage root: $root"
step "$uwf" cas schema list
schema=$(echo '{"title":"review","type":"object","properties":{"approved":{"type":"boolean"},"notes":{"type":"string"}},"required":["approved"]}' \
  | "$uwf" cas schema put -)
echo "review schema: $schema"
step "$uwf" cas put "$schema" '{"approved": false, "notes": "needs tests"}'
node=$("$uwf" cas put "$schema" '{"approved": false, "notes": "needs tests"}')
step "$uwf" cas get "$node"
step "$uwf" cas walk "$node"
echo
echo '$ uwf cas put '"$schema"' '"'"'{"notes": 3}'"'"'   # refused: two rules fail'
"$uwf" cas put "$schema" '{"notes": 3}' || true
step "$uwf" cas fsck
step "$uwf" cas gc --dry-run --grace 0s
[ -n "${UWF_DEMO_ROOT:-}" ] || rm -rf "$root"
