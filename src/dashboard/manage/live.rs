//! A streaming API's live view: each stream's graph (inputs, processors, outputs) with
//! the counters of every node, and the clients connected to its HTTP routes. The
//! numbers are the process's own metrics, so they are there when the streams run in
//! this process (`sluice serve`); a dashboard apart from its gateways shows the graph
//! from the definition, with `running_here: false`.

use std::collections::BTreeMap;

use http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::apis::{find, ApiPath, Kind};
use crate::apidef::streaming::{self, STREAMING};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{BadQuery, NotFound, Unauthorized};
use crate::metrics as m;

/// The live view of a streaming API.
#[derive(Debug, Serialize, ToSchema)]
pub struct LiveApi {
    pub api_id: String,
    /// The streams run in this process, so the counters are live.
    pub running_here: bool,
    pub streams: Vec<LiveStream>,
    /// The stream connections (SSE, WebSocket, long poll) open on the API in this
    /// process, by the key that let each in, most first.
    pub keys: Vec<LiveKey>,
    /// When the counters were read, in unix milliseconds.
    pub at: i64,
}

#[derive(Debug, Serialize, ToSchema, PartialEq)]
pub struct LiveKey {
    /// The gateway key's id; null for connections let in without a key.
    pub key_id: Option<String>,
    pub connections: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LiveStream {
    pub name: String,
    /// In the order messages pass: inputs, processors, outputs.
    pub nodes: Vec<LiveNode>,
    /// Clients connected to the stream's HTTP routes (SSE, WebSocket, HTTP).
    pub clients: Vec<LiveRoute>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct LiveNode {
    /// The component's label, or its path in the stream (`pipeline.processors[0].mapping`).
    pub component: String,
    /// `input`, `processor` or `output`.
    pub kind: String,
    /// The component's type (`kafka`, `mapping`, ...).
    #[serde(rename = "type")]
    pub type_name: String,
    /// Messages received, passed on (or delivered), and failures, since the stream started.
    pub received: f64,
    pub sent: f64,
    pub errors: f64,
    /// For an input of a broker that says: messages its consumer is behind, all
    /// partitions together. Null otherwise.
    pub lag: Option<f64>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct LiveRoute {
    pub route: String,
    pub transport: String,
    pub connections: f64,
}

#[utoipa::path(
    get,
    path = "/api/apis/streams/{apiId}/live",
    tag = "apis",
    params(ApiPath),
    responses(
        (status = 200, description = "Each stream's graph and counters.", body = LiveApi),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn live(ctx: Ctx) -> Result<Reply, ApiError> {
    let (api, doc) = find(&ctx, Kind::Streams).await?;
    let text = m::installed().map(|h| h.render()).unwrap_or_default();
    let series = parse(&text);
    let mut running_here = false;
    let mut streams = Vec::new();
    let defined = doc
        .get(STREAMING)
        .map(streaming::streams_of)
        .unwrap_or_default();
    for (name, config) in defined {
        let stream = (api.id.as_str(), name);
        let mut nodes = nodes_of(&series, stream);
        if nodes.is_empty() {
            nodes = nodes_from_definition(config);
        } else {
            running_here = true;
        }
        streams.push(LiveStream {
            name: name.to_owned(),
            nodes,
            clients: routes_of(&series, stream),
        });
    }
    let keys = crate::gateway::streams::leases::open_by_key(&api.id)
        .into_iter()
        .map(|(key_id, connections)| LiveKey {
            key_id,
            connections,
        })
        .collect();
    Reply::json(
        StatusCode::OK,
        LiveApi {
            api_id: api.id,
            running_here,
            streams,
            keys,
            at: chrono::Utc::now().timestamp_millis(),
        },
    )
}

/// Requests the gateway in this process answered, per API of the caller's organisation.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiRequests {
    /// A gateway runs in this process, so the counts are live.
    pub running_here: bool,
    pub apis: Vec<ApiRequestCount>,
    /// When the counters were read, in unix milliseconds.
    pub at: i64,
}

#[derive(Debug, Serialize, ToSchema, PartialEq)]
pub struct ApiRequestCount {
    pub api_id: String,
    /// Requests answered since the gateway started.
    pub requests: f64,
    /// Of those, answered with a 5xx.
    pub errors: f64,
}

#[utoipa::path(
    get,
    path = "/api/apis/requests",
    tag = "apis",
    responses(
        (status = 200, description = "Request counts per API; rates are the difference of two readings over their `at`.", body = ApiRequests),
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn requests(ctx: Ctx) -> Result<Reply, ApiError> {
    let ids: Vec<String> = ctx
        .state
        .store
        .list_apis_of_org(&ctx.caller.org_id)
        .await?
        .into_iter()
        .map(|a| a.id)
        .collect();
    let text = m::installed().map(|h| h.render()).unwrap_or_default();
    let series = parse(&text);
    let apis = request_counts(&series, &ids);
    Reply::json(
        StatusCode::OK,
        ApiRequests {
            running_here: series.iter().any(|s| s.name == m::GATEWAY_REQUESTS),
            apis,
            at: chrono::Utc::now().timestamp_millis(),
        },
    )
}

/// The request counts of the APIs `ids`, in that order (zero for an API not seen).
fn request_counts(series: &[Sample], ids: &[String]) -> Vec<ApiRequestCount> {
    ids.iter()
        .map(|id| {
            let mine = series
                .iter()
                .filter(|s| s.name == m::GATEWAY_REQUESTS && s.labels.get("api_id") == Some(id));
            let (mut requests, mut errors) = (0.0, 0.0);
            for s in mine {
                requests += s.value;
                if s.labels.get("status_class").map(String::as_str) == Some("5xx") {
                    errors += s.value;
                }
            }
            ApiRequestCount {
                api_id: id.clone(),
                requests,
                errors,
            }
        })
        .collect()
}

/// Header-like metadata never shown in the tail, whatever the stream's config says.
const REDACTED: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
];

/// The tail of one stream: what it delivered lately.
#[derive(Debug, Serialize, ToSchema)]
pub struct Tail {
    pub stream: String,
    /// Pass the last `seq` seen as `after` to get only newer messages.
    pub messages: Vec<TailMessage>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TailMessage {
    pub seq: u64,
    /// RFC 3339, UTC.
    pub at: String,
    /// The payload as text (invalid UTF-8 replaced), cut at 2 KiB.
    pub payload: String,
    pub truncated: bool,
    /// Metadata; credential-bearing keys (authorization, cookies, API keys) and those of
    /// the dashboard's `console.redact` read `***`.
    #[schema(value_type = Object)]
    pub metadata: BTreeMap<String, String>,
}

#[utoipa::path(
    post,
    path = "/api/apis/streams/{apiId}/tail",
    tag = "apis",
    params(
        ApiPath,
        ("stream" = String, Query, description = "The stream's name in the API."),
        ("after" = Option<u64>, Query, description = "Only messages after this `seq`."),
    ),
    responses(
        (status = 200, description = "The latest sampled messages; the tail stays open 30 s after each call.", body = Tail),
        BadQuery,
        Unauthorized,
        (status = 404, description = "No such streaming API or stream, or the stream does not run in this process.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
/// A `POST` because it opens (or keeps open) the tail: sampling starts with the first
/// call, not before.
pub async fn tail(ctx: Ctx) -> Result<Reply, ApiError> {
    let (api, doc) = find(&ctx, Kind::Streams).await?;
    let stream = ctx
        .query("stream")
        .ok_or_else(|| ApiError::bad_request("missing query parameter `stream`"))?
        .to_owned();
    let after = match ctx.query("after") {
        None | Some("") => 0,
        Some(v) => v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid query parameter `after`: `{v}` is not a number"
            ))
        })?,
    };
    let defined = doc
        .get(STREAMING)
        .is_some_and(|ext| streaming::streams_of(ext).iter().any(|(n, _)| *n == stream));
    if !defined {
        return Err(ApiError::not_found(&format!("stream `{stream}`")));
    }
    let Some(tap) = crate::stream::tap::find(&format!("{}.{stream}", api.id)) else {
        return Err(ApiError::NotFound(format!(
            "stream `{stream}` does not run in this process (its tail is where it runs: `sluice serve`)"
        )));
    };
    let redact = &ctx.state.config.console.redact;
    let messages = tap
        .read(after)
        .into_iter()
        .map(|s| TailMessage {
            seq: s.seq,
            at: chrono::DateTime::from_timestamp_millis(s.at)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            payload: String::from_utf8_lossy(&s.payload).into_owned(),
            truncated: s.truncated,
            metadata: s
                .metadata
                .into_iter()
                .map(|(k, v)| {
                    let hidden = REDACTED.iter().any(|r| k.eq_ignore_ascii_case(r))
                        || redact.iter().any(|r| k.eq_ignore_ascii_case(r));
                    (k, if hidden { "***".into() } else { v })
                })
                .collect(),
        })
        .collect();
    Reply::json(StatusCode::OK, Tail { stream, messages })
}

/// One sample of the Prometheus text: name, labels, value.
#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of Prometheus text; lines that do not parse are skipped.
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find('{') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => {
            let (name, value) = line.split_once(' ')?;
            return Some(Sample {
                name: name.to_owned(),
                labels: BTreeMap::new(),
                value: value.trim().parse().ok()?,
            });
        }
    };
    let mut labels = BTreeMap::new();
    let mut chars = rest.char_indices().peekable();
    loop {
        // A label name, `=`, a quoted value with `\\`, `\"` and `\n` escapes.
        let start = chars.peek()?.0;
        let mut eq = None;
        for (i, c) in chars.by_ref() {
            if c == '=' {
                eq = Some(i);
                break;
            }
        }
        let key = rest[start..eq?].trim_start_matches(',').trim().to_owned();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()?.1 {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(key, value);
        match chars.next()? {
            (_, ',') => {
                if chars.peek().is_some_and(|(_, c)| *c == '}') {
                    chars.next();
                    break;
                }
            }
            (_, '}') => break,
            _ => return None,
        }
    }
    let value = chars
        .next()
        .map(|(i, _)| rest[i..].trim())
        .unwrap_or_default();
    Some(Sample {
        name: name.to_owned(),
        labels,
        value: value.split(' ').next()?.parse().ok()?,
    })
}

/// Whether sample `s` is of stream `name` of API `api_id`.
fn of_stream(s: &Sample, (api_id, name): (&str, &str)) -> bool {
    s.labels.get("api_id").map(String::as_str) == Some(api_id)
        && s.labels.get("stream").map(String::as_str) == Some(name)
}

/// The nodes of the API's stream in the samples, in message order.
fn nodes_of(series: &[Sample], stream: (&str, &str)) -> Vec<LiveNode> {
    let mut nodes: BTreeMap<(u8, usize, String), LiveNode> = BTreeMap::new();
    for s in series {
        if !of_stream(s, stream) {
            continue;
        }
        let field = match s.name.as_str() {
            m::RECEIVED_MESSAGES => 0,
            m::SENT_MESSAGES => 1,
            m::ERRORS => 2,
            m::INPUT_LAG => 3,
            _ => continue,
        };
        let (Some(component), Some(kind), Some(type_name)) = (
            s.labels.get("component"),
            s.labels.get("kind"),
            s.labels.get("type"),
        ) else {
            continue;
        };
        let rank = match kind.as_str() {
            "input" => 0,
            "processor" => 1,
            _ => 2,
        };
        let node = nodes
            .entry((rank, position(component), component.clone()))
            .or_insert_with(|| LiveNode {
                component: component.clone(),
                kind: kind.clone(),
                type_name: type_name.clone(),
                received: 0.0,
                sent: 0.0,
                errors: 0.0,
                lag: None,
            });
        // Errors come by stage, and lag by partition: they add up.
        match field {
            0 => node.received = s.value,
            1 => node.sent = s.value,
            2 => node.errors += s.value,
            _ => *node.lag.get_or_insert(0.0) += s.value,
        }
    }
    nodes.into_values().collect()
}

/// A processor's index in its path (`pipeline.processors[3].x` is 3), to keep order.
fn position(component: &str) -> usize {
    component
        .split_once("processors[")
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0)
}

fn routes_of(series: &[Sample], stream: (&str, &str)) -> Vec<LiveRoute> {
    series
        .iter()
        .filter(|s| s.name == m::HTTP_STREAM_ACTIVE_CONNECTIONS && of_stream(s, stream))
        .map(|s| LiveRoute {
            route: s.labels.get("route").cloned().unwrap_or_default(),
            transport: s.labels.get("transport").cloned().unwrap_or_default(),
            connections: s.value,
        })
        .collect()
}

/// The graph as the definition writes it, without counters.
fn nodes_from_definition(config: &Value) -> Vec<LiveNode> {
    let node = |path: &str, kind: &str, c: &Value| {
        let type_name = c
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "label").cloned())
            .unwrap_or_default();
        let component = c
            .get("label")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{path}.{type_name}"));
        LiveNode {
            component,
            kind: kind.into(),
            type_name,
            received: 0.0,
            sent: 0.0,
            errors: 0.0,
            lag: None,
        }
    };
    let mut nodes = Vec::new();
    if let Some(input) = config.get("input") {
        nodes.push(node("input", "input", input));
    }
    let processors = config
        .get("pipeline")
        .and_then(|p| p.get("processors"))
        .and_then(Value::as_array);
    for (i, p) in processors.into_iter().flatten().enumerate() {
        nodes.push(node(&format!("pipeline.processors[{i}]"), "processor", p));
    }
    if let Some(output) = config.get("output") {
        nodes.push(node("output", "output", output));
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE sluice_component_received_messages_total counter
sluice_component_received_messages_total{api_id="pets",org_id="o1",stream="events",component="input.http_server",kind="input",type="http_server"} 12
sluice_component_sent_messages_total{api_id="pets",org_id="o1",stream="events",component="input.http_server",kind="input",type="http_server"} 12
sluice_component_received_messages_total{api_id="pets",org_id="o1",stream="events",component="pipeline.processors[10].mapping",kind="processor",type="mapping"} 3
sluice_component_received_messages_total{api_id="pets",org_id="o1",stream="events",component="pipeline.processors[2].mapping",kind="processor",type="mapping"} 12
sluice_component_errors_total{api_id="pets",org_id="o1",stream="events",component="out \"x\"",kind="output",type="websocket_server",stage="write"} 1
sluice_component_errors_total{api_id="pets",org_id="o1",stream="events",component="out \"x\"",kind="output",type="websocket_server",stage="connect"} 2
sluice_input_lag_messages{api_id="pets",org_id="o1",stream="events",component="input.http_server",kind="input",type="http_server",topic="t",partition="0"} 5
sluice_input_lag_messages{api_id="pets",org_id="o1",stream="events",component="input.http_server",kind="input",type="http_server",topic="t",partition="1"} 2
sluice_component_received_messages_total{api_id="other",org_id="o1",stream="s",component="input.x",kind="input",type="x"} 99
sluice_http_stream_active_connections{api_id="pets",org_id="o1",stream="events",component="o",kind="output",type="websocket_server",route="/ws",transport="websocket"} 4
sluice_gateway_events_total 7
not a sample {
"#;

    #[test]
    fn reads_a_stream_from_prometheus_text() {
        let series = parse(TEXT);
        let nodes = nodes_of(&series, ("pets", "events"));
        let names: Vec<&str> = nodes.iter().map(|n| n.component.as_str()).collect();
        assert_eq!(
            names,
            [
                "input.http_server",
                "pipeline.processors[2].mapping",
                "pipeline.processors[10].mapping",
                "out \"x\""
            ]
        );
        assert_eq!((nodes[0].received, nodes[0].sent), (12.0, 12.0));
        assert_eq!(nodes[0].lag, Some(7.0), "partitions add up");
        assert_eq!(nodes[1].lag, None);
        assert_eq!(nodes[3].errors, 3.0);
        assert_eq!(
            routes_of(&series, ("pets", "events")),
            [LiveRoute {
                route: "/ws".into(),
                transport: "websocket".into(),
                connections: 4.0
            }]
        );
        assert!(nodes_of(&series, ("pets", "none")).is_empty());
    }

    #[test]
    fn request_counts_add_up_status_classes() {
        let text = "sluice_gateway_requests_total{api_id=\"pets\",status_class=\"2xx\"} 7\nsluice_gateway_requests_total{api_id=\"pets\",status_class=\"5xx\"} 2\nsluice_gateway_requests_total{api_id=\"theirs\",status_class=\"2xx\"} 9\n";
        let got = request_counts(&parse(text), &["pets".into(), "idle".into()]);
        assert_eq!(
            got,
            [
                ApiRequestCount {
                    api_id: "pets".into(),
                    requests: 9.0,
                    errors: 2.0
                },
                ApiRequestCount {
                    api_id: "idle".into(),
                    requests: 0.0,
                    errors: 0.0
                },
            ]
        );
    }

    #[test]
    fn odd_lines_do_not_panic() {
        for line in [
            "x{",
            "x{a",
            "x{a=",
            "x{a=\"",
            "x{a=\"\\",
            "x{a=\"b\"",
            "x{a=\"b\"}",
            "x{a=\"b\",}",
            "x{a=\"b\",} 1",
            "x{a=\"b\"} nope",
            "x 1 2",
            "{}",
        ] {
            let _ = parse_line(line);
        }
        assert_eq!(parse_line("x{a=\"b\",} 1").unwrap().value, 1.0);
        assert_eq!(parse_line("x 2").unwrap().value, 2.0);
    }

    #[test]
    fn the_definition_gives_the_graph_when_nothing_runs_here() {
        let config = serde_json::json!({
            "input": {"kafka": {"topics": ["t"]}},
            "pipeline": {"processors": [{"mapping": "root = this"}, {"label": "enrich", "http": {}}]},
            "output": {"label": "sse", "http_server": {"path": "/s"}}
        });
        let nodes = nodes_from_definition(&config);
        let names: Vec<(&str, &str)> = nodes
            .iter()
            .map(|n| (n.component.as_str(), n.type_name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("input.kafka", "kafka"),
                ("pipeline.processors[0].mapping", "mapping"),
                ("enrich", "http"),
                ("sse", "http_server")
            ]
        );
    }
}
