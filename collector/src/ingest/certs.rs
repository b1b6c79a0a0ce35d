//! Development PKI: mints a CA, a collector certificate and agent certificates with rcgen, and
//! reads the identity (node, cluster) back out of a peer certificate.
//!
//! Identity convention: an agent certificate's subject common name (CN) is the node name; an
//! optional organisational unit (OU) is the cluster. Production PKIs (cert-manager, Vault) only
//! need to follow the same convention.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// Minting or reading certificates failed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen failed.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The certificate, key or directory that could not be written or read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A peer certificate could not be parsed or names no node.
    #[error("peer certificate: {0}")]
    Peer(String),
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A collector (TLS server).
    Collector,
    /// An agent (TLS client).
    Agent,
}

/// One certificate to mint.
#[derive(Debug, Clone)]
pub struct LeafSpec {
    /// Subject CN (node name for agents).
    pub common_name: String,
    /// Subject OU (cluster for agents), if any.
    pub cluster: Option<String>,
    /// DNS names / IP addresses (collectors).
    pub subject_alt_names: Vec<String>,
    /// Server or client.
    pub role: Role,
    /// Validity start.
    pub not_before: OffsetDateTime,
    /// Validity end.
    pub not_after: OffsetDateTime,
}

impl LeafSpec {
    /// A certificate valid from an hour ago for `days` days.
    pub fn new(common_name: &str, role: Role, days: i64) -> Self {
        let now = OffsetDateTime::now_utc();
        LeafSpec {
            common_name: common_name.to_owned(),
            cluster: None,
            subject_alt_names: Vec::new(),
            role,
            not_before: now - Duration::hours(1),
            not_after: now + Duration::days(days),
        }
    }
}

/// A CA able to sign leaf certificates.
#[derive(Debug)]
pub struct DevCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

/// A minted certificate and its key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct MintedCert {
    /// Certificate PEM.
    pub cert_pem: String,
    /// Private key PEM (PKCS#8).
    pub key_pem: String,
}

impl DevCa {
    /// A new self-signed CA valid for `days` days.
    pub fn new(name: &str, days: i64) -> Result<Self, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + Duration::days(days);
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(DevCa { cert_pem: cert.pem(), key_pem, issuer: Issuer::new(params, key) })
    }

    /// Loads a CA minted earlier (its certificate and key PEM).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(DevCa { issuer, cert_pem: cert_pem.to_owned(), key_pem: key_pem.to_owned() })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Signs a leaf certificate.
    pub fn mint(&self, spec: &LeafSpec) -> Result<MintedCert, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(spec.subject_alt_names.clone())?;
        params.distinguished_name.push(DnType::CommonName, spec.common_name.as_str());
        if let Some(cluster) = &spec.cluster {
            params.distinguished_name.push(DnType::OrganizationalUnitName, cluster.as_str());
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match spec.role {
            Role::Collector => ExtendedKeyUsagePurpose::ServerAuth,
            Role::Agent => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        params.not_before = spec.not_before;
        params.not_after = spec.not_after;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(MintedCert { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    let io = |source| CertError::Io { path: path.to_owned(), source };
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = opts.open(path).map_err(io)?;
    f.write_all(contents.as_bytes()).map_err(io)
}

/// Paths of a minted certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// Certificate PEM.
    pub cert: PathBuf,
    /// Key PEM.
    pub key: PathBuf,
}

/// Writes `name.pem` and `name.key` (0600) into `dir`.
pub fn write_minted(dir: &Path, name: &str, minted: &MintedCert) -> Result<CertFiles, CertError> {
    fs::create_dir_all(dir).map_err(|source| CertError::Io { path: dir.to_owned(), source })?;
    let files = CertFiles { cert: dir.join(format!("{name}.pem")), key: dir.join(format!("{name}.key")) };
    write_file(&files.cert, &minted.cert_pem, false)?;
    write_file(&files.key, &minted.key_pem, true)?;
    Ok(files)
}

/// The files of a development PKI.
#[derive(Debug, Clone)]
pub struct DevPki {
    /// `ca.pem`.
    pub ca: PathBuf,
    /// `collector.pem` / `collector.key`.
    pub collector: CertFiles,
    /// One entry per agent node: `agent-<node>.pem` / `.key`.
    pub agents: Vec<(String, CertFiles)>,
}

/// Mints (or extends) a development PKI in `dir`: reuses `ca.pem`/`ca.key` if present, writes a
/// collector certificate for `collector_names` (DNS names or IPs) and one agent certificate per
/// node (CN = node, OU = cluster).
pub fn mint_dev_pki(
    dir: &Path,
    collector_names: &[String],
    cluster: &str,
    nodes: &[String],
    days: i64,
) -> Result<DevPki, CertError> {
    let ca_cert = dir.join("ca.pem");
    let ca_key = dir.join("ca.key");
    let read =
        |p: &Path| fs::read_to_string(p).map_err(|source| CertError::Io { path: p.to_owned(), source });
    let ca = if ca_cert.exists() && ca_key.exists() {
        DevCa::load(&read(&ca_cert)?, &read(&ca_key)?)?
    } else {
        fs::create_dir_all(dir).map_err(|source| CertError::Io { path: dir.to_owned(), source })?;
        let ca = DevCa::new("oomlens dev CA", days.max(1))?;
        write_file(&ca_cert, &ca.cert_pem, false)?;
        write_file(&ca_key, &ca.key_pem, true)?;
        ca
    };
    let mut collector_spec = LeafSpec::new("oomlens-collector", Role::Collector, days);
    collector_spec.subject_alt_names = collector_names.to_vec();
    let collector = write_minted(dir, "collector", &ca.mint(&collector_spec)?)?;
    let mut agents = Vec::with_capacity(nodes.len());
    for node in nodes {
        let mut spec = LeafSpec::new(node, Role::Agent, days);
        spec.cluster = Some(cluster.to_owned());
        agents.push((node.clone(), write_minted(dir, &format!("agent-{node}"), &ca.mint(&spec)?)?));
    }
    Ok(DevPki { ca: ca_cert, collector, agents })
}

/// Identity carried by an agent certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    /// Node name: the certificate subject's CN.
    pub node: String,
    /// OU, if present.
    pub cluster: Option<String>,
}

/// Reads node (CN) and cluster (OU) from a DER certificate.
pub fn identity_from_der(der: &[u8]) -> Result<CertIdentity, CertError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| CertError::Peer(format!("unparseable: {e}")))?;
    let subject = cert.subject();
    let node = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .map(str::to_owned)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| CertError::Peer("subject has no common name (the node name)".to_owned()))?;
    let cluster = subject
        .iter_organizational_unit()
        .next()
        .and_then(|a| a.as_str().ok())
        .map(str::to_owned)
        .filter(|s| !s.is_empty());
    Ok(CertIdentity { node, cluster })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn minted_agent_cert_carries_node_and_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let pki =
            mint_dev_pki(dir.path(), &["localhost".into()], "prod-a", &["gpu-node-1".into()], 30).unwrap();
        let pem = fs::read(&pki.agents[0].1.cert).unwrap();
        let der = CertificateDer::from_pem_slice(&pem).unwrap();
        let id = identity_from_der(&der).unwrap();
        assert_eq!(id, CertIdentity { node: "gpu-node-1".into(), cluster: Some("prod-a".into()) });

        // A second run reuses the CA.
        let ca_before = fs::read(&pki.ca).unwrap();
        mint_dev_pki(dir.path(), &["localhost".into()], "prod-a", &["gpu-node-2".into()], 30).unwrap();
        assert_eq!(fs::read(&pki.ca).unwrap(), ca_before);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&pki.collector.key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn garbage_is_not_an_identity() {
        assert!(identity_from_der(b"not a certificate").is_err());
    }
}
