//! Fixtures for the TLS and authentication tests: a throwaway CA with server and client
//! certificates, private brokers on free loopback ports (their own process group, killed
//! when dropped), and `sluice run` round trips through them.
//!
//! A private broker listens only where the test says (TLS only, or with authentication
//! required), so a test passes only if sluice really spoke TLS or really authenticated.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// Every test crate that includes this file includes `brokers.rs` as `common` too.
use super::brokers::{port_open, unique};
use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// A CA, a server certificate for `localhost` and `127.0.0.1`, a client certificate, and
/// an unrelated CA (that signed nothing here), as PEM files in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

fn params(names: Vec<String>, cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(names).expect("certificate names");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.not_before = date_time_ymd(2020, 1, 1);
    p.not_after = date_time_ymd(2100, 1, 1);
    p
}

fn new_ca(cn: &str) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().expect("CA key");
    let mut p = params(Vec::new(), cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (p.self_signed(&key).expect("CA certificate"), key)
}

fn new_leaf(
    names: &[&str],
    cn: &str,
    usage: ExtendedKeyUsagePurpose,
    ca: &Certificate,
    ca_key: &KeyPair,
) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().expect("key");
    let mut p = params(names.iter().map(|n| n.to_string()).collect(), cn);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![usage];
    (p.signed_by(&key, ca, ca_key).expect("certificate"), key)
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ca, ca_key) = new_ca("sluice test CA");
        let (server, server_key) = new_leaf(
            &["localhost", "127.0.0.1"],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca,
            &ca_key,
        );
        let (client, client_key) = new_leaf(
            &["sluice-client"],
            "sluice-client",
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca,
            &ca_key,
        );
        let (other, _) = new_ca("unrelated CA");
        let files = [
            ("ca.pem", ca.pem()),
            ("server.pem", server.pem()),
            ("server.key", server_key.serialize_pem()),
            ("client.pem", client.pem()),
            ("client.key", client_key.serialize_pem()),
            ("other-ca.pem", other.pem()),
        ];
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write PEM");
        }
        Pki { dir }
    }

    /// The path of one of the files: `ca.pem`, `server.pem`, `server.key`, `client.pem`,
    /// `client.key`, `other-ca.pem`.
    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// A `tls` block trusting this CA, with the client certificate when `client`.
    pub fn tls_block(&self, client: bool) -> String {
        self.block_trusting("ca.pem", client)
    }

    /// Like [`Pki::tls_block`], trusting the CA that signed nothing here: the broker's
    /// certificate must be refused.
    pub fn untrusted_block(&self, client: bool) -> String {
        self.block_trusting("other-ca.pem", client)
    }

    fn block_trusting(&self, ca: &str, client: bool) -> String {
        let mut b = format!("{{enabled: true, root_cas_file: '{}'", self.path(ca));
        if client {
            b += &format!(
                ", client_cert_file: '{}', client_key_file: '{}'",
                self.path("client.pem"),
                self.path("client.key")
            );
        }
        b + "}"
    }

    /// A `tls` block with the client certificate and `skip_cert_verify`, no CA: the
    /// server's certificate is taken without checking who signed it.
    pub fn skip_verify_block(&self) -> String {
        format!(
            "{{enabled: true, skip_cert_verify: true, client_cert_file: '{}', client_key_file: '{}'}}",
            self.path("client.pem"),
            self.path("client.key")
        )
    }
}

/// Where a broker binary is installed: on PATH or in an sbin directory (Debian puts
/// mosquitto and nats-server there, which a non-root PATH may lack).
pub fn find_bin(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The binary a test cannot run without. A missing one fails the test (it does not pass
/// by skipping), with the command that installs it.
pub fn require_bin(name: &str, test: &str) -> PathBuf {
    find_bin(name).unwrap_or_else(|| {
        panic!(
            "{test} needs `{name}`, which is not installed: run scripts/brokers.sh \
             (it installs every broker binary the tests start)"
        )
    })
}

/// A broker process of the test's own, killed with its whole process group when
/// dropped (RabbitMQ's start script leaves the Erlang VM as a child).
pub struct Broker {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Broker {
    /// Starts `cmd` in a new process group, output to `log`, and waits up to `limit`
    /// for `port` to accept connections.
    pub fn start(mut cmd: Command, port: u16, log: &Path, limit: Duration) -> Broker {
        let out = std::fs::File::create(log).expect("broker log");
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .process_group(0);
        let child = cmd.spawn().expect("start broker");
        let mut broker = Broker {
            child,
            port,
            log: log.to_owned(),
        };
        let deadline = Instant::now() + limit;
        while !port_open(port) {
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!("broker exited ({status}):\n{}", broker.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "broker not listening on {port} after {limit:?}:\n{}",
                broker.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        broker
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // The group id is the child's pid (process_group(0)).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `sluice run` of a config, logs to a file; killed when dropped.
pub struct Run {
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Run {
    /// Runs `config`, in which `{dir}` is replaced by the run's own directory.
    pub fn start(config: &str) -> Run {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = config.replace("{dir}", &dir.path().display().to_string());
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).expect("write config");
        let log = std::fs::File::create(dir.path().join("sluice.log")).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn sluice");
        Run { child, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sluice.log")).unwrap_or_default()
    }

    pub fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(file))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Waits until `check` holds, failing with sluice's log when `limit` passes or when
    /// sluice exits.
    pub async fn wait(&mut self, what: &str, limit: Duration, mut check: impl FnMut(&Run) -> bool) {
        let deadline = Instant::now() + limit;
        while !check(self) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sluice exited ({status}) before {what}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; sluice's log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one sluice with two streams: `generate` (a unique payload every 50ms) into
/// `output`, and `input` into a file; both components are YAML flow mappings. Returns
/// once the payload came back through the broker a few times (the producer keeps
/// sending, so a subscription made after the first messages still sees some).
pub async fn round_trip(output: &str, input: &str) {
    let payload = unique("tls");
    let config = format!(
        "http: {{enabled: false}}\nlogger: {{level: warn}}\nstreams:\n  to_broker:\n    input: {{generate: {{payload: '{payload}', interval: 50ms}}}}\n    output: {output}\n  from_broker:\n    input: {input}\n    output: {{file: {{path: '{{dir}}/out.txt'}}}}\n"
    );
    let mut run = Run::start(&config);
    run.wait(
        "the payload to come back through the broker",
        Duration::from_secs(30),
        |r| r.lines("out.txt").len() >= 3,
    )
    .await;
    let lines = run.lines("out.txt");
    assert!(
        lines.iter().all(|l| *l == payload),
        "unexpected lines: {lines:?}"
    );
}

/// Runs `input` (a YAML flow mapping) alone and waits for it to fail to connect with
/// `reason` in sluice's log (which is shown if it does not).
pub async fn refused(input: &str, reason: &str) {
    refused_with(input, reason, None).await;
}

/// As [`refused`], adding `broker`'s own log to a failure.
pub async fn refused_by(broker: &Broker, input: &str, reason: &str) {
    refused_with(input, reason, Some(broker)).await;
}

async fn refused_with(input: &str, reason: &str, broker: Option<&Broker>) {
    let config = format!(
        "http: {{enabled: false}}\nlogger: {{level: warn}}\ninput: {input}\noutput: {{drop: {{}}}}\n"
    );
    let mut run = Run::start(&config);
    // The reason may be logged by the client library just after the failed connect.
    let what = format!("a connection refused with `{reason}`");
    let waited = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run.wait(
        &what,
        Duration::from_secs(60),
        |r| {
            let log = r.log();
            log.contains("Input failed to connect") && log.contains(reason)
        },
    )))
    .await;
    if let Err(panic) = waited {
        if let Some(broker) = broker {
            eprintln!("the broker's log:\n{}", broker.log_text());
        }
        std::panic::resume_unwind(panic);
    }
}
