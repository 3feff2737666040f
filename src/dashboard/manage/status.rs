//! A streaming API's health (`GET /api/apis/streams/{apiId}/status`): each stream's
//! state (starting, running, failing with its last error, stopped), its recoveries and
//! failures, and each input's and output's connection. The states are those of the
//! streams run in this process (`sluice serve`); a dashboard apart from its gateways
//! answers `running_here: false` and `unknown` states (each gateway's own
//! `/sluice/apis` and its `sluice_stream_state` metric say theirs).

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::apis::{find, ApiPath, Kind};
use crate::apidef::streaming::{self, STREAMING};
use crate::dashboard::error::ApiError;
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{NotFound, Unauthorized};
use crate::stream::health::{Health, StreamHealth};

/// The health of a streaming API's streams.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiStatus {
    pub api_id: String,
    /// Some stream of the API runs in this process, so the states are live.
    pub running_here: bool,
    pub streams: Vec<StreamStatus>,
}

/// One stream's health.
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamStatus {
    pub name: String,
    /// `starting`, `running`, `failing`, `stopped`; `per_client` for a stream run once
    /// per client (its instances come and go); `unknown` when it does not run here.
    pub state: String,
    /// Null unless the stream runs here.
    pub health: Option<StreamHealth>,
}

#[utoipa::path(
    get,
    path = "/api/apis/streams/{apiId}/status",
    tag = "apis",
    params(ApiPath),
    responses(
        (status = 200, description = "Each stream's state, last error, recoveries and connections.", body = ApiStatus),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn status(ctx: Ctx) -> Result<Reply, ApiError> {
    let (api, doc) = find(&ctx, Kind::Streams).await?;
    let health = Health::global();
    let defined = doc
        .get(STREAMING)
        .map(streaming::streams_of)
        .unwrap_or_default();
    let mut streams = Vec::with_capacity(defined.len());
    for (name, config) in defined {
        let found = health.get(&format!("{}.{name}", api.id));
        let state = match &found {
            Some(h) => h.state.as_str().to_owned(),
            None if streaming::per_client(config) => "per_client".into(),
            None => "unknown".into(),
        };
        streams.push(StreamStatus {
            name: name.to_owned(),
            state,
            health: found,
        });
    }
    Reply::json(
        StatusCode::OK,
        ApiStatus {
            api_id: api.id,
            running_here: streams.iter().any(|s| s.health.is_some()),
            streams,
        },
    )
}
