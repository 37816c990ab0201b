//! TLS to PostgreSQL (`sslmode`, `sslrootcert`) against real servers: a private one
//! with TLS on, showing a certificate for `localhost` signed by a throwaway CA that the `openssl`
//! CLI makes here, and a private plain one, both on 127.0.0.1 (TLS needs TCP).
//!
//! The CA files live in memory and each test writes the ones it needs into its own temp
//! directory. Without PostgreSQL or `openssl` every test prints `SKIP …` and passes, unless
//! `UWF_REQUIRE_POSTGRES=1` (CI installs both).

mod pg_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::json;
use uwf::advice::Advice;
use uwf::cas::builtin;
use uwf::pg::{PgConfig, PgError, PgStore};

use pg_server::{PASSWORD, PgServer};

/// The PEM text of the CA that signed the TLS server's certificate, and of another CA.
struct Cas {
    ca: String,
    other_ca: String,
}

/// The TLS server (certificate for `localhost` only, not for 127.0.0.1) and its CAs.
fn tls_server(name: &str) -> Option<&'static (PgServer, Cas)> {
    static SERVER: OnceLock<Result<(PgServer, Cas), String>> = OnceLock::new();
    let started = SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let certs = make_certs(dir.path())?;
        // The server copies the certificate and key into its own directory.
        match PgServer::private_tls(name, &certs.server_cert, &certs.server_key) {
            Some(server) => Ok((server, certs.cas)),
            None => Err("no PostgreSQL server (see above)".to_owned()),
        }
    });
    match started {
        Ok(found) => Some(found),
        Err(reason) => pg_server::skip(name, reason),
    }
}

/// A server on 127.0.0.1 without TLS.
fn plain_server(name: &str) -> Option<&'static PgServer> {
    static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| PgServer::private_tcp(name))
        .as_ref()
        .or_else(|| pg_server::skip(name, "no PostgreSQL server (see above)"))
}

struct Certs {
    cas: Cas,
    server_cert: PathBuf,
    server_key: PathBuf,
}

/// A CA, a server certificate it signs for `localhost` (DNS name only), and a second CA, made
/// with the `openssl` CLI in `dir`.
fn make_certs(dir: &Path) -> Result<Certs, String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("the openssl CLI cannot run ({e}); Debian package `openssl`"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    for ca in ["ca", "other-ca"] {
        let (key, pem, subj) = (
            format!("{ca}.key"),
            format!("{ca}.pem"),
            format!("/CN=uwf test {ca}"),
        );
        let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &pem, "-subj", &subj]);
        args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        openssl(&args)?;
    }
    let mut args = vec!["req", "-new", "-nodes"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&args)?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ])?;
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).map_err(|e| e.to_string());
    Ok(Certs {
        cas: Cas {
            ca: read("ca.pem")?,
            other_ca: read("other-ca.pem")?,
        },
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
    })
}

/// `pem` written to `name` in `dir`; its path with `/` escaped for a URL.
fn write_pem(dir: &Path, name: &str, pem: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    std::fs::write(&path, pem).expect("write pem");
    let escaped = path.to_string_lossy().replace('/', "%2F");
    (path, escaped)
}

/// The environment without `PGSSLROOTCERT` or `PGPASSWORD` (the URLs carry the password).
fn no_env(_: &str) -> Option<String> {
    None
}

fn connect(url: &str) -> Result<postgres::Client, PgError> {
    connect_with_env(url, no_env)
}

fn connect_with_env(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<postgres::Client, PgError> {
    PgConfig::parse_with_env(url, env)
        .expect("url parses")
        .connect()
}

/// Whether the server sees this connection as TLS, and its protocol version.
fn server_view(client: &mut postgres::Client) -> (bool, Option<String>) {
    let row = client
        .query_one(
            "select ssl, version from pg_stat_ssl where pid = pg_backend_pid()",
            &[],
        )
        .expect("pg_stat_ssl");
    (row.get(0), row.get(1))
}

/// A connection error that must be one clear line naming the target and never the password.
fn check_error(result: Result<postgres::Client, PgError>, target: &str, expected: &str) -> PgError {
    let err = match result {
        Ok(_) => panic!("connected, expected an error with `{expected}`"),
        Err(err) => err,
    };
    let text = err.to_string();
    assert!(text.contains(expected), "{text}");
    assert!(text.contains(target), "{text}");
    assert!(!text.contains(PASSWORD), "the password leaked: {text}");
    assert!(!text.contains('\n'), "{text}");
    for hint in err.hints() {
        assert!(!hint.contains(PASSWORD), "{hint}");
    }
    err
}

#[test]
fn verify_full_with_the_ca_connects_over_tls_and_the_store_works() {
    let name = "verify_full_with_the_ca";
    let Some((server, cas)) = tls_server(name) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, ca) = write_pem(dir.path(), "ca.pem", &cas.ca);
    let url = server.tcp_url(
        "localhost",
        "postgres",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let mut client = connect(&url).expect("verify-full connects");
    let (ssl, version) = server_view(&mut client);
    assert!(ssl, "the server sees a plain connection");
    assert!(version.is_some_and(|v| v.starts_with("TLS")));

    // The whole store over that connection: schema, a node written and read back.
    server
        .admin()
        .batch_execute("create database tls_store")
        .expect("create database");
    let url = server.tcp_url(
        "localhost",
        "tls_store",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let store = PgStore::open(&PgConfig::parse(&url).expect("parses")).expect("store opens");
    let hash = store
        .put_node(builtin::hash_of("text"), &json!("over TLS"))
        .expect("put");
    assert!(store.has_node(hash).expect("has"));
    let mut admin = server.admin();
    let tls_sessions: i64 = admin
        .query_one(
            "select count(*) from pg_stat_ssl join pg_stat_activity using (pid) \
             where ssl and datname = 'tls_store'",
            &[],
        )
        .expect("count")
        .get(0);
    assert!(tls_sessions >= 1, "the store's connection is not TLS");
}

#[test]
fn verify_full_without_the_ca_fails_naming_the_unknown_issuer() {
    let name = "verify_full_without_the_ca";
    let Some((server, cas)) = tls_server(name) else {
        return;
    };
    let target = format!("localhost:{}", server.port());
    let url = server.tcp_url("localhost", "postgres", "sslmode=verify-full");
    let err = check_error(
        connect(&url),
        &target,
        "the server's certificate is not signed by a trusted CA",
    );
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("trusted roots: Mozilla's built-in ones"),
        "{err}"
    );
    assert!(err.hints().join(" ").contains("sslrootcert"), "{err:?}");

    // Another CA, from PGSSLROOTCERT this time, is no better.
    let dir = tempfile::tempdir().expect("temp dir");
    let (other, _) = write_pem(dir.path(), "other-ca.pem", &cas.other_ca);
    let env = |var: &str| (var == "PGSSLROOTCERT").then(|| other.to_string_lossy().into_owned());
    let text = check_error(
        connect_with_env(&url, env),
        &target,
        "not signed by a trusted CA",
    )
    .to_string();
    assert!(text.contains("trusted roots: /"), "{text}");
    assert!(text.contains("other-ca.pem)"), "{text}");
}

#[test]
fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let name = "verify_full_checks_the_host_name";
    let Some((server, cas)) = tls_server(name) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, ca) = write_pem(dir.path(), "ca.pem", &cas.ca);
    // The certificate names localhost only; 127.0.0.1 reaches the same server.
    let url = server.tcp_url(
        "127.0.0.1",
        "postgres",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let err = check_error(
        connect(&url),
        &format!("127.0.0.1:{}", server.port()),
        "the server's certificate is not valid for host `127.0.0.1`",
    );
    assert!(err.to_string().contains("(it names localhost)"), "{err}");
    assert!(err.hints().join(" ").contains("verify-ca"), "{err:?}");

    let url = server.tcp_url(
        "127.0.0.1",
        "postgres",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    );
    let mut client = connect(&url).expect("verify-ca connects");
    assert!(server_view(&mut client).0);
}

#[test]
fn require_encrypts_without_a_root_certificate_and_checks_the_chain_with_one() {
    let name = "require_encrypts";
    let Some((server, cas)) = tls_server(name) else {
        return;
    };
    for mode in ["require", "prefer"] {
        let url = server.tcp_url("127.0.0.1", "postgres", &format!("sslmode={mode}"));
        let mut client = connect(&url).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(server_view(&mut client).0, "{mode}: not TLS");
    }
    // The default (no sslmode) is prefer.
    let url = server.tcp_url("127.0.0.1", "postgres", "");
    assert!(server_view(&mut connect(&url).expect("default connects")).0);

    // As libpq: given a root certificate, require checks the chain (not the host name).
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, other) = write_pem(dir.path(), "other-ca.pem", &cas.other_ca);
    let url = server.tcp_url(
        "127.0.0.1",
        "postgres",
        &format!("sslmode=require&sslrootcert={other}"),
    );
    check_error(
        connect(&url),
        &format!("127.0.0.1:{}", server.port()),
        "not signed by a trusted CA",
    );
}

#[test]
fn require_against_a_server_without_tls_fails_and_prefer_falls_back() {
    let name = "require_against_a_plain_server";
    let Some(server) = plain_server(name) else {
        return;
    };
    let target = format!("127.0.0.1:{}", server.port());
    for mode in ["require", "verify-ca", "verify-full"] {
        let url = server.tcp_url("127.0.0.1", "postgres", &format!("sslmode={mode}"));
        let err = check_error(
            connect(&url),
            &target,
            &format!("the server does not offer TLS, and sslmode={mode} requires it"),
        );
        assert!(err.hints().join(" ").contains("ssl"), "{err:?}");
    }
    for params in ["sslmode=prefer", "", "sslmode=disable"] {
        let url = server.tcp_url("127.0.0.1", "postgres", params);
        let mut client = connect(&url).unwrap_or_else(|e| panic!("{params}: {e}"));
        assert!(!server_view(&mut client).0, "{params}: TLS?");
    }
}

#[test]
fn a_root_certificate_that_cannot_be_read_is_named() {
    let name = "a_root_certificate_that_cannot_be_read";
    let Some((server, _)) = tls_server(name) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, empty) = write_pem(dir.path(), "empty.pem", "not a certificate\n");
    let target = format!("localhost:{}", server.port());
    for (rootcert, expected) in [
        (
            "%2Fno%2Fsuch%2Fca.pem",
            "cannot read the root certificate /no/such/ca.pem",
        ),
        (empty.as_str(), "empty.pem: it holds no PEM certificate"),
    ] {
        let url = server.tcp_url(
            "localhost",
            "postgres",
            &format!("sslmode=verify-full&sslrootcert={rootcert}"),
        );
        check_error(connect(&url), &target, expected);
    }
}

#[test]
fn the_cli_names_a_tls_failure_in_one_line_with_a_hint() {
    let name = "the_cli_names_a_tls_failure";
    let Some((server, _)) = tls_server(name) else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let url = server.tcp_url("localhost", "postgres", "sslmode=verify-full");
    let out = Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(["thread", "list"])
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env_remove("PGSSLROOTCERT")
        .env("UWF_STORAGE_ROOT", root.path())
        .env("HOME", root.path())
        .env("UWF_STORAGE_URL", &url)
        .stdin(Stdio::null())
        .output()
        .expect("run uwf");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: cannot connect to PostgreSQL at localhost:")
            && first.contains("over TLS: the server's certificate is not signed by a trusted CA"),
        "{err}"
    );
    assert!(err.contains("sslrootcert"), "{err}");
    assert!(!err.contains(PASSWORD), "the password leaked: {err}");
}
