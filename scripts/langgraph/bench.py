"""Driver of scripts/langgraph/bench.sh (run that; it sets up the venv, the build and the
environment): times uwf and its LangGraph twin (twin.py) on the same workflow, interleaved, and
prints one table of medians. Environment: UWF (the binary), BENCH_DIR (a fresh directory),
SAMPLES (rounds; each round takes one sample of every series).
"""

import itertools
import json
import os
import statistics
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
UWF, DIR, SAMPLES = os.environ["UWF"], os.environ["BENCH_DIR"], int(os.environ["SAMPLES"])
WORKFLOW, CANNED = f"{HERE}/triage-fix.yaml", f"{HERE}/canned.yaml"
LOOP, DB = f"{DIR}/triage-fix-loop.yaml", f"{DIR}/langgraph.sqlite"
AGENT = f"{UWF} agent script --file {CANNED}"
SHORT, LONG = 20, 300  # chain lengths compared
RUN = LONG + 20  # steps of one in-process run; per-step windows of 11 steps around SHORT and LONG
STEPS = 3  # one-shot steps per thread and round
ENV = dict(os.environ, UWF_STORAGE_ROOT=f"{DIR}/store")
LOG = f"{DIR}/stderr.log"  # both sides' stderr (uwf says when --max-steps stops a run)


def fail(what):
    with open(LOG) as f:
        sys.exit(f"bench.py: {what} failed; stderr ends with:\n{f.read()[-2000:]}")


def spawn(*argv):
    """Runs argv; returns (seconds, peak RSS in KiB of it and its waited-for children, stdout)."""
    r, w = os.pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, w, 1),
               (os.POSIX_SPAWN_OPEN, 2, LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)]
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, ENV, file_actions=actions)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    # `thread run --max-steps` ends with 3 when the thread is still active (docs/cli.md).
    stopped = tuple(argv[1:3]) == ("thread", "run") and code == 3
    if code != 0 and not stopped:
        fail(" ".join(argv))
    return seconds, usage.ru_maxrss, out


def uwf(*args):
    return spawn(UWF, *args)


def twin(*args):
    return spawn(sys.executable, f"{HERE}/twin.py", *args)


THREADS = itertools.count()


def new_thread(workflow):
    # A prompt of its own: a start node names only the workflow and the prompt, so two threads
    # with the same prompt would share their start and, with canned outputs, every step node
    # after it; the second would then write no node (and sync nothing), unlike a real thread.
    prompt = f"Users are logged out (thread {next(THREADS)})"
    return json.loads(uwf("thread", "start", workflow, "-p", prompt)[2])["thread"]


def uwf_cold():
    """A whole triage-fix thread, every command a fresh process: start, then step until done."""
    t, roles = time.perf_counter(), []
    thread = new_thread("triage-fix")
    while True:
        step = json.loads(uwf("thread", "step", thread, "--agent", AGENT)[2])
        roles.append(step["role"])
        if step["done"]:
            break
    return time.perf_counter() - t, roles


def uwf_run_gaps(thread):
    """ms per step inside one `thread run`, from the arrival times of its JSON lines."""
    argv = [UWF, "thread", "run", thread, "--max-steps", str(RUN), "--agent", AGENT]
    with open(LOG, "a") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=ENV)
    ms, t = [], time.perf_counter()
    for _ in proc.stdout:
        now = time.perf_counter()
        ms.append((now - t) * 1e3)
        t = now
    if proc.wait() not in (0, 3) or len(ms) != RUN:
        fail("uwf thread run")
    return ms


def around(ms, n):
    """Median of the per-step times of steps n-5 … n+5 (1-based)."""
    return statistics.median(ms[n - 6 : n + 5])


def loop_variant():
    """triage-fix with the critic sending every verdict back to the fixer while
    `$count(steps) < 1000`: a thread as long as we like, for both sides."""
    with open(WORKFLOW) as f:
        wf = yaml.safe_load(f)
    wf["name"] += "-loop"
    wf["conditions"] = {"more": {"expression": "$count(steps) < 1000"}}
    wf["graph"]["critic"] = [{"role": "fixer", "condition": "more"},
                             {"role": "$END", "condition": None}]
    del wf["roles"]["committer"], wf["graph"]["committer"]
    with open(LOOP, "w") as f:
        yaml.safe_dump(wf, f, sort_keys=False)


def main():
    loop_variant()
    uwf("workflow", "put", WORKFLOW)
    uwf("workflow", "put", LOOP)
    with open(f"{DIR}/store/config.yaml", "w") as f:
        f.write("defaultAgent: dry\n")
    short, long = new_thread("triage-fix-loop"), new_thread("triage-fix-loop")
    for thread, n in ((short, SHORT), (long, LONG)):
        uwf("thread", "run", thread, "--max-steps", str(n), "--agent", AGENT)
        twin("grow", DB, LOOP, CANNED, thread, str(n))

    s = {k: [] for k in ("version", "uwf_cold", "lg_cold", "uwf_step20", "uwf_step300",
                         "lg_step20", "lg_step300", "uwf_run20", "uwf_run300",
                         "lg_sync20", "lg_sync300", "lg_async20", "lg_async300",
                         "uwf_rss", "lg_rss")}
    for i in range(SAMPLES):
        print(f"round {i + 1} of {SAMPLES}", file=sys.stderr)
        s["version"].append(uwf("--version")[0] * 1e3)
        # Cold: one whole thread in fresh processes.
        seconds, roles = uwf_cold()
        s["uwf_cold"].append(seconds * 1e3)
        seconds, rss, out = twin("run", DB, WORKFLOW, CANNED, f"cold-{i}")
        if json.loads(out) != roles:
            sys.exit(f"bench.py: the sides took different paths: {roles} vs {out}")
        s["lg_cold"].append(seconds * 1e3)
        # One-shot steps on threads of ~20 and ~300 steps: a `thread step` process each (the
        # `script` agent runs inside it); one LangGraph process doing invoke-per-step reloads
        # from SQLite.
        for _ in range(STEPS):
            for thread, key in ((short, "uwf_step20"), (long, "uwf_step300")):
                seconds, rss, _ = uwf("thread", "step", thread, "--agent", AGENT)
                s[key].append(seconds * 1e3)
                s["uwf_rss"].append(rss)
        _, rss, out = twin("step", DB, LOOP, CANNED, str(STEPS), short, long)
        ms = json.loads(out)
        s["lg_step20"] += ms[short]
        s["lg_step300"] += ms[long]
        s["lg_rss"].append(rss)
        # In one process: a new looping thread run to RUN steps.
        ms = uwf_run_gaps(new_thread("triage-fix-loop"))
        s["uwf_run20"].append(around(ms, SHORT))
        s["uwf_run300"].append(around(ms, LONG))
        for durability in ("sync", "async"):
            _, rss, out = twin("stream", DB, LOOP, CANNED, f"run-{durability}-{i}", str(RUN),
                               durability)
            ms = json.loads(out)
            s[f"lg_{durability}20"].append(around(ms, SHORT))
            s[f"lg_{durability}300"].append(around(ms, LONG))
            s["lg_rss"].append(rss)
    report({k: statistics.median(v) for k, v in s.items() if "rss" not in k},
           max(s["uwf_rss"]) / 1024, max(s["lg_rss"]) / 1024)


def report(m, uwf_rss, lg_rss):
    rows = [
        ("cold: one whole thread (6 steps), fresh processes¹", "uwf_cold", "lg_cold"),
        ("warm per step: `thread step` process² / LG in-process³", "uwf_step20", "lg_sync20"),
        ("warm per step: inside `thread run` / LG in-process³", "uwf_run20", "lg_sync20"),
        ("warm per step: inside `thread run` / LG in-process, async⁴", "uwf_run20", "lg_async20"),
        ("warm per step: `thread step` process² / LG reloading⁵", "uwf_step20", "lg_step20"),
    ]
    print(f"\nuwf vs LangGraph on triage-fix, medians of {SAMPLES} interleaved rounds "
          f"(ms unless stated)\n")
    print(f"| {'':60} | {'uwf':>9} | {'LangGraph':>9} | {'ratio':>6} |")
    print(f"|{'-' * 62}|{'-' * 11}|{'-' * 11}|{'-' * 8}|")

    def row(label, a, b, unit=""):
        print(f"| {label:60} | {a:>8.2f}{unit or ' '} | {b:>8.2f}{unit or ' '} | {a / b:>6.2f} |")

    for label, a, b in rows:
        row(label, m[a], m[b])
    for label, a, b in (
        ("per step at ~300 vs ~20: `thread step` / LG reloading⁵", "uwf_step", "lg_step"),
        ("per step at ~300 vs ~20: in `thread run` / LG in-process³", "uwf_run", "lg_sync"),
        ("per step at ~300 vs ~20: in `thread run` / LG async⁴", "uwf_run", "lg_async"),
    ):
        x, y = m[a + "300"] / m[a + "20"], m[b + "300"] / m[b + "20"]
        print(f"| {label:60} | {x:>8.2f}× | {y:>8.2f}× | {'':>6} |")
    row("peak RSS of a step (MiB)⁶", uwf_rss, lg_rss)
    v = m["version"]
    print(f"\nreference: one `uwf --version` spawn: {v:.2f} ms")
    print(f"  uwf per step inside `thread run`  = {m['uwf_run20'] / v:.2f}× a spawn "
          f"(target ≤ 0.5×)")
    print(f"  one-shot `thread step` (script)   = {m['uwf_step20'] / v:.2f}× a spawn "
          f"(target ≤ 1.5×)")
    print(f"""
¹ uwf: `thread start` + one `thread step` process per step (the `script` agent, being this
  binary's, runs inside it);
  LangGraph: one fresh Python process (imports, YAML, graph, SqliteSaver) running the thread.
² one `uwf thread step` process (agent in process), on a looping thread at ~{SHORT} steps.
³ one invoke streaming {RUN} steps, durability=sync (each checkpoint written before the next
  step, as uwf publishes each step); per-step time between updates, steps {SHORT}±5 and {LONG}±5.
⁴ the same with LangGraph's default durability=async (checkpoint written during the next step).
⁵ one process, a new graph.invoke(None) per step (interrupt_after="*") on the same thread_id:
  the state is reloaded from SQLite each step.
⁶ uwf: max ru_maxrss over `thread step` processes;
  LangGraph: max ru_maxrss of the stepping processes (chain up to ~{LONG + SAMPLES * STEPS}).""")


if __name__ == "__main__":
    main()
