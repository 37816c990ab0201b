//! Integrity under damage, crashes and hostile input (issue #13): a full disk leaves whole run
//! files and says "write"; fsck sees every damaged node; a step refuses to build on damage;
//! killed steps leave no processes and no temp files behind; bounded inputs and logs.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, json, start_thread};

const LOOP: &str = r#"
name: counter
roles:
  tick: { meta: { type: object, properties: { n: { type: integer } }, required: [n] } }
conditions:
  more: { expression: "$count(steps) < 50" }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]
"#;

/// A small tmpfs mounted at `path` for the life of the guard (this machine's tests run as root).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "cannot mount a tmpfs at {}",
            path.display()
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }

    /// Fills the filesystem: writes until the disk is full. Returns the filler's path.
    fn fill(&self) -> PathBuf {
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![b'x'; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
                    break;
                }
            }
        }
        // Fill the last partial page too.
        while file.write(b"x").is_ok_and(|n| n > 0) {}
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// The thread's run files (`runs/<id>.*` but the lock and the log) and their contents.
fn run_files(env: &Env, id: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(env.root().join("runs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let kept = ["run.json", "last.json", "error"]
            .iter()
            .any(|suffix| name == format!("{id}.{suffix}"));
        if kept {
            let text = std::fs::read_to_string(env.root().join("runs").join(&name)).unwrap();
            out.push((name, text));
        }
    }
    out.sort();
    out
}

/// Item 5: on a full disk, run and error files are never left empty or torn, and a failed
/// index write says "write" (once), not "cannot read".
#[test]
fn a_full_disk_leaves_whole_run_files_and_says_write() {
    let env = Env::new();
    let disk = Tmpfs::mount(&env.root(), "2m");
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    let id = start_thread(&env, "counter", "p");
    let head = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]))["head"]
        .as_str()
        .unwrap()
        .to_owned();
    let filler = disk.fill();

    // A step cannot write its nodes: it fails, and its run files stay whole.
    let err = env.fails(&["thread", "step", &id, "--agent", "dry"], 1);
    assert!(!err.contains("cannot read"), "{err}");
    let files = run_files(&env, &id);
    assert!(!files.is_empty());
    for (name, text) in &files {
        assert!(!text.is_empty(), "{name} was left empty on a full disk");
        assert!(
            text.ends_with('\n') || text.starts_with('{'),
            "{name}: {text:?}"
        );
    }

    // An index write (a fork writes no node, only threads.yaml) says what failed, once.
    let err = env.fails(&["thread", "fork", &head], 1);
    assert!(err.contains("cannot write temp file for"), "{err}");
    assert!(err.contains("threads.yaml"), "{err}");
    assert!(!err.contains("cannot read"), "{err}");
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "the cause is said once: {err}"
    );

    // Space freed: the thread steps again and records the outcome.
    std::fs::remove_file(filler).unwrap();
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    let last: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.root().join("runs").join(format!("{id}.last.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(last["thread"], id.as_str());
    drop(disk);
}
