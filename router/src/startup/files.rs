//! What start-up and reload read from outside the configuration: the admin token,
//! the default certificate, the descriptor limit.

use std::path::PathBuf;

use super::StartError;
use crate::config::Config;

/// Says so when a secret's file can be read by its group or by anyone (it should be
/// 0600 or 0400, as the ticket key file).
pub(super) fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        let mode = m.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                mode = format!("{mode:04o}"),
                "admin.token_file can be read by other users: chmod 600 it"
            );
        }
    }
}

/// `admin.token_file`'s first line (an empty one is refused).
pub fn admin_token(config: &Config) -> Result<Option<String>, StartError> {
    let Some(path) = &config.admin.token_file else {
        return Ok(None);
    };
    let error = |source| StartError::AdminToken {
        path: path.clone(),
        source,
    };
    let t = config_file::first_line(path)
        .map_err(error)?
        .trim()
        .to_string();
    if t.is_empty() {
        return Err(error(std::io::Error::other("the first line is empty")));
    }
    warn_if_readable_by_others(path);
    Ok(Some(t))
}

/// Raises the file-descriptor limit and lowers `limits.max_connections` to what
/// fits in it (see [`crate::fds`]), saying so.
pub(super) fn fit_file_descriptors(config: &mut Config) {
    let limit = match crate::fds::raise_limit() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE; client connections not sized to it");
            return;
        }
    };
    let limits = &mut config.limits;
    let b = crate::fds::budget(limit, limits.max_connections, limits.max_admin_connections);
    if b.client_connections < limits.max_connections
        || b.admin_connections < limits.max_admin_connections
    {
        tracing::warn!(
            nofile = limit,
            reserve = b.reserve,
            max_connections = limits.max_connections,
            effective = b.client_connections,
            max_admin_connections = limits.max_admin_connections,
            effective_admin = b.admin_connections,
            "connection limits do not fit in the file-descriptor limit (each client may hold a member connection too); lowered"
        );
        limits.max_connections = b.client_connections;
        limits.max_admin_connections = b.admin_connections;
    } else {
        tracing::debug!(nofile = limit, "file-descriptor limit");
    }
}

/// `tls.default_cert` and `tls.default_key` (and the pass phrase file), loaded.
pub(super) fn load_default_cert(
    tls: &crate::config::TlsConfig,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Option<crate::tls::keys::Loaded>, StartError> {
    let (Some(cert), Some(key)) = (&tls.default_cert, &tls.default_key) else {
        return Ok(None);
    };
    let pass = match &tls.default_key_pass_file {
        Some(p) => {
            Some(
                config_file::first_line(p).map_err(|source| StartError::DefaultCertRead {
                    field: "tls.default_key_pass_file",
                    path: p.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let fields = ("tls.default_cert", "tls.default_key");
    load_cert(fields, (cert, key), pass.as_deref(), provider).map(Some)
}

/// The certificate the admin listener presents over TLS (it is bound off
/// loopback): `admin.tls_cert` and `admin.tls_key`, else the default
/// certificate; `None` on loopback, where it is plain HTTP.
fn load_admin_cert(
    config: &crate::config::Config,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Option<crate::tls::keys::Loaded>, StartError> {
    let Some(addr) = config.listen.admin.filter(|a| !a.ip().is_loopback()) else {
        return Ok(None);
    };
    match (&config.admin.tls_cert, &config.admin.tls_key) {
        (Some(cert), Some(key)) => {
            let fields = ("admin.tls_cert", "admin.tls_key");
            load_cert(fields, (cert, key), None, provider).map(Some)
        }
        (None, None) => match load_default_cert(&config.tls, provider)? {
            Some(l) => Ok(Some(l)),
            None => Err(StartError::AdminTls(addr)),
        },
        _ => Err(StartError::AdminTls(addr)),
    }
}

/// The admin listener's TLS: off loopback it is served over TLS only (see
/// [`load_admin_cert`]).
pub(super) fn admin_tls(
    config: &crate::config::Config,
    provider: &std::sync::Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<tokio_rustls::TlsAcceptor>, StartError> {
    Ok(load_admin_cert(config, provider)?
        .map(|l| crate::admin::tls_acceptor(l.key, provider.clone()))
        .transpose()?)
}

/// A certificate chain and its key from their files (`fields`: their keys in
/// the configuration, for the error).
fn load_cert(
    (cert_field, key_field): (&'static str, &'static str),
    (cert, key): (&PathBuf, &PathBuf),
    pass: Option<&str>,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<crate::tls::keys::Loaded, StartError> {
    let read = |field: &'static str, path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| StartError::DefaultCertRead {
            field,
            path: path.clone(),
            source,
        })
    };
    let cert_pem = read(cert_field, cert)?;
    let key_pem = read(key_field, key)?;
    crate::tls::keys::load(&cert_pem, &key_pem, pass, provider).map_err(|source| {
        let (field, path) = match source {
            crate::tls::keys::CertError::NoCertificate
            | crate::tls::keys::CertError::BadCertificate(_) => (cert_field, cert),
            _ => (key_field, key),
        };
        StartError::DefaultCert {
            field,
            path: path.clone(),
            source,
        }
    })
}
