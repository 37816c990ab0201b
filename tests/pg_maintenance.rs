//! `uwf cas gc`, `cas fsck`, `export` and `doctor` over PostgreSQL, through the real binary with
//! `UWF_STORAGE_URL` naming a fresh database (issue #18).
//!
//! A second, empty storage root on the same database stands for another machine: what it sees
//! comes from the database, not from the first root's node cache.
//!
//! Without PostgreSQL binaries the tests print `SKIP …` and pass, unless
//! `UWF_REQUIRE_POSTGRES=1`.

mod common;
mod pg_server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::Env;
use uwf::cas::canonical::node_bytes;
use uwf::cas::{Hash, builtin};

/// A storage root on a database: `Env`'s sealed environment plus `UWF_STORAGE_URL`.
struct Machine<'a> {
    env: &'a Env,
    root: PathBuf,
    url: String,
}

impl Machine<'_> {
    fn run(&self, args: &[&str]) -> Output {
        self.env
            .uwf()
            .env("UWF_STORAGE_ROOT", &self.root)
            .env("UWF_STORAGE_URL", &self.url)
            .args(args)
            .output()
            .expect("run uwf")
    }

    fn ok(&self, args: &[&str]) -> String {
        common::success_stdout(args, &self.run(args))
    }

    /// Runs `uwf args…`, asserting exit `code` and no panic; returns stdout and stderr.
    fn fails(&self, args: &[&str], code: i32) -> (String, String) {
        let out = self.run(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert_eq!(
            out.status.code(),
            Some(code),
            "uwf {args:?}\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        (stdout, stderr)
    }

    fn has(&self, hash: &str) -> bool {
        match self.run(&["cas", "has", hash]).status.code() {
            Some(0) => true,
            Some(1) => false,
            other => panic!("cas has {hash}: exit {other:?}"),
        }
    }
}

/// A fresh database and a first machine on it (the root of `env`); `None` when skipping.
fn fresh<'a>(env: &'a Env, name: &str) -> Option<Machine<'a>> {
    let server = pg_server::shared(name)?;
    Some(Machine {
        env,
        root: env.root(),
        url: server.fresh_db(name),
    })
}

/// Another machine on the same database: a new, empty storage root.
fn other_machine<'a>(first: &Machine<'a>, name: &str) -> Machine<'a> {
    let root = first.env.dir.path().join(name);
    std::fs::create_dir(&root).expect("second root");
    Machine {
        env: first.env,
        root,
        url: first.url.clone(),
    }
}

/// Registers solve-issue and runs one thread to its end with the offline `dry` agent; returns
/// the thread id.
fn run_a_thread(m: &Machine) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    m.ok(&["workflow", "put", example.to_str().expect("utf-8")]);
    let started = common::json(&m.ok(&[
        "thread",
        "start",
        "solve-issue",
        "-p",
        "The login page times out",
    ]));
    let id = started["thread"].as_str().expect("thread id").to_owned();
    m.ok(&["thread", "run", &id]);
    id
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

#[test]
fn gc_deletes_unreferenced_rows_past_the_grace_and_keeps_what_is_reachable() {
    let name = "gc_deletes_unreferenced_rows";
    let env = Env::new();
    let Some(m) = fresh(&env, name) else {
        return;
    };
    let thread = run_a_thread(&m);
    let orphan = m.ok(&["cas", "put", "text", "\"nobody names me\""]);
    let before = lines(&m.ok(&["cas", "list"]));
    assert!(before.contains(&orphan));

    // Within the default grace (a day) nothing goes; a dry run names the orphan and keeps it.
    let kept = m.ok(&["cas", "gc"]);
    assert!(kept.contains("removed 0"), "{kept}");
    assert!(m.has(&orphan));
    let dry = m.ok(&["cas", "gc", "--grace", "0s", "--dry-run"]);
    assert!(dry.contains(&format!("would remove {orphan}")), "{dry}");
    assert!(dry.contains("would remove 1,"), "{dry}");
    assert!(m.has(&orphan));

    let swept = m.ok(&["cas", "gc", "--grace", "0s"]);
    assert!(swept.contains(&format!("removed {orphan}")), "{swept}");
    assert!(
        !m.root
            .join("cas/objects")
            .join(&orphan[..2])
            .join(format!("{}.json", &orphan[2..]))
            .exists(),
        "the orphan's cache file is left"
    );
    // Another machine asks the database, not a cache.
    let other = other_machine(&m, "other");
    assert!(!other.has(&orphan), "the row is still in the database");
    assert!(!m.has(&orphan));
    let after = lines(&other.ok(&["cas", "list"]));
    let expected: Vec<String> = before.into_iter().filter(|h| *h != orphan).collect();
    assert_eq!(after, expected, "gc removed more than the orphan");
    // Everything reachable reads back, from the database alone.
    other.ok(&["thread", "show", &thread]);
    let ok = other.ok(&["cas", "fsck"]);
    assert!(ok.starts_with("ok:"), "{ok}");
    // Nothing left to collect.
    let again = m.ok(&["cas", "gc", "--grace", "0s"]);
    assert!(again.contains("removed 0"), "{again}");
}

#[test]
fn fsck_re_hashes_rows_and_treats_the_node_cache_as_derived() {
    let name = "fsck_re_hashes_rows";
    let env = Env::new();
    let Some(m) = fresh(&env, name) else {
        return;
    };
    let thread = run_a_thread(&m);
    let ok = m.ok(&["cas", "fsck"]);
    assert!(ok.starts_with("ok:"), "{ok}");
    let reindexed = m.ok(&["cas", "reindex"]);
    assert!(reindexed.contains("node cache"), "{reindexed}");

    // A damaged cache file is derived data: reported, and replaced from its row when read.
    // A text node of the thread (not, say, the workflow's saved source).
    let text = builtin::hash_of("text").to_string();
    let texts = lines(&m.ok(&["cas", "list", "--type", &text]));
    let step = builtin::hash_of("step").to_string();
    let steps = lines(&m.ok(&["cas", "list", "--type", &step]));
    let reached = lines(&m.ok(&["cas", "walk", &steps[0]]));
    let victim = texts
        .iter()
        .find(|t| reached.contains(t))
        .expect("the run wrote text nodes")
        .clone();
    let cached = m
        .root
        .join("cas/objects")
        .join(&victim[..2])
        .join(format!("{}.json", &victim[2..]));
    assert!(cached.is_file(), "{}", cached.display());
    common::make_writable(&cached);
    std::fs::write(&cached, b"{\"payload\":\"garbage\"}").expect("damage the cache file");
    let (stdout, stderr) = m.fails(&["cas", "fsck"], 1);
    assert!(stdout.contains("derived cas/objects/"), "{stdout}");
    assert!(stderr.contains("--repair"), "{stderr}");
    // fsck's own walk read that node through the store, which replaced the file from its row
    // (a cache file is written without fsync, so a torn one heals on the next read): the next
    // fsck finds nothing to repair, and the file holds the node again.
    let repaired = m.ok(&["cas", "fsck", "--repair"]);
    assert!(repaired.starts_with("ok:"), "{repaired}");
    let healed = std::fs::read_to_string(&cached).expect("cache file");
    assert!(!healed.contains("garbage"), "{healed}");
    m.ok(&["cas", "get", &victim]);

    // A row changed by hand: reported as a hash mismatch and as a corrupt node of the thread,
    // although this machine's cache still holds the good copy.
    let tampered = node_bytes(
        builtin::hash_of("text"),
        &serde_json::json!("tampered by hand"),
    );
    let mut db = pg_server::PgServer::raw(&m.url);
    let changed = db
        .execute(
            "update nodes set bytes = $1 where hash = $2",
            &[&tampered, &victim],
        )
        .expect("tamper");
    assert_eq!(changed, 1);
    let (stdout, stderr) = m.fails(&["cas", "fsck"], 1);
    assert!(
        stdout.contains(&format!("{victim}: hash mismatch")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("corrupt text node {victim}"))
            && stdout.contains(&format!("reached from thread {thread}")),
        "{stdout}"
    );
    assert!(stderr.contains("changed in the database"), "{stderr}");
    // The same from a machine with no cache at all.
    let other = other_machine(&m, "other");
    let (stdout, _) = other.fails(&["cas", "fsck"], 1);
    assert!(
        stdout.contains(&format!("corrupt text node {victim}")),
        "{stdout}"
    );
    // --repair touches no row.
    m.fails(&["cas", "fsck", "--repair"], 1);
    let still: Vec<u8> = db
        .query_one("select bytes from nodes where hash = $1", &[&victim])
        .expect("row")
        .get(0);
    assert_eq!(still, tampered);
    assert_ne!(Hash::of_bytes(&still).to_string(), victim);
}

#[test]
fn doctor_names_the_database_and_never_the_password() {
    let name = "doctor_names_the_database";
    let env = Env::new();
    let Some(m) = fresh(&env, name) else {
        return;
    };
    let doctor = ["doctor", "--skip", "fuse", "--skip", "providers"];
    // Before any command: reachable, no tables yet (doctor creates none).
    let first = m.ok(&doctor);
    assert!(first.contains("no uwf tables yet"), "{first}");
    m.ok(&["cas", "list"]);
    let out = m.ok(&doctor);
    let line = out
        .lines()
        .find(|l| l.contains("storage:"))
        .expect("a storage line");
    assert!(line.starts_with("ok"), "{out}");
    assert!(line.contains("PostgreSQL postgres://uwf:***@"), "{line}");
    assert!(line.contains("server "), "{line}");
    assert!(
        line.contains(&format!("uwf schema {}", uwf::pg::SCHEMA_VERSION)),
        "{line}"
    );
    assert!(!out.contains(pg_server::PASSWORD), "{out}");

    // A server that is down: the target named, the password not.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let down = Machine {
        env: m.env,
        root: m.root.clone(),
        url: format!("postgres://uwf:{}@127.0.0.1:{port}/db", pg_server::PASSWORD),
    };
    let (stdout, stderr) = down.fails(&doctor, 1);
    let line = stdout
        .lines()
        .find(|l| l.contains("storage:"))
        .expect("a storage line");
    assert!(line.starts_with("FAIL"), "{stdout}");
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("connection refused"), "{line}");
    assert!(
        !stdout.contains(pg_server::PASSWORD) && !stderr.contains(pg_server::PASSWORD),
        "{stdout}{stderr}"
    );

    // The wrong password.
    let wrong = Machine {
        env: m.env,
        root: m.root.clone(),
        url: m.url.replace(pg_server::PASSWORD, "not-the-Password-42"),
    };
    let (stdout, _) = wrong.fails(&doctor, 1);
    assert!(stdout.contains("refused the password"), "{stdout}");
    assert!(!stdout.contains("not-the-Password-42"), "{stdout}");

    // A schema newer than this uwf.
    let mut db = pg_server::PgServer::raw(&m.url);
    db.execute("update uwf_meta set schema_version = 99", &[])
        .expect("bump the schema version");
    let (stdout, _) = m.fails(&doctor, 1);
    assert!(stdout.contains("version 99, newer"), "{stdout}");
}

/// Every file and link under `dir`, by relative path: a file's bytes, a link's target.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(dir)
                .expect("under dir")
                .to_string_lossy()
                .into_owned();
            let kind = entry.file_type().expect("file type");
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).expect("link");
                out.insert(rel, target.to_string_lossy().as_bytes().to_vec());
            } else if kind.is_dir() {
                stack.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).expect("file"));
            }
        }
    }
    out
}

#[test]
fn export_over_postgres_matches_export_of_a_directory_copy() {
    let name = "export_over_postgres";
    let env = Env::new();
    let Some(m) = fresh(&env, name) else {
        return;
    };
    let thread = run_a_thread(&m);
    let from_pg = m.env.dir.path().join("from-pg");
    m.ok(&["export", &thread, from_pg.to_str().expect("utf-8")]);

    let copy = m.env.dir.path().join("copy");
    m.ok(&["store", "copy", &m.url, copy.to_str().expect("utf-8")]);
    let from_dir = m.env.dir.path().join("from-dir");
    let out = m
        .env
        .uwf()
        .env("UWF_STORAGE_ROOT", &copy)
        .env_remove("UWF_STORAGE_URL")
        .args(["export", &thread, from_dir.to_str().expect("utf-8")])
        .output()
        .expect("run uwf");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `events` and `log` are this machine's run files (runs/<id>.*), which a store copy leaves
    // behind: the copy's export has them empty.
    let machine_local = |path: &String| path.ends_with("/events") || path.ends_with("/log");
    let (mut pg, mut dir) = (tree(&from_pg), tree(&from_dir));
    assert!(!pg[&format!("threads/{thread}/events")].is_empty());
    pg.retain(|p, _| !machine_local(p));
    dir.retain(|p, _| !machine_local(p));
    let steps = pg.keys().filter(|p| p.ends_with("output.yaml")).count();
    assert!(steps >= 2, "{:?}", pg.keys().collect::<Vec<_>>());
    assert_eq!(
        pg.keys().collect::<Vec<_>>(),
        dir.keys().collect::<Vec<_>>(),
        "the same files"
    );
    for (path, bytes) in &pg {
        assert_eq!(
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&dir[path]),
            "{path} differs"
        );
    }
}
