"""The LangGraph twin of a uwf workflow, driven by scripts/langgraph/bench.py (run
`bash scripts/langgraph/bench.sh`; see there for what is measured).

It reads the same workflow YAML as uwf (roles with `meta` schemas, conditions, graph) and the same
canned outputs as uwf's `script` agent (role -> outputs; the n-th visit of a role takes the n-th
entry, the last repeats). Each role is a node that validates its output against the role's schema
with jsonschema and appends a step to the state; edges route by the workflow's conditions in
order, the first match wins. State is checkpointed by SqliteSaver in a file database.

    twin.py run    DB WORKFLOW CANNED THREAD        a whole thread in one invoke; prints the steps
    twin.py stream DB WORKFLOW CANNED THREAD N DUR  N steps in one invoke with durability DUR
                                                    (sync: a step's checkpoint is written before
                                                    the next step starts, as uwf publishes each
                                                    step; async: LangGraph's default, written
                                                    while the next step runs); prints ms per step
    twin.py grow   DB WORKFLOW CANNED THREAD N      a new thread of N steps, one invoke per step
    twin.py step   DB WORKFLOW CANNED K THREAD...   K rounds of one step on each (existing) thread,
                                                    each a new invoke reloading state from SQLite;
                                                    prints ms per step for each thread
"""

import json
import operator
import re
import sqlite3
import sys
import time
from typing import Annotated, TypedDict

import jsonschema
import yaml
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    prompt: str
    steps: Annotated[list, operator.add]


def count(steps, role):
    return sum(s["role"] == role for s in steps)


# The workflow's JSONata conditions, hand-translated to Python: an expression pattern and the
# test of the steps so far it stands for. A condition matching none of these is refused.
CONDITIONS = [
    (r"steps\[-1\]\.output\.approved = (true|false)",
     lambda s, m: s[-1]["output"]["approved"] is (m[1] == "true")),
    (r"steps\[-1\]\.output\.approved = false and \$count\(steps\[role='(\w+)'\]\) < (\d+)",
     lambda s, m: s[-1]["output"]["approved"] is False and count(s, m[1]) < int(m[2])),
    (r"\$count\(steps\) < (\d+)", lambda s, m: len(s) < int(m[1])),
]


def condition(expression):
    for pattern, test in CONDITIONS:
        if m := re.fullmatch(pattern, expression.strip()):
            return lambda steps: test(steps, m)
    sys.exit(f"twin.py: no Python translation of the condition {expression!r}")


def node(role, meta, outputs):
    validator = jsonschema.Draft202012Validator(meta)

    def run(state):
        output = outputs[min(count(state["steps"], role), len(outputs) - 1)]
        validator.validate(output)
        return {"steps": [{"role": role, "output": output, "agent": "script"}]}

    return run


def router(source, transitions, conditions):
    def route(state):
        for t in transitions:
            if t["condition"] is None or conditions[t["condition"]](state["steps"]):
                return END if t["role"] == "$END" else t["role"]
        raise RuntimeError(f"no transition out of {source} matches")

    return route


def compile_graph(db, workflow_file, canned_file, interrupt=False):
    with open(workflow_file) as f:
        wf = yaml.safe_load(f)
    with open(canned_file) as f:
        canned = yaml.safe_load(f)
    graph = StateGraph(State)
    for role, spec in wf["roles"].items():
        graph.add_node(role, node(role, spec["meta"], canned[role]))
    conditions = {n: condition(c["expression"]) for n, c in wf.get("conditions", {}).items()}
    for source, transitions in wf["graph"].items():
        start = START if source == "$START" else source
        graph.add_conditional_edges(start, router(source, transitions, conditions))
    saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    # interrupt: stop after every node, so that each invoke(None) runs exactly one step.
    return graph.compile(checkpointer=saver, interrupt_after="*" if interrupt else None)


def config(thread):
    return {"configurable": {"thread_id": thread}, "recursion_limit": 100_000}


START_STATE = {"prompt": "Users are logged out after one minute", "steps": []}


def main():
    cmd, db, workflow, canned, *args = sys.argv[1:]
    graph = compile_graph(db, workflow, canned, interrupt=cmd in ("grow", "step"))
    if cmd == "run":
        state = graph.invoke(START_STATE, config(args[0]))
        print(json.dumps([s["role"] for s in state["steps"]]))
    elif cmd == "stream":
        ms, n = [], int(args[1])
        t = time.perf_counter()
        updates = graph.stream(
            START_STATE, config(args[0]), stream_mode="updates", durability=args[2]
        )
        for _ in updates:
            now = time.perf_counter()
            ms.append((now - t) * 1e3)
            t = now
            if len(ms) == n:
                break
        print(json.dumps(ms))
    elif cmd == "grow":
        graph.invoke(START_STATE, config(args[0]))
        for _ in range(int(args[1]) - 1):
            graph.invoke(None, config(args[0]))
    elif cmd == "step":
        ms = {thread: [] for thread in args[1:]}
        for _ in range(int(args[0])):
            for thread in ms:
                t = time.perf_counter()
                graph.invoke(None, config(thread))
                ms[thread].append((time.perf_counter() - t) * 1e3)
        print(json.dumps(ms))
    else:
        sys.exit(f"twin.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
