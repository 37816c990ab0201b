//! The generated `README.md` at the root of a mount: how to use it, written for people and for
//! agents that find themselves in the directory.
//!
//! Invariant: the text is fixed when the mount starts (it depends only on the storage root and
//! `--read-only`), so the file is immutable.

use std::path::Path;

/// The README of a mount of `root`.
pub(super) fn text(root: &Path, read_only: bool) -> String {
    let mode = if read_only {
        "This mount is **read-only** (`uwf mount --read-only`): everything can be read, nothing \
         can be saved, no control file (`prompt`, `step`, `run`, `kill`, `fork`) acts, and `wait` \
         does not wait. Remount without `--read-only` to register workflows and run threads \
         through files."
    } else {
        "This mount is read-write: saving a workflow file registers it, exactly like \
         `uwf workflow put`, and writing a control file starts threads and steps."
    };
    format!(
        r#"# uwf mount

The storage at `{root}` as files. {mode}

```text
README.md                          this file
workflows/
  error                            why the last save or prompt through workflows/ was refused
  <name>/
    workflow.yaml                  current definition, schemas inline; save to register a new version
    hash                           current workflow hash
    graph.mmd                      Mermaid flowchart of the graph
    versions/NNN-<hash>.yaml       every registered version, in the order they became current
    versions/current -> NNN-<hash>.yaml
    prompt                         write a prompt and close: a new thread of this workflow starts
    latest -> ../../threads/<id>   the newest thread of this workflow
    threads/<id> -> ../../../threads/<id>
  <anything>.yaml                  create or copy a YAML file here: registered under its `name`
threads/
  <thread-id>/                     active and archived threads
    prompt  head  status           status: `active next=<role>`, `running role=<role> pid=<pid>`,
                                   `failed: <why>`, `done`, `killed`, `rebased onto <id>`
                                   (`paused (…)` while `uwf thread pause` holds it)
    workflow -> ../../workflows/<name>
    origin -> ../<id>/steps/NNN-role   the step a fork was made from (forks only)
    parent -> ../<id>              the thread whose step started this one (child threads only)
    question                       while a person is asked: what to answer (`uwf thread question`)
    answer                         write the answer (YAML or JSON) and close: it becomes the step
    cost                           tokens and dollars spent, its sub-workflows', its budget
    forks/<id> -> ../../<id>       the threads forked from this one
    step                           touch it (or write to it): one step starts in the background
    run                            write to it: steps run until the thread is done (100 at most)
    wait                           not listed; reading blocks until no step runs, then shows the
                                   last step's JSON (the thread's state before any step)
    kill                           write to it: returns once the agent is gone and the thread killed
    log                            the running or last step's agent stderr, growing while it runs
    events                         one JSON line per step started/finished/failed, killed, rebased
    error                          the last failure on this thread, as text
    transcript.md                  the thread as Markdown (`uwf thread read`)
    steps/
      001-planner/                 one directory per step: index (3 digits, more past 999), role
        output.yaml  output.json   the structured output, keys sorted (diffs are meaningful)
        body.md                    the agent's Markdown after the frontmatter
        detail.yaml                how the step ran (`uwf thread step-details`)
        hash  role  agent          one line each
        diff                       unified diff of output.yaml against the previous step of this role
        fork                       write to it: a new thread continues from this step
        child -> ../../../<id>     the thread a sub-workflow started in this step
      latest -> NNN-role
cas/
  <hash>                           any node by hash, case-insensitive, as pretty JSON
  schemas/<hash>.json              schema nodes
```

## Running threads

    echo "Fix the login bug" > workflows/solve-issue/prompt   # a new thread starts
    cd workflows/solve-issue/latest                           # it is the newest one
    touch step; cat status; cat wait                          # one step; wait for it
    echo > run; cat wait                                      # step until done
    diff steps/001-planner/output.yaml steps/005-planner/output.yaml
    echo > steps/002-developer/fork                           # continue from step 2 in a new thread

Scripts that need the new thread's id without a race open `prompt` read-write, write the
prompt, and read on the same descriptor: the read starts the thread and returns its id (so does
a read after writing `fork`). Each write handle of `step`, `run`, `kill` or `fork` acts once, so
`touch step` and `echo > step` each start exactly one step. `step` while a step runs fails with
EBUSY, on a finished thread with EINVAL, and so does a step whose agent cannot start (a broken
`config.yaml`) or a paused thread; the thread's `error` file says why. An empty prompt fails the
write itself. A thread started here runs its agents in the mount's `--workdir` (default: where
`uwf mount` ran), with the agents `config.yaml` named when it started (`uwf thread rebind`
changes them), like `uwf thread step` without `--agent`. `echo > kill` returns once the agent's processes are gone and the thread is
archived as `killed`: no step can start in between.

## Walking, waiting and watching

`wait` is the one file that blocks, so it is left out of directory listings: `grep -r`, `find`,
`cp -a`, `rsync -a`, `tar`, `diff -r` and `git add` never open it and finish at once while steps
run, copying exactly what the other files hold. Name it to wait: `cat threads/<id>/wait`. A
blocked read of `wait` ends with EINTR when the reader catches a signal (Python's
`signal.alarm`, a handler of SIGTERM), and at once on Ctrl-C; `select`/`poll` say it is not
ready while a step runs. bash's `read -t 1 x < wait` cannot time out: bash turns its timeout
off when the input is a regular file, so it sets no timer and no signal ever comes. Give it a
pipe instead, `read -t 1 x < <(cat wait)`, or use `timeout 5 cat wait`.

Changes made by steps do not raise inotify events: a FUSE mount only reports the changes made
through it (the kernel's limit), so `inotifywait` and file watchers never see a step finish.
Follow `threads/<id>/events` instead (`tail -f` works: it grows by one JSON line per event and
is never rewritten), or block on `wait`.

## Registering workflows

    cp my-flow.yaml workflows/                    # registers `name:` from the file
    vim workflows/my-flow/workflow.yaml           # :w registers a new version
    sed -i 's/old/new/' workflows/my-flow/workflow.yaml
    uwf workflow history my-flow                  # one new version per save

Every editor's save sequence works (vim, nano, emacs, sed -i, cp, mv, `>`, `>>`, write-temp-then-
rename). A save registers once, when the file is closed or renamed into place. Other files you
create in `workflows/` (swap files, backups, temp files) are scratch files kept in memory until
you delete them or rename them onto a meaningful name; they vanish when the mount ends.

A refused save fails the `close` or `rename` with EINVAL (your editor says so), registers
nothing, keeps your text in the file so no edit is lost, and explains itself in
`workflows/error` (bash ignores what `close` returns: after `echo … >> workflow.yaml`, look there). Fix the text and save again, or delete `workflows/<name>/workflow.yaml` to go
back to the registered version (that also clears `workflows/error`). When the program that saved
deletes its own temp file on failure (`sed -i`), the text is kept as
`workflows/<name>/workflow.yaml.refused`. What you save is what you read back, comments
included, also after a remount and in `uwf workflow show`.

## Freshness

Files under `cas/`, `versions/` and `steps/NNN-role/` never change, nor does anything of a
finished thread but its `error`, `wait` and `forks/`. Everything else reflects changes made by the CLI or
by agents in other processes within a second.

`uwf export <thread|--all> DIR` writes the same files into a plain directory. `df` shows the
filesystem that holds the store.

## Unmounting

    uwf umount DIR          # also works after the mount's process was killed
"#,
        root = root.display()
    )
}
