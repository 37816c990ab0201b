#!/usr/bin/env python3
"""Measures general re-ranking techniques on top of `uwf knowledge query` (words only), on
question sets of run.py, before building any of them into uwf. Bench-only: not part of uwf.

Each technique re-ranks uwf's first 100 chunks (their BM25 scores, with uwf's boosts), using
the term weights that uwf stored in its index (the `chunks.terms` column: little-endian `u32`
term, `f32` BM25 weight pairs) and BM25's inverse document frequency over the repository:

- file aggregation: a chunk gains `beta` times the scores of the best `k` other chunks of its
  file (a file with much evidence ranks above a file with one good chunk);
- RM3 pseudo-relevance feedback: the `m` strongest terms of the first `k` chunks (each term's
  share of a chunk's weight, weighted by the chunk's score and the term's idf) expand the
  query; a chunk scores (1 - gamma) x its BM25 score + gamma x its expansion score (each over
  its best);
- coordination: a chunk's score times the share of the query's words it holds, to a power;
- file coverage: a chunk's score times 1 + `g` x the share of the query's words (weighted by
  their idf over the repository's files) found anywhere in the chunk's file, its path included.

    python3 scripts/knowledge-eval/techniques.py --uwf target/debug/uwf --work WORK \\
        --set questions.yaml=CHECKOUTS --set questions-heldout.yaml=CHECKOUTS2

The work folder keeps one index per set (`WORK/<set>`), as run.py's `--work` does.
"""
import argparse
import json
import math
import os
import re
import sqlite3
import struct
import sys
from collections import Counter, defaultdict

import yaml

import run


def load(binary, qfile, checkouts, root):
    """The questions of a set with uwf's first 100 chunks, and per repository the stored term
    weights of each chunk (by file and first line), idf of each term, and words of each chunk."""
    spec = yaml.safe_load(open(qfile))
    items, corpora = [], {}
    for name, r in spec["repos"].items():
        repo = run.checkout(checkouts, name, r)
        run.uwf(["knowledge", "sync", "--json", "--repo", repo], root, binary)
        db = sqlite3.connect(os.path.join(root, "knowledge.db"))
        rows = db.execute(
            "select c.path, c.start_line, c.terms, t.text from chunks c join texts t on t.id = c.id "
            "join repos r on r.id = c.repo where r.path = ?",
            (repo,),
        ).fetchall()
        weights, words, df = {}, {}, Counter()
        for path, start, blob, text in rows:
            w = {}
            for i in range(0, len(blob), 8):
                term, value = struct.unpack("<If", blob[i : i + 8])
                w.setdefault(term, value)
            weights[(path, start)] = w
            words[(path, start)] = set(re.findall(r"[a-z0-9]+", f"{path} {text}".lower()))
            df.update(w.keys())
        n = len(rows)
        idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
        corpora[name] = (weights, idf, words)
        for q in r["questions"]:
            items.append((name, q, run.hits(binary, root, repo, q["q"], 100)))
    return items, corpora


def measure(items, rerank):
    per = {"words": [], "paraphrase": []}
    for name, q, hs in items:
        ranked = [(h["file"], h["startLine"], h["endLine"]) for h in rerank(name, q, hs)]
        per[q["kind"]].append(run.score(ranked, q))
    every = per["words"] + per["paraphrase"]

    def cell(rows):
        return f"{sum(a for a, _, _ in rows) / len(rows):.2f} {sum(c for _, _, c in rows) / len(rows):.2f}"

    return f"{cell(every)}   {cell(per['words'])}   {cell(per['paraphrase'])}"


def aggregation(beta, k):
    def rerank(_name, _q, hs):
        by_file = defaultdict(list)
        for h in hs:
            by_file[h["file"]].append(h["score"])
        scored = []
        for h in hs:
            others = sorted(by_file[h["file"]], reverse=True)
            others.remove(h["score"])
            scored.append((h["score"] + beta * sum(others[:k]), h))
        return [h for _, h in sorted(scored, key=lambda t: -t[0])]

    return rerank


def rm3(corpora, k, m, gamma):
    def rerank(name, _q, hs):
        if not hs:
            return hs
        weights, idf, _ = corpora[name]
        feedback = hs[:k]
        total = sum(h["score"] for h in feedback) or 1.0
        model = defaultdict(float)
        for h in feedback:
            w = weights[(h["file"], h["startLine"])]
            size = sum(w.values()) or 1.0
            for t, v in w.items():
                model[t] += v / size * h["score"] / total * idf[t]
        terms = sorted(model.items(), key=lambda t: -t[1])[:m]
        norm = sum(v for _, v in terms) or 1.0
        expansion = {}
        for key, w in weights.items():
            e = sum(v / norm * idf[t] * w.get(t, 0.0) for t, v in terms)
            if e > 0:
                expansion[key] = e
        top = max(expansion.values(), default=1.0)
        best = hs[0]["score"] or 1.0
        first = {(h["file"], h["startLine"]): h for h in hs}
        scored = []
        for key in set(first) | set(expansion):
            lexical = first[key]["score"] / best if key in first else 0.0
            scored.append(((1 - gamma) * lexical + gamma * expansion.get(key, 0.0) / top, key))
        scored.sort(key=lambda t: (-t[0], t[1]))
        # A chunk found by the expansion alone: its lines are unknown here, so it can only
        # take a file's place, never answer a passage (conservative for MRR).
        return [first.get(key, {"file": key[0], "startLine": 0, "endLine": -1}) for _, key in scored]

    return rerank


def coordination(corpora, power):
    def rerank(name, q, hs):
        _, _, words = corpora[name]
        wanted = set(re.findall(r"[a-z0-9]+", q["q"].lower()))
        scored = []
        for h in hs:
            have = len(wanted & words[(h["file"], h["startLine"])])
            scored.append((h["score"] * (max(have, 1) / max(len(wanted), 1)) ** power, h))
        return [h for _, h in sorted(scored, key=lambda t: -t[0])]

    return rerank


def file_words(corpora):
    """Per repository, the words of each file (its chunks' words together) and how many files
    hold each word."""
    out = {}
    for name, (_, _, words) in corpora.items():
        by_file = defaultdict(set)
        for (path, _), w in words.items():
            by_file[path] |= w
        out[name] = (by_file, Counter(t for w in by_file.values() for t in w))
    return out


def file_coverage(files, g):
    def rerank(name, q, hs):
        by_file, df = files[name]
        n = len(by_file)
        wanted = set(re.findall(r"[a-z0-9]+", q["q"].lower()))
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
        total = sum(idf.values()) or 1.0
        cover = {f: sum(idf[t] for t in wanted & w) / total for f, w in by_file.items()}
        scored = [(h["score"] * (1 + g * cover.get(h["file"], 0.0)), h) for h in hs]
        return [h for _, h in sorted(scored, key=lambda t: -t[0])]

    return rerank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uwf", default="target/release/uwf")
    ap.add_argument("--work", required=True)
    ap.add_argument("--set", action="append", required=True, help="QUESTIONS=CHECKOUTS, repeatable")
    args = ap.parse_args()
    binary = os.path.abspath(args.uwf)
    items, corpora = [], {}
    for _, qfile, checkouts, root in run.question_sets(args.set, args.work):
        i, c = load(binary, qfile, checkouts, root)
        items += i
        corpora.update(c)
    print(f"{len(items)} questions; columns: file@1 MRR for all, words, paraphrase")
    print(f"{'uwf words':<28} {measure(items, lambda _n, _q, hs: hs)}")
    for beta, k in [(0.1, 1), (0.3, 1), (0.1, 3), (0.3, 3)]:
        print(f"{f'file aggregation {beta} {k}':<28} {measure(items, aggregation(beta, k))}")
    for k, m, gamma in [(3, 10, 0.3), (5, 10, 0.3), (10, 10, 0.5), (10, 20, 0.3)]:
        print(f"{f'RM3 {k} docs {m} terms {gamma}':<28} {measure(items, rm3(corpora, k, m, gamma))}")
    for power in [0.5, 1.0, 2.0]:
        print(f"{f'coordination {power}':<28} {measure(items, coordination(corpora, power))}")
    files = file_words(corpora)
    for g in [0.25, 0.5, 1.0, 2.0]:
        print(f"{f'file coverage {g}':<28} {measure(items, file_coverage(files, g))}")


if __name__ == "__main__":
    sys.exit(main())
