//! Real mounts: `uwf mount` serving a sealed storage root, driven by the tools people use (ls,
//! cat, find, vim, nano in tmux, emacs, sed, cp, mv, shell redirection, python), each under a hard
//! timeout. `.ci/run` installs the editors; where a tool or FUSE is missing a test says so and
//! skips (`UWF_REQUIRE_ALL_TESTS=1`, as in CI, makes that a failure).
//!
//! Mount points live under Cargo's target tmp dir, not /tmp, and the editors are told to make
//! backups wherever the file is (vim's `backupskip=`, emacs' `backup-enable-predicate`): by
//! default neither backs up a file under /tmp, which would test a different save path, and a
//! checkout under /tmp puts the target dir there too. Every mount is owned by a [`Mounted`] guard
//! whose `Drop` always unmounts (plain → lazy → connection abort) and reaps the daemon, also when
//! a test panics, so a failing test never leaves a hung mount behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Env, Need};
use uwf::fs::unmount;

const UWF: &str = env!("CARGO_BIN_EXE_uwf");

fn definition(name: &str, description: &str) -> String {
    format!(
        "name: {name}\ndescription: {description}\nroles:\n  planner:\n    goal: plan\n    meta:\n      \
         type: object\n      properties: {{ plan: {{ type: string }} }}\n      required: [plan]\n\
         graph:\n  $START: [ {{ role: planner, condition: null }} ]\n  planner: [ {{ role: $END, \
         condition: null }} ]\n"
    )
}

/// Unmounts leftovers of earlier crashed runs under our mount base.
fn clean_stale_mounts(base: &Path) {
    if let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") {
        for m in unmount::parse_mountinfo(&text) {
            if m.mount_point.starts_with(base) {
                let _ = unmount::unmount(&m.mount_point, true);
            }
        }
    }
}

/// A running `uwf mount --background` of an [`Env`]'s storage root.
struct Mounted {
    dir: PathBuf,
    pid: u32,
    root: PathBuf,
    /// A daemon run in the foreground (see [`Mounted::traced`]), reaped in `Drop`.
    child: Option<std::process::Child>,
}

/// An empty directory to mount on for `test`, after unmounting what a crashed run left there.
fn fresh_mount_dir(test: &str) -> PathBuf {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fs-mount");
    std::fs::create_dir_all(&base).expect("mount base");
    let dir = base.join(test);
    clean_stale_mounts(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mount dir");
    dir
}

impl Mounted {
    fn start(env: &Env, test: &str, extra: &[&str]) -> Mounted {
        let dir = fresh_mount_dir(test);
        let mut args = vec!["mount", "--background"];
        args.extend_from_slice(extra);
        let dir_str = dir.to_str().expect("utf-8 path");
        args.push(dir_str);
        let out = env.run(&args);
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("mount prints JSON");
        let pid = report["pid"].as_u64().expect("pid") as u32;
        Mounted {
            dir,
            pid,
            root: env.root(),
            child: None,
        }
    }

    /// A mount whose daemon logs every request it serves (`UWF_FS_TRACE=1`) to the returned file.
    fn traced(env: &Env, test: &str) -> (Mounted, PathBuf) {
        let dir = fresh_mount_dir(test);
        let log = env.dir.path().join("trace.log");
        let child = Command::new(UWF)
            .arg("mount")
            .arg(&dir)
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env("UWF_STORAGE_ROOT", env.root())
            .env("HOME", env.dir.path())
            .env("UWF_FS_TRACE", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("trace log"))
            .spawn()
            .expect("start uwf mount");
        let m = Mounted {
            dir,
            pid: child.id(),
            root: env.root(),
            child: Some(child),
        };
        let start = Instant::now();
        while !m.mounted() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the daemon did not mount"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        (m, log)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Runs `sh -c script` in the mount under a hard timeout; returns the output.
    fn sh(&self, script: &str) -> Output {
        Command::new("timeout")
            .args(["-s", "KILL", "30", "sh", "-c", script])
            .current_dir(&self.dir)
            .env("UWF_STORAGE_ROOT", &self.root)
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env("UWF", UWF)
            .env("HOME", self.root.parent().expect("env dir"))
            .output()
            .expect("run sh")
    }

    /// Runs a script that must succeed; returns its stdout.
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        common::assert_succeeded(&format!("`{script}`"), &out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                .unwrap_or_default()
                .contains(") Z ")
    }

    fn wait_gone(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if !self.alive() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn mounted(&self) -> bool {
        unmount::find(&self.dir).ok().flatten().is_some()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Plain unmount, lazy when busy; a mount still there after that has a stuck daemon:
        // abort its connection.
        if self.mounted() && (unmount::unmount(&self.dir, false).is_err() || self.mounted()) {
            let _ = unmount::unmount(&self.dir, true);
        }
        if !self.wait_gone(Duration::from_secs(5)) {
            let _ = Command::new("kill")
                .args(["-9", &self.pid.to_string()])
                .status();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

fn history(env: &Env, name: &str) -> usize {
    env.ok(&["workflow", "history", name]).lines().count()
}

/// The current hash of a registered workflow, from `uwf workflow history`.
fn current_hash(env: &Env, name: &str) -> String {
    let first = env.ok(&["workflow", "history", name]);
    let line: serde_json::Value =
        serde_json::from_str(first.lines().next().expect("a version")).expect("JSON line");
    line["hash"].as_str().expect("hash").to_owned()
}

fn put(env: &Env, text: &str) {
    env.ok_stdin(&["workflow", "put", "-"], text);
}

#[test]
fn ls_cat_find_show_workflows_and_cas() {
    if !common::has("ls_cat_find_show_workflows_and_cas", &[Need::Fuse]) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "first"));
    let m = Mounted::start(&env, "browse", &[]);
    assert_eq!(
        m.ok("ls"),
        "README.md\ncas\nthreads\nworkflows\n",
        "the root holds the documented entries"
    );
    assert_eq!(m.ok("ls workflows"), "demo\nerror\n");
    assert_eq!(
        m.ok("ls workflows/demo"),
        "graph.mmd\nhash\nprompt\nthreads\nversions\nworkflow.yaml\n"
    );
    let hash = m.ok("cat workflows/demo/hash").trim().to_owned();
    assert_eq!(
        hash,
        env.ok(&["workflow", "list"]).split('"').nth(7).unwrap()
    );
    assert_eq!(
        m.ok("cat workflows/demo/workflow.yaml"),
        env.ok(&["workflow", "show", "demo"]) + "\n"
    );
    assert_eq!(
        m.ok("cat workflows/demo/graph.mmd").trim(),
        env.ok(&["workflow", "graph", "demo"])
    );
    assert_eq!(
        m.ok("ls workflows/demo/versions").trim(),
        format!("001-{hash}.yaml\ncurrent")
    );
    // cas/: every node, case-insensitive names, pretty JSON like `uwf cas get`.
    let nodes = env.ok(&["cas", "list"]);
    let listed = m.ok("ls cas | grep -v schemas");
    assert_eq!(listed.trim(), nodes.trim());
    assert_eq!(
        m.ok(&format!("cat cas/{}", hash.to_lowercase())).trim(),
        env.ok(&["cas", "get", &hash])
    );
    assert!(m.ok("ls cas/schemas").contains("F5VV55NBKX1R5.json"));
    let files: usize = m.ok("find . -type f | wc -l").trim().parse().unwrap();
    let expected = 1 + 1 + 4 + 1 + nodes.lines().count() + m.ok("ls cas/schemas").lines().count();
    assert_eq!(
        files, expected,
        "README, error, 4 workflow files, 1 version, nodes, schemas"
    );
    assert!(m.ok("cat README.md").contains("workflows/"));
    assert_eq!(
        m.ok("stat -c '%a %n' workflows workflows/demo/hash workflows/demo/workflow.yaml cas"),
        "755 workflows\n444 workflows/demo/hash\n644 workflows/demo/workflow.yaml\n555 cas\n"
    );
    // Reading everything twice gives the same bytes (cached or not).
    assert_eq!(
        m.ok("find . -type f | sort | xargs cat | md5sum"),
        m.ok("find . -type f | sort | xargs cat | md5sum")
    );
}

#[test]
fn every_editor_and_tool_registers_exactly_one_version_per_save() {
    if !common::has(
        "every_editor_and_tool_registers_exactly_one_version_per_save",
        &[Need::Fuse, Need::Tool("vim"), Need::Tool("python3")],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "v0"));
    let m = Mounted::start(&env, "editors", &[]);
    let outside = env.dir.path();
    let yaml = "workflows/demo/workflow.yaml";
    // Listed first, so the kernel holds these listings through every save below.
    assert_eq!(
        m.ok("ls -A workflows/demo; ls workflows/demo/versions | wc -l; ls -A workflows"),
        "graph.mmd\nhash\nprompt\nthreads\nversions\nworkflow.yaml\n2\ndemo\nerror\n"
    );
    let mut versions = 1;
    let mut expect_new = |what: &str, m: &Mounted| {
        versions += 1;
        assert_eq!(
            history(&env, "demo"),
            versions,
            "{what} registered one version"
        );
        let error = m.ok("cat workflows/error");
        assert!(error.is_empty(), "{what}: {error}");
    };

    // vim, nocompatible: swap file, 4913 probe, backup by rename, create, fsync.
    m.ok(&format!(
        "vim -Nu NONE -i NONE -es -c 'set backupskip=' \
         -c '%s/description: v0/description: vim/' -c wq {yaml}"
    ));
    expect_new("vim -N", &m);
    assert!(m.ok(&format!("cat {yaml}")).contains("description: vim"));
    // vim, compatible: backup by copy, then overwrite in place.
    m.ok(&format!(
        "vim -u NONE -i NONE -Es -c 'set backupskip=' \
         -c '%s/description: vim/description: vimcopy/' -c wq {yaml}"
    ));
    expect_new("vim -E", &m);
    // nano's save: lock file with O_EXCL, open write-only + O_TRUNC, write, fsync, close.
    m.ok(&format!(
        "python3 - <<'EOF'\nimport os\nlock='workflows/demo/.workflow.yaml.swp'\n\
         fd=os.open(lock, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o644); os.write(fd, bytes(1024)); os.close(fd)\n\
         t=open('{yaml}').read().replace('vimcopy','nano')\n\
         fd=os.open('{yaml}', os.O_WRONLY|os.O_TRUNC); os.write(fd, t.encode()); os.fsync(fd); os.close(fd)\n\
         os.unlink(lock)\nEOF"
    ));
    expect_new("nano", &m);
    m.ok(&format!(
        "sed -i 's/description: nano/description: sed/' {yaml}"
    ));
    expect_new("sed -i", &m);
    std::fs::write(outside.join("cp.yaml"), definition("demo", "cp")).unwrap();
    m.ok(&format!("cp {}/cp.yaml {yaml}", outside.display()));
    expect_new("cp over", &m);
    std::fs::write(
        outside.join("mv.yaml"),
        definition("demo", "mv-from-outside"),
    )
    .unwrap();
    m.ok(&format!(
        "mv {}/mv.yaml workflows/from-outside.yaml",
        outside.display()
    ));
    expect_new("mv into workflows/", &m);
    m.ok(&format!(
        "sed 's/mv-from-outside/mv-inside/' {yaml} > workflows/demo/draft && mv workflows/demo/draft {yaml}"
    ));
    expect_new("mv within the mount", &m);
    m.ok(&format!(
        "python3 - <<'EOF'\nimport os\np='{yaml}'\nt=open(p).read().replace('mv-inside','python')\n\
         with open(p+'.tmp','w') as f:\n    f.write(t); f.flush(); os.fsync(f.fileno())\n\
         os.replace(p+'.tmp', p)\nEOF"
    ));
    expect_new("python os.replace", &m);
    // emacs: lock file renamed into place (no symlinks here), backup by rename, O_TRUNC create.
    m.ok(&format!(
        "python3 - <<'EOF'\nimport os\nd='workflows/demo/'\n\
         fd=os.open(d+'.#-emacs1', os.O_RDWR|os.O_CREAT|os.O_EXCL, 0o644); os.write(fd, b'u@h.1'); os.close(fd)\n\
         os.rename(d+'.#-emacs1', d+'.#workflow.yaml')\n\
         t=open('{yaml}').read().replace('python','emacs')\n\
         os.rename('{yaml}', '{yaml}~')\n\
         fd=os.open('{yaml}', os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o644)\n\
         os.write(fd, t[:20].encode()); os.write(fd, t[20:].encode()); os.fsync(fd); os.close(fd)\n\
         fd=os.open('{yaml}', os.O_WRONLY); os.close(fd)\n\
         os.unlink(d+'.#workflow.yaml')\nEOF"
    ));
    expect_new("emacs", &m);
    m.ok(&format!(
        "sed 's/description: python/description: redirect/' {yaml}~ > {yaml}"
    ));
    expect_new("> redirection", &m);
    m.ok(&format!("touch {yaml} && echo '# note' >> {yaml}"));
    assert_eq!(
        history(&env, "demo"),
        versions,
        "touch and a comment change nothing"
    );
    assert!(m.ok(&format!("cat {yaml}")).ends_with("# note\n"));
    // Side files editors left are scratch files; deleting them works.
    assert_eq!(
        m.ok("ls -A workflows/demo; ls -A workflows"),
        "graph.mmd\nhash\nprompt\nthreads\nversions\nworkflow.yaml\nworkflow.yaml~\n\
         demo\nerror\nfrom-outside.yaml\n"
    );
    m.ok("rm -f workflows/demo/workflow.yaml~ workflows/from-outside.yaml");
    assert_eq!(m.ok("ls -A workflows"), "demo\nerror\n");
    assert_eq!(
        m.ok("ls -A workflows/demo"),
        "graph.mmd\nhash\nprompt\nthreads\nversions\nworkflow.yaml\n"
    );
    assert_eq!(
        m.ok("ls workflows/demo/versions | grep -vc current").trim(),
        versions.to_string()
    );
}

/// Waits (bounded) until `name` has `count` versions; interactive editors save asynchronously.
fn wait_for_versions(env: &Env, name: &str, count: usize) -> usize {
    let start = Instant::now();
    loop {
        let now = history(env, name);
        if now >= count || start.elapsed() > Duration::from_secs(10) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn real_emacs_nano_and_vim_save_through_the_mount() {
    if !common::has(
        "real_emacs_nano_and_vim_save_through_the_mount",
        &[
            Need::Fuse,
            Need::Tool("emacs"),
            Need::Tool("nano"),
            Need::Tool("vim"),
            Need::Tool("tmux"),
        ],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "v0"));
    let m = Mounted::start(&env, "nano-emacs", &[]);
    let yaml = "workflows/demo/workflow.yaml";
    // emacs: lock file (symlink refused, so a renamed regular file), backup by rename, O_TRUNC.
    m.ok(&format!(
        "emacs --batch -Q --eval '(setq backup-enable-predicate (lambda (_) t))' {yaml} \
         --eval '(progn (goto-char (point-min)) \
         (re-search-forward \"description: .*\") (replace-match \"description: emacs\") (save-buffer))'"
    ));
    assert_eq!(history(&env, "demo"), 2);
    assert!(m.ok(&format!("cat {yaml}")).contains("description: emacs"));
    assert!(
        m.ok("ls -A workflows/demo").contains("workflow.yaml~"),
        "emacs' backup"
    );
    // nano, driven through a terminal: replace, write out, exit.
    let session = format!("uwf-nano-{}", std::process::id());
    let tmux = |args: &[&str]| {
        let status = Command::new("timeout")
            .args(["10", "tmux"])
            .args(args)
            .current_dir(&m.dir)
            .status()
            .expect("tmux");
        std::thread::sleep(Duration::from_millis(300));
        status
    };
    struct KillSession(String);
    impl Drop for KillSession {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .status();
        }
    }
    let _guard = KillSession(session.clone());
    let nano = format!("nano {yaml}");
    assert!(
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            &nano
        ])
        .success()
    );
    for keys in [
        &["C-\\"][..],
        &["description: emacs", "Enter"],
        &["description: nano", "Enter"],
        &["A"],
        &["C-o"],
        &["Enter"],
        &["C-x"],
    ] {
        let mut args = vec!["send-keys", "-t", &session];
        args.extend_from_slice(keys);
        tmux(&args);
    }
    assert_eq!(wait_for_versions(&env, "demo", 3), 3, "nano saved once");
    assert!(m.ok(&format!("cat {yaml}")).contains("description: nano"));
    assert!(
        !m.ok("ls -A workflows/demo").contains(".swp"),
        "nano removed its lock"
    );
    // Interactive vim with Debian's defaults: swap file, 4913 probe, backup rename, fsync, xattr.
    let session = format!("uwf-vim-{}", std::process::id());
    let _guard = KillSession(session.clone());
    let vim = format!("vim -i NONE -c 'set backupskip=' {yaml}");
    assert!(
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            &vim
        ])
        .success()
    );
    tmux(&[
        "send-keys",
        "-t",
        &session,
        ":%s/description: nano/description: vim/",
        "Enter",
    ]);
    tmux(&["send-keys", "-t", &session, ":wq", "Enter"]);
    assert_eq!(wait_for_versions(&env, "demo", 4), 4, "vim saved once");
    assert!(m.ok(&format!("cat {yaml}")).contains("description: vim"));
    let start = Instant::now();
    while m.ok("ls -A workflows/demo").contains(".swp") && start.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !m.ok("ls -A workflows/demo").contains(".swp"),
        "vim removed its swap file"
    );
}

#[test]
fn a_refused_save_keeps_the_text_and_explains_itself() {
    if !common::has(
        "a_refused_save_keeps_the_text_and_explains_itself",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "good"));
    let m = Mounted::start(&env, "refused", &[]);
    let yaml = "workflows/demo/workflow.yaml";
    // The failing close reports EINVAL to the program that saved.
    let out = m.ok(&format!(
        "python3 - <<'EOF'\nimport os, errno\n\
         fd=os.open('{yaml}', os.O_WRONLY|os.O_TRUNC)\nos.write(fd, b'name: demo\\nroles: {{}}\\n')\n\
         try:\n    os.close(fd); print('closed')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\nEOF"
    ));
    assert_eq!(out.trim(), "EINVAL");
    assert_eq!(history(&env, "demo"), 1);
    assert_eq!(
        m.ok(&format!("cat {yaml}")),
        "name: demo\nroles: {}\n",
        "no edit lost"
    );
    let error = m.ok("cat workflows/error");
    assert!(
        error.contains("workflows/demo/workflow.yaml: not registered"),
        "{error}"
    );
    assert!(error.contains("graph"), "{error}");
    // cp says so too, and a rename onto the name (sed -i) fails without touching anything.
    std::fs::write(env.dir.path().join("bad.yaml"), "name: [").unwrap();
    let out = m.sh(&format!(
        "cp {}/bad.yaml workflows/new.yaml",
        env.dir.path().display()
    ));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Invalid argument"));
    assert_eq!(m.ok("cat workflows/new.yaml"), "name: [");
    assert!(m.ok("cat workflows/error").contains("workflows/new.yaml"));
    // Deleting the refused text goes back to the registered version.
    m.ok(&format!("rm {yaml}"));
    assert!(m.ok(&format!("cat {yaml}")).contains("description: good"));
    let out = m.sh(&format!("sed -i 's/roles:/rolez:/' {yaml}"));
    assert!(!out.status.success(), "sed -i onto a refused text fails");
    assert!(m.ok(&format!("cat {yaml}")).contains("roles:"));
    assert_eq!(history(&env, "demo"), 1);
}

#[test]
fn cli_changes_show_within_a_second() {
    if !common::has("cli_changes_show_within_a_second", &[Need::Fuse]) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "before"));
    let m = Mounted::start(&env, "fresh", &[]);
    let before =
        m.ok("cat workflows/demo/hash && cat workflows/demo/workflow.yaml && ls workflows");
    assert!(before.contains("before"));
    put(&env, &definition("demo", "after the CLI changed it"));
    put(&env, &definition("second", "new"));
    std::thread::sleep(Duration::from_millis(1100));
    let after = m.ok("cat workflows/demo/workflow.yaml && ls workflows && cat workflows/demo/hash");
    assert!(after.contains("after the CLI changed it"), "{after}");
    assert!(after.contains("second"), "{after}");
    assert!(after.contains(&current_hash(&env, "demo")), "{after}");
}

#[test]
fn a_read_only_mount_reads_everything_and_writes_nothing() {
    if !common::has(
        "a_read_only_mount_reads_everything_and_writes_nothing",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "ro"));
    let m = Mounted::start(&env, "readonly", &["--read-only"]);
    assert!(
        m.ok("cat workflows/demo/workflow.yaml")
            .contains("description: ro")
    );
    assert_eq!(
        m.ok("find . -type f | sort | xargs cat | md5sum"),
        m.ok("find . -type f | sort | xargs cat | md5sum")
    );
    let out = m.sh("echo x > workflows/new.yaml");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    // Registry changes still show (attributes expire; changed mtimes drop cached pages).
    put(&env, &definition("demo", "changed under a read-only mount"));
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        m.ok("cat workflows/demo/workflow.yaml")
            .contains("changed under")
    );
}

#[test]
fn syscalls_fail_with_meaningful_errno() {
    if !common::has(
        "syscalls_fail_with_meaningful_errno",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "errno"));
    let m = Mounted::start(&env, "errno", &[]);
    let out = m.ok(
        "python3 - <<'EOF'\nimport os, errno, fcntl, termios, ctypes\n\
         def code(f):\n    try:\n        f(); return 'ok'\n    except OSError as e:\n        return errno.errorcode[e.errno]\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def rename2(a, b, flags):\n    if libc.renameat2(-100, a.encode(), -100, b.encode(), flags) != 0:\n        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))\n\
         open('workflows/a', 'w').write('a'); open('workflows/b', 'w').write('b')\n\
         fd = os.open('workflows/demo/workflow.yaml', os.O_RDONLY)\n\
         print('long', code(lambda: open('workflows/' + 'x' * 256, 'w')))\n\
         print('cas', code(lambda: open('cas/F5VV55NBKX1R5', 'w')))\n\
         print('hash', code(lambda: os.unlink('workflows/demo/hash')))\n\
         print('excl', code(lambda: os.open('workflows/a', os.O_CREAT | os.O_EXCL | os.O_WRONLY)))\n\
         print('noreplace', code(lambda: rename2('workflows/a', 'workflows/b', 1)))\n\
         print('exchange', code(lambda: rename2('workflows/a', 'workflows/b', 2)))\n\
         print('efbig', code(lambda: os.truncate('workflows/a', 1 << 40)))\n\
         print('ioctl', code(lambda: fcntl.ioctl(fd, termios.TCGETS, bytes(64))))\n\
         print('xattr', code(lambda: os.setxattr('workflows/a', 'user.x', b'1')))\n\
         print('mkdir', code(lambda: os.mkdir('workflows/d')))\n\
         print('missing', code(lambda: open('cas/not-a-hash')))\nEOF",
    );
    assert_eq!(
        out,
        "long ENAMETOOLONG\ncas EACCES\nhash EPERM\nexcl EEXIST\nnoreplace EEXIST\n\
         exchange EINVAL\nefbig EFBIG\nioctl ENOTTY\nxattr ENOTSUP\nmkdir EPERM\nmissing ENOENT\n"
    );
}

#[test]
fn sigterm_unmounts_cleanly() {
    if !common::has("sigterm_unmounts_cleanly", &[Need::Fuse]) {
        return;
    }
    let env = Env::new();
    let m = Mounted::start(&env, "sigterm", &[]);
    assert!(m.mounted());
    Command::new("kill")
        .args(["-TERM", &m.pid.to_string()])
        .status()
        .unwrap();
    assert!(m.wait_gone(Duration::from_secs(10)), "the daemon exits");
    assert!(!m.mounted(), "and leaves no mount behind");
}

#[test]
fn sigterm_with_a_file_open_detaches_and_serves_it_to_the_end() {
    if !common::has(
        "sigterm_with_a_file_open_detaches_and_serves_it_to_the_end",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "busy"));
    let m = Mounted::start(&env, "busy", &[]);
    let mut reader = Command::new("timeout")
        .args(["-s", "KILL", "20", "python3", "-c"])
        .arg(
            "import sys, time\nf = open(sys.argv[1])\nprint('open', flush=True)\n\
             time.sleep(1.5)\nprint(f.read().splitlines()[0])",
        )
        .arg(m.path("workflows/demo/workflow.yaml"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(reader.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "open\n");
    Command::new("kill")
        .args(["-TERM", &m.pid.to_string()])
        .status()
        .unwrap();
    let start = Instant::now();
    while m.mounted() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!m.mounted(), "busy: detached lazily at once");
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "name: demo\n", "the open file is still served");
    assert!(reader.wait().unwrap().success());
    assert!(
        m.wait_gone(Duration::from_secs(10)),
        "then the daemon exits"
    );
}

#[test]
fn umount_cleans_up_after_a_killed_daemon() {
    if !common::has("umount_cleans_up_after_a_killed_daemon", &[Need::Fuse]) {
        return;
    }
    let env = Env::new();
    let m = Mounted::start(&env, "killed", &[]);
    Command::new("kill")
        .args(["-9", &m.pid.to_string()])
        .status()
        .unwrap();
    assert!(m.wait_gone(Duration::from_secs(5)));
    let out = Command::new("timeout")
        .args(["-s", "KILL", "10", "ls"])
        .arg(m.path("workflows"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not connected"),
        "a dead mount answers ENOTCONN: {out:?}"
    );
    assert!(m.mounted());
    let report = env.ok(&["umount", m.dir.to_str().unwrap()]);
    assert!(report.contains("\"unmounted\""), "{report}");
    assert!(!m.mounted());
    // And the directory can be mounted again.
    let again = Mounted::start(&env, "killed", &[]);
    assert_eq!(again.ok("ls"), "README.md\ncas\nthreads\nworkflows\n");
    let out = env.run(&["umount", again.dir.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(again.wait_gone(Duration::from_secs(10)));
    let out = env.run(&["umount", again.dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "not mounted any more");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a FUSE mount point"));
}

#[test]
fn mount_refuses_a_directory_with_files_unless_nonempty() {
    if !common::has(
        "mount_refuses_a_directory_with_files_unless_nonempty",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    let dir = fresh_mount_dir("nonempty");
    std::fs::write(dir.join("notes.txt"), "mine\n").unwrap();
    let dir_str = dir.to_str().unwrap();
    for how in [&["mount", dir_str][..], &["mount", "--background", dir_str]] {
        let out = env.run(how);
        assert_eq!(out.status.code(), Some(1), "{how:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is not empty"), "{stderr}");
        assert!(stderr.contains("--nonempty"), "{stderr}");
        assert!(unmount::find(&dir).unwrap().is_none(), "nothing mounted");
    }
    let out = env.run(&["mount", "--background", "--nonempty", dir_str]);
    common::assert_succeeded("mount --nonempty", &out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = Mounted {
        dir: dir.clone(),
        pid: report["pid"].as_u64().unwrap() as u32,
        root: env.root(),
        child: None,
    };
    assert_eq!(m.ok("ls"), "README.md\ncas\nthreads\nworkflows\n");
    drop(m);
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "mine\n"
    );
}

#[test]
fn umount_from_inside_says_what_lazy_means() {
    if !common::has("umount_from_inside_says_what_lazy_means", &[Need::Fuse]) {
        return;
    }
    let env = Env::new();
    let m = Mounted::start(&env, "lazy", &[]);
    // A process whose working directory is inside keeps the mount busy.
    let mut inside = Command::new("sleep")
        .arg("30")
        .current_dir(m.path("workflows"))
        .spawn()
        .unwrap();
    let out = env.run(&["umount", m.dir.to_str().unwrap()]);
    let _ = inside.kill();
    let _ = inside.wait();
    common::assert_succeeded("umount", &out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"lazy\":true"),
        "{out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is busy"), "{stderr}");
    assert!(stderr.contains("detached now"), "{stderr}");
    assert!(
        stderr.contains("last open file or working directory"),
        "{stderr}"
    );
    assert!(
        m.wait_gone(Duration::from_secs(10)),
        "the daemon exits once it is left"
    );
}

// ---------------------------------------------------------------- threads/

const LOOP: &str = "name: loop\nroles:\n  planner:\n    goal: plan\n    meta:\n      type: object\n      \
properties: { plan: { type: string } }\n      required: [plan]\n  reviewer:\n    goal: review\n    \
meta:\n      type: object\n      properties: { ok: { type: boolean } }\n      required: [ok]\n\
conditions:\n  approved:\n    expression: \"steps[-1].output.ok = true\"\n\
graph:\n  $START: [ { role: planner, condition: null } ]\n  planner: [ { role: reviewer, condition: null } ]\n  \
reviewer: [ { role: $END, condition: approved }, { role: planner, condition: null } ]\n";

/// Canned outputs: planner, reviewer (no), planner, reviewer (yes) → done after four steps.
const SCRIPT: &str = "planner:\n  - \"---\\nplan: first\\n---\\nPlan A.\\n\"\n  - \"---\\nplan: second\\nrisk: low\\n---\\nPlan B.\\n\"\n\
reviewer:\n  - \"---\\nok: false\\n---\\nNot yet.\\n\"\n  - \"---\\nok: true\\n---\\nGood.\\n\"\n";

/// An environment with the `loop` workflow and `config.yaml` making `agent` (a script body run
/// with `sh`, ending in the script agent) the default agent.
fn loop_env(agent: &str) -> Env {
    let env = Env::new();
    put(&env, LOOP);
    let script = env.dir.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let agent_path = env.dir.path().join("agent.sh");
    std::fs::write(
        &agent_path,
        format!(
            "#!/bin/sh\n{agent}\nexec {UWF} agent script --file {} \"$1\" \"$2\"\n",
            script.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .args(["+x", agent_path.to_str().unwrap()])
        .status()
        .unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "agents:\n  scripted:\n    command: {}\ndefaultAgent: scripted\n",
            agent_path.display()
        ),
    )
    .unwrap();
    env
}

fn thread_of(json_line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json_line.trim()).expect("JSON");
    v["thread"].as_str().expect("thread").to_owned()
}

/// Polls `script` in the mount until its output satisfies `done` (at most 15 s).
fn eventually(m: &Mounted, script: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let out = m.ok(script);
        if done(&out) || start.elapsed() > Duration::from_secs(15) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_finished_thread_browses_with_ls_cat_find_and_diff_like_the_cli() {
    if !common::has(
        "a_finished_thread_browses_with_ls_cat_find_and_diff_like_the_cli",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "Fix the login bug"]));
    env.ok(&["thread", "run", &id]);
    let m = Mounted::start(&env, "threads-browse", &[]);
    let t = format!("threads/{id}");
    assert_eq!(m.ok("ls threads"), format!("{id}\n"));
    assert_eq!(
        m.ok(&format!("ls {t}")),
        "answer\ncost\nerror\nevents\nforks\nhead\nkill\nlog\nprompt\nquestion\nrun\nstatus\nstep\nsteps\ntranscript.md\nworkflow\n"
    );
    assert_eq!(
        m.ok(&format!("ls {t}/steps")),
        "001-planner\n002-reviewer\n003-planner\n004-reviewer\nlatest\n"
    );
    assert_eq!(m.ok(&format!("cat {t}/status")), "done\n");
    assert_eq!(m.ok(&format!("cat {t}/prompt")), "Fix the login bug");
    assert_eq!(
        m.ok(&format!("readlink {t}/steps/latest")),
        "004-reviewer\n"
    );
    assert_eq!(
        m.ok(&format!("readlink {t}/workflow && ls {t}/workflow/")),
        "../../workflows/loop\ngraph.mmd\nhash\nlatest\nprompt\nthreads\nversions\nworkflow.yaml\n"
    );
    assert_eq!(
        m.ok(&format!("cat {t}/steps/003-planner/output.yaml")),
        "plan: second\nrisk: low\n"
    );
    assert_eq!(
        m.ok(&format!("cat {t}/steps/003-planner/body.md")),
        "Plan B.\n"
    );
    assert_eq!(
        m.ok(&format!(
            "cat {t}/steps/003-planner/role {t}/steps/003-planner/agent"
        )),
        "planner\nscript\n"
    );
    // The same renderings as the CLI.
    assert_eq!(
        m.ok(&format!("cat {t}/transcript.md")),
        env.ok(&["thread", "read", &id]) + "\n"
    );
    let steps = env.ok(&["thread", "steps", &id]);
    let hashes: Vec<String> = steps
        .lines()
        .map(|l| common::json(l)["hash"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(m.ok(&format!("cat {t}/head")).trim(), hashes[3]);
    assert_eq!(
        m.ok(&format!("cat {t}/steps/002-reviewer/hash")).trim(),
        hashes[1]
    );
    assert_eq!(
        m.ok(&format!("cat {t}/steps/002-reviewer/detail.yaml")),
        env.ok(&["thread", "step-details", &hashes[1]]) + "\n"
    );
    // diff between steps, and the `diff` file (against the previous step of the same role).
    let out = m.sh(&format!(
        "diff {t}/steps/001-planner/output.yaml {t}/steps/003-planner/output.yaml"
    ));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1c1,2\n< plan: first\n---\n> plan: second\n> risk: low\n"
    );
    let diff = m.ok(&format!("cat {t}/steps/003-planner/diff"));
    assert!(
        diff.starts_with("--- 001-planner/output.yaml\n+++ 003-planner/output.yaml\n"),
        "{diff}"
    );
    assert!(
        diff.contains("-plan: first\n+plan: second\n+risk: low\n"),
        "{diff}"
    );
    assert_eq!(m.ok(&format!("cat {t}/steps/001-planner/diff")), "");
    // find sees every file: 13 in the thread (the workflow link is no file, `wait` is not
    // listed), 9 per step (no `child` link: no sub-workflow played these).
    assert_eq!(
        m.ok(&format!("find {t} -type f | wc -l")).trim(),
        (13 + 4 * 9).to_string()
    );
    assert_eq!(m.ok(&format!("find {t} -type l | wc -l")).trim(), "2");
    // ls -lt sorts steps by their nodes' time.
    assert_eq!(
        m.ok(&format!("ls -t {t}/steps | grep -v latest")),
        "004-reviewer\n003-planner\n002-reviewer\n001-planner\n"
    );
    assert!(
        m.ok(&format!(
            "stat -c '%a %s' {t}/steps/001-planner/output.yaml {t}/step"
        )) == "444 12\n644 0\n"
    );
    // Forks share their steps: diff -r between forks.
    let fork = common::json(&env.ok(&["thread", "fork", &hashes[1]]));
    let f = format!("threads/{}", fork["thread"].as_str().unwrap());
    std::thread::sleep(Duration::from_millis(1100));
    m.ok(&format!("diff -r {t}/steps/001-planner {f}/steps/001-planner && diff -r {t}/steps/002-reviewer {f}/steps/002-reviewer"));
    let out = m.sh(&format!("diff -r {t}/steps {f}/steps"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("Only in {t}/steps: 003-planner"))
    );
    assert_eq!(m.ok(&format!("cat {f}/status")), "active next=planner\n");
    // The export is byte for byte the mount (links compared as links).
    let exported = env.dir.path().join("export");
    env.ok(&["export", &id, exported.to_str().unwrap()]);
    m.ok(&format!(
        "diff -r --no-dereference {t} {}/{t}",
        exported.display()
    ));
    env.ok(&["export", "--all", exported.to_str().unwrap()]);
    m.ok(&format!(
        "diff -r --no-dereference threads {}/threads",
        exported.display()
    ));
    m.ok(&format!(
        "diff -r --no-dereference workflows/loop {}/workflows/loop",
        exported.display()
    ));
    // A read-only mount shows the same bytes.
    let ro = Mounted::start(&env, "threads-browse-ro", &["--read-only"]);
    m.ok(&format!(
        "diff -r --no-dereference threads {}/threads",
        ro.dir.display()
    ));
    let out = ro.sh(&format!("touch {t}/step"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
}

#[test]
fn echo_into_prompt_and_a_clone_style_read_start_threads() {
    if !common::has(
        "echo_into_prompt_and_a_clone_style_read_start_threads",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = loop_env("");
    let m = Mounted::start(&env, "threads-prompt", &[]);
    assert_eq!(m.ok("ls threads"), "");
    m.ok("echo 'Fix the login bug' > workflows/loop/prompt");
    let first = m.ok("ls threads").trim().to_owned();
    assert_eq!(first.len(), 26, "one thread: {first}");
    assert_eq!(
        m.ok("readlink workflows/loop/latest"),
        format!("../../threads/{first}\n")
    );
    assert_eq!(
        m.ok("cat workflows/loop/latest/prompt"),
        "Fix the login bug\n"
    );
    assert_eq!(
        m.ok(&format!("cat threads/{first}/status")),
        "active next=planner\n"
    );
    // Clone-style: the read on the writing descriptor starts the thread and returns its id.
    let id = m.ok(
        "python3 - <<'EOF'\nimport os\nfd = os.open('workflows/loop/prompt', os.O_RDWR)\n\
         os.write(fd, b'Second task')\nprint(os.read(fd, 100).decode().strip())\n\
         print(repr(os.read(fd, 100)))\nos.close(fd)\nEOF",
    );
    let mut lines = id.lines();
    let second = lines.next().unwrap().to_owned();
    assert_eq!(lines.next(), Some("b''"), "the id once, then end of file");
    assert_ne!(second, first);
    assert_eq!(m.ok(&format!("cat threads/{second}/prompt")), "Second task");
    assert_eq!(
        m.ok("ls workflows/loop/threads"),
        format!("{first}\n{second}\n")
    );
    assert_eq!(
        m.ok("readlink workflows/loop/latest"),
        format!("../../threads/{second}\n")
    );
    // The CLI sees them too; an empty prompt starts nothing and says why.
    assert_eq!(env.ok(&["thread", "list"]).lines().count(), 2);
    m.ok("printf '' > workflows/loop/prompt");
    let refused = m.sh("echo '   ' > workflows/loop/prompt");
    assert!(
        !refused.status.success(),
        "the write of a blank prompt fails"
    );
    assert_eq!(m.ok("ls threads").lines().count(), 2);
    let closed = m.ok(
        "python3 - <<'EOF'\nimport os, errno\nfd = os.open('workflows/loop/prompt', os.O_WRONLY)\n\
         for step in (lambda: os.write(fd, b'  \\n'), lambda: os.close(fd)):\n    try:\n        \
         step(); print('ok')\n    except OSError as e:\n        print(errno.errorcode[e.errno])\nEOF",
    );
    assert_eq!(
        closed, "EINVAL\nEINVAL\n",
        "the write and the close report the empty prompt"
    );
    assert!(m.ok("cat workflows/error").contains("the prompt is empty"));
}

#[test]
fn touch_and_echo_each_start_exactly_one_step_and_wait_waits() {
    if !common::has(
        "touch_and_echo_each_start_exactly_one_step_and_wait_waits",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "one step at a time"]));
    let m = Mounted::start(&env, "threads-step", &[]);
    let t = format!("threads/{id}");
    m.ok(&format!("touch {t}/step"));
    let wait = m.ok(&format!("cat {t}/wait"));
    assert_eq!(common::json(&wait)["role"], "planner", "{wait}");
    assert_eq!(m.ok(&format!("ls {t}/steps")), "001-planner\nlatest\n");
    m.ok(&format!("echo > {t}/step"));
    let wait = m.ok(&format!("cat {t}/wait"));
    assert_eq!(common::json(&wait)["role"], "reviewer", "{wait}");
    assert_eq!(
        m.ok(&format!("ls {t}/steps")),
        "001-planner\n002-reviewer\nlatest\n"
    );
    assert_eq!(m.ok(&format!("cat {t}/status")), "active next=planner\n");
    // run: steps until done.
    m.ok(&format!("echo > {t}/run && cat {t}/wait > /dev/null"));
    assert_eq!(m.ok(&format!("cat {t}/status")), "done\n");
    assert_eq!(env.ok(&["thread", "steps", &id]).lines().count(), 4);
    // A finished thread refuses with EINVAL and says why in `error`.
    let out = m.sh(&format!("touch {t}/step"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{out:?}"
    );
    let error = m.ok(&format!("cat {t}/error"));
    assert!(error.contains("archived (done)"), "{error}");
    let out = m.sh(&format!("echo > {t}/step"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{out:?}"
    );
    assert_eq!(
        env.ok(&["thread", "steps", &id]).lines().count(),
        4,
        "nothing ran"
    );
}

/// A `tail -f` of a file in the mount, killed (and reaped) when dropped, so that no reader
/// keeps the mount busy when a test ends, also on panic.
struct Follower {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<(Duration, String)>,
}

impl Follower {
    fn start(path: &Path, since: Instant) -> Follower {
        let mut child = Command::new("tail")
            .args(["-n", "+1", "-f"])
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start tail -f");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((since.elapsed(), line)).is_err() {
                    break;
                }
            }
        });
        Follower { child, lines }
    }

    /// Waits (at most 20 s) for a line equal to `wanted`; returns when it arrived.
    fn until(&self, wanted: &str, seen: &mut Vec<String>) -> Duration {
        loop {
            let (at, line) = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| {
                    panic!("tail -f never printed {wanted:?}; it printed {seen:?}")
                });
            seen.push(line.clone());
            if line == wanted {
                return at;
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn tail_f_of_the_log_shows_an_agents_first_line_before_its_step_ends() {
    if !common::has(
        "tail_f_of_the_log_shows_an_agents_first_line_before_its_step_ends",
        &[Need::Fuse, Need::Tool("tail")],
    ) {
        return;
    }
    let env =
        loop_env("echo \"first line from $2\" >&2\nsleep 3\necho \"second line from $2\" >&2");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "slowly"]));
    let m = Mounted::start(&env, "tail-log", &[]);
    let t = format!("threads/{id}");
    let started = Instant::now();
    // Declared after the mount, so dropped (killed) before it unmounts.
    let tail = Follower::start(&m.path(&format!("{t}/log")), started);
    m.ok(&format!("touch {t}/step"));
    let mut seen = Vec::new();
    let first_at = tail.until("first line from planner", &mut seen);
    let wait = m.ok(&format!("cat {t}/wait"));
    let step_ended = started.elapsed();
    assert_eq!(common::json(&wait)["role"], "planner", "{wait}");
    // The agent slept 3 s after its first line: tail (polling a FUSE file once a second)
    // printed it well before the step ended.
    eprintln!("first line at {first_at:?}, the step ended at {step_ended:?}");
    assert!(
        first_at + Duration::from_millis(1500) < step_ended,
        "first line at {first_at:?}, the step ended at {step_ended:?}"
    );
    assert!(
        seen[0].starts_with("── step 1 · planner · agent scripted · "),
        "{seen:?}"
    );
    tail.until("second line from planner", &mut seen);
    // The next step appends under its own header; the file is never truncated, so tail -f
    // follows the whole run without "file truncated".
    m.ok(&format!("touch {t}/step"));
    tail.until("first line from reviewer", &mut seen);
    let headers: Vec<&String> = seen.iter().filter(|l| l.starts_with("── step ")).collect();
    assert_eq!(headers.len(), 2, "{seen:?}");
    assert!(
        headers[1].starts_with("── step 2 · reviewer · "),
        "{seen:?}"
    );
    m.ok(&format!("cat {t}/wait"));
}

#[test]
fn a_slow_step_is_busy_logs_as_it_goes_and_can_be_killed() {
    if !common::has(
        "a_slow_step_is_busy_logs_as_it_goes_and_can_be_killed",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env(
        "echo \"slow agent for $2\" >&2\ni=0\nwhile [ $i -lt 30 ]; do echo tick $i >&2; sleep 0.1; i=$((i+1)); done",
    );
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "slowly"]));
    let m = Mounted::start(&env, "threads-slow", &[]);
    let t = format!("threads/{id}");
    m.ok(&format!("touch {t}/step"));
    let status = m.ok(&format!("cat {t}/status"));
    assert!(status.starts_with("running role=planner pid="), "{status}");
    // Busy: EBUSY, and the reason in `error`.
    let out = m.sh(&format!("touch {t}/step"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Device or resource busy"),
        "{out:?}"
    );
    assert!(m.ok(&format!("cat {t}/error")).contains("busy"));
    // The log grows while the agent runs.
    let first = eventually(&m, &format!("cat {t}/log"), |l| l.contains("tick 3"));
    let later = eventually(&m, &format!("cat {t}/log"), |l| l.len() > first.len() + 20);
    // The thread log: a header per step, then the agent's output as it arrives.
    assert!(
        later.starts_with("── step 1 · planner · agent scripted · ")
            && later.contains("\nslow agent for planner\n"),
        "{later}"
    );
    assert!(later.len() > first.len(), "{first:?} then {later:?}");
    // A blocked `wait` stalls nothing else and can be interrupted.
    let mut waiter = Command::new("timeout")
        .args(["-s", "KILL", "20", "cat"])
        .arg(m.path(&format!("{t}/wait")))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let busy_since = Instant::now();
    m.ok(&format!(
        "ls threads && cat {t}/status {t}/prompt > /dev/null && ls {t}/steps"
    ));
    assert!(
        busy_since.elapsed() < Duration::from_secs(1),
        "the mount kept serving"
    );
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "wait is still blocked"
    );
    Command::new("kill")
        .args(["-INT", &waiter.id().to_string()])
        .status()
        .unwrap();
    let interrupted = Instant::now();
    let status = waiter.wait().unwrap();
    assert!(!status.success());
    assert!(
        interrupted.elapsed() < Duration::from_secs(1),
        "Ctrl-C ends a blocked wait"
    );
    // The step finishes; wait gives its JSON.
    let wait = m.ok(&format!("cat {t}/wait"));
    assert_eq!(common::json(&wait)["role"], "planner");
    assert!(m.ok(&format!("cat {t}/log")).contains("tick 29"));
    // kill during the next step: the agent stops, the thread is archived as killed.
    m.ok(&format!("touch {t}/step"));
    eventually(&m, &format!("cat {t}/log"), |l| l.contains("tick 2"));
    m.ok(&format!("echo > {t}/kill"));
    let status = eventually(&m, &format!("cat {t}/status"), |s| s == "killed\n");
    assert_eq!(status, "killed\n");
    assert_eq!(
        env.ok(&["thread", "steps", &id]).lines().count(),
        1,
        "the killed step left no step"
    );
    assert!(
        String::from_utf8_lossy(&m.sh(&format!("touch {t}/step")).stderr)
            .contains("Invalid argument")
    );
    assert!(
        m.ok(&format!("cat {t}/error"))
            .contains("archived (killed)")
    );
}

#[test]
fn fork_through_the_mount_continues_from_a_step() {
    if !common::has(
        "fork_through_the_mount_continues_from_a_step",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "to fork"]));
    env.ok(&["thread", "step", &id]);
    env.ok(&["thread", "step", &id]);
    let m = Mounted::start(&env, "threads-fork", &[]);
    let t = format!("threads/{id}");
    let mtime = |path: &str| -> u64 { m.ok(&format!("stat -c %Y {path}")).trim().parse().unwrap() };
    // Before any fork exists, `forks/` is as old as its thread, not 1970.
    assert!(mtime(&format!("{t}/forks")) >= mtime(&format!("{t}/steps/001-planner")) - 1);
    let new = m.ok(&format!(
        "python3 - <<'EOF'\nimport os\nfd = os.open('{t}/steps/001-planner/fork', os.O_RDWR)\n\
         os.write(fd, b'x')\nprint(os.read(fd, 100).decode().strip())\nos.close(fd)\nEOF"
    ));
    let new = new.trim();
    // The fork's directory has the fork's time, not its source step's; `forks/` is dated.
    let forked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(mtime(&format!("threads/{new}")) + 2 >= forked);
    assert!(mtime(&format!("threads/{new}")) >= mtime(&format!("{t}/steps/001-planner")));
    assert!(mtime(&format!("threads/{new}/forks")) >= mtime(&format!("threads/{new}")));
    assert!(mtime(&format!("{t}/forks")) >= mtime(&format!("threads/{new}")));
    assert_eq!(
        m.ok(&format!(
            "find threads -mindepth 1 -maxdepth 1 -newer {t}/steps/002-reviewer"
        )),
        format!("threads/{new}\n")
    );
    assert_eq!(
        m.ok(&format!("ls threads/{new}/steps")),
        "001-planner\nlatest\n"
    );
    assert_eq!(
        m.ok(&format!("cat threads/{new}/status")),
        "active next=reviewer\n"
    );
    m.ok(&format!(
        "diff -r threads/{new}/steps/001-planner {t}/steps/001-planner"
    ));
    // echo > fork works too: the newest thread of the workflow is the fork.
    m.ok(&format!("echo > {t}/steps/002-reviewer/fork"));
    let latest = m.ok("readlink workflows/loop/latest");
    let newest = latest.trim().rsplit('/').next().unwrap().to_owned();
    assert_eq!(
        m.ok(&format!("cat threads/{newest}/head")),
        m.ok(&format!("cat {t}/head"))
    );
    assert_eq!(env.ok(&["thread", "list"]).lines().count(), 3);
}

#[test]
fn threads_made_by_the_cli_show_within_a_second() {
    if !common::has(
        "threads_made_by_the_cli_show_within_a_second",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env("");
    let m = Mounted::start(&env, "threads-fresh", &[]);
    assert_eq!(m.ok("ls threads"), "");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "from the CLI"]));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(m.ok("ls threads"), format!("{id}\n"));
    let t = format!("threads/{id}");
    assert_eq!(m.ok(&format!("cat {t}/status")), "active next=planner\n");
    assert_eq!(m.ok(&format!("ls {t}/steps")), "");
    env.ok(&["thread", "step", &id]);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(m.ok(&format!("cat {t}/status")), "active next=reviewer\n");
    assert_eq!(m.ok(&format!("ls {t}/steps")), "001-planner\nlatest\n");
    let head = env.ok(&["thread", "show", &id]);
    assert_eq!(
        m.ok(&format!("cat {t}/head")).trim(),
        common::json(&head)["head"].as_str().unwrap()
    );
    env.ok(&["thread", "run", &id]);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(m.ok(&format!("cat {t}/status")), "done\n");
    assert_eq!(m.ok(&format!("ls {t}/steps | wc -l")).trim(), "5");
}

/// The requests of kind `op` (`READDIR`, `LOOKUP`, …) the traced daemon has served.
fn served(log: &Path, op: &str) -> Vec<String> {
    let text = std::fs::read_to_string(log).expect("trace log");
    text.lines()
        .filter(|l| l.split(' ').next() == Some(op))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_writable_mount_lists_each_directory_once_until_it_changes() {
    if !common::has(
        "a_writable_mount_lists_each_directory_once_until_it_changes",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "listed"]));
    env.ok(&["thread", "run", &id]);
    // Index files younger than `SETTLE` (100 ms) are re-read and threads/ re-listed every time.
    std::thread::sleep(Duration::from_millis(300));
    let (m, log) = Mounted::traced(&env, "listings-cached");
    let t = format!("threads/{id}");
    // Not cas/: it is listed afresh every second (nodes can go without a trace, `uwf cas gc`).
    let tree = format!("ls; find threads workflows | sort; ls {t}/steps {t}/steps/001-planner");
    let first = m.ok(&tree);
    let listed = served(&log, "READDIR").len();
    assert!(listed > 0, "the first walk lists");
    // The kernel keeps every listing: a second walk (finished thread, unchanged registry and
    // index) sends no READDIR at all.
    assert_eq!(m.ok(&tree), first);
    let again = served(&log, "READDIR");
    assert_eq!(
        again.len(),
        listed,
        "listings came from the cache: {again:#?}"
    );
    // A change made through the mount is listed at once, and only what changed is read again.
    m.ok("touch workflows/notes.txt");
    assert!(m.ok(&tree).contains("workflows/notes.txt\n"));
    let relisted = served(&log, "READDIR").len();
    assert!(relisted > listed, "workflows/ was read again");
    m.ok("rm workflows/notes.txt");
    assert!(!m.ok(&tree).contains("notes.txt"));
    // A change by another process: a new thread shows in threads/ within a second.
    let second = thread_of(&env.ok(&["thread", "start", "loop", "-p", "another"]));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(m.ok("ls threads"), format!("{id}\n{second}\n"));
}

/// A script listing `dir` the way programs do without `ls`: `opendir`/`readdir` and no `stat`
/// (`ls` stats its arguments, which on a writable mount refreshes the directory's attributes
/// anyway, since the kernel drops the cached atime of a directory after every listing).
fn listdir(dir: &str) -> String {
    format!("python3 -c 'import os; [print(n) for n in sorted(os.listdir(\"{dir}\"))]'")
}

#[test]
fn every_listing_follows_changes_by_the_mount_at_once_and_by_the_cli_within_a_second() {
    if !common::has(
        "every_listing_follows_changes_by_the_mount_at_once_and_by_the_cli_within_a_second",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = loop_env("");
    let m = Mounted::start(&env, "listings-fresh", &[]);
    let count = |script: &str| -> usize { m.ok(script).lines().count() };
    // List everything once, so the kernel holds each listing.
    assert_eq!(m.ok("ls threads"), "");
    assert_eq!(m.ok("ls workflows"), "error\nloop\n");
    assert_eq!(
        m.ok("ls workflows/loop"),
        "graph.mmd\nhash\nprompt\nthreads\nversions\nworkflow.yaml\n"
    );
    assert_eq!(m.ok("ls workflows/loop/threads"), "");
    assert_eq!(
        count("ls workflows/loop/versions"),
        2,
        "one version and `current`"
    );
    let nodes = count("ls cas");
    let schemas = count("ls cas/schemas");

    // Through the mount: scratch files appear and go at once, also moved between directories.
    m.ok("echo x > workflows/notes.txt");
    assert_eq!(m.ok("ls workflows"), "error\nloop\nnotes.txt\n");
    m.ok("mv workflows/notes.txt workflows/loop/notes.txt");
    assert_eq!(m.ok("ls workflows"), "error\nloop\n");
    assert!(m.ok("ls workflows/loop").contains("notes.txt\n"));
    m.ok("rm workflows/loop/notes.txt");
    assert!(!m.ok("ls workflows/loop").contains("notes.txt"));
    // A python-style atomic save: the temp file is listed, then gone; a new version is listed.
    m.ok(
        "python3 - <<'EOF'\nimport os\np='workflows/loop/workflow.yaml'\n\
         t=open(p).read().replace('goal: plan', 'goal: plan well')\n\
         f=open(p+'.tmp','w'); f.write(t); f.close()\n\
         assert 'workflow.yaml.tmp' in os.listdir('workflows/loop')\n\
         os.replace(p+'.tmp', p)\n\
         assert 'workflow.yaml.tmp' not in os.listdir('workflows/loop')\nEOF",
    );
    assert_eq!(count("ls workflows/loop/versions"), 3);
    // A thread started by writing `prompt`: threads/, latest, the workflow's threads/ (listed
    // without `stat`, so nothing but the directories' own attributes can tell the kernel).
    assert_eq!(m.ok(&listdir("threads")), "");
    assert_eq!(m.ok(&listdir("workflows/loop/threads")), "");
    assert!(!m.ok(&listdir("workflows/loop")).contains("latest"));
    m.ok("echo 'Through the mount' > workflows/loop/prompt");
    let id = m.ok(&listdir("threads")).trim().to_owned();
    assert_eq!(id.len(), 26, "one thread: {id}");
    assert!(m.ok(&listdir("workflows/loop")).contains("latest\n"));
    assert_eq!(m.ok(&listdir("workflows/loop/threads")), format!("{id}\n"));
    assert_eq!(m.ok("ls threads"), format!("{id}\n"));
    // A step run through the mount.
    let t = format!("threads/{id}");
    let steps = listdir(&format!("{t}/steps"));
    assert_eq!(m.ok(&steps), "");
    m.ok(&format!("touch {t}/step && cat {t}/wait > /dev/null"));
    assert_eq!(m.ok(&steps), "001-planner\nlatest\n");
    m.ok(&format!("echo > {t}/step && cat {t}/wait > /dev/null"));
    assert_eq!(m.ok(&steps), "001-planner\n002-reviewer\nlatest\n");
    assert_eq!(
        m.ok(&format!("ls {t}/steps")),
        "001-planner\n002-reviewer\nlatest\n"
    );
    // A program that keeps a directory open and reads it again from the start (`rewinddir`),
    // with no `stat` in between, sees a step finish at once too.
    let polled = m.ok(&format!(
        "python3 - <<'EOF'\nimport ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         GETDENTS64 = {{'x86_64': 217, 'aarch64': 61}}[os.uname().machine]\n\
         fd = os.open('{t}/steps', os.O_RDONLY | os.O_DIRECTORY)\n\
         def names():\n    os.lseek(fd, 0, 0)\n    out = []\n    buf = ctypes.create_string_buffer(65536)\n\
         \x20   while True:\n        n = libc.syscall(GETDENTS64, fd, buf, 65536)\n        assert n >= 0\n\
         \x20       if n == 0:\n            return sorted(x for x in out if x not in ('.', '..'))\n\
         \x20       raw, pos = buf.raw, 0\n        while pos < n:\n\
         \x20           size = int.from_bytes(raw[pos + 16:pos + 18], 'little')\n\
         \x20           out.append(raw[pos + 19:pos + size].split(b'\\0')[0].decode())\n\
         \x20           pos += size\n\
         print(' '.join(names()))\n\
         w = os.open('{t}/step', os.O_WRONLY); os.write(w, b'go'); os.close(w)\n\
         open('{t}/wait').read()\n\
         print(' '.join(names()))\nEOF"
    ));
    assert_eq!(
        polled,
        "001-planner 002-reviewer latest\n001-planner 002-reviewer 003-planner latest\n"
    );

    // By the CLI, in other processes: visible within a second.
    let second = thread_of(&env.ok(&["thread", "start", "loop", "-p", "from the CLI"]));
    env.ok(&["thread", "step", &id]);
    put(&env, &LOOP.replace("goal: review", "goal: review closely"));
    put(
        &env,
        &definition("other", "new").replace(
            "required: [plan]",
            "required: [plan]\n      description: a schema of its own",
        ),
    );
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(m.ok("ls threads"), format!("{id}\n{second}\n"));
    assert_eq!(
        m.ok("ls workflows/loop/threads"),
        format!("{id}\n{second}\n")
    );
    assert_eq!(
        m.ok(&format!("ls {t}/steps")),
        "001-planner\n002-reviewer\n003-planner\n004-reviewer\nlatest\n"
    );
    assert_eq!(m.ok("ls workflows"), "error\nloop\nother\n");
    assert_eq!(count("ls workflows/loop/versions"), 4);
    assert!(count("ls cas") > nodes, "new nodes are listed in cas/");
    assert!(
        count("ls cas/schemas") > schemas,
        "the new schema is listed in cas/schemas/"
    );
    // The CLI's first thread of a workflow makes its `latest` appear.
    assert!(!m.ok("ls workflows/other").contains("latest"));
    let third = thread_of(&env.ok(&["thread", "start", "other", "-p", "first of its kind"]));
    std::thread::sleep(Duration::from_millis(1100));
    assert!(m.ok("ls workflows/other").contains("latest\n"));
    assert_eq!(m.ok("ls workflows/other/threads"), format!("{third}\n"));
}

#[test]
fn a_cold_read_of_an_immutable_file_finds_its_pages_already_filled() {
    if !common::has(
        "a_cold_read_of_an_immutable_file_finds_its_pages_already_filled",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "prefilled"]));
    env.ok(&["thread", "run", &id]);
    let (m, log) = Mounted::traced(&env, "prefill");
    let s = format!("threads/{id}/steps/003-planner");
    let files = ["output.yaml", "body.md", "detail.yaml", "diff"];
    let cold = m.ok(&format!(
        "cd {s} && cat {}",
        files.map(|f| f.to_owned()).join(" ")
    ));
    // The bytes pushed at the first open are the file's bytes, end to end: the same as
    // `uwf export` writes.
    let export = env.dir.path().join("export");
    env.ok(&["export", &id, export.to_str().unwrap()]);
    let expected: String = files
        .iter()
        .map(|f| std::fs::read_to_string(export.join(format!("{s}/{f}"))).unwrap())
        .collect();
    assert_eq!(cold, expected);
    assert!(cold.contains("plan: second"), "{cold}");
    assert!(cold.contains("Plan B."), "{cold}");
    let stores = served(&log, "STORE");
    assert_eq!(
        stores.len(),
        files.len(),
        "one store per first open: {stores:#?}"
    );
    assert!(stores.iter().all(|l| l.ends_with("Ok(())")), "{stores:#?}");
    assert_eq!(served(&log, "READ"), Vec::<String>::new(), "no READ at all");
    // Later opens push nothing: the kernel keeps the pages.
    assert_eq!(m.ok(&format!("cd {s} && cat {}", files.join(" "))), cold);
    assert_eq!(served(&log, "STORE").len(), files.len());
}

// ---------------------------------------------------------------- trust (issue 14)

/// Runs `script` in the mount with bash; returns (exit code, stdout+stderr, seconds taken).
fn timed(m: &Mounted, script: &str) -> (Option<i32>, String, f64) {
    let started = Instant::now();
    let out = m.sh(&format!("exec bash -c {}", shell_quote(script)));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text, started.elapsed().as_secs_f64())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A thread of `loop` whose first step's agent sleeps `secs` seconds, with that step started
/// through the mount; returns the thread id once `status` says it runs.
fn slow_step(env: &Env, m: &Mounted) -> String {
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "take your time"]));
    let t = format!("threads/{id}");
    m.ok(&format!("touch {t}/step"));
    // Until the agent is spawned, `status` names the step's own pid (the mount daemon's);
    // wait for the agent's, which the run record names once it runs.
    let run = env.root().join("runs").join(format!("{id}.run.json"));
    let start = Instant::now();
    // (The record has `"agentPid": null` from the start: wait for a number.)
    let agent_known = || {
        std::fs::read_to_string(&run)
            .ok()
            .and_then(|r| serde_json::from_str::<serde_json::Value>(&r).ok())
            .is_some_and(|v| v["agentPid"].is_u64())
    };
    while !agent_known() && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
    }
    eventually(m, &format!("cat {t}/status"), |s| s.contains("pid="));
    id
}

#[test]
fn walking_a_thread_while_a_step_runs_never_blocks_and_copies_faithfully() {
    if !common::has(
        "walking_a_thread_while_a_step_runs_never_blocks_and_copies_faithfully",
        &[Need::Fuse, Need::Tool("rsync")],
    ) {
        return;
    }
    let env = loop_env("sleep 8");
    let m = Mounted::start(&env, "trust-walk", &[]);
    let id = slow_step(&env, &m);
    let t = format!("threads/{id}");
    let out = env.dir.path().join("copies");
    std::fs::create_dir_all(&out).unwrap();
    let o = out.display();
    for (what, script) in [
        (
            "grep -r",
            format!("grep -r 'take your time' {t} > /dev/null"),
        ),
        ("cp -a", format!("cp -a {t} {o}/cp")),
        ("tar cf", format!("tar cf {o}/t.tar {t}")),
        ("rsync -a", format!("rsync -a {t}/ {o}/rsync/")),
        (
            "find -exec cat",
            format!("find {t} -type f -exec cat {{}} + > /dev/null"),
        ),
        (
            "diff -r",
            format!("diff -r --no-dereference {t} {o}/cp > /dev/null"),
        ),
    ] {
        let (code, text, secs) = timed(&m, &script);
        assert_eq!(code, Some(0), "{what}: {text}");
        assert!(secs < 1.0, "{what} took {secs:.1}s while a step runs");
    }
    // The tar holds what the files hold: no file padded with NULs, and the same bytes as cp.
    m.ok(&format!("mkdir {o}/untar && tar xf {o}/t.tar -C {o}/untar"));
    let padded = m.sh(&format!("grep -rlP '\\x00' {o}/untar"));
    assert!(padded.stdout.is_empty(), "NUL-padded: {padded:?}");
    m.ok(&format!(
        "diff -r --no-dereference {o}/untar/{t} {o}/cp && \
         diff -r --no-dereference {o}/cp {o}/rsync"
    ));
    // `wait` was never copied, but is there for whoever names it.
    assert!(!out.join("cp/wait").exists());
    m.ok(&format!("echo > {t}/kill"));
}

#[test]
fn a_blocked_wait_ends_with_eintr_on_a_caught_signal() {
    if !common::has(
        "a_blocked_wait_ends_with_eintr_on_a_caught_signal",
        &[Need::Fuse, Need::Tool("python3")],
    ) {
        return;
    }
    let env = loop_env("sleep 8");
    let m = Mounted::start(&env, "trust-eintr", &[]);
    let id = slow_step(&env, &m);
    let t = format!("threads/{id}");
    // (Not bash's `read -t 1 x < wait`: bash turns its timeout off when standard input is a
    // regular file — no timer, no select — so no signal ever comes; see the mount's README.)
    let (code, text, _) = timed(
        &m,
        &format!(
            "python3 - <<'EOF'\nimport signal, time\nclass Late(Exception): pass\n\
             def late(*_): raise Late()\nsignal.signal(signal.SIGALRM, late)\nf = open('{t}/wait')\n\
             start = time.monotonic(); signal.alarm(1)\n\
             try:\n    f.read(); print('read')\nexcept Late:\n    \
             print('alarm', round(time.monotonic() - start, 2))\nEOF"
        ),
    );
    assert_eq!(code, Some(0), "{text}");
    let secs: f64 = text
        .strip_prefix("alarm ")
        .expect(&text)
        .trim()
        .parse()
        .unwrap();
    assert!(secs <= 1.5, "python's alarm came after {secs:.1}s");
    // bash's own timeout works where its input is a pipe, the form the mount's README gives.
    let (code, text, secs) = timed(
        &m,
        &format!("read -t 1 x < <(cat {t}/wait 2>/dev/null); echo \"read=$?\""),
    );
    assert_eq!(code, Some(0), "{text}");
    let status: i32 = text
        .trim()
        .strip_prefix("read=")
        .expect(&text)
        .parse()
        .unwrap();
    assert!(
        status > 128,
        "read timed out with a status above 128: {text}"
    );
    assert!(secs <= 1.5, "bash's read -t 1 came back after {secs:.1}s");
    // A signal that kills ends it too (`timeout` sends TERM), and so does Ctrl-C.
    for signal in ["TERM", "INT"] {
        let (code, _, secs) = timed(&m, &format!("timeout -s {signal} 1 cat {t}/wait"));
        assert_eq!(code, Some(124), "{signal}");
        assert!(secs <= 1.5, "SIG{signal} ended cat after {secs:.1}s");
    }
    // The mount still serves, and a plain `cat wait` still waits for the step.
    assert!(m.ok(&format!("cat {t}/status")).starts_with("running"));
    m.ok(&format!("echo > {t}/kill"));
}

#[test]
fn kill_returns_once_the_thread_is_killed() {
    if !common::has("kill_returns_once_the_thread_is_killed", &[Need::Fuse]) {
        return;
    }
    let env = loop_env("sleep 8");
    let m = Mounted::start(&env, "trust-kill", &[]);
    let id = slow_step(&env, &m);
    let t = format!("threads/{id}");
    let running = m.ok(&format!("cat {t}/status"));
    let pid = running.trim().rsplit('=').next().unwrap().to_owned();
    // The agent's pid, not the step's own (the mount daemon's, named before the agent runs).
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("agent.sh"),
        "{running}: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    let (code, text, secs) = timed(&m, &format!("echo > {t}/kill"));
    assert_eq!(code, Some(0), "{text}");
    assert!(secs < 5.0, "kill took {secs:.1}s");
    // Right after `kill` returned: killed, the agent gone, no step can start.
    assert_eq!(m.ok(&format!("cat {t}/status")), "killed\n");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "agent {pid} alive"
    );
    let step = m.sh(&format!("touch {t}/step"));
    assert!(
        String::from_utf8_lossy(&step.stderr).contains("Invalid argument"),
        "{step:?}"
    );
    assert_eq!(
        common::json(&m.ok(&format!("cat {t}/wait")))["status"],
        "killed"
    );
    assert_eq!(env.ok(&["thread", "steps", &id]).lines().count(), 0);
    let events = m.ok(&format!("cat {t}/events"));
    assert!(
        events.lines().last().unwrap().contains("\"killed\""),
        "{events}"
    );

    // A `run` killed mid-step starts no further step, and the CLI's kill is as synchronous.
    let second = thread_of(&env.ok(&["thread", "start", "loop", "-p", "run then kill"]));
    let s = format!("threads/{second}");
    eventually(&m, "ls threads", |l| l.contains(&second));
    m.ok(&format!("echo > {s}/run"));
    eventually(&m, &format!("cat {s}/status"), |s| s.contains("pid="));
    env.ok(&["thread", "kill", &second]);
    assert_eq!(m.ok(&format!("cat {s}/status")), "killed\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(env.ok(&["thread", "steps", &second]).lines().count(), 0);
    let show = common::json(&env.ok(&["thread", "show", &second]));
    assert_eq!(show["status"], "killed", "{show}");
}

#[test]
fn refusals_fail_the_write_itself() {
    if !common::has("refusals_fail_the_write_itself", &[Need::Fuse]) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "refusals"]));
    let m = Mounted::start(&env, "trust-refuse", &[]);
    let t = format!("threads/{id}");
    // bash ignores what close returns: only a failed write is seen.
    for script in [
        "echo '' > workflows/loop/prompt".to_owned(),
        "echo '  ' > workflows/loop/prompt".to_owned(),
    ] {
        let (code, text, _) = timed(&m, &script);
        assert_ne!(code, Some(0), "{script}: {text}");
    }
    assert!(m.ok("cat workflows/error").contains("the prompt is empty"));
    assert_eq!(m.ok("ls threads").lines().count(), 1);
    // A step whose agent cannot start: refused where the writer sees it.
    std::fs::write(env.root().join("config.yaml"), "agents: [not, a, map\n").unwrap();
    for script in [format!("echo > {t}/step"), format!("echo > {t}/run")] {
        let (code, text, _) = timed(&m, &script);
        assert_ne!(code, Some(0), "{script}: {text}");
        assert!(text.contains("Invalid argument"), "{text}");
    }
    assert!(m.ok(&format!("cat {t}/error")).contains("config"));
}

/// A whole answer or workflow the engine refuses fails the `write` itself (which bash reports,
/// unlike a failed close), its reason in the `error` file; a plain YAML answer is taken.
#[test]
fn a_refused_answer_or_workflow_fails_the_write_and_plain_yaml_answers() {
    if !common::has(
        "a_refused_answer_or_workflow_fails_the_write_and_plain_yaml_answers",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    put(
        &env,
        "name: ask\nroles:\n  approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\n\
graph:\n  $START: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n",
    );
    std::fs::write(
        env.root().join("config.yaml"),
        "agentOverrides:\n  ask: { approver: human }\n",
    )
    .unwrap();
    let id = thread_of(&env.ok(&["thread", "start", "ask", "-p", "ship it?"]));
    env.ok(&["thread", "step", &id]);
    let m = Mounted::start(&env, "answer-write", &[]);
    let t = format!("threads/{id}");
    // bash reports the failed write (and ignores what close returns).
    let (code, text, _) = timed(
        &m,
        &format!("echo '{{\"approved\": \"yes\"}}' > {t}/answer"),
    );
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("Invalid argument"), "{text}");
    let error = m.ok(&format!("cat {t}/error"));
    assert!(
        error.contains("the field `approved` must be true or false, not \"yes\""),
        "{error}"
    );
    assert_eq!(
        m.ok(&format!("cat {t}/status")).trim(),
        "awaiting role=approver"
    );
    // Plain YAML, the way a person writes it.
    m.ok(&format!("echo 'approved: true' > {t}/answer"));
    let show: serde_json::Value = serde_json::from_str(&env.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "done", "{show}");

    // A workflow that is no workflow, refused at the write.
    let (code, text, _) = timed(&m, "printf 'bad' > workflows/x.yaml");
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("Invalid argument"), "{text}");
    let error = m.ok("cat workflows/error");
    assert!(
        error.contains("workflows/x.yaml: not registered"),
        "{error}"
    );
    // A whole one with a mistake in it, too.
    let (code, text, _) = timed(
        &m,
        "printf 'name: y\\nroles: {}\\ngraph:\\n  $START: [ { role: nobody, condition: null } ]\\n' > workflows/y.yaml",
    );
    assert_ne!(code, Some(0), "{text}");
    assert!(m.ok("cat workflows/error").contains("workflows/y.yaml"));
}

#[test]
fn status_size_agrees_with_its_content_once_wait_returned() {
    if !common::has(
        "status_size_agrees_with_its_content_once_wait_returned",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env("sleep 0.3");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "sizes"]));
    let m = Mounted::start(&env, "trust-size", &[]);
    let t = format!("threads/{id}");
    for _ in 0..3 {
        m.ok(&format!("touch {t}/step"));
        // The kernel learns the size of `running role=… pid=…` first.
        m.ok(&format!("stat -c %s {t}/status && cat {t}/status"));
        m.ok(&format!("cat {t}/wait"));
        let out = m.ok(&format!("stat -c %s {t}/status; cat {t}/status | wc -c"));
        let sizes: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(sizes[0], sizes[1], "stat and cat disagree: {out}");
    }
}

#[test]
fn lineage_and_the_change_feed_are_files() {
    if !common::has("lineage_and_the_change_feed_are_files", &[Need::Fuse]) {
        return;
    }
    let env = loop_env("");
    let id = thread_of(&env.ok(&["thread", "start", "loop", "-p", "lineage"]));
    let m = Mounted::start(&env, "trust-lineage", &[]);
    let t = format!("threads/{id}");
    // Never stepped: `wait` gives the state, at once.
    let state = common::json(&m.ok(&format!("cat {t}/wait")));
    assert_eq!(state["status"], "active");
    assert_eq!(state["next"], "planner");
    // The feed, followed by `tail -f` while steps run.
    let tail = Command::new("timeout")
        .args(["20", "tail", "-n", "+1", "-f"])
        .arg(m.path(&format!("{t}/events")))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    m.ok(&format!("touch {t}/step && cat {t}/wait > /dev/null"));
    m.ok(&format!("touch {t}/step && cat {t}/wait > /dev/null"));
    let feed = eventually(&m, &format!("cat {t}/events"), |e| e.lines().count() >= 4);
    let kinds: Vec<String> = feed
        .lines()
        .map(|l| common::json(l)["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["started", "finished", "started", "finished"]);
    std::thread::sleep(Duration::from_millis(1500));
    // `timeout` passes the TERM on to `tail`, which ends and closes its output.
    let _ = Command::new("kill")
        .args(["-TERM", &tail.id().to_string()])
        .status();
    let followed = tail.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&followed.stdout),
        feed,
        "tail -f saw it all"
    );
    // Forks link back to their step, and the source lists them.
    m.ok(&format!("echo > {t}/steps/002-reviewer/fork"));
    let fork = m.ok(&format!("ls {t}/forks")).trim().to_owned();
    assert_eq!(fork.len(), 26, "one fork: {fork}");
    assert_eq!(
        m.ok(&format!("readlink threads/{fork}/origin")),
        format!("../{id}/steps/002-reviewer\n")
    );
    assert_eq!(
        m.ok(&format!("cat threads/{fork}/origin/hash")),
        m.ok(&format!("cat {t}/steps/002-reviewer/hash"))
    );
    assert_eq!(
        m.ok(&format!("readlink {t}/forks/{fork}")),
        format!("../../{fork}\n")
    );
    assert!(m.sh(&format!("test -e {t}/origin")).status.code() != Some(0));
    // Versions in order, with `current`.
    let before = m.ok("cat workflows/loop/hash").trim().to_owned();
    put(&env, &LOOP.replace("goal: plan", "goal: plan well"));
    std::thread::sleep(Duration::from_millis(1100));
    let after = m.ok("cat workflows/loop/hash").trim().to_owned();
    assert_eq!(
        m.ok("ls workflows/loop/versions"),
        format!("001-{before}.yaml\n002-{after}.yaml\ncurrent\n")
    );
    assert_eq!(
        m.ok("readlink workflows/loop/versions/current"),
        format!("002-{after}.yaml\n")
    );
    // df: the numbers of the store's filesystem.
    let df = m.ok("df -P . | tail -1");
    let blocks: u64 = df.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(blocks > 0, "{df}");
    // The archived-thread hint names the file way.
    env.ok(&["thread", "kill", &id]);
    std::thread::sleep(Duration::from_millis(1100));
    let _ = m.sh(&format!("touch {t}/step"));
    let error = m.ok(&format!("cat {t}/error"));
    assert!(error.contains("/fork`"), "{error}");
    assert!(!error.contains("uwf thread fork"), "{error}");
}

#[test]
fn an_entry_the_kernel_cannot_hold_is_left_out_not_an_eio() {
    if !common::has(
        "an_entry_the_kernel_cannot_hold_is_left_out_not_an_eio",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = loop_env("");
    // A name no directory can hold, registered by hand.
    let long = "w".repeat(300);
    let registry = std::fs::read_to_string(env.root().join("registry.yaml")).unwrap();
    let entry = registry.replacen("loop:", &format!("{long}:"), 1);
    std::fs::write(
        env.root().join("registry.yaml"),
        format!("{registry}{}", &entry[entry.find(&long).unwrap()..]),
    )
    .unwrap();
    let (m, log) = Mounted::traced(&env, "trust-longname");
    assert_eq!(m.ok("ls workflows"), "error\nloop\n");
    m.ok("find . > /dev/null");
    let trace = std::fs::read_to_string(&log).unwrap();
    assert!(trace.contains("SKIP"), "logged under UWF_FS_TRACE");
}

#[test]
fn a_refused_sed_keeps_the_text_under_a_name_that_survives_and_rm_reverts() {
    if !common::has(
        "a_refused_sed_keeps_the_text_under_a_name_that_survives_and_rm_reverts",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    put(&env, &definition("demo", "v0"));
    let m = Mounted::start(&env, "trust-sed", &[]);
    let yaml = "workflows/demo/workflow.yaml";
    let registered = m.ok(&format!("cat {yaml}"));
    let out = m.sh(&format!("sed -i 's/^roles:/roles: [broken/' {yaml}"));
    assert!(!out.status.success(), "sed reports the refused rename");
    let error = m.ok("cat workflows/error");
    let kept = "workflows/demo/workflow.yaml.refused";
    assert!(error.contains(kept), "{error}");
    // sed deleted its temp file; the named one is there with the refused text.
    assert!(m.ok(&format!("cat {kept}")).contains("roles: [broken"));
    assert_eq!(m.ok(&format!("cat {yaml}")), registered);
    assert_eq!(history(&env, "demo"), 1);
    // Reverting by deleting the kept text clears the explanation.
    m.ok(&format!("rm {kept}"));
    assert_eq!(m.ok("cat workflows/error"), "");
    // The same for a refused in-place save: deleting the draft reverts and clears it.
    let _ = m.sh(&format!("echo 'not: [valid' >> {yaml}"));
    assert!(m.ok("cat workflows/error").contains(yaml));
    m.ok(&format!("rm {yaml}"));
    assert_eq!(m.ok("cat workflows/error"), "");
    assert_eq!(m.ok(&format!("cat {yaml}")), registered);
}

#[test]
fn comments_survive_a_remount_and_show_in_versions_and_the_cli() {
    if !common::has(
        "comments_survive_a_remount_and_show_in_versions_and_the_cli",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    let text = format!(
        "# The demo workflow, kept with its comments.\n{}# trailing note\n",
        definition("demo", "commented").replace("roles:", "roles: # one role")
    );
    let file = env.dir.path().join("demo.yaml");
    std::fs::write(&file, &text).unwrap();
    let m = Mounted::start(&env, "trust-comments", &[]);
    m.ok(&format!("cp {} workflows/", file.display()));
    assert_eq!(m.ok("cat workflows/demo/workflow.yaml"), text);
    drop(m);
    let m = Mounted::start(&env, "trust-comments", &[]);
    assert_eq!(
        m.ok("cat workflows/demo/workflow.yaml"),
        text,
        "after a remount"
    );
    assert_eq!(m.ok("cat workflows/demo/versions/current"), text);
    assert!(
        env.ok(&["workflow", "show", "demo"])
            .contains("# trailing note")
    );
    // The definition's hash ignores comments: the plain text is the same version.
    let hash = current_hash(&env, "demo");
    put(&env, &definition("demo", "commented"));
    assert_eq!(current_hash(&env, "demo"), hash);
    assert_eq!(history(&env, "demo"), 1);
}

/// A parent whose `approval` role a child `review` thread plays, whose `approver` is a person
/// (`docs/agents.md#workflows-as-agents-and-steps-a-person-answers`), all through the mount: the
/// child's `parent` link and `question`, a refused and an accepted `answer`, `wait`, and the parent
/// step's `child` link.
#[test]
fn a_child_awaiting_a_person_is_answered_through_the_mount() {
    if !common::has(
        "a_child_awaiting_a_person_is_answered_through_the_mount",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    put(
        &env,
        "name: wrap\nroles:\n  draft:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  \
approval:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\n\
graph:\n  $START: [ { role: draft, condition: null } ]\n  draft: [ { role: approval, condition: null } ]\n  \
approval: [ { role: $END, condition: null } ]\n",
    );
    put(
        &env,
        "name: review\nroles:\n  writer:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  \
approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\n\
graph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  \
approver: [ { role: $END, condition: null } ]\n",
    );
    let script = env.dir.path().join("script.yaml");
    std::fs::write(&script, "draft: [ { text: d } ]\nwriter: [ { text: w } ]\n").unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "defaultAgent: canned\nagents:\n  canned: {{ command: uwf, args: [agent, script, --file, '{}'] }}\n  \
review-flow: {{ command: uwf, args: [agent, workflow, --name, review] }}\n\
agentOverrides:\n  wrap: {{ approval: review-flow }}\n  review: {{ approver: human }}\n",
            script.display()
        ),
    )
    .unwrap();
    let parent = thread_of(&env.ok(&["thread", "start", "wrap", "-p", "ship it"]));
    let mut run = Command::new(UWF)
        .args(["thread", "run", &parent])
        .env("UWF_STORAGE_ROOT", env.root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let m = Mounted::start(&env, "human-answer", &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let child = loop {
        let show: serde_json::Value =
            serde_json::from_str(&env.ok(&["thread", "show", &parent])).unwrap();
        if let Some(c) = show["children"][0].as_str() {
            let s: serde_json::Value =
                serde_json::from_str(&env.ok(&["thread", "show", c])).unwrap();
            if s["status"] == "awaiting" {
                break c.to_owned();
            }
        }
        assert!(Instant::now() < deadline, "the child never asked");
        std::thread::sleep(Duration::from_millis(50));
    };
    let c = format!("threads/{child}");
    assert_eq!(
        m.ok(&format!("readlink {c}/parent")).trim(),
        format!("../{parent}")
    );
    assert_eq!(
        m.ok(&format!("cat {c}/status")).trim(),
        "awaiting role=approver"
    );
    let question = eventually(&m, &format!("cat {c}/question"), |q| q.contains("approved"));
    assert!(
        question.contains("## How to answer") && !question.contains("## Output format"),
        "{question}"
    );
    // A refused answer fails the close (EINVAL: bash does not look at what close returns, so
    // this asks python) and leaves the thread asking.
    let out = m.sh(&format!(
        "python3 -c \"f = open('{c}/answer', 'w'); f.write('{{\\\"approved\\\": \\\"yes\\\"}}'); f.close()\""
    ));
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{out:?}"
    );
    assert!(m.ok(&format!("cat {c}/error")).contains("boolean"));
    assert_eq!(
        m.ok(&format!("cat {c}/status")).trim(),
        "awaiting role=approver"
    );
    // An empty answer fails the write itself, which the shell reports.
    let out = m.sh(&format!("echo '' > {c}/answer"));
    assert!(!out.status.success(), "{out:?}");
    assert!(
        m.ok(&format!("cat {c}/error"))
            .contains("the answer is empty")
    );
    assert_eq!(
        m.ok(&format!("cat {c}/status")).trim(),
        "awaiting role=approver"
    );
    // A valid one publishes the step; `wait` shows it.
    m.ok(&format!("echo '{{\"approved\": true}}' > {c}/answer"));
    let wait = m.ok(&format!("cat {c}/wait"));
    assert!(wait.contains("\"role\":\"approver\""), "{wait}");
    // The answer moves the thread in its feed as an agent's step would.
    let events = m.ok(&format!("cat {c}/events"));
    let last: serde_json::Value =
        serde_json::from_str(events.lines().last().expect("an event")).unwrap();
    assert_eq!(last["event"], "finished", "{events}");
    assert_eq!(last["role"], "approver", "{events}");
    assert_eq!(last["step"], 2, "{events}");
    assert_eq!(last["done"], true, "{events}");
    // Once it asks nothing, an answer fails at the open, with `uwf thread answer`'s reason.
    let out = m.sh(&format!("echo garbage > {c}/answer"));
    assert!(!out.status.success(), "{out:?}");
    let error = m.ok(&format!("cat {c}/error"));
    assert!(error.contains("is archived (done)"), "{error}");
    let cli = env.fails_stdin(&["thread", "answer", &child, "-"], "garbage");
    let reason = cli.lines().next().unwrap().trim_start_matches("error: ");
    assert!(error.contains(reason), "{error} vs {cli}");
    assert!(run.wait().unwrap().success());
    let p = format!("threads/{parent}");
    let linked = eventually(
        &m,
        &format!("readlink {p}/steps/002-approval/child || true"),
        |l| !l.trim().is_empty(),
    );
    assert_eq!(linked.trim(), format!("../../../{child}"));
    assert!(!m.ok(&format!("ls {p}/steps/001-draft")).contains("child"));
    assert!(!m.ok(&format!("ls {p}")).contains("parent"));
    // readdir types the links as links: `find -type l` lists them, `-type f` does not.
    let links = m.ok(&format!("find {c} {p} -maxdepth 3 -type l | sort"));
    assert!(links.contains(&format!("{c}/parent\n")), "{links}");
    assert!(
        links.contains(&format!("{p}/steps/002-approval/child\n")),
        "{links}"
    );
    let files = m.ok(&format!("find {c} {p} -maxdepth 3 -type f"));
    assert!(
        !files.contains("/parent\n") && !files.contains("/child\n"),
        "{files}"
    );
}

/// The agent context through the mount: a thread started by writing a prompt runs its agents
/// in the mount's `--workdir` with the agents `config.yaml` named when it started (an edit
/// reaches threads started after it, not this one), and a paused thread refuses `touch step`
/// until it is resumed.
#[test]
fn the_mount_runs_agents_in_its_workdir_keeps_bindings_and_honours_pause() {
    if !common::has(
        "the_mount_runs_agents_in_its_workdir_keeps_bindings_and_honours_pause",
        &[Need::Fuse],
    ) {
        return;
    }
    // Where the agent notes its folder and tag: a folder of this test's, removed after it.
    let seen_dir = tempfile::tempdir().unwrap();
    let seen = seen_dir.path().join("seen");
    let env = loop_env(&format!("echo \"$(pwd) $TAG\" >> {}", seen.display()));
    let agent = env.dir.path().join("agent.sh");
    let config = |tag: &str| {
        std::fs::write(
            env.root().join("config.yaml"),
            format!(
                "agents:\n  scripted:\n    command: {}\n    env:\n      TAG: {tag}\ndefaultAgent: scripted\n",
                agent.display()
            ),
        )
        .unwrap();
    };
    config("first");
    let work = env.dir.path().join("project");
    std::fs::create_dir(&work).unwrap();
    let work = work.canonicalize().unwrap();
    let m = Mounted::start(&env, "ctx-mount", &["--workdir", work.to_str().unwrap()]);
    m.ok("echo 'one' > workflows/loop/prompt");
    let first = m.ok("ls threads").trim().to_owned();
    config("second");
    m.ok("echo 'two' > workflows/loop/prompt");
    let second = m
        .ok("ls threads")
        .lines()
        .find(|t| *t != first)
        .expect("a second thread")
        .to_owned();
    for id in [&first, &second] {
        m.ok(&format!(
            "touch threads/{id}/step && cat threads/{id}/wait > /dev/null"
        ));
    }
    let lines = std::fs::read_to_string(&seen).unwrap_or_default();
    let _ = std::fs::remove_file(&seen);
    assert_eq!(
        lines,
        format!("{0} first\n{0} second\n", work.display()),
        "the first thread keeps the agent it started with; both run in --workdir"
    );

    // Paused: `touch step` is refused and says why; resumed, it steps again.
    env.ok(&["thread", "pause", &first]);
    let status = m.ok(&format!("cat threads/{first}/status"));
    assert!(status.starts_with("paused"), "{status}");
    let out = m.sh(&format!("touch threads/{first}/step"));
    assert!(!out.status.success(), "a paused thread refuses a step");
    let error = m.ok(&format!("cat threads/{first}/error"));
    assert!(error.contains("is paused"), "{error}");
    assert_eq!(
        m.ok(&format!("ls threads/{first}/steps")),
        "001-planner\nlatest\n"
    );
    env.ok(&["thread", "resume", &first]);
    m.ok(&format!(
        "touch threads/{first}/step && cat threads/{first}/wait > /dev/null"
    ));
    assert_eq!(
        m.ok(&format!("ls threads/{first}/steps")),
        "001-planner\n002-reviewer\nlatest\n"
    );
}

/// Who did what through a real mount: a thread started, stepped, answered and killed through
/// its files names the person who mounted it (`uwf mount --by NAME`), in the thread's `log`
/// file and in `uwf thread show` (issue #41).
#[test]
fn what_is_done_through_the_mount_names_who_mounted_it() {
    if !common::has(
        "what_is_done_through_the_mount_names_who_mounted_it",
        &[Need::Fuse],
    ) {
        return;
    }
    let env = Env::new();
    put(
        &env,
        "name: ask\nroles:\n  approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\n\
graph:\n  $START: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n",
    );
    std::fs::write(
        env.root().join("config.yaml"),
        "agentOverrides:\n  ask: { approver: human }\n",
    )
    .unwrap();
    let m = Mounted::start(&env, "authors", &["--by", "Mia Wong"]);
    m.ok("echo 'Ship 2.0?' > workflows/ask/prompt");
    let id = m.ok("ls threads").trim().to_owned();
    assert_eq!(id.len(), 26, "one thread: {id}");
    let t = format!("threads/{id}");
    m.ok(&format!("touch {t}/step"));
    m.ok(&format!("cat {t}/wait > /dev/null"));
    m.ok(&format!("echo 'approved: true' > {t}/answer"));
    let show = common::json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(show["by"], "Mia Wong", "{show}");
    assert_eq!(show["lastAction"]["by"], "Mia Wong", "{show}");
    let log = eventually(&m, &format!("cat {t}/log"), |l| l.contains("answered by"));
    assert!(log.contains("by Mia Wong"), "{log}");
    assert!(log.contains("answered by Mia Wong"), "{log}");

    // A kill through the mount, by the same person.
    let other = thread_of(&env.ok(&["thread", "start", "ask", "-p", "Ship 2.1?", "--by", "cli"]));
    let o = format!("threads/{other}");
    eventually(&m, "ls threads", |l| l.contains(&other));
    m.ok(&format!("echo > {o}/kill"));
    let show = common::json(&env.ok(&["thread", "show", &other]));
    assert_eq!(show["status"], "killed", "{show}");
    assert_eq!(show["by"], "cli", "{show}");
    assert_eq!(show["lastAction"]["by"], "Mia Wong", "{show}");
    let log = m.ok(&format!("cat {o}/log"));
    assert!(log.contains("killed by Mia Wong"), "{log}");
}
