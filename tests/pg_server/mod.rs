//! A private PostgreSQL server for tests: `initdb` + `pg_ctl` in a temp directory, listening
//! only on a Unix socket inside it, run as the unprivileged `postgres` user when the tests run
//! as root (PostgreSQL refuses root).
//!
//! [`shared`] starts one server per test binary; every test gets its own database in it
//! ([`PgServer::fresh_db`]). Statics are never dropped, so a watchdog shell started with the
//! server stops it (`pg_ctl stop -m fast`) and removes the directory once the test process is
//! gone, also after a panic or abort. [`PgServer::private`] servers (for restart tests) stop in
//! `Drop` as well. [`PgServer::private_tcp`] and [`PgServer::private_tls`] also listen on
//! 127.0.0.1 on a free port (TLS needs TCP), the latter with `ssl=on` and only `hostssl` lines
//! for TCP in `pg_hba.conf`. Missing binaries skip with a reason, or fail under
//! `UWF_REQUIRE_POSTGRES=1` or `UWF_REQUIRE_ALL_TESTS=1`.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const USER: &str = "uwf";
pub const PASSWORD: &str = "tiger-s3cret-pw";
const PORT: u16 = 5432;

/// A running test server.
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    stopped: bool,
    /// Whether the server syncs its writes (benchmarks); tests run with `fsync=off`.
    durable: bool,
    /// The port of the Unix socket, and of 127.0.0.1 when `tcp`.
    port: u16,
    /// Whether the server also listens on 127.0.0.1.
    tcp: bool,
}

/// What a server listens on besides its Unix socket.
#[derive(Clone, Copy)]
enum Listen<'a> {
    SocketOnly,
    Tcp,
    /// TCP with TLS: the server's certificate and key (PEM files).
    Tls {
        cert: &'a Path,
        key: &'a Path,
    },
}

/// Whether a skip must fail instead.
fn required() -> bool {
    ["UWF_REQUIRE_POSTGRES", "UWF_REQUIRE_ALL_TESTS"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| x == "1"))
}

/// Prints `SKIP name: reason` and returns `None`, or panics when PostgreSQL is required.
pub fn skip<T>(name: &str, reason: &str) -> Option<T> {
    assert!(
        !required(),
        "{name}: PostgreSQL is required (UWF_REQUIRE_POSTGRES) but {reason}"
    );
    eprintln!("SKIP {name}: {reason}");
    None
}

/// The directory holding `initdb` and `pg_ctl`: PATH first, then Debian's versioned dirs.
fn find_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .collect();
    debian.sort();
    debian.reverse();
    on_path
        .chain(debian)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The server shared by the tests of this binary, started on first use.
pub fn shared(name: &str) -> Option<&'static PgServer> {
    static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
    match SERVER.get_or_init(PgServer::start_new) {
        Ok(server) => Some(server),
        Err(reason) => skip(name, reason),
    }
}

impl PgServer {
    /// A server of the caller's own, stopped when dropped.
    pub fn private(name: &str) -> Option<PgServer> {
        match PgServer::start_new() {
            Ok(server) => Some(server),
            Err(reason) => skip(name, &reason),
        }
    }

    /// A private server that syncs its commits as a production one does (for benchmarks
    /// compared with the directory store, which syncs every step).
    pub fn private_durable(name: &str) -> Option<PgServer> {
        match PgServer::start_with(true) {
            Ok(server) => Some(server),
            Err(reason) => skip(name, &reason),
        }
    }

    /// A private server that also listens on 127.0.0.1 ([`PgServer::port`]), without TLS.
    pub fn private_tcp(name: &str) -> Option<PgServer> {
        match PgServer::start_listening(false, Listen::Tcp) {
            Ok(server) => Some(server),
            Err(reason) => skip(name, &reason),
        }
    }

    /// A private server that also listens on 127.0.0.1 ([`PgServer::port`]) with TLS on, showing
    /// the certificate `cert` (PEM, its chain after it) for the key `key`. TCP clients must use
    /// TLS (`hostssl`); the Unix socket stays plain, so [`PgServer::admin`] works as ever.
    pub fn private_tls(name: &str, cert: &Path, key: &Path) -> Option<PgServer> {
        match PgServer::start_listening(false, Listen::Tls { cert, key }) {
            Ok(server) => Some(server),
            Err(reason) => skip(name, &reason),
        }
    }

    fn start_new() -> Result<PgServer, String> {
        PgServer::start_with(false)
    }

    fn start_with(durable: bool) -> Result<PgServer, String> {
        PgServer::start_listening(durable, Listen::SocketOnly)
    }

    fn start_listening(durable: bool, listen: Listen<'_>) -> Result<PgServer, String> {
        let bin =
            find_bin().ok_or("initdb/pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin")?;
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("uwf-pg-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("temp dir: {e}"))?
            .keep();
        if as_postgres {
            let user = nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .ok_or("running as root and there is no `postgres` user to run the server as")?;
            std::os::unix::fs::chown(&dir, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod: {e}"))?;
        let (port, tcp) = match listen {
            Listen::SocketOnly => (PORT, false),
            Listen::Tcp | Listen::Tls { .. } => (free_port()?, true),
        };
        let server = PgServer {
            dir,
            bin,
            as_postgres,
            stopped: true,
            durable,
            port,
            tcp,
        };
        let pwfile = server.dir.join("pw");
        server.run_as_server_user(
            "sh",
            &[
                "-c",
                &format!("umask 077; printf %s '{PASSWORD}' > {}", pwfile.display()),
            ],
        )?;
        let data = server.data();
        server.run_pg(
            "initdb",
            &[
                "-D",
                &data.to_string_lossy(),
                "-U",
                USER,
                &format!("--pwfile={}", pwfile.display()),
                "-A",
                "scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        if let Listen::Tls { cert, key } = listen {
            server.set_up_tls(cert, key)?;
        }
        let mut server = server;
        server.start()?;
        server.watchdog()?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Copies the certificate and key into the data directory (the key readable by the server's
    /// user only, as PostgreSQL demands), turns `ssl` on and makes every TCP line of
    /// `pg_hba.conf` a `hostssl` one.
    fn set_up_tls(&self, cert: &Path, key: &Path) -> Result<(), String> {
        let data = self.data();
        let owner = if self.as_postgres {
            nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
        } else {
            None
        };
        for (from, name) in [(cert, "server.crt"), (key, "server.key")] {
            let to = data.join(name);
            std::fs::copy(from, &to).map_err(|e| format!("copy {}: {e}", from.display()))?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("chmod {}: {e}", to.display()))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&to, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", to.display()))?;
            }
        }
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).map_err(|e| format!("{e}"))?;
        text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(&conf, text).map_err(|e| format!("{e}"))?;
        let hba = data.join("pg_hba.conf");
        let text = std::fs::read_to_string(&hba).map_err(|e| format!("{e}"))?;
        let text: String = text
            .lines()
            .map(|line| match line.strip_prefix("host ") {
                Some(rest) => format!("hostssl {rest}\n"),
                None => format!("{line}\n"),
            })
            .collect();
        std::fs::write(&hba, text).map_err(|e| format!("{e}"))
    }

    /// The port of the server (on 127.0.0.1 too for TCP servers).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for database `db` over TCP to `host` (which must reach 127.0.0.1), with the password
    /// in it and `params` (`sslmode=…&…`, or empty) after it.
    pub fn tcp_url(&self, host: &str, db: &str, params: &str) -> String {
        assert!(self.tcp, "this server listens on its Unix socket only");
        let query = if params.is_empty() {
            String::new()
        } else {
            format!("?{params}")
        };
        format!(
            "postgres://{USER}:{PASSWORD}@{host}:{port}/{db}{query}",
            port = self.port
        )
    }

    /// The server's processes: the postmaster and its children (backends, writers), for tests
    /// that freeze the whole server with SIGSTOP.
    pub fn pids(&self) -> Vec<u32> {
        let Ok(text) = std::fs::read_to_string(self.data().join("postmaster.pid")) else {
            return Vec::new();
        };
        let Some(main) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![main];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`: the fields after the last `)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(main)
                && let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>()
            {
                pids.push(pid);
            }
        }
        pids
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Starts (or restarts) the server; waits until it accepts connections.
    pub fn start(&mut self) -> Result<(), String> {
        let sync = if self.durable {
            ""
        } else {
            " -c fsync=off -c full_page_writes=off"
        };
        let listen = if self.tcp { "127.0.0.1" } else { "" };
        let options = format!(
            "-c listen_addresses='{listen}' -k {} -p {port}{sync} -c max_connections=200",
            self.dir.display(),
            port = self.port,
        );
        self.run_pg(
            "pg_ctl",
            &[
                "-D",
                &self.data().to_string_lossy(),
                "-l",
                &self.dir.join("log").to_string_lossy(),
                "-w",
                "-o",
                &options,
                "start",
            ],
        )?;
        self.stopped = false;
        Ok(())
    }

    /// Stops the server (`pg_ctl stop -m fast`).
    pub fn stop(&mut self) -> Result<(), String> {
        self.run_pg(
            "pg_ctl",
            &[
                "-D",
                &self.data().to_string_lossy(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        )?;
        self.stopped = true;
        Ok(())
    }

    /// A URL for database `db` with the password in it.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{USER}:{PASSWORD}@{}:{port}/{db}",
            encode(&self.dir),
            port = self.port
        )
    }

    /// A URL for database `db` without a password.
    pub fn url_without_password(&self, db: &str) -> String {
        format!(
            "postgres://{USER}@{}:{port}/{db}",
            encode(&self.dir),
            port = self.port
        )
    }

    /// Creates a new empty database and returns its URL.
    pub fn fresh_db(&self, name: &str) -> String {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let db = format!(
            "t_{}_{}",
            name.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut client = self.admin();
        client
            .batch_execute(&format!("create database \"{db}\""))
            .expect("create database");
        self.url(&db)
    }

    /// A superuser connection to the `postgres` database.
    pub fn admin(&self) -> postgres::Client {
        postgres::Client::connect(&self.url("postgres"), postgres::NoTls).expect("admin connect")
    }

    /// A superuser connection to the database of `url`.
    pub fn raw(url: &str) -> postgres::Client {
        postgres::Client::connect(url, postgres::NoTls).expect("raw connect")
    }

    /// Stops the server and removes its directory when this process is gone, however it ends.
    fn watchdog(&self) -> Result<(), String> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; {stop}; rm -rf '{dir}'",
            pid = std::process::id(),
            stop = self.shell_pg_ctl_stop(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("watchdog: {e}"))
    }

    fn shell_pg_ctl_stop(&self) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let cmd = format!(
            "{} -D '{}' -m fast -w stop",
            pg_ctl.display(),
            self.data().display()
        );
        if self.as_postgres {
            format!("runuser -u postgres -- {cmd}")
        } else {
            cmd
        }
    }

    fn run_pg(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let path = self.bin.join(tool);
        self.run_as_server_user(&path.to_string_lossy(), args)
    }

    /// Runs a command as the server's user, its output going to a file (a pipe would be held
    /// open by the daemonised postmaster).
    fn run_as_server_user(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", program]);
            c
        } else {
            Command::new(program)
        };
        let out_path = std::env::temp_dir().join(format!(
            "uwf-pg-cmd-{}-{}.out",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let out = std::fs::File::create(&out_path).map_err(|e| format!("{e}"))?;
        let err = out.try_clone().map_err(|e| format!("{e}"))?;
        let status = cmd
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(|e| format!("cannot run {program}: {e}"));
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        match status? {
            s if s.success() => Ok(()),
            s => Err(format!("{program} {args:?} failed ({s}): {text}")),
        }
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Drop for PgServer {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

fn encode(path: &Path) -> String {
    path.to_string_lossy().replace('/', "%2F")
}
