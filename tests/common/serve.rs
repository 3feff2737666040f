//! Starts `sluice serve` as a user would: the dashboard and the gateway of one process,
//! on their defaults in a directory of their own, with an instance administrator's key.
//! Test modules add the helpers of their own area with `impl Serve` blocks.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::{free_port, DEADLINE};

/// The instance administrator's key of every `Serve`.
pub const ADMIN_KEY: &str = "serve-admin-key-0123456789abcdef";

pub struct Serve {
    /// Killed when the test ends.
    _child: Child,
    _tmp: Option<tempfile::TempDir>,
    /// Where it runs: its store is `data/sluice.db` below.
    pub dir: PathBuf,
    /// The dashboard's port (`/api`).
    pub db: u16,
    /// The gateway's port.
    pub gw: u16,
    /// The gateway's control port (`/metrics`, `/sluice/`).
    pub control: u16,
    pub http: reqwest::Client,
}

impl Serve {
    /// `sluice serve` in a new temporary directory, with `env` added.
    pub async fn start(env: &[(&str, &str)]) -> Serve {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut serve = Serve::start_in(tmp.path(), env).await;
        serve._tmp = Some(tmp);
        serve
    }

    /// `sluice serve` in `dir` (which may hold the store of an earlier one), with `env`
    /// added. Returns once both servers answer.
    pub async fn start_in(dir: &Path, env: &[(&str, &str)]) -> Serve {
        Serve::start_in_with_args(dir, &[], env).await
    }

    /// [`Serve::start_in`] with `args` after `serve` (`--gateway-config gw.yaml`).
    pub async fn start_in_with_args(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let (db, gw, control) = (free_port(), free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("serve")
            .args(args)
            .current_dir(dir)
            .env("SLUICE_DB_ADMIN_KEY", ADMIN_KEY)
            .env("SLUICE_DB_LISTEN_PORT", db.to_string())
            .env("SLUICE_GW_LISTEN_PORT", gw.to_string())
            .env("SLUICE_GW_CONTROL_PORT", control.to_string())
            .env("SLUICE_GW_LOGGER_LEVEL", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("run sluice serve");
        let serve = Serve {
            _child: child,
            _tmp: None,
            dir: dir.to_owned(),
            db,
            gw,
            control,
            http: reqwest::Client::new(),
        };
        let started = Instant::now();
        while !(serve.up(db).await && serve.up(gw).await) {
            assert!(started.elapsed() < DEADLINE, "sluice serve did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        serve
    }

    /// The process's id, to read what it uses from `/proc`.
    pub fn pid(&self) -> u32 {
        self._child.id().expect("sluice serve is running")
    }

    /// Whether the server on `port` answers `/ping`.
    pub async fn up(&self, port: u16) -> bool {
        let ping = self
            .http
            .get(format!("http://127.0.0.1:{port}/ping"))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        matches!(ping, Ok(r) if r.status() == 200)
    }

    /// A request to the dashboard's API with `key`.
    pub fn api(&self, key: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("http://127.0.0.1:{}{path}", self.db))
            .bearer_auth(key)
    }

    /// A GET through the gateway.
    pub fn gateway(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(format!("http://127.0.0.1:{}{path}", self.gw))
    }

    /// The store it keeps under `data/`, opened beside it.
    pub async fn store(&self) -> sluice::store::Store {
        let file = self.dir.join("data/sluice.db");
        sluice::store::Store::open(&format!("sqlite://{}", file.display()))
            .await
            .expect("open the store of sluice serve")
    }
}
