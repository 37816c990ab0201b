//! The generated `README.md` at the root of a mount: how to use it, written for people and for
//! agents that find themselves in the directory.

use std::path::Path;

/// The README of a mount of `root`.
pub fn text(root: &Path, read_only: bool) -> String {
    let mode = if read_only {
        "This mount is **read-only** (`uwf mount --read-only`): everything can be read, nothing \
         can be saved. Remount without `--read-only` to register workflows through files."
    } else {
        "This mount is read-write: saving a workflow file registers it, exactly like \
         `uwf workflow put`."
    };
    format!(
        r#"# uwf mount

The storage at `{root}` as files. {mode}

```text
README.md                          this file
workflows/
  error                            why the last save through workflows/ was refused
  <name>/
    workflow.yaml                  current definition, schemas inline; save to register a new version
    hash                           current workflow hash
    graph.mmd                      Mermaid flowchart of the graph
    versions/<hash>.yaml           every registered version
  <anything>.yaml                  create or copy a YAML file here: registered under its `name`
threads/                           threads (coming with the thread engine)
cas/
  <hash>                           any node by hash, case-insensitive, as pretty JSON
  schemas/<hash>.json              schema nodes
```

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
`workflows/error`. Fix the text and save again, or delete `workflows/<name>/workflow.yaml` to go
back to the registered version.

## Freshness

Files under `cas/` and `versions/` never change. Everything else reflects changes made by the
CLI or by agents in other processes within a second.

## Unmounting

    uwf umount DIR          # also works after the mount's process was killed
"#,
        root = root.display()
    )
}
