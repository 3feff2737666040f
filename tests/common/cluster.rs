//! A cluster for black-box tests: a dashboard and three `sluice gateway` processes on one
//! PostgreSQL store and one Redis, as `scripts/cluster.sh` starts them.
#![allow(dead_code)]

use reqwest::Method;
use serde_json::Value;

use super::dashboard::{send, Db};
use super::harness::Gw;

pub const ADMIN_KEY: &str = "cluster-admin-key-0123456789";
pub const STREAMS: &str = "application/vnd.sluice.streams.oas";
/// How often each node reads the store: a change must reach all of them soon after.
const POLL: &str = "200ms";
pub const NATS: &str = "nats://127.0.0.1:4222";
pub const REDIS: &str = "redis://127.0.0.1:6379";

/// A dashboard and three gateways with streaming on, on one store (and one Redis).
pub struct Cluster {
    pub db: Db,
    pub nodes: Vec<Gw>,
    /// Unique to the test: it names the test's topics, streams and groups.
    pub id: String,
    /// What every node is started with: its store, its Redis and config of its own.
    node_store: String,
    redis: String,
    node_config: String,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// The dashboard on `store`, the nodes on `node_store` (the same database, or the
    /// same through a relay).
    pub async fn start(store: &str, node_store: &str) -> Cluster {
        Self::start_with(store, node_store, REDIS, |_| String::new()).await
    }

    /// [`Cluster::start`] with the nodes on `redis` and `node_config(id)` added to every
    /// node's config.
    pub async fn start_with(
        store: &str,
        node_store: &str,
        redis: &str,
        node_config: impl Fn(&str) -> String,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), store, &config, ADMIN_KEY).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut cluster = Cluster {
            db,
            nodes: Vec::new(),
            node_config: node_config(&id),
            id,
            node_store: node_store.to_owned(),
            redis: redis.to_owned(),
            _dir: dir,
        };
        for n in 0..3 {
            let node = cluster.node(n).await;
            cluster.nodes.push(node);
        }
        cluster
    }

    /// Starts node `n` of the cluster (again, after it was killed: under the same name,
    /// so that its brokers' groups go on where it stopped).
    pub async fn node(&self, n: usize) -> Gw {
        let tmp = tempfile::tempdir().unwrap();
        let id = &self.id;
        let env = [
            ("SLUICE_GW_STORE_URL", self.node_store.clone()),
            ("SLUICE_GW_STREAMING_ENABLED", "true".to_owned()),
            ("SLUICE_GW_APPS_POLL_INTERVAL", POLL.to_owned()),
            ("SLUICE_GW_REDIS_URL", self.redis.clone()),
            ("SLUICE_GW_REDIS_PREFIX", format!("cluster-{id}:")),
            ("SLUICE_GW_CLUSTER_NODE_ID", format!("n{n}-{id}")),
        ];
        let dir = tmp.path().to_path_buf();
        Gw::start_in(dir, Some(tmp), &[], &self.node_config, &env).await
    }

    /// Sends a streaming API document to the dashboard (POST creates, PUT changes).
    pub async fn streams(&self, method: Method, path: &str, doc: String) -> (u16, Value) {
        let req = self
            .db
            .http
            .request(method, self.db.url(path))
            .header("Authorization", ADMIN_KEY)
            .header("content-type", STREAMS)
            .body(doc);
        let (status, body) = send(req).await;
        (status.as_u16(), body)
    }

    /// Posts a streaming API, which must be created.
    pub async fn post(&self, doc: String) {
        let made = self.streams(Method::POST, "/api/apis/streams", doc).await;
        assert_eq!(made.0, 201, "{}", made.1);
    }
}

/// A streaming API at `/{id}/` with one stream `main`: `stream` is its input, pipeline
/// and output, as YAML indented by six.
pub fn api(id: &str, stream: &str) -> String {
    format!(
        "openapi: 3.0.3\ninfo: {{title: {id}, version: '1'}}\npaths: {{}}\n\
         x-sluice-api-gateway:\n  info: {{id: {id}, name: {id}}}\n  \
         server: {{listenPath: {{value: /{id}/, strip: true}}}}\n\
         x-sluice-streaming:\n  streams:\n    main:\n{stream}"
    )
}
