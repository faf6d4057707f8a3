//! A real openssl CA (`openssl ca` with its index, so it can revoke, publish
//! CRLs and answer OCSP with `openssl ocsp`), as an operator's or a
//! partner's PKI is: client certificates for `tls.client_certificates`,
//! server certificates naming an OCSP responder for `tls.ocsp`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `openssl req`'s arguments for a new unencrypted EC P-256 key.
pub const NEW_EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

pub struct OpensslCa {
    pub dir: PathBuf,
}

impl OpensslCa {
    /// A CA called `name` (an EC P-256 key) in `dir/client-ca`, with an empty CRL.
    pub fn new(dir: &Path, name: &str) -> OpensslCa {
        let dir = dir.join("client-ca");
        std::fs::create_dir_all(dir.join("new")).expect("dir");
        std::fs::write(dir.join("index.txt"), "").expect("index");
        std::fs::write(dir.join("crlnumber"), "01\n").expect("crlnumber");
        let conf = format!(
            "[ca]\ndefault_ca = test\n[test]\ndir = {d}\ndatabase = {d}/index.txt\nnew_certs_dir = {d}/new\n\
             certificate = {d}/ca.crt\nprivate_key = {d}/ca.key\nserial = {d}/serial\ncrlnumber = {d}/crlnumber\n\
             default_md = sha256\ndefault_days = 2\ndefault_crl_days = 2\npolicy = any\nunique_subject = no\n\
             copy_extensions = copy\nx509_extensions = client\n[any]\ncommonName = supplied\n\
             [client]\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\nextendedKeyUsage = clientAuth\n",
            d = dir.display()
        );
        std::fs::write(dir.join("ca.cnf"), conf).expect("cnf");
        let ca = OpensslCa { dir };
        let subject = format!("/CN={name}");
        let mut args = vec!["req", "-x509"];
        args.extend(NEW_EC_KEY);
        args.extend([
            "-days", "2", "-subj", &subject, "-keyout", "ca.key", "-out", "ca.crt",
        ]);
        ca.run(&args);
        ca.crl();
        ca
    }

    pub fn run(&self, args: &[&str]) {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A key and signing request for `cn`: the files' stem.
    fn request(&self, cn: &str) -> String {
        let stem = cn.replace(['.', ' '], "_");
        let (subject, key, csr) = (
            format!("/CN={cn}"),
            format!("{stem}.key"),
            format!("{stem}.csr"),
        );
        let mut args = vec!["req"];
        args.extend(NEW_EC_KEY);
        args.extend(["-subj", &subject, "-keyout", &key, "-out", &csr]);
        self.run(&args);
        stem
    }

    /// A client certificate for `cn`: its files' stem.
    pub fn issue(&self, cn: &str) -> String {
        let stem = self.request(cn);
        self.sign(&stem, &[]);
        stem
    }

    /// A server certificate for the DNS name `cn` whose Authority Information
    /// Access names the OCSP responder `ocsp_url`: its files' stem; also
    /// `{stem}.chain` (leaf then CA), as a server serves it.
    pub fn issue_server(&self, cn: &str, ocsp_url: &str) -> String {
        let stem = self.request(cn);
        let ext = format!("{stem}.ext");
        std::fs::write(
            self.dir.join(&ext),
            format!(
                "[server]\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\n\
                 extendedKeyUsage = serverAuth\nsubjectAltName = DNS:{cn}\n\
                 authorityInfoAccess = OCSP;URI:{ocsp_url}\n"
            ),
        )
        .expect("ext");
        self.sign(&stem, &["-extfile", &ext, "-extensions", "server"]);
        let chain = [
            std::fs::read_to_string(self.dir.join(format!("{stem}.crt"))).expect("leaf"),
            std::fs::read_to_string(self.dir.join("ca.crt")).expect("ca"),
        ]
        .concat();
        std::fs::write(self.dir.join(format!("{stem}.chain")), chain).expect("chain");
        stem
    }

    fn sign(&self, stem: &str, extra: &[&str]) {
        let (csr, crt) = (format!("{stem}.csr"), format!("{stem}.crt"));
        let mut args = vec!["ca", "-batch", "-config", "ca.cnf", "-create_serial"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-in", &csr, "-out", &crt, "-notext"]);
        self.run(&args);
    }

    pub fn revoke(&self, stem: &str) {
        self.run(&["ca", "-config", "ca.cnf", "-revoke", &format!("{stem}.crt")]);
        self.crl();
    }

    /// Publishes the CRL (`ca.crl`), written whole then renamed into place.
    pub fn crl(&self) {
        self.run(&["ca", "-config", "ca.cnf", "-gencrl", "-out", "ca.crl.new"]);
        std::fs::rename(self.dir.join("ca.crl.new"), self.dir.join("ca.crl")).expect("crl");
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// `openssl ocsp` answering for this CA on `addr` (signed by the CA itself,
    /// answers valid a day), from the index as it is now; killed on drop.
    pub async fn responder(&self, addr: SocketAddr) -> Responder {
        let mut child = tokio::process::Command::new("openssl")
            .args(["ocsp", "-index", "index.txt", "-port"])
            .arg(addr.port().to_string())
            .args(["-rsigner", "ca.crt", "-rkey", "ca.key", "-CA", "ca.crt"])
            .args(["-ndays", "1", "-ignore_err"])
            .current_dir(&self.dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("openssl ocsp");
        // Ready when it says it accepts ("ACCEPT [::]:PORT PID=N"). Not by
        // connecting: `openssl ocsp` serves one connection at a time and one
        // that closes without a request wedges it.
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let ready = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("ACCEPT") {
                    return true;
                }
            }
            false
        });
        assert!(
            ready.await.unwrap_or(false),
            "openssl ocsp did not say ACCEPT on {addr} within 20 s"
        );
        // Keep reading what it prints, so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Responder { child }
    }
}

/// A running `openssl ocsp` responder.
pub struct Responder {
    pub child: tokio::process::Child,
}
