//! Real mounts: `uwf mount` serving a sealed storage root, driven by the tools people use (ls,
//! cat, find, vim, nano in tmux, emacs, sed, cp, mv, shell redirection, python), each under a hard
//! timeout. `.ci/run` installs the editors.
//!
//! Mount points live under Cargo's target tmp dir, not /tmp: vim and emacs make no backups under
//! /tmp, which would test a different save path. Every mount is owned by a [`Mounted`] guard
//! whose `Drop` always unmounts (plain → lazy → connection abort) and reaps the daemon, also when
//! a test panics, so a failing test never leaves a hung mount behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Env;
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
}

impl Mounted {
    fn start(env: &Env, test: &str, extra: &[&str]) -> Mounted {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fs-mount");
        std::fs::create_dir_all(&base).expect("mount base");
        clean_stale_mounts(&base.join(test));
        let dir = base.join(test);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mount dir");
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
        }
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
        assert!(
            out.status.success(),
            "`{script}` failed ({:?})\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
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
        format!("{hash}.yaml")
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
    let env = Env::new();
    put(&env, &definition("demo", "v0"));
    let m = Mounted::start(&env, "editors", &[]);
    let outside = env.dir.path();
    let yaml = "workflows/demo/workflow.yaml";
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
        "vim -Nu NONE -i NONE -es -c '%s/description: v0/description: vim/' -c wq {yaml}"
    ));
    expect_new("vim -N", &m);
    assert!(m.ok(&format!("cat {yaml}")).contains("description: vim"));
    // vim, compatible: backup by copy, then overwrite in place.
    m.ok(&format!(
        "vim -u NONE -i NONE -Es -c '%s/description: vim/description: vimcopy/' -c wq {yaml}"
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
    m.ok("rm -f workflows/demo/workflow.yaml~ workflows/from-outside.yaml");
    assert_eq!(
        m.ok("ls -A workflows/demo"),
        "graph.mmd\nhash\nprompt\nthreads\nversions\nworkflow.yaml\n"
    );
    assert_eq!(
        m.ok("ls workflows/demo/versions | wc -l").trim(),
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
    let env = Env::new();
    put(&env, &definition("demo", "v0"));
    let m = Mounted::start(&env, "nano-emacs", &[]);
    let yaml = "workflows/demo/workflow.yaml";
    // emacs: lock file (symlink refused, so a renamed regular file), backup by rename, O_TRUNC.
    m.ok(&format!(
        "emacs --batch -Q {yaml} --eval '(progn (goto-char (point-min)) \
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
    let vim = format!("vim -i NONE {yaml}");
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
        "a dead mount answers ENOTCONN"
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
