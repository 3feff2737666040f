//! A `sluice dashboard` process for black-box tests, and the helpers that read its
//! answers.
#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{free_port, DEADLINE};

/// A running dashboard process.
pub struct Db {
    child: Child,
    /// The admin key requests go with.
    key: &'static str,
    pub port: u16,
    pub http: reqwest::Client,
    /// What it printed on standard output (the first start's key).
    pub stdout: Vec<String>,
}

impl Db {
    /// Starts `sluice dashboard` in `dir` with `store` and extra config `extra`; its
    /// requests go with the admin key `key`.
    pub async fn start(dir: &Path, store: &str, extra: &str, key: &'static str) -> Db {
        Db::start_with(dir, store, extra, &[], key).await
    }

    pub async fn start_with(
        dir: &Path,
        store: &str,
        extra: &str,
        env: &[(&str, &str)],
        key: &'static str,
    ) -> Db {
        let port = free_port();
        let config = format!(
            "listen:\n  address: 127.0.0.1\n  port: {port}\nstore:\n  url: {store}\nlogger:\n  level: warn\n{extra}\n"
        );
        let path = dir.join(format!("dashboard-{port}.yaml"));
        std::fs::write(&path, config).expect("write config");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("dashboard")
            .arg("--config")
            .arg(&path)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        // The test's own environment must not reconfigure the dashboard.
        for (k, _) in std::env::vars() {
            if k.starts_with("SLUICE_DB_") {
                command.env_remove(k);
            }
        }
        // The tests' receivers and brokers listen on loopback, which posted streams may
        // reach only when allowed; a test may set its own list.
        command.env("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]");
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn sluice dashboard");
        let out = child.stdout.take().expect("stdout");
        // The first start prints the admin key before it listens; collect what comes.
        let lines = tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            let mut got = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                let done = line.starts_with("Admin key");
                got.push(line);
                if done {
                    break;
                }
            }
            got
        });
        assert!(
            wait_up(port).await,
            "the dashboard did not come up within {DEADLINE:?}"
        );
        // Standard output closes only when the process ends: what was printed before
        // the port opened is all there is, so stop waiting after a moment.
        let stdout = match tokio::time::timeout(Duration::from_millis(300), lines).await {
            Ok(Ok(lines)) => lines,
            _ => Vec::new(),
        };
        Db {
            child,
            key,
            port,
            http: reqwest::Client::new(),
            stdout,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// A request with the admin key as `Bearer`.
    pub fn req(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.as_key(self.key, method, path)
    }

    pub fn as_key(&self, key: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .header("Authorization", format!("Bearer {key}"))
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

pub async fn wait_up(port: u16) -> bool {
    let start = Instant::now();
    let http = reqwest::Client::new();
    while start.elapsed() < DEADLINE {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{port}/ping"))
            .send()
            .await
        {
            if r.status() == 200 {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Sends `req` and returns the status and JSON body (null when the body is not JSON).
pub async fn send(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Asserts the spec's error shape and status, and that the message holds `needle`.
pub fn assert_error(got: &(StatusCode, Value), status: u16, needle: &str) {
    assert_eq!(got.0.as_u16(), status, "{}", got.1);
    assert_eq!(got.1["Status"], "Error", "{}", got.1);
    let message = got.1["Message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}
