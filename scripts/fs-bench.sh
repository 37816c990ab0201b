#!/usr/bin/env bash
# Filesystem benchmark (not a test; prints numbers side by side): the mount's threads/ against
# the same tree exported as plain files onto a tmpfs (the targets in brackets).
#
#   warm cat of every file       mount rw / export   [≤ 2.2×]    mount --read-only / export [≤ 1.2×]
#   cold cat: fresh mount after drop_caches / export after drop_caches   [≤ 4×]
#             fresh mount, store in the page cache / warm export         [≤ 4×]
#   find                         mount / export      [≤ 1.2× warm]
#   daemon peak RSS (VmHWM) after reading every file of 1,000 finished threads [≤ 100 MB]
#
# Needs root (mount, tmpfs, drop_caches). Release build. Usage: bash scripts/fs-bench.sh [THREADS]
# (default 30 for the timings; the RSS phase always grows the store to 1,000 threads).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-30}
BIG=1000
RUNS=7
COLD_RUNS=5

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
cargo build --release --quiet
UWF=$target/release/uwf
B=$target/fs-bench
MOUNTS=()

cleanup() {
  for m in "${MOUNTS[@]}"; do
    "$UWF" umount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true
  done
  umount "$B/export" 2>/dev/null || true
}
trap cleanup EXIT

for m in "$B/mnt" "$B/ro" "$B/export"; do
  if grep -q " $m " /proc/self/mounts; then umount -l "$m" || true; fi
done
rm -rf "$B"
mkdir -p "$B/store" "$B/mnt" "$B/ro" "$B/export"
export UWF_STORAGE_ROOT=$B/store

# ---------------------------------------------------------------- a store of finished threads
cat > "$B/loop.yaml" <<'EOF'
name: loop
description: plan, review, plan again, approve
roles:
  planner:
    goal: plan
    meta:
      type: object
      properties: { plan: { type: string }, steps: { type: array, items: { type: string } } }
      required: [plan]
  reviewer:
    goal: review
    meta:
      type: object
      properties: { ok: { type: boolean }, comments: { type: array, items: { type: string } } }
      required: [ok]
conditions:
  approved:
    expression: "steps[-1].output.ok = true"
graph:
  $START: [ { role: planner, condition: null } ]
  planner: [ { role: reviewer, condition: null } ]
  reviewer: [ { role: $END, condition: approved }, { role: planner, condition: null } ]
EOF
body=$(printf 'Some reasoning the agent wrote down, line %s.\\n' $(seq 1 12) | tr -d '\n')
cat > "$B/script.yaml" <<EOF
planner:
  - "---\\nplan: first attempt\\nsteps: [read the code, change the session timeout, add a test]\\n---\\n$body"
  - "---\\nplan: second attempt\\nsteps: [read the code, keep the session alive on activity, add two tests]\\n---\\n$body"
reviewer:
  - "---\\nok: false\\ncomments: [the timeout is still hard-coded, no test for refresh]\\n---\\n$body"
  - "---\\nok: true\\ncomments: []\\n---\\n$body"
EOF
cat > "$B/store/config.yaml" <<EOF
agents:
  scripted:
    command: $UWF
    args: [agent, script, --file, $B/script.yaml]
defaultAgent: scripted
EOF
"$UWF" workflow put "$B/loop.yaml" >/dev/null

make_threads() { # count
  seq "$1" | xargs -P 2 -I{} sh -c '
    id=$("$0" thread start loop -p "Task {}: users are logged out after a minute" | sed "s/.*\"thread\":\"\([^\"]*\)\".*/\1/")
    "$0" thread run "$id" >/dev/null 2>&1' "$UWF"
}
make_threads "$THREADS"

# ---------------------------------------------------------------- export onto a tmpfs
mount -t tmpfs -o size=1g uwf-bench "$B/export"
"$UWF" export --all "$B/export" >/dev/null
(cd "$B/export/threads" && find . -type f -print0 > "$B/files")
files=$(tr -cd '\0' < "$B/files" | wc -c)

now() { date +%s%N; }
# ms for one run of "$@" in directory $1
timed() {
  local dir=$1; shift
  local s; s=$(now)
  (cd "$dir" && "$@")
  echo $(( ($(now) - s) / 1000000 ))
}
cat_all() { xargs -0 -a "$B/files" cat > /dev/null; }
find_all() { for _ in 1 2 3 4 5 6 7 8 9 10; do find . > /dev/null; done; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Warm timings of the same command in two directories, interleaved (this machine is shared:
# alternating runs keeps a burst of load from landing on one side only). Prints "msA msB",
# each the median of $RUNS runs after one warm-up.
warm_pair() { # dirA dirB command
  local a=$1 b=$2; shift 2
  timed "$a" "$@" > /dev/null
  timed "$b" "$@" > /dev/null
  local ta=() tb=()
  for _ in $(seq $RUNS); do
    ta+=("$(timed "$a" "$@")")
    tb+=("$(timed "$b" "$@")")
  done
  echo "$(median "${ta[@]}") $(median "${tb[@]}")"
}
mount_uwf() { # dir [flags] → sets $pid (not in a subshell: cleanup needs MOUNTS)
  local dir=$1; shift
  local out; out=$("$UWF" mount --background "$@" "$dir")
  MOUNTS+=("$dir")
  pid=$(echo "$out" | sed 's/.*"pid":\([0-9]*\).*/\1/')
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) b = 1; printf "%.2f", a / b }'; }

# ---------------------------------------------------------------- timings
# Cold: each run a fresh mount; the median of $COLD_RUNS (one run alone swings by ±10 % here).
# The export is timed cold too, right before, in the same state: page cache dropped, so `cat`,
# `xargs` and libc are read from disk again on both sides (tmpfs itself has no cold state).
colds=() cold_exports=() hot_disk=()
for _ in $(seq $COLD_RUNS); do
  sync; echo 3 > /proc/sys/vm/drop_caches
  cold_exports+=("$(timed "$B/export/threads" cat_all)")
  sync; echo 3 > /proc/sys/vm/drop_caches
  mount_uwf "$B/mnt"
  colds+=("$(timed "$B/mnt/threads" cat_all)")
  "$UWF" umount "$B/mnt" >/dev/null
  # Again with the store's pages still cached: only the kernel's FUSE caches start cold (a
  # new mount of a store in use), against the export as it is then.
  mount_uwf "$B/mnt"
  hot_disk+=("$(timed "$B/mnt/threads" cat_all)")
  "$UWF" umount "$B/mnt" >/dev/null
done
cold_mount=$(median "${colds[@]}")
cold_export=$(median "${cold_exports[@]}")
cold_mount_hot_disk=$(median "${hot_disk[@]}")
mount_uwf "$B/mnt"
read -r warm_export warm_mount < <(warm_pair "$B/export/threads" "$B/mnt/threads" cat_all)
read -r find_export find_mount < <(warm_pair "$B/export/threads" "$B/mnt/threads" find_all)
"$UWF" umount "$B/mnt" >/dev/null
mount_uwf "$B/ro" --read-only
read -r ro_export warm_ro < <(warm_pair "$B/export/threads" "$B/ro/threads" cat_all)
read -r ro_find_export find_ro < <(warm_pair "$B/export/threads" "$B/ro/threads" find_all)
"$UWF" umount "$B/ro" >/dev/null

# ---------------------------------------------------------------- memory with 1,000 threads
make_threads $((BIG - THREADS))
mount_uwf "$B/mnt"
s=$(now)
(cd "$B/mnt/threads" && find . -type f -print0 | xargs -0 cat > /dev/null)
big_ms=$(( ($(now) - s) / 1000000 ))
big_files=$(cd "$B/mnt/threads" && find . -type f | wc -l)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
"$UWF" umount "$B/mnt" >/dev/null

# ---------------------------------------------------------------- report
echo
echo "uwf filesystem benchmark: $THREADS finished threads, $files files in threads/ (4 steps each)"
echo "export on tmpfs vs uwf mount (ms; warm = median of $RUNS; cold = median of $COLD_RUNS fresh mounts; find = 10 runs)"
printf '  %-34s %8s %8s %7s   %s\n' "" export mount ratio target
row() { printf '  %-34s %8s %8s %7s   %s\n' "$1" "$2" "$3" "$(ratio "$3" "$2")x" "$4"; }
row "warm cat of every file (rw)" "$warm_export" "$warm_mount" "<= 2.2x"
row "warm cat of every file (--read-only)" "$ro_export" "$warm_ro" "<= 1.2x"
row "cold cat (drop_caches, new mount)" "$cold_export" "$cold_mount" "<= 4x"
row "cold cat (new mount, store cached)" "$warm_export" "$cold_mount_hot_disk" "<= 4x"
row "find (rw)" "$find_export" "$find_mount" "<= 1.2x"
row "find (--read-only)" "$ro_find_export" "$find_ro" ""
echo "daemon memory after cat of all $big_files files of $BIG finished threads ($big_ms ms):"
printf '  peak RSS (VmHWM) %s MB, RSS now %s MB   [target <= 100 MB]\n' "$(awk -v k="$hwm" 'BEGIN{printf "%.1f", k/1024}')" "$(awk -v k="$rss" 'BEGIN{printf "%.1f", k/1024}')"
