#!/usr/bin/env bash
# The main job: build uwf, register an example workflow, run a thread with the offline agents,
# and read it back — on a fresh, throwaway storage root, first on the embedded defaults (no
# config.yaml), then with a config in which a workflow plays a role and a person answers one;
# then browse and drive it all through the mount.
# Usage: bash scripts/demo.sh            (set UWF_DEMO_ROOT=DIR to keep the store;
#                                         UWF_BIN=PATH runs that binary instead of building)
# Every command is echoed as it can be pasted (quotes kept), and the output can go to a file
# (`bash scripts/demo.sh > log 2>&1`): nothing reopens stdout or stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${UWF_BIN:-}" ]; then
  bin_dir=$(cd "$(dirname "$UWF_BIN")" && pwd)
else
  # Cargo's own progress (a bar on a terminal, a line per crate otherwise), so a first build
  # is never silent; then how long it took.
  echo "building uwf (a first debug build takes 3-9 minutes on 2 cores; later ones seconds)" >&2
  build_start=$SECONDS
  cargo build --bin uwf
  echo "built in $((SECONDS - build_start))s; the demo itself takes a few seconds" >&2
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
# `thread run` ends with 4 when the thread waits for a person (docs/cli.md#exit-codes).
awaits() { say "$(quote "$@")"; "$@" || [ $? -eq 4 ]; }
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

# A role played by a whole workflow, and a step a person answers (examples/config/config.yaml
# wires both; here with canned outputs so it runs offline).
cat > "$root/solve.yaml" <<'YAML'
planner: [ { summary: "Keep sessions alive", steps: ["fix the expiry check"] } ]
reviewer: [ { approved: true, replan: false, comments: [] } ]
YAML
cat > "$root/develop.yaml" <<'YAML'
planner: [ { phases: [ { title: "Fix the expiry check", goal: "sessions last their configured time" } ] } ]
coder: [ { phase: 1, filesChanged: [src/session.rs], summary: "Compare seconds, not minutes" } ]
reviewer: [ { approved: true, comments: [] } ]
tester: [ { passed: true, commands: ["cargo test"], failures: [] } ]
committer: [ { commit: "4f2a9c1", message: "Keep sessions alive for their configured time", filesChanged: [src/session.rs], summary: "Compare seconds, not minutes", testsPassing: true } ]
YAML
cat > "$root/notes.yaml" <<'YAML'
writer: [ { title: "1.4.2", notes: "- Sessions last as long as configured" }, { title: "1.4.2", notes: "- Sessions no longer end after one minute" } ]
YAML
cat > "$root/config.yaml" <<YAML
defaultAgent: solve-canned
agents:
  solve-canned: { command: uwf, args: [agent, script, --file, "$root/solve.yaml"] }
  develop-canned: { command: uwf, args: [agent, script, --file, "$root/develop.yaml"] }
  notes-canned: { command: uwf, args: [agent, script, --file, "$root/notes.yaml"] }
  develop-flow: { command: uwf, args: [agent, workflow, --name, develop] }
agentOverrides:
  solve-issue: { developer: develop-flow }
  develop: { planner: develop-canned, coder: develop-canned, reviewer: develop-canned, tester: develop-canned, committer: develop-canned }
  release-notes: { writer: notes-canned, approver: human }
YAML
step uwf workflow put examples/develop.yaml
step uwf workflow put examples/release-notes.yaml
nested=$(uwf thread start solve-issue -p "Users are logged out after one minute" -q)
step uwf thread run "$nested"
step uwf thread list --all --tree
step uwf thread show "$nested"
notes=$(uwf thread start release-notes -p "Release 1.4.2 fixes the one-minute logout" -q)
awaits uwf thread run "$notes"
say "$(quote uwf thread question "$notes") | head -3"
uwf thread question "$notes" | head -3
say "$(quote echo '{"approved": false, "feedback": "say what users notice"}') | $(quote uwf thread answer "$notes" --by demo)"
echo '{"approved": false, "feedback": "say what users notice"}' | uwf thread answer "$notes" --by demo
awaits uwf thread run "$notes"

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
  if [ -d "$mnt/threads/$notes" ]; then
    # A person answers through the mount: read the question, write the answer, wait.
    step cat "$mnt/threads/$notes/status"
    say "echo '{\"approved\": true}' > threads/$notes/answer; cat threads/$notes/wait"
    echo '{"approved": true}' > "$mnt/threads/$notes/answer"
    cat "$mnt/threads/$notes/wait"
    echo
    step cat "$mnt/threads/$notes/status"
  fi
  step uwf umount "$mnt"
else
  echo "(skipping the mount: $(head -1 "$root/mount.err"))"
fi
