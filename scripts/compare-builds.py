#!/usr/bin/env python3
"""Two or more uwf builds side by side, interleaved in one run: what a command costs each.

Each build gets a store of its own, grown by its own processes the way a team grows one (one
`thread start` per thread, every other one killed, every fourth stepped), then every sample
runs, build after build: a `uwf --version` spawn, a one-shot `thread start`, a one-shot
`thread step` with the built-in script agent, and a 20-step `thread run`. Prints medians in ms,
each as a ratio of the same build's spawn, and the size of `index.db-wal` at the end.

    cargo build --release && cp target/release/uwf /tmp/uwf-new
    python3 scripts/compare-builds.py /tmp/uwf-old /tmp/uwf-new [--grow 1000] [--samples 31]

Not a test; asserts nothing. Machines are noisy: compare ratios from one run.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

WORKFLOW = """
name: counter
roles:
  tick:
    meta: { type: object, properties: { n: { type: integer }, note: { type: string } }, required: [n] }
conditions:
  more: { expression: "$count(steps) < 1000000" }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]
"""

SCRIPT = 'tick:\n  - { n: 1, note: "a short note of realistic length for a step\'s output" }\n'


def run(binary, root, *args):
    env = dict(os.environ, UWF_STORAGE_ROOT=root)
    env.pop("UWF_STORAGE_URL", None)
    out = subprocess.run([binary, *args], env=env, capture_output=True, text=True, check=False)
    # `thread run --max-steps` ends with 3 when the thread is still active (docs/cli.md);
    # earlier builds ended with 0.
    stopped = args[:2] == ("thread", "run") and out.returncode == 3
    if out.returncode != 0 and not stopped:
        raise SystemExit(f"{binary} {' '.join(args)} failed: {out.stderr}")
    return out.stdout.strip()


def timed(binary, root, *args):
    started = time.perf_counter()
    run(binary, root, *args)
    return (time.perf_counter() - started) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+", help="uwf binaries to compare")
    parser.add_argument("--grow", type=int, default=1000, help="threads grown first")
    parser.add_argument("--samples", type=int, default=31)
    opts = parser.parse_args()
    base = tempfile.mkdtemp(prefix="uwf-compare-")
    script = os.path.join(base, "script.yaml")
    with open(script, "w") as f:
        f.write(SCRIPT)
    wf = os.path.join(base, "counter.yaml")
    with open(wf, "w") as f:
        f.write(WORKFLOW)
    agent = f"uwf agent script --file {script}"
    roots = {}
    for i, b in enumerate(opts.builds):
        root = os.path.join(base, f"store-{i}")
        os.makedirs(root)
        run(b, root, "workflow", "put", wf)
        roots[b] = root
    # Grown in turns, so both stores see the same machine.
    for n in range(opts.grow):
        for b in opts.builds:
            tid = run(b, roots[b], "thread", "start", "counter", "-p", f"grown {n}", "-q")
            if n % 2 == 1:
                run(b, roots[b], "thread", "kill", tid, "-q")
            elif n % 4 == 0:
                run(b, roots[b], "thread", "step", tid, "--agent", agent)
    costs = {b: {"spawn": [], "start": [], "step": [], "run/step": []} for b in opts.builds}
    for n in range(opts.samples):
        for b in opts.builds:
            root, c = roots[b], costs[b]
            c["spawn"].append(timed(b, root, "--version"))
            started = time.perf_counter()
            tid = run(b, root, "thread", "start", "counter", "-p", f"sample {n}", "-q")
            c["start"].append((time.perf_counter() - started) * 1000)
            c["step"].append(timed(b, root, "thread", "step", tid, "--agent", agent))
            c["run/step"].append(
                timed(b, root, "thread", "run", tid, "--max-steps", "20", "--agent", agent) / 20
            )
            run(b, root, "thread", "kill", tid, "-q")
    print(f"medians of {opts.samples} interleaved samples, stores grown to {opts.grow} threads")
    print(f"{'build':<28} {'spawn':>8} {'start':>16} {'step':>16} {'run/step':>16} {'log MB':>7}")
    for b in opts.builds:
        m = {k: statistics.median(v) for k, v in costs[b].items()}
        wal = os.path.join(roots[b], "index.db-wal")
        log = os.path.getsize(wal) / 1e6 if os.path.exists(wal) else 0.0
        cells = [f"{m[k]:7.2f} ({m[k] / m['spawn']:4.2f}×)" for k in ("start", "step", "run/step")]
        print(f"{b:<28} {m['spawn']:8.2f} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {log:7.2f}")
    subprocess.run(["rm", "-rf", base], check=False)


if __name__ == "__main__":
    main()
