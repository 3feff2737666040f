//! Helpers shared by the broker integration tests: unique names, running streams from
//! YAML, polling with deadlines, and stopping/restarting local brokers safely.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sluice::stream::{RunningStream, Stream, StreamEnv};

/// A name no other test run uses: `prefix-<random>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

/// Builds and starts the single stream of a YAML config.
pub fn start(yaml: &str) -> RunningStream {
    start_in(yaml, &StreamEnv::standalone())
}

pub fn start_in(yaml: &str, env: &StreamEnv) -> RunningStream {
    let root = sluice::stream::config::parse_str("test.yaml", yaml)
        .unwrap_or_else(|e| panic!("config does not parse: {e:?}\n{yaml}"));
    let (name, config) = root.streams.into_iter().next().expect("one stream");
    Stream::build(&name, &config, env)
        .unwrap_or_else(|e| panic!("stream does not build: {e}\n{yaml}"))
        .start()
}

/// Polls `check` until it returns true or `limit` passes.
pub async fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `lines` to a new file in `dir` and returns its path.
pub fn lines_file(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join(format!("{}.txt", unique("in")));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// The distinct lines of a file (empty when it does not exist yet).
pub fn read_lines(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `n` distinct payloads tagged with `tag`.
pub fn payloads(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i:06}")).collect()
}

pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// A local broker that a fault test stops; dropping the guard starts it again (and waits
/// for its port), whether the test passed or panicked, because other tests need it.
pub struct BrokerGuard {
    pub name: &'static str,
    pub port: u16,
    pub start: Vec<String>,
}

/// Tests of one broker share it: each takes this lock for reading, and a fault test
/// (which stops the broker) takes it for writing, so that it runs alone.
pub static BROKER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

impl BrokerGuard {
    pub fn new(name: &'static str, port: u16, start: &[&str]) -> BrokerGuard {
        BrokerGuard {
            name,
            port,
            start: start.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Stops the broker by killing the process that listens on its port.
    pub fn stop(&self) {
        self.stop_only();
    }

    /// Stops the broker; for guards whose restart is done elsewhere.
    pub fn stop_only(&self) {
        stop_listener(self.name, self.port);
    }

    /// Starts the broker again and waits for its port; fails when it does not come back,
    /// since every later test of this broker would fail for that reason instead.
    pub fn restart(&self) {
        if port_open(self.port) {
            return;
        }
        let command = self.start.join(" ");
        let started = match Command::new(&self.start[0]).args(&self.start[1..]).status() {
            Ok(status) if status.success() => String::new(),
            Ok(status) => format!("; `{command}` exited with {status}"),
            Err(e) => format!("; `{command}` could not run: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while !port_open(self.port) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        if !port_open(self.port) {
            let (name, port) = (self.name, self.port);
            let message =
                format!("{name} did not listen on {port} again after `{command}`{started}");
            // A second panic while a failed test unwinds would abort the whole run.
            if std::thread::panicking() {
                eprintln!("{message}");
            } else {
                panic!("{message}");
            }
        }
    }
}

/// Stops the processes listening on `port` (SIGTERM) and waits until they are gone, not
/// only their port: a broker closes its listener before it has finished exiting, and a
/// start command that looks for a running instance would still find the old one.
pub fn stop_listener(name: &str, port: u16) {
    let pids = listener_pids(port);
    for pid in &pids {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (port_open(port) || pids.iter().any(|&p| running(p))) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!port_open(port), "{name} did not stop");
    let left: Vec<u32> = pids.into_iter().filter(|&p| running(p)).collect();
    assert!(
        left.is_empty(),
        "{name} closed port {port} but its process did not exit: {left:?}"
    );
}

/// Whether process `pid` still runs; a zombie (exited, not yet reaped) does not.
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold spaces.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// The processes listening on a loopback TCP port, as `ss` reports them.
fn listener_pids(port: u16) -> Vec<u32> {
    let out = Command::new("ss")
        .args(["-ltnpH", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2) is needed to find a broker's process");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut pids: Vec<u32> = text
        .split("pid=")
        .skip(1)
        .filter_map(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        self.restart();
    }
}

/// A `sluice run` process, killed when dropped.
pub struct Sluice(pub std::process::Child);

impl Sluice {
    /// Runs an example from `pipelines/` with the given environment.
    pub fn run_example(file: &str, env: &[(&str, String)]) -> Sluice {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("pipelines")
            .join(file);
        assert!(path.exists(), "{} exists", path.display());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("run").arg(path);
        cmd.env("SLUICE_HTTP_ADDRESS", "127.0.0.1:0");
        cmd.env("SLUICE_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Sluice(cmd.spawn().expect("sluice runs"))
    }

    pub fn still_running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub use super::free_port;
