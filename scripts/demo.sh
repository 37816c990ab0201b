#!/usr/bin/env bash
# The main job: build uwf, register an example workflow, run a thread with the offline agents,
# and read it back — on a fresh, throwaway storage root (the embedded defaults: no config.yaml).
# Usage: bash scripts/demo.sh            (set UWF_DEMO_ROOT=DIR to keep the store;
#                                         UWF_BIN=PATH runs that binary instead of building)
# Every command is echoed as it can be pasted (quotes kept), and the output can go to a file
# (`bash scripts/demo.sh > log 2>&1`): nothing reopens stdout or stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${UWF_BIN:-}" ]; then
  bin_dir=$(cd "$(dirname "$UWF_BIN")" && pwd)
else
  cargo build --quiet --bin uwf
  bin_dir=$PWD/${CARGO_TARGET_DIR:-target}/debug
  case "${CARGO_TARGET_DIR:-}" in /*) bin_dir=$CARGO_TARGET_DIR/debug ;; esac
fi
export PATH=$bin_dir:$PATH
root=${UWF_DEMO_ROOT:-$(mktemp -d)}
export UWF_STORAGE_ROOT=$root
mnt=

# However the demo ends (done, failed, Ctrl-C, kill), unmount and remove what it made.
cleanup() {
  if [ -n "$mnt" ]; then
    uwf umount "$mnt" >/dev/null 2>&1 || true
    rmdir "$mnt" 2>/dev/null || true
  fi
  [ -n "${UWF_DEMO_ROOT:-}" ] || rm -rf "$root"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
# Prints a command as it can be pasted: words that need it in single quotes.
quote() {
  local word words=()
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
      words+=("$word")
    else
      words+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  printf '%s' "${words[*]}"
}
say() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; }
step() { say "$(quote "$@")"; "$@"; }
json_field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

echo "uwf demo — storage root: $root"
step uwf workflow put examples/solve-issue.yaml
step uwf workflow graph solve-issue

say "$(quote uwf thread start solve-issue -p "Users are logged out after one minute")"
started=$(uwf thread start solve-issue -p "Users are logged out after one minute")
printf '%s\n' "$started"
thread=$(json_field thread <<<"$started")

# A scripted run: canned outputs per role (the reviewer rejects once, then approves).
script=$root/demo-script.yaml
cat > "$script" <<'YAML'
planner:
  - { summary: "Keep sessions alive", steps: ["reproduce the logout", "fix the expiry check", "add a regression test"] }
developer:
  - { filesChanged: [src/session.rs], summary: "Compare expiry in seconds, not minutes", testsPassing: true }
  - "---\nfilesChanged: [src/session.rs, tests/session.rs]\nsummary: Added the regression test\ntestsPassing: true\n---\nThe test fails before the fix and passes after it.\n"
reviewer:
  - "---\napproved: false\nreplan: false\ncomments:\n  - { file: src/session.rs, line: 42, message: please add a regression test }\n---\nThe fix looks right; it needs a test.\n"
  - { approved: true, replan: false, comments: [] }
YAML
step uwf thread run "$thread" --agent "uwf agent script --file $script"
step uwf thread read "$thread"
step uwf thread steps "$thread"

# The same workflow with the dry agent (the default with no config): routing only.
dry=$(uwf thread start solve-issue -p "Try the routing" | json_field thread)
step uwf thread run "$dry"
step uwf thread list --all
step uwf cas fsck

# The same storage as files (FUSE; root mounts without fusermount).
mnt=$(mktemp -d)
if uwf mount --background "$mnt" >/dev/null 2>"$root/mount.err"; then
  step ls "$mnt" "$mnt/workflows/solve-issue"
  step cat "$mnt/workflows/solve-issue/hash"
  step head -5 "$mnt/workflows/solve-issue/workflow.yaml"
  if [ -d "$mnt/threads/$thread" ]; then
    step cat "$mnt/threads/$thread/status"
    step ls "$mnt/threads/$thread/steps"
    step cat "$mnt/threads/$thread/steps/latest/output.yaml"
    step cat "$mnt/threads/$thread/steps/004-developer/diff"
    # Drive a thread with files: a prompt starts it, touching `step` runs one step (dry agent).
    say 'echo "Try the mount" > workflows/solve-issue/prompt; touch threads/<new>/step; cat threads/<new>/wait'
    echo "Try the mount" > "$mnt/workflows/solve-issue/prompt"
    new=$(basename "$(readlink "$mnt/workflows/solve-issue/latest")")
    touch "$mnt/threads/$new/step"
    cat "$mnt/threads/$new/wait"
    step cat "$mnt/threads/$new/status"
  fi
  step uwf umount "$mnt"
else
  echo "(skipping the mount: $(head -1 "$root/mount.err"))"
fi
