//! Starts `sluice gateway` as a user would: a config file, an apps directory of API
//! definitions and a store in a temporary directory, a real port.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};

pub const SECRET: &str = "test-gateway-secret";
pub const DEADLINE: Duration = Duration::from_secs(20);

pub use super::free_port;

pub struct Gw {
    /// Killed when the test ends.
    _child: Child,
    /// How it was started, so that it can be started again the same way.
    launch: Launch,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub port: u16,
    /// The control port: `/ready`, `/metrics` and the gateway API.
    pub control_port: u16,
    pub http: reqwest::Client,
    scheme: &'static str,
}

/// The command line and environment of a gateway process: its config file (which names
/// its ports), its environment and its open-file limit.
struct Launch {
    config: PathBuf,
    env: Vec<(String, String)>,
    descriptors: Option<u32>,
}

impl Launch {
    fn spawn(&self) -> Child {
        let sluice = env!("CARGO_BIN_EXE_sluice");
        let mut command = match self.descriptors {
            None => Command::new(sluice),
            // The shell lowers its limit, then becomes the gateway.
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(sluice);
                sh
            }
        };
        command
            .arg("gateway")
            .arg("--config")
            .arg(&self.config)
            // The tests' upstreams listen on loopback, which the streams of APIs from
            // the store may reach only when allowed; a test may set its own list.
            .env("SLUICE_GW_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sluice gateway")
    }
}

/// An API definition with key auth (header `X-Api-Key`) or none, for `upstream`.
pub fn api(id: &str, listen: &str, upstream: &str, extra: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info:
  title: {id}
  version: "1.0"
paths: {{}}
x-sluice-api-gateway:
  info:
    id: {id}
    name: {id}
    state:
      active: true
  upstream:
    url: {upstream}
  server:
    listenPath:
      value: {listen}
      strip: true
{extra}"#
    )
}

impl Gw {
    /// Starts a gateway whose apps directory holds `apis` (file name, text); `config`
    /// is added to the gateway config.
    pub async fn start(apis: &[(&str, String)], config: &str) -> Gw {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        Self::start_in(dir, Some(tmp), apis, config, &[]).await
    }

    /// Starts a gateway with no APIs, `env` added to its environment.
    pub async fn start_with_env(env: &[(&str, String)]) -> Gw {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        Self::start_in(dir, Some(tmp), &[], "", env).await
    }

    /// Starts a gateway with no APIs, `env` added to its environment, allowed at most
    /// `descriptors` open files (its soft limit, as `ulimit -n` sets it).
    pub async fn start_with_descriptors(descriptors: u32, env: &[(&str, String)]) -> Gw {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        Self::launch(dir, Some(tmp), &[], "", env, Some(descriptors)).await
    }

    /// Starts a gateway in `dir` (shared with another gateway: same apps and store).
    pub async fn start_in(
        dir: PathBuf,
        tmp: Option<tempfile::TempDir>,
        apis: &[(&str, String)],
        config: &str,
        env: &[(&str, String)],
    ) -> Gw {
        Self::launch(dir, tmp, apis, config, env, None).await
    }

    async fn launch(
        dir: PathBuf,
        tmp: Option<tempfile::TempDir>,
        apis: &[(&str, String)],
        config: &str,
        env: &[(&str, String)],
        descriptors: Option<u32>,
    ) -> Gw {
        let apps = dir.join("apis");
        std::fs::create_dir_all(&apps).expect("apps dir");
        for (name, text) in apis {
            std::fs::write(apps.join(name), text).expect("write api");
        }
        let (port, control_port) = (free_port(), free_port());
        let text = format!(
            "listen:\n  address: 127.0.0.1\n  port: {port}\ncontrol:\n  port: {control_port}\napps:\n  path: {apps}\n  poll_interval: 100ms\nstore:\n  url: sqlite://{store}\nsecret: {SECRET}\nlogger:\n  level: warn\n{config}\n",
            apps = apps.display(),
            store = dir.join("sluice.db").display(),
        );
        let path = dir.join(format!("gateway-{port}.yaml"));
        std::fs::write(&path, text).expect("write config");
        let launch = Launch {
            config: path,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            descriptors,
        };
        let child = launch.spawn();
        let tls = config.contains("tls:");
        let gw = Gw {
            _child: child,
            launch,
            dir,
            _tmp: tmp,
            port,
            control_port,
            // The TLS tests use a self-signed certificate.
            http: reqwest::Client::builder()
                .danger_accept_invalid_certs(tls)
                .build()
                .expect("client"),
            scheme: if tls { "https" } else { "http" },
        };
        gw.wait_up().await;
        gw
    }

    /// What the gateway writes on standard error (its log), from now on; once.
    pub fn stderr(&mut self) -> tokio::process::ChildStderr {
        self._child
            .stderr
            .take()
            .expect("standard error, taken once")
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self._child.id().expect("a running gateway")
    }

    /// Kills the process with SIGKILL: no shutdown, nothing flushed.
    pub async fn kill(mut self) {
        let _ = self._child.kill().await;
    }

    /// Stops the gateway as an operator does, with SIGTERM, and waits until the process
    /// has exited: how it exited.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "SIGTERM to the gateway");
        tokio::time::timeout(DEADLINE, self._child.wait())
            .await
            .unwrap_or_else(|_| panic!("the gateway did not exit within {DEADLINE:?} of SIGTERM"))
            .expect("wait for the gateway")
    }

    /// Starts the gateway again after it exited, with the same config (so on the same
    /// ports), environment and directory; returns once it is ready.
    pub async fn start_again(&mut self) {
        self._child = self.launch.spawn();
        self.wait_up().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://127.0.0.1:{}{path}", self.scheme, self.port)
    }

    /// A URL on the control port (plain HTTP even when the APIs' port speaks TLS).
    pub fn control_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.control_port)
    }

    /// What `/metrics` on the control port shows now.
    pub async fn metrics(&self) -> String {
        let resp = self.http.get(self.control_url("/metrics")).send().await;
        resp.expect("the control port answers")
            .text()
            .await
            .expect("metrics text")
    }

    async fn wait_up(&self) {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if let Ok(r) = self.http.get(self.control_url("/ready")).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the gateway did not come up within {DEADLINE:?}");
    }

    /// Writes (or rewrites) an API definition file.
    pub fn write_api(&self, name: &str, text: &str) {
        let apps = self.dir.join("apis");
        let tmp = apps.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write api");
        std::fs::rename(&tmp, apps.join(name)).expect("rename api");
    }

    pub fn admin(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.control_url(path))
            .header("x-sluice-authorization", SECRET)
    }

    /// `GET /sluice/apis`: the APIs served and the definitions that failed.
    pub async fn apis(&self) -> serde_json::Value {
        self.admin(reqwest::Method::GET, "/sluice/apis")
            .send()
            .await
            .expect("list APIs")
            .json()
            .await
            .expect("APIs JSON")
    }

    /// Makes a key through the gateway API; returns the whole answer.
    pub async fn create_key(&self, body: Value) -> Value {
        let resp = self
            .admin(reqwest::Method::POST, "/sluice/keys")
            .json(&body)
            .send()
            .await
            .expect("create key");
        let status = resp.status();
        let body: Value = resp.json().await.expect("key JSON");
        assert_eq!(status, 201, "create key: {body}");
        body
    }
}

/// Runs `sluice gateway` with a config expected to be refused; returns (code, stderr).
pub async fn refused(config: &str) -> (i32, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("gateway.yaml");
    std::fs::write(&path, config).expect("write config");
    // In its own directory: a config that gets as far as opening the default store
    // writes it there.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("gateway")
        .arg("--config")
        .arg(&path)
        .current_dir(tmp.path())
        .output();
    let out = tokio::time::timeout(DEADLINE, out)
        .await
        .expect("exits in time")
        .expect("run sluice");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
