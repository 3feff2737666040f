//! Helpers for tests that run `sluice` as a user would: a spawned binary, real sockets.
#![allow(dead_code)]

pub mod brokers;
pub mod cluster;
pub mod dashboard;
pub mod harness;
mod ports;
pub mod postgres;
pub mod receiver;
pub mod relay;
pub mod serve;
pub mod sink;
pub mod streams;
pub mod tls;
pub mod upstream;

pub use ports::free_port;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

#[allow(unused_imports)]
pub use sink::Sink;

pub const DEADLINE: Duration = Duration::from_secs(20);

/// A running `sluice run` with its config in a temporary directory.
pub struct Sluice {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
}

impl Sluice {
    /// Writes `config` (where `{port}` and `{dir}` are replaced) and starts `sluice run`.
    pub async fn start(config: &str) -> Sluice {
        Self::start_with(config, Stdio::null()).await
    }

    /// Starts `sluice run` as [`Sluice::start`] does, with `env` added to its environment.
    pub async fn start_env(config: &str, env: &[(&str, String)]) -> Sluice {
        Self::launch(config, Stdio::null(), env).await
    }

    pub async fn start_with(config: &str, stdin: Stdio) -> Sluice {
        Self::launch(config, stdin, &[]).await
    }

    async fn launch(config: &str, stdin: Stdio, env: &[(&str, String)]) -> Sluice {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let text = config
            .replace("{port}", &port.to_string())
            .replace("{dir}", &dir.path().display().to_string());
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).expect("write config");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(&path)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sluice");
        Sluice { child, dir, port }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits until `/ping` answers.
    pub async fn wait_up(&self) {
        let client = reqwest::Client::new();
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if client.get(self.url("/ping")).send().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("sluice did not come up within {DEADLINE:?}");
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().expect("running child");
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit; returns (exit code, stdout, stderr). The temporary
    /// directory stays until `self` is dropped, so outputs can still be read.
    pub async fn finish(&mut self) -> (i32, String, String) {
        use tokio::io::AsyncReadExt;
        let mut stdout = self.child.stdout.take().expect("stdout piped");
        let mut stderr = self.child.stderr.take().expect("stderr piped");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let run = async {
            let (_, _, status) = tokio::join!(
                stdout.read_to_end(&mut out),
                stderr.read_to_end(&mut err),
                self.child.wait()
            );
            status
        };
        let status = tokio::time::timeout(DEADLINE, run)
            .await
            .expect("sluice exits in time")
            .expect("wait for sluice");
        (
            status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        )
    }
}

/// Polls `check` until it is true or the deadline passes.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether `value` is a W3C `traceparent` of version 00 with ids that are not zero.
pub fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}
