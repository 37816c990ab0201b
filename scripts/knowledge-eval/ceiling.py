#!/usr/bin/env python3
"""How far can ranking by words go on a question set? Bench-only: not part of uwf.

Ranks the very chunks `uwf knowledge sync` made (read from its knowledge.db) with a family of
word rankers, every one of them BM25 over the same words, and measures file hit@1 for each:

- k1 and b of BM25;
- the unit scored: a chunk (a file scores as its best chunk), the whole file, or both
  (a file's best chunk plus its whole-file score);
- the weight of a chunk's path and of its title and defined symbols beside its text (BM25F
  style: a field's term counts are added to the text's, times the weight);
- words stemmed or not, English stop words dropped or not;
- test files (a path naming `test`) weighed down or not, Markdown files weighed up, down or not.

Words are split as uwf splits them (snake_case, camelCase and acronyms, the whole name kept).
It prints, per set: the best single configuration's hit@1 **chosen on that very set** (an
optimistic ceiling: tuned on its own test) and the configuration, how many configurations reach
0.80, the per-question oracle (the share of questions that at least one configuration ranks
right: no choice among these rankers can do better), and the questions no configuration answers.

    python3 scripts/knowledge-eval/ceiling.py --judge questions-heldout2 \\
        --set questions-heldout2.yaml=CHECKOUTS2=WORK2 --set questions.yaml=CHECKOUTS=WORK ...

`WORK` is the folder run.py's `--work` kept that set's indexes in (`WORK/<set>/words` or
`WORK/words`): run.py first. With `--judge SET`, the configuration is chosen on the other sets
and its hit@1 on SET printed: the honest way to choose one.
"""
import argparse
import itertools
import os
import re
import sqlite3
from collections import Counter

import numpy as np
import Stemmer
import yaml

import run

STOP = set(
    """a an and are as at be but by do does for from has have how i if in into is it its me my no
    not of on one or so such that the their then there these they this to was what when where
    which while who why will with without you your can could should would""".split()
)
STEM = Stemmer.Stemmer("english")


def split_words(text):
    """uwf's identifier splitting: every run of letters and digits, and for a name with parts
    (snake_case, camelCase, HTTPServer) each part as well as the whole."""
    out = []
    for token in re.findall(r"[A-Za-z0-9_]+", text):
        parts = [p for p in re.split(r"_+", token) if p]
        sub = []
        for p in parts:
            sub += re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+", p)
        whole = token.lower().strip("_")
        if whole:
            out.append(whole)
        if len(sub) > 1:
            out += [s.lower() for s in sub]
    return out


def terms(text, stem, stop):
    words = split_words(text)
    if stop:
        words = [w for w in words if w not in STOP]
    if stem:
        words = STEM.stemWords(words)
    return words


class Corpus:
    """A repository's chunks, with per-variant (stem, stop) term counts of each field, as
    arrays per term over the chunks and over the files."""

    def __init__(self, db, repo):
        rows = db.execute(
            "select c.path, c.start_line, coalesce(c.title, ''), c.symbols, t.text "
            "from chunks c join texts t on t.id = c.id join repos r on r.id = c.repo "
            "where r.path = ? order by c.path, c.start_line",
            (repo,),
        ).fetchall()
        self.paths = [r[0] for r in rows]
        self.files = sorted(set(self.paths))
        index = {f: i for i, f in enumerate(self.files)}
        self.file_of = np.array([index[p] for p in self.paths])
        self.rows = rows
        self.variants = {}

    def variant(self, stem, stop):
        """(chunks, files): each a dict of field -> (lengths, {term: counts array})."""
        key = (stem, stop)
        if key not in self.variants:
            n, m = len(self.rows), len(self.files)
            chunk_fields, file_fields = {}, {}
            for field in ("text", "path", "title"):
                counts = []
                for path, _, title, symbols, text in self.rows:
                    source = {"text": text, "path": path, "title": f"{title} {symbols}"}[field]
                    counts.append(Counter(terms(source, stem, stop)))
                postings = {}
                for i, c in enumerate(counts):
                    for t, k in c.items():
                        postings.setdefault(t, np.zeros(n))[i] = k
                lengths = np.array([sum(c.values()) for c in counts], dtype=float)
                chunk_fields[field] = (lengths, postings)
                if field == "path":
                    # A file's path once, not once per chunk.
                    first = np.zeros(n, dtype=bool)
                    first[np.unique(self.file_of, return_index=True)[1]] = True
                    fl = np.zeros(m)
                    np.add.at(fl, self.file_of[first], lengths[first])
                    fp = {}
                    for t, arr in postings.items():
                        fp[t] = np.zeros(m)
                        np.add.at(fp[t], self.file_of[first], arr[first])
                else:
                    fl = np.zeros(m)
                    np.add.at(fl, self.file_of, lengths)
                    fp = {}
                    for t, arr in postings.items():
                        fp[t] = np.zeros(m)
                        np.add.at(fp[t], self.file_of, arr)
                file_fields[field] = (fl, fp)
            self.variants[key] = (chunk_fields, file_fields)
        return self.variants[key]


def bm25(docs, query, k1, b, wpath, wtitle):
    """BM25F-like scores of `docs` (field -> (lengths, postings)) for the query terms."""
    w = {"text": 1.0, "path": wpath, "title": wtitle}
    length = sum(w[f] * docs[f][0] for f in docs)
    n = len(length)
    avg = length.mean() or 1.0
    norm = k1 * (1 - b + b * length / avg)
    score = np.zeros(n)
    for t in set(query):
        tf = sum(w[f] * docs[f][1][t] for f in docs if t in docs[f][1])
        if not isinstance(tf, np.ndarray):
            continue
        df = np.count_nonzero(tf)
        if df == 0:
            continue
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        score += idf * tf * (k1 + 1) / (tf + norm)
    return score


GRID = {
    "k1": [0.3, 0.6, 1.2, 2.0, 3.0],
    "b": [0.0, 0.25, 0.5, 0.75, 1.0],
    "unit": ["chunk", "file", "both"],
    "path": [0.0, 1.0, 3.0],
    "title": [0.0, 1.0, 3.0],
    "stem": [True, False],
    "stop": [True, False],
    "tests": [1.0, 0.6],
    "markdown": [0.8, 1.0, 1.25],
}


PRIORS = ("tests", "markdown")


def file_scores(corpus, q, cfg):
    """Each file's score before the priors."""
    fields, files = corpus.variant(cfg["stem"], cfg["stop"])
    query = terms(q, cfg["stem"], cfg["stop"])
    by_file = np.zeros(len(corpus.files))
    if cfg["unit"] in ("chunk", "both"):
        chunk = bm25(fields, query, cfg["k1"], cfg["b"], cfg["path"], cfg["title"])
        np.maximum.at(by_file, corpus.file_of, chunk)
    if cfg["unit"] in ("file", "both"):
        by_file = by_file + bm25(files, query, cfg["k1"], cfg["b"], cfg["path"], cfg["title"])
    return by_file


def prior(corpus, cfg):
    return np.array(
        [(cfg["tests"] if "test" in f.lower() else 1.0) * (cfg["markdown"] if f.endswith(".md") else 1.0) for f in corpus.files]
    )


def first_file(scores):
    """The first file, or None when no file matches a word (nothing is ranked first then)."""
    i = int(np.argmax(scores))
    return i if scores[i] > 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", help="the index folder of run.py's --work, for sets that name none")
    ap.add_argument("--set", action="append", required=True, help="QUESTIONS=CHECKOUTS[=WORK], repeatable")
    ap.add_argument("--judge", help="a set (its file name without .yaml) to leave out: the configuration is chosen on the others and measured on it")
    args = ap.parse_args()
    table = {}
    base_keys = [k for k in GRID if k not in PRIORS]
    bases = [dict(zip(base_keys, v)) for v in itertools.product(*(GRID[k] for k in base_keys))]
    priors = [dict(zip(PRIORS, v)) for v in itertools.product(*(GRID[k] for k in PRIORS))]
    configs = [{**b, **p} for b in bases for p in priors]
    for pair in args.set:
        qfile, checkouts, work = (pair.split("=", 2) + [args.work])[:3]
        if not os.path.exists(qfile):
            qfile = os.path.join(run.HERE, qfile)
        name = os.path.splitext(os.path.basename(qfile))[0]
        path = os.path.join(work, name, "words", "knowledge.db")
        if not os.path.exists(path):
            path = os.path.join(work, "words", "knowledge.db")
        db = sqlite3.connect(path)
        spec = yaml.safe_load(open(qfile))
        questions = []
        for repo_name, r in spec["repos"].items():
            repo = run.checkout(checkouts, repo_name, r)
            corpus = Corpus(db, repo)
            if not corpus.rows:
                raise SystemExit(f"{path} has no chunks of {repo}: run run.py with this --work first")
            for q in r["questions"]:
                questions.append((repo_name, corpus, q))
        right = np.zeros((len(configs), len(questions)), dtype=bool)
        for j, (_, corpus, q) in enumerate(questions):
            want = corpus.files.index(q["file"]) if q["file"] in corpus.files else -1
            weights = [prior(corpus, p) for p in priors]
            for bi, base in enumerate(bases):
                scores = file_scores(corpus, q["q"], base)
                for pi, w in enumerate(weights):
                    right[bi * len(priors) + pi, j] = first_file(scores * w) == want
        per_config = right.mean(axis=1)
        table[name] = right
        best = int(np.argmax(per_config))
        oracle = right.any(axis=0)
        kinds = np.array([q["kind"] for _, _, q in questions])
        print(f"\n{name}: {len(questions)} questions, {len(configs)} configurations of BM25 over uwf's chunks")
        print(f"  best single configuration, chosen on this set: file hit@1 {per_config[best]:.2f}  {configs[best]}")
        for kind in ("words", "paraphrase"):
            sel = kinds == kind
            print(f"    {kind:10} {right[best, sel].mean():.2f}  (oracle {oracle[sel].mean():.2f})")
        print(f"  configurations at or above 0.80: {int((per_config >= 0.80 - 1e-9).sum())} of {len(configs)}")
        print(f"  per-question oracle (some configuration ranks the right file first): {oracle.mean():.2f}")
        for ok, (repo_name, _, q) in zip(oracle, questions):
            if not ok:
                print(f"    never first: [{q['kind']}] {repo_name}: {q['q']!r} -> {q['file']}")
    if args.judge:
        tuning = [n for n in table if n != args.judge]
        together = np.concatenate([table[n] for n in tuning], axis=1).mean(axis=1)
        top = np.flatnonzero(together >= together.max() - 1e-9)
        print(f"\nchosen on {', '.join(tuning)} ({len(top)} configurations tie at {together.max():.2f}):")
        judged = table[args.judge].mean(axis=1)[top]
        print(f"  on {args.judge}: file hit@1 from {judged.min():.2f} to {judged.max():.2f}, median {np.median(judged):.2f}")
        for i in top[:5]:
            print(f"    {configs[i]} -> {table[args.judge][i].mean():.2f}")


if __name__ == "__main__":
    main()
