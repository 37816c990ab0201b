#!/usr/bin/env python3
"""Evaluates `uwf knowledge query` on public repositories with the questions of questions.yaml
(written before the first run): for words only (no model) and fused with a real embedding model
(all-MiniLM-L6-v2 served by minilm_server.py), beside bm25s over the very same chunks. Prints,
per repository and overall: file hit@1 (the right file is the first file), file hit@5 (among
the first five distinct files), passage MRR (1/rank of the first chunk, within 10, whose lines
overlap the answer). The fused lists are re-fused here for a range of word weights, exactly as
`search::fuse` does, to show how the weight was chosen. Bench-only: not part of uwf.

    git clone https://github.com/encode/httpx CHECKOUTS/httpx   # at the commits in questions.yaml
    git clone https://github.com/spf13/cobra CHECKOUTS/cobra
    python3 scripts/knowledge-eval/minilm_server.py 8765 &
    python3 scripts/knowledge-eval/run.py --uwf target/release/uwf --checkouts CHECKOUTS --port 8765

The checkouts get a knowledge.yaml (from the questions file) if they have none. `--questions
scripts/knowledge-eval/questions-heldout.yaml` runs the held-out set (starlette and chi, written
and committed before any run over them; nothing was tuned on it); `--questions
scripts/knowledge-eval/questions-heldout2.yaml` a second held-out set (uvicorn and axum, from
PyPI and crates.io: a missing checkout of a `pypi:` or `crates:` source is fetched).
"""
import argparse
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def uwf(args, root, binary):
    env = dict(os.environ, UWF_STORAGE_ROOT=root)
    out = subprocess.run([binary] + args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"uwf {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def fetch(source, dest):
    """Unpacks a question set's `source` from its package registry into `dest`:
    `pypi:NAME==VERSION` (the sdist, by pip) or `crates:NAME==VERSION` (by cargo, through a
    scratch crate). Sources of the form `owner/name@commit` are git checkouts to clone by hand."""
    kind, _, spec = source.partition(":")
    name, _, version = spec.partition("==")
    with tempfile.TemporaryDirectory(prefix="uwf-eval-fetch-") as tmp:
        if kind == "pypi":
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", tmp, spec],
                check=True,
                capture_output=True,
            )
            (archive,) = glob.glob(os.path.join(tmp, "*.tar.gz"))
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            (top,) = [p for p in glob.glob(os.path.join(tmp, "*")) if os.path.isdir(p)]
        elif kind == "crates":
            os.makedirs(os.path.join(tmp, "src"))
            with open(os.path.join(tmp, "Cargo.toml"), "w") as f:
                f.write(f'[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n{name} = "={version}"\n')
            with open(os.path.join(tmp, "src", "main.rs"), "w") as f:
                f.write("fn main() {}\n")
            subprocess.run(["cargo", "fetch", "--quiet"], cwd=tmp, check=True)
            home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
            (top,) = glob.glob(os.path.join(home, "registry", "src", "*", f"{name}-{version}"))[:1]
        else:
            sys.exit(f"{dest} is missing: clone {source} there (at that commit)")
        shutil.copytree(top, dest)
    print(f"fetched {source} into {dest}", file=sys.stderr)


def question_sets(pairs, work):
    """The question sets named by `--set QUESTIONS=CHECKOUTS` arguments (a questions file here
    or beside this script), each as (name, questions file, checkouts, its index folder under
    `work`, made if missing): one index per set, so sets never share an index."""
    for pair in pairs:
        qfile, checkouts = pair.split("=", 1)
        if not os.path.exists(qfile):
            qfile = os.path.join(HERE, qfile)
        name = os.path.basename(qfile).removesuffix(".yaml")
        root = os.path.join(work, name)
        os.makedirs(root, exist_ok=True)
        yield name, qfile, checkouts, root


def checkout(checkouts, name, r):
    """The checkout of repository `name` of a questions file (fetched if missing), with a
    knowledge.yaml from the file's include and exclude if it has none."""
    repo = os.path.realpath(os.path.join(checkouts, name))
    if not os.path.isdir(repo):
        fetch(r["source"], repo)
    manifest = os.path.join(repo, "knowledge.yaml")
    if not os.path.exists(manifest):
        with open(manifest, "w") as f:
            yaml.safe_dump({"include": r["include"], "exclude": r["exclude"]}, f)
    return repo


def hits(binary, root, repo, q, limit):
    out = uwf(["knowledge", "query", "--json", "--repo", repo, "--limit", str(limit), q], root, binary)
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def score(ranked, question):
    """(file hit@1, file hit@5, reciprocal rank of the right passage) of a list of
    (file, start, end), best first."""
    files = []
    for f, _, _ in ranked:
        if f not in files:
            files.append(f)
    lo, hi = question["lines"]
    rr = 0.0
    for rank, (f, s, e) in enumerate(ranked[:10], 1):
        if f == question["file"] and s <= hi and e >= lo:
            rr = 1.0 / rank
            break
    return (files[:1] == [question["file"]], question["file"] in files[:5], rr)


def fuse(pool, weight):
    """search::fuse over a pool of fused hits holding both lists (their `lexical` and
    `semantic` scores)."""
    lex = [h for h in pool if "lexical" in h]
    sem = [h for h in pool if "semantic" in h]
    best = max((h["lexical"] for h in lex), default=0.0)
    high = max((h["semantic"] for h in sem), default=0.0)
    low = min((h["semantic"] for h in sem), default=0.0)
    lex_rank = {id(h): i for i, h in enumerate(sorted(lex, key=lambda h: -h["lexical"]))}
    scored = []
    for h in pool:
        s = 0.0
        if "lexical" in h and best > 0:
            s += weight * h["lexical"] / best
        if "semantic" in h:
            s += (1 - weight) * ((h["semantic"] - low) / (high - low) if high > low else 1.0)
        scored.append((-s, lex_rank.get(id(h), 10**9), h))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(h["file"], h["startLine"], h["endLine"]) for _, _, h in scored]


def bm25s_ranker(root, repo):
    import bm25s
    import Stemmer

    db = sqlite3.connect(os.path.join(root, "knowledge.db"))
    rows = db.execute(
        "select c.path, c.title, c.start_line, c.end_line, t.text from chunks c "
        "join texts t on t.id = c.id join repos r on r.id = c.repo where r.path = ?",
        (repo,),
    ).fetchall()
    corpus = [f"{p}\n{t}\n{x}" if t else f"{p}\n{x}" for p, t, _, _, x in rows]
    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25()
    model.index(bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)

    def rank(q):
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        docs, _ = model.retrieve(tokens, k=min(10, len(corpus)), show_progress=False)
        return [(rows[i][0], rows[i][2], rows[i][3]) for i in docs[0]]

    return rank, len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uwf", default="target/release/uwf")
    ap.add_argument("--checkouts", required=True)
    ap.add_argument("--port", type=int, default=0, help="minilm_server.py's port (0: words only)")
    ap.add_argument("--weights", default="0.3,0.5,0.6,0.7,0.8,0.9")
    ap.add_argument("--work", help="a directory keeping the indexes (and vectors) between runs")
    ap.add_argument(
        "--questions",
        default=os.path.join(HERE, "questions.yaml"),
        help="the questions (questions.yaml, the set the ranking was tuned on; questions-heldout.yaml, never tuned on)",
    )
    ap.add_argument("--misses", action="store_true", help="print each question whose right file is not first, words only")
    args = ap.parse_args()
    binary = os.path.abspath(args.uwf)
    spec = yaml.safe_load(open(args.questions))
    work = args.work or tempfile.mkdtemp(prefix="uwf-eval-")
    words_root, fused_root = os.path.join(work, "words"), os.path.join(work, "fused")
    os.makedirs(words_root, exist_ok=True)
    os.makedirs(fused_root, exist_ok=True)
    if args.port:
        with open(os.path.join(fused_root, "config.yaml"), "w") as f:
            f.write(
                f"providers:\n  local: {{ baseUrl: 'http://127.0.0.1:{args.port}/v1', timeout: 600, retries: 0 }}\n"
                "models:\n  minilm: { provider: local, name: all-MiniLM-L6-v2 }\n"
                "modelOverrides:\n  embed: minilm\n"
            )
    weights = [float(w) for w in args.weights.split(",")]
    systems = ["uwf words", "bm25s"] + ([f"fused {w}" for w in weights] if args.port else [])
    totals = {s: [] for s in systems}
    for name, r in spec["repos"].items():
        repo = checkout(args.checkouts, name, r)
        report = json.loads(uwf(["knowledge", "sync", "--json", "--repo", repo], words_root, binary))
        print(f"{name}: {report['files']} files, {report['chunks']} chunks, skipped {len(report['skipped'])}", file=sys.stderr)
        if args.port:
            fr = json.loads(uwf(["knowledge", "sync", "--json", "--repo", repo], fused_root, binary))
            print(f"{name}: embedded {fr.get('embedded')} (refused {len(fr.get('embedRefused', []))})", file=sys.stderr)
        rank_bm25s, _ = bm25s_ranker(words_root, repo)
        per = {s: [] for s in systems}
        for q in r["questions"]:
            words = [(h["file"], h["startLine"], h["endLine"]) for h in hits(binary, words_root, repo, q["q"], 10)]
            per["uwf words"].append((q, score(words, q)))
            if args.misses and not per["uwf words"][-1][1][0]:
                top = []
                for f, s_, e in words:
                    if f not in top:
                        top.append(f)
                print(f"  miss [{q['kind']}] {q['q']!r}: want {q['file']}, got {top[:4]}", file=sys.stderr)
            per["bm25s"].append((q, score(rank_bm25s(q["q"]), q)))
            if args.port:
                pool = hits(binary, fused_root, repo, q["q"], 200)
                for w in weights:
                    per[f"fused {w}"].append((q, score(fuse(pool, w), q)))
        for s in systems:
            totals[s].extend(per[s])
        table(name, per)
    table("all", totals)


def table(name, per):
    print(f"\n{name}")
    print(f"{'system':<12} {'kind':<11} {'n':>3} {'file@1':>7} {'file@5':>7} {'MRR':>6}")
    for s, rows in per.items():
        for kind in ["all", "words", "paraphrase"]:
            sel = [x for q, x in rows if kind == "all" or q["kind"] == kind]
            if not sel:
                continue
            n = len(sel)
            print(
                f"{s:<12} {kind:<11} {n:>3} {sum(a for a, _, _ in sel) / n:>7.2f} "
                f"{sum(b for _, b, _ in sel) / n:>7.2f} {sum(c for _, _, c in sel) / n:>6.2f}"
            )


if __name__ == "__main__":
    main()
