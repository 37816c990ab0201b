#!/usr/bin/env bash
# signal-trials.sh — does anything of an agent outlive its step? (issue #27, "Nothing left behind")
#
# For each stop signal (INT, TERM, HUP, KILL) and each way of stepping (`thread step`,
# `thread run`), runs TRIALS trials, each on a fresh store: a step whose agent starts
# `sleep 30 &` and then `sleep 30` (every other trial a shell script agent, the others
# `uwf agent exec` running the same shell line), the signal sent to the `uwf` process once both
# sleeps run, and one second later a count of the processes left in the agent's process group.
# Also checks the exit status (128 + the signal's number) and that the head did not move.
#
# With WORKFLOW_AGENT=1 the agent is a sub-workflow (`uwf agent workflow`) whose child thread's
# agent is the shell script above: then the child's group is counted too, and the child thread
# must be archived once the parent has been looked at (`thread show`).
#
# Usage: scripts/signal-trials.sh            (target/debug/uwf, 20 trials each)
#        UWF=target/release/uwf TRIALS=5 SIGNALS="INT KILL" MODES=run scripts/signal-trials.sh
set -u
set -m # background jobs keep SIGINT (a shell without job control starts them ignoring it)

UWF=$(realpath "${UWF:-target/debug/uwf}")
TRIALS=${TRIALS:-20}
SIGNALS=${SIGNALS:-"INT TERM HUP KILL"}
MODES=${MODES:-"step run"}
WORKFLOW_AGENT=${WORKFLOW_AGENT:-0}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/one.yaml" <<'EOF'
name: one
roles:
  work:
    goal: Work.
    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }
graph:
  $START: [ { role: work, condition: null } ]
  work: [ { role: $END, condition: null } ]
EOF
sed 's/^name: one/name: inner/' "$work/one.yaml" >"$work/inner.yaml"
printf '#!/bin/sh\nsleep 30 &\nsleep 30\n' >"$work/agent.sh"
chmod +x "$work/agent.sh"

# Processes (not zombies) in process group $1.
in_group() {
    ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/' | wc -l
}

# Sleeps (not zombies) in process group $1.
sleeps_in_group() {
    ps -eo pgid=,stat=,comm= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ && $3 == "sleep"' | wc -l
}

# The agent pid (= process group) a running step of thread $2 recorded under root $1.
agent_of() {
    sed -n 's/.*"agentPid":\([0-9][0-9]*\).*/\1/p' "$1/runs/$2.run.json" 2>/dev/null
}

head_of() {
    "$UWF" thread show "$1" 2>/dev/null | sed -n 's/.*"head":"\([0-9A-Z]*\)".*/\1/p'
}

# One trial, in this shell (a subshell would start the step ignoring SIGINT); sets
# left, status, unmoved (0|1) and childactive (0|1).
trial() {
    local sig=$1 mode=$2 n=$3
    local root="$work/store-$sig-$mode-$n"
    mkdir -p "$root"
    export UWF_STORAGE_ROOT=$root
    "$UWF" workflow put "$work/one.yaml" >/dev/null
    local agent
    if [ "$WORKFLOW_AGENT" = 1 ]; then
        "$UWF" workflow put "$work/inner.yaml" >/dev/null
        printf 'agents:\n  sleeper: { command: %s }\nagentOverrides:\n  inner: { work: sleeper }\n' \
            "$work/agent.sh" >"$root/config.yaml"
        agent="uwf agent workflow --name inner"
    elif [ $((n % 2)) = 0 ]; then
        agent=$work/agent.sh
    else
        agent="uwf agent exec --cmd 'sleep 30 & sleep 30'"
    fi
    local id
    id=$("$UWF" -q thread start one -p "trial $n")
    local before
    before=$(head_of "$id")
    "$UWF" thread "$mode" "$id" --agent "$agent" >/dev/null 2>&1 &
    local pid=$!
    # The group to watch: the agent's, or with a sub-workflow the child's agent's.
    local watched="" group="" child="" deadline=$((SECONDS + 20))
    while [ $SECONDS -lt $deadline ]; do
        group=$(agent_of "$root" "$id")
        if [ "$WORKFLOW_AGENT" = 1 ]; then
            child=$(sed -n 1p "$root/runs/$id.children" 2>/dev/null)
            watched=${child:+$(agent_of "$root" "$child")}
        else
            watched=$group
        fi
        if [ -n "$watched" ] && [ "$(sleeps_in_group "$watched")" -ge 2 ]; then
            break
        fi
        sleep 0.02
    done
    kill -s "$sig" "$pid" 2>/dev/null || echo "trial $n: the step ended before the signal" >&2
    wait "$pid" 2>/dev/null
    status=$?
    sleep 1
    left=0
    for g in $group $watched; do
        left=$((left + $(in_group "$g")))
    done
    unmoved=0
    [ "$(head_of "$id")" = "$before" ] && unmoved=1
    local active=0
    if [ -n "$child" ]; then
        "$UWF" thread show "$id" >/dev/null 2>&1
        "$UWF" thread show "$child" 2>/dev/null | grep -qv '"status":"killed"' && active=1
    fi
    # Whatever is left is not ours to keep: the next trial starts clean.
    for g in $group $watched; do
        kill -KILL -- "-$g" 2>/dev/null
    done
    childactive=$active
}

signum() { kill -l "$1"; }

total_bad=0
echo "uwf: $UWF; $TRIALS trials per signal and command$([ "$WORKFLOW_AGENT" = 1 ] && echo ', sub-workflow agent')"
for sig in $SIGNALS; do
    want=$((128 + $(signum "$sig")))
    for mode in $MODES; do
        left_trials=0 left_procs=0 bad_status=0 moved=0 active=0
        for n in $(seq 1 "$TRIALS"); do
            trial "$sig" "$mode" "$n"
            [ "$left" -gt 0 ] && left_trials=$((left_trials + 1))
            left_procs=$((left_procs + left))
            [ "$status" != "$want" ] && bad_status=$((bad_status + 1))
            [ "$unmoved" != 1 ] && moved=$((moved + 1))
            [ "$childactive" = 1 ] && active=$((active + 1))
        done
        line=$(printf 'SIG%-4s thread %-4s %3d trials: %3d with agent processes alive 1 s later (%d processes), exit %d in %d/%d, head unmoved in %d/%d' \
            "$sig" "$mode" "$TRIALS" "$left_trials" "$left_procs" "$want" $((TRIALS - bad_status)) "$TRIALS" $((TRIALS - moved)) "$TRIALS")
        [ "$WORKFLOW_AGENT" = 1 ] && line="$line, child still active in $active/$TRIALS"
        echo "$line"
        total_bad=$((total_bad + left_trials + bad_status + moved + active))
    done
done
if [ "$total_bad" = 0 ]; then
    echo "all trials clean"
else
    echo "FAILED: $total_bad problems"
    exit 1
fi
