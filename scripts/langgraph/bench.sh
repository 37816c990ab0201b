#!/usr/bin/env bash
# uwf vs LangGraph on the same workflow, side by side in one run (issue #17). Not a test; CI does
# not run it. Prints one table of medians and uwf/LangGraph ratios:
#   cold: one whole thread (6 steps) in fresh processes;
#   warm per step: a `uwf thread step` process, a step inside `uwf thread run`, LangGraph in one
#     process (SqliteSaver on a file), LangGraph reloading state from SQLite for every step;
#   per step at chain ~300 vs ~20 for each side; peak RSS of a step;
#   reference: one `uwf --version` spawn, and uwf's targets expressed in it.
# Both sides run scripts/langgraph/triage-fix.yaml with the canned outputs of canned.yaml (uwf
# through its `script` agent, LangGraph through twin.py); samples alternate between the sides.
#
#   bash scripts/langgraph/bench.sh            # SAMPLES=9 rounds (~2-3 min on 2 cores)
#   SAMPLES=15 bash scripts/langgraph/bench.sh
#
# Needs Python 3.10+ and PyPI: the venv target/langgraph-venv is created on first use with
# langgraph, langgraph-checkpoint-sqlite, jsonschema and pyyaml. Stores go to a fresh directory
# under target/langgraph-bench/, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
export SAMPLES=${SAMPLES:-9}

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
venv=$PWD/target/langgraph-venv
if ! "$venv/bin/python" -c 'import langgraph.checkpoint.sqlite, jsonschema, yaml' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet langgraph langgraph-checkpoint-sqlite jsonschema pyyaml
fi
cargo build --release --quiet
export UWF=$target/release/uwf

mkdir -p target/langgraph-bench
BENCH_DIR=$(mktemp -d "$PWD/target/langgraph-bench/run.XXXXXX")
export BENCH_DIR
trap 'rm -rf "$BENCH_DIR"' EXIT
"$venv/bin/python" -c 'import importlib.metadata as m
for p in ("langgraph", "langgraph-checkpoint-sqlite", "jsonschema"): print(p, m.version(p), end=" · ")'
"$UWF" --version
"$venv/bin/python" scripts/langgraph/bench.py
