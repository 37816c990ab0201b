#!/usr/bin/env python3
"""Where the wall time of a one-shot `uwf thread step` goes, from exec to exit.

Runs the step N times with UWF_PROFILE=1 and prints the median time of every phase between
the profile marks, plus the time before the first mark (exec, dynamic loading, argument
parsing) and after the last (exit), against `uwf --version` run the same way.

    UWF_STORAGE_ROOT=STORE python3 scripts/step-timeline.py UWF THREAD 'AGENT COMMAND' [N]

Each run takes a step, so use a thread whose workflow loops (like the step bench's `counter`).
It also prints the page faults of each (first touches of code and memory: on this machine kind
they cost microseconds each, and they are most of what a step adds to `--version`).

To compare two builds, run copies of both made at the same moment: how long ago a binary file
was written (how the page cache holds it) moved a step by up to 0.7 ms here.
"""
import os
import re
import statistics
import subprocess
import sys
import time

MARK = re.compile(r"uwf-profile\s+[\d.]+ ms  (.*?)  \(monotonic ([\d.]+) ms\)")


def phases(cmd):
    """The phases of one run of `cmd`, and its minor page faults."""
    env = dict(os.environ, UWF_PROFILE="1")
    start = time.monotonic_ns() / 1e6
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    child.stderr.close()
    # wait4 rather than Popen.wait, for the child's own resource usage.
    _, status, usage = os.wait4(child.pid, 0)
    end = time.monotonic_ns() / 1e6
    child.returncode = os.waitstatus_to_exitcode(status)
    rows, prev = [], start
    for label, mono in MARK.findall(stderr):
        rows.append((label, float(mono) - prev))
        prev = float(mono)
    rows.append(("(exit)", end - prev))
    rows.append(("TOTAL", end - start))
    return rows, usage.ru_minflt


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    uwf, thread, agent = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    version, step, faults = [], [], {"version": [], "step": []}
    for _ in range(runs):
        rows, minflt = phases([uwf, "--version"])
        version.append(rows[-1][1])
        faults["version"].append(minflt)
        rows, minflt = phases([uwf, "thread", "step", thread, "--agent", agent])
        step.append(rows)
        faults["step"].append(minflt)
    spawn = statistics.median(version)
    print(f"uwf --version: {spawn:.3f} ms (median of {runs})")
    print(f"uwf thread step, medians of {runs} (ms, and share of one --version spawn):")
    for i, (label, _) in enumerate(step[0]):
        value = statistics.median(run[i][1] for run in step if i < len(run))
        print(f"  {value:8.3f}  {value / spawn:5.2f}x  {label}")
    print(f"page faults (median): `thread step` {statistics.median(faults['step']):.0f}, "
          f"`--version` {statistics.median(faults['version']):.0f}")


if __name__ == "__main__":
    main()
