#!/usr/bin/env python3
"""Measures query expansion by a programming thesaurus on top of `uwf knowledge query` (words
only), on question sets of run.py, before building it into uwf. Bench-only: not part of uwf.

The thesaurus below was written (2026-11-29) from general programming vocabulary before any
question or miss was looked at for it. A query's words found in a group bring in the group's
other words as a second query; a chunk scores its BM25 score for the query plus `w` times its
score for the expansion (uwf's first 200 chunks of each), for a few `w` (0 is uwf as it is).

    python3 scripts/knowledge-eval/thesaurus.py --uwf target/debug/uwf --work WORK \\
        --set questions.yaml=CHECKOUTS --set questions-heldout.yaml=CHECKOUTS2

The work folder keeps one index per set (`WORK/<set>`), as techniques.py's does.
"""
import argparse
import os
import re
import sys

import yaml

import run

THESAURUS = """
remove delete drop erase unlink discard purge
start begin launch spawn boot startup init initialize
stop halt terminate kill shutdown exit abort cancel quit
create make construct generate
config configuration settings options preferences setup
error failure exception fault panic problem
retry retries attempt again
timeout deadline expire expiry expiration
connect connection socket
request call
response reply answer result
auth authentication authenticate login credential credentials password signin
permission authorization access allow deny forbidden
redirect redirection
encode serialize marshal dump
decode parse deserialize unmarshal
compress compression gzip deflate brotli zip
decompress uncompress inflate
cache caching memoize
limit cap maximum max bound threshold
size length
wait sleep block pause
concurrent concurrency parallel async asynchronous
lock mutex synchronize
log logging logger
test tests testing spec verify assert
path route url endpoint uri
middleware handler hook interceptor
flag option argument arg parameter param
command subcommand cmd
help usage
completion autocomplete autocompletion
version release
environment env variable
directory folder dir
proxy tunnel
certificate cert tls ssl https
websocket ws
stream streaming chunked
upload multipart
download fetch
default fallback
ignore skip
hide hidden deprecated
reload restart autoreload watch
signal sigterm sigint interrupt
port bind listen address host
worker process
body payload content
status code
server serve
header headers
cookie cookies
query querystring params
mount mounting
register registration
close closing teardown cleanup
open opening
send write emit
receive read recv
user client
"""

GROUPS = [line.split() for line in THESAURUS.strip().splitlines()]
WEIGHTS = [0.0, 0.1, 0.2, 0.3, 0.5]


def expansion(question):
    """The thesaurus words a question does not say, of the groups holding words it says."""
    said = {w.lower() for w in re.findall(r"[A-Za-z]+", question)}
    said |= {w[:-1] for w in said if w.endswith("s")}
    extra = []
    for group in GROUPS:
        if said & set(group):
            extra += [w for w in group if w not in said and w not in extra]
    return " ".join(extra)


def ranked(base, expanded, weight):
    scores = {}
    for hits, factor in ((base, 1.0), (expanded, weight)):
        for h in hits:
            key = (h["file"], h["startLine"], h["endLine"])
            scores[key] = scores.get(key, 0.0) + factor * h["lexical"]
    return sorted(scores, key=lambda k: -scores[k])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uwf", default="target/release/uwf")
    ap.add_argument("--work", required=True)
    ap.add_argument("--set", action="append", required=True, help="QUESTIONS=CHECKOUTS, repeatable")
    args = ap.parse_args()
    binary = os.path.abspath(args.uwf)
    print("set, weight: file@1 file@5 MRR for all | paraphrased")
    for name, qfile, checkouts, root in run.question_sets(args.set, args.work):
        scored = {w: [] for w in WEIGHTS}
        for repo_name, r in yaml.safe_load(open(qfile))["repos"].items():
            repo = run.checkout(checkouts, repo_name, r)
            run.uwf(["knowledge", "sync", "--json", "--repo", repo], root, binary)
            for q in r["questions"]:
                base = run.hits(binary, root, repo, q["q"], 200)
                extra = expansion(q["q"])
                expanded = run.hits(binary, root, repo, extra, 200) if extra else []
                for w in WEIGHTS:
                    scored[w].append((q["kind"], run.score(ranked(base, expanded, w), q)))
        for w in WEIGHTS:
            cells = []
            for kind in ("all", "paraphrase"):
                rows = [s for k, s in scored[w] if kind == "all" or k == kind]
                n = len(rows)
                cells.append(" ".join(f"{sum(r[i] for r in rows) / n:.2f}" for i in range(3)))
            print(f"{name:<24} {w:.1f}: {cells[0]} | {cells[1]}")


if __name__ == "__main__":
    sys.exit(main())
