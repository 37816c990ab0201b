//! The TLS half of connecting (`sslmode`, `sslrootcert`): which certificate check a mode asks
//! for, the trusted roots, the two verifiers libpq's weaker modes need (any certificate for
//! `require`/`prefer` without roots, the chain without the host name for `verify-ca`), and the
//! one-line wording of TLS failures.

use super::*;

pub(super) const HINT_ROOT_CERT: &str = "give the PEM file of the CA that signed the server's certificate as sslrootcert=FILE in the storage URL or as PGSSLROOTCERT";
pub(super) const HINT_HOST_NAME: &str = "use the host name the certificate was issued for in the storage URL, or sslmode=verify-ca to check only the CA";
pub(super) const HINT_SERVER_TLS: &str =
    "turn on ssl in the server's postgresql.conf, or use sslmode=prefer on a trusted network";
pub(super) const HINT_TLS_SETTINGS: &str =
    "check the server's certificate and the sslmode of the storage URL";

/// The rustls error under a client error, if the TLS handshake failed.
pub(super) fn rustls_error(error: &postgres::Error) -> Option<&rustls::Error> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(found) = cause.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        // tokio-rustls wraps the rustls error in an I/O error, whose `source` skips it.
        if let Some(found) = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(found);
        }
        source = cause.source();
    }
    None
}

/// The certificate check of `mode` given the root certificate setting (`sslrootcert`, else
/// `PGSSLROOTCERT`), as libpq does it.
pub(super) fn certificate_check(
    mode: SslModeArg,
    rootcert: Option<String>,
) -> Result<Check, String> {
    let roots = match rootcert {
        Some(r) if r == "system" && mode != SslModeArg::VerifyFull => {
            return Err(format!(
                "sslrootcert=system goes only with sslmode=verify-full, not {}",
                mode.name()
            ));
        }
        Some(r) if r == "system" => Some(Roots::Builtin),
        Some(r) => Some(Roots::File(PathBuf::from(r))),
        None => None,
    };
    Ok(match (mode, roots) {
        (SslModeArg::Disable, _) => Check::Plain,
        (SslModeArg::Prefer, _) | (SslModeArg::Require, None) => Check::Unverified,
        (SslModeArg::Require | SslModeArg::VerifyCa, roots) => {
            Check::Chain(roots.unwrap_or(Roots::Builtin))
        }
        (SslModeArg::VerifyFull, roots) => Check::Full(roots.unwrap_or(Roots::Builtin)),
    })
}

/// A subject name as rustls shows it (`DnsName("db.example")`, `IpAddress(10.0.0.1)`), plain.
pub(super) fn plain_name(shown: &str) -> &str {
    shown
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| {
            shown
                .strip_prefix("IpAddress(")
                .and_then(|rest| rest.strip_suffix(')'))
        })
        .unwrap_or(shown)
}

/// The trusted roots: every certificate of a PEM file, or Mozilla's.
pub(super) fn load_roots(roots: &Roots) -> Result<RootCertStore, String> {
    match roots {
        Roots::Builtin => Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        }),
        Roots::File(path) => load_pem_roots(path),
    }
}

pub(super) fn load_pem_roots(path: &Path) -> Result<RootCertStore, String> {
    let cannot =
        |e: &dyn fmt::Display| format!("cannot read the root certificate {}: {e}", path.display());
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| cannot(&e))? {
        let cert = cert.map_err(|e| cannot(&e))?;
        store.add(cert).map_err(|e| cannot(&e))?;
    }
    if store.is_empty() {
        return Err(cannot(&"it holds no PEM certificate"));
    }
    Ok(store)
}

/// Accepts any server certificate. Only for `sslmode=prefer`, and `require` without a root
/// certificate, where libpq checks none either: the connection is encrypted against passive
/// eavesdropping but not authenticated (an active man in the middle can pose as the server).
/// The handshake signatures are still checked, so the server holds the key of the certificate
/// it shows.
#[derive(Debug)]
pub(super) struct AnyCertificate(pub(super) Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the WebPKI check without its last step, the host name. rustls checks the chain
/// (signatures, validity dates, key usage) before the name, so a name error means the chain was
/// good.
#[derive(Debug)]
pub(super) struct ChainOnly(pub(super) Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `%XX` escapes of a URL parameter decoded (a path like `%2Fetc%2Fca.pem`).
pub(super) fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}
