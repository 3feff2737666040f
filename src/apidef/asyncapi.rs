//! An AsyncAPI 3.0 document for a streaming API, made from its `x-sluice-streaming`: a
//! channel for every place clients (or brokers) send to or receive from, the operation
//! on it from the gateway's side, and the bindings that say how (HTTP method, WebSocket,
//! Kafka topic, NATS queue, MQTT QoS, AMQP queue or exchange). Server-Sent Events have
//! no binding of their own in AsyncAPI: they are HTTP GET channels whose messages come
//! as `text/event-stream`, as their description says. AsyncAPI is only an output here:
//! streams are still defined in OpenAPI with `x-sluice-streaming`.

use serde_json::{json, Map, Value};

use super::streaming::ApiStream;
use super::Definition;
use crate::input::{InputConfig, InputKind};
use crate::output::{OutputConfig, OutputKind};

/// The AsyncAPI version the documents follow.
pub const VERSION: &str = "3.0.0";

/// Where the document says the API is served.
#[derive(Debug, Clone)]
pub struct Target {
    /// The gateway's `host[:port]`, as clients reach it.
    pub host: String,
    /// Whether clients reach it over TLS (`https`, `wss`).
    pub tls: bool,
    /// Whether the brokers the streams read and write are described too (their hosts,
    /// never their credentials). Off for readers outside the organisation.
    pub brokers: bool,
}

/// The AsyncAPI document of `api`.
pub fn document(api: &Definition, target: &Target) -> Value {
    let mut doc = Doc::default();
    let http = if target.tls { "https" } else { "http" };
    let ws = if target.tls { "wss" } else { "ws" };
    let pathname = api.listen_path.trim_end_matches('/');
    let mut gateway = json!({
        "host": target.host,
        "protocol": http,
        "description": "The gateway: HTTP requests and Server-Sent Events.",
    });
    let mut websocket = json!({
        "host": target.host,
        "protocol": ws,
        "description": "The gateway's WebSocket connections.",
    });
    if !pathname.is_empty() {
        gateway["pathname"] = json!(pathname);
        websocket["pathname"] = json!(pathname);
    }
    doc.servers.insert("gateway".into(), gateway);
    doc.servers.insert("gateway-ws".into(), websocket);
    for stream in &api.streams {
        doc.stream(stream, target);
    }
    let info = api.document.get("info");
    let text = |key: &str| info.and_then(|i| i.get(key)).and_then(Value::as_str);
    let mut out = json!({
        "asyncapi": VERSION,
        "info": {
            "title": api.name,
            "version": text("version").unwrap_or("1"),
        },
        "servers": doc.servers,
        "channels": doc.channels,
        "operations": doc.operations,
        "components": {"messages": doc.messages},
    });
    if let Some(description) = text("description") {
        out["info"]["description"] = json!(description);
    }
    out
}

/// The document being made.
#[derive(Default)]
struct Doc {
    servers: Map<String, Value>,
    channels: Map<String, Value>,
    operations: Map<String, Value>,
    messages: Map<String, Value>,
}

/// One channel and the gateway's operation on it.
struct Channel<'a> {
    stream: &'a str,
    /// What the channel is for, unique in the stream: part of its id.
    role: String,
    address: Option<String>,
    server: &'static str,
    /// `receive` (the gateway takes messages from it) or `send`.
    action: &'static str,
    description: String,
    channel_bindings: Option<Value>,
    operation_bindings: Option<Value>,
}

impl<'a> Channel<'a> {
    /// A channel of the gateway's HTTP server, used with `method`.
    fn http(
        stream: &'a str,
        role: String,
        address: Option<String>,
        action: &'static str,
        method: &str,
        description: String,
    ) -> Self {
        Channel {
            stream,
            role,
            address,
            server: "gateway",
            action,
            description,
            channel_bindings: None,
            operation_bindings: Some(http_method(method)),
        }
    }

    /// A WebSocket channel of the gateway.
    fn ws(
        stream: &'a str,
        role: String,
        address: String,
        action: &'static str,
        description: String,
    ) -> Self {
        Channel {
            stream,
            role,
            address: Some(address),
            server: "gateway-ws",
            action,
            description,
            channel_bindings: Some(websocket()),
            operation_bindings: None,
        }
    }
}

impl Doc {
    fn stream(&mut self, stream: &ApiStream, target: &Target) {
        let name = id(&stream.name);
        self.messages.insert(
            name.clone(),
            json!({
                "name": name,
                "title": format!("A message of stream `{}`", stream.name),
                "payload": {},
            }),
        );
        self.input(&stream.name, &stream.config.input, target, "in");
        self.output(&stream.name, &stream.config.output, target, "out");
    }

    fn input(&mut self, stream: &str, input: &InputConfig, target: &Target, role: &str) {
        match &input.kind {
            InputKind::HttpServer(c) => {
                if !c.path.trim().is_empty() {
                    self.add(Channel::http(
                        stream,
                        format!("{role}-post"),
                        Some(c.path.clone()),
                        "receive",
                        "POST",
                        format!(
                            "POST a message to `{}`; the answer comes once the stream \
                             delivered it.",
                            c.path
                        ),
                    ));
                }
                if !c.ws_path.trim().is_empty() {
                    self.add(Channel::ws(
                        stream,
                        format!("{role}-ws"),
                        c.ws_path.clone(),
                        "receive",
                        format!(
                            "Send messages as WebSocket frames on `{}`, each one a message.",
                            c.ws_path
                        ),
                    ));
                }
            }
            InputKind::Broker(b) => {
                for (i, input) in b.inputs.iter().enumerate() {
                    self.input(stream, input, target, &format!("{role}{i}"));
                }
            }
            kind if target.brokers => {
                for (i, found) in broker_input(kind).into_iter().enumerate() {
                    self.broker(stream, format!("{role}-{i}"), found, "receive");
                }
            }
            _ => {}
        }
    }

    fn output(&mut self, stream: &str, output: &OutputConfig, target: &Target, role: &str) {
        match &output.kind {
            OutputKind::HttpServer(c) => {
                let [path, stream_path, ws_path] = c.routes();
                if !path.trim().is_empty() {
                    self.add(Channel::http(
                        stream,
                        format!("{role}-get"),
                        Some(path.clone()),
                        "send",
                        "GET",
                        format!("Each GET on `{path}` answers with the next message."),
                    ));
                }
                if !stream_path.trim().is_empty() {
                    self.add(Channel::http(
                        stream,
                        format!("{role}-sse"),
                        Some(stream_path.clone()),
                        "send",
                        "GET",
                        format!(
                            "Server-Sent Events: a GET on `{stream_path}` holds a \
                             `text/event-stream` response open, an event per message \
                             ({}). Reconnect with `Last-Event-ID` to resume.",
                            delivery(c.delivery)
                        ),
                    ));
                }
                if !ws_path.trim().is_empty() {
                    self.add(Channel::ws(
                        stream,
                        format!("{role}-ws"),
                        ws_path.clone(),
                        "send",
                        format!(
                            "A WebSocket on `{ws_path}`: a frame per message ({}).",
                            delivery(c.delivery)
                        ),
                    ));
                }
            }
            OutputKind::WebsocketServer(c) => self.add(Channel::ws(
                stream,
                format!("{role}-ws"),
                c.path.clone(),
                "send",
                format!(
                    "A WebSocket on `{}`: a frame per message ({}); reconnect with \
                     `?last_event_id=` to resume.",
                    c.path,
                    delivery(c.delivery)
                ),
            )),
            OutputKind::PortalWebhook(c) => self.add(Channel::http(
                stream,
                format!("{role}-webhook"),
                None,
                "send",
                "POST",
                format!(
                    "Delivered to the webhook subscriptions of the developer portal that \
                     chose the event (`{}`), signed with each subscription's secret.",
                    c.event_type.source()
                ),
            )),
            OutputKind::Broker(b) => {
                for (i, o) in b.outputs.iter().enumerate() {
                    self.output(stream, o, target, &format!("{role}{i}"));
                }
            }
            OutputKind::Fallback(f) => {
                for (i, o) in f.0.iter().enumerate() {
                    self.output(stream, o, target, &format!("{role}{i}"));
                }
            }
            OutputKind::Switch(s) => {
                for (i, case) in s.cases.iter().enumerate() {
                    self.output(stream, &case.output, target, &format!("{role}{i}"));
                }
            }
            OutputKind::Retry(r) => self.output(stream, &r.output, target, role),
            kind if target.brokers => {
                if let Some(found) = broker_output(kind) {
                    self.broker(stream, format!("{role}-0"), found, "send");
                }
            }
            _ => {}
        }
    }

    /// A channel on a broker, with a server for the broker.
    fn broker(&mut self, stream: &str, role: String, found: BrokerChannel, action: &'static str) {
        let (server, address, channel_bindings, operation_bindings) = found;
        let key = format!("{}-{}", server.protocol, id(&server.host));
        self.servers
            .entry(key.clone())
            .or_insert_with(|| json!({"host": server.host, "protocol": server.protocol}));
        let verb = if action == "receive" {
            "reads"
        } else {
            "writes"
        };
        self.add_on(
            Channel {
                stream,
                role,
                address: Some(address.clone()),
                server: "",
                action,
                description: format!("The stream {verb} `{address}` on {}.", server.protocol),
                channel_bindings,
                operation_bindings,
            },
            &key,
        );
    }

    fn add(&mut self, channel: Channel<'_>) {
        let server = channel.server;
        self.add_on(channel, server);
    }

    fn add_on(&mut self, c: Channel<'_>, server: &str) {
        let key = id(&format!("{}.{}", c.stream, c.role));
        let message = id(c.stream);
        let mut channel = json!({
            "address": c.address,
            "description": c.description,
            "servers": [{"$ref": format!("#/servers/{server}")}],
            "messages": {"message": {"$ref": format!("#/components/messages/{message}")}},
        });
        if let Some(b) = c.channel_bindings {
            channel["bindings"] = b;
        }
        let mut operation = json!({
            "action": c.action,
            "channel": {"$ref": format!("#/channels/{key}")},
            "messages": [{"$ref": format!("#/channels/{key}/messages/message")}],
        });
        if let Some(b) = c.operation_bindings {
            operation["bindings"] = b;
        }
        self.channels.insert(key.clone(), channel);
        self.operations.insert(key, operation);
    }
}

/// A broker the stream reaches: its protocol and its first address, without credentials.
struct BrokerServer {
    protocol: &'static str,
    host: String,
}

type BrokerChannel = (BrokerServer, String, Option<Value>, Option<Value>);

/// The channels a broker input reads: server, address, channel and operation bindings.
fn broker_input(kind: &InputKind) -> Vec<BrokerChannel> {
    match kind {
        InputKind::Kafka(c) => c
            .parsed_topics()
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                let binding = json!({"kafka": {"topic": t.topic, "bindingVersion": "0.5.0"}});
                (server("kafka", &c.addresses), t.topic, Some(binding), None)
            })
            .collect(),
        InputKind::Nats(c) => {
            let op = c.queue.as_ref().map(|q| nats_queue(q));
            vec![(server("nats", &c.urls), c.subject.clone(), None, op)]
        }
        InputKind::NatsJetStream(c) => {
            let subject = c.subject.clone().unwrap_or_else(|| c.stream.clone());
            vec![(server("nats", &c.urls), subject, None, None)]
        }
        InputKind::Mqtt(c) => c
            .topics
            .iter()
            .map(|t| {
                let op = json!({"mqtt": {"qos": c.qos.min(2), "bindingVersion": "0.2.0"}});
                (server("mqtt", &c.urls), t.clone(), None, Some(op))
            })
            .collect(),
        InputKind::Amqp09(c) => {
            let binding = json!({"amqp": {
                "is": "queue",
                "queue": {"name": c.queue},
                "bindingVersion": "0.3.0",
            }});
            vec![(
                server("amqp", &c.urls),
                c.queue.clone(),
                Some(binding),
                None,
            )]
        }
        InputKind::RedisStreams(c) => redis_channels(&c.url, &c.streams),
        InputKind::RedisPubSub(c) => redis_channels(&c.url, &c.channels),
        _ => Vec::new(),
    }
}

/// Redis streams or pub/sub channels on the server at `url`.
fn redis_channels(url: &str, names: &[String]) -> Vec<BrokerChannel> {
    names
        .iter()
        .map(|name| (server("redis", &[url.to_owned()]), name.clone(), None, None))
        .collect()
}

/// The channel a broker output writes, when it writes to a broker.
fn broker_output(kind: &OutputKind) -> Option<BrokerChannel> {
    Some(match kind {
        OutputKind::Kafka(c) => {
            let topic = c.topic.source().to_owned();
            let binding = json!({"kafka": {"topic": topic, "bindingVersion": "0.5.0"}});
            (server("kafka", &c.addresses), topic, Some(binding), None)
        }
        OutputKind::Nats(c) => (
            server("nats", &c.urls),
            c.subject.source().into(),
            None,
            None,
        ),
        OutputKind::NatsJetStream(c) => (
            server("nats", &c.urls),
            c.subject.source().into(),
            None,
            None,
        ),
        OutputKind::Mqtt(c) => {
            let op = json!({"mqtt": {
                "qos": c.qos.min(2),
                "retain": c.retained,
                "bindingVersion": "0.2.0",
            }});
            (
                server("mqtt", &c.urls),
                c.topic.source().into(),
                None,
                Some(op),
            )
        }
        OutputKind::Amqp09(c) => {
            let binding = json!({"amqp": {
                "is": "routingKey",
                "exchange": {"name": c.exchange},
                "bindingVersion": "0.3.0",
            }});
            let key = c.key.as_ref().map(|k| k.source().to_owned());
            let address = key.unwrap_or_else(|| c.exchange.clone());
            (server("amqp", &c.urls), address, Some(binding), None)
        }
        OutputKind::RedisStreams(c) => (
            server("redis", std::slice::from_ref(&c.url)),
            c.stream.source().into(),
            None,
            None,
        ),
        OutputKind::RedisPubSub(c) => (
            server("redis", std::slice::from_ref(&c.url)),
            c.channel.source().into(),
            None,
            None,
        ),
        _ => return None,
    })
}

/// The broker at the first of `addresses`, as `host:port` without user or password.
fn server(protocol: &'static str, addresses: &[String]) -> BrokerServer {
    let first = addresses
        .first()
        .and_then(|a| a.split(',').next())
        .unwrap_or_default()
        .trim();
    let host = match url::Url::parse(first) {
        Ok(u) if u.has_host() => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            _ => String::new(),
        },
        // `host:9092`: no scheme, nothing secret.
        _ => first.rsplit('@').next().unwrap_or_default().to_owned(),
    };
    BrokerServer { protocol, host }
}

fn http_method(method: &str) -> Value {
    json!({"http": {"method": method, "bindingVersion": "0.3.0"}})
}

fn websocket() -> Value {
    json!({"ws": {"method": "GET", "bindingVersion": "0.1.0"}})
}

fn nats_queue(queue: &str) -> Value {
    json!({"nats": {"queue": queue, "bindingVersion": "0.1.0"}})
}

fn delivery(mode: crate::http::hub::DeliveryMode) -> &'static str {
    match mode {
        crate::http::hub::DeliveryMode::Broadcast => "every client gets every message",
        crate::http::hub::DeliveryMode::RoundRobin => "each message goes to one client",
    }
}

/// `text` as a key AsyncAPI takes for a component or channel (`[\w\d.\-_]`).
fn id(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(streaming: &str) -> Definition {
        let text = format!(
            "openapi: 3.0.3\ninfo: {{title: chat, version: '2', description: Talk.}}\npaths: {{}}\n\
             x-sluice-api-gateway:\n  info: {{id: chat, name: Chat}}\n  \
             server: {{listenPath: {{value: /chat/, strip: true}}}}\n\
             x-sluice-streaming:\n{streaming}"
        );
        super::super::from_file("chat.yaml", &text).unwrap()
    }

    fn target(brokers: bool) -> Target {
        Target {
            host: "api.example.com".into(),
            tls: true,
            brokers,
        }
    }

    #[test]
    fn http_channels_carry_their_methods_and_the_servers_their_path() {
        let doc = document(
            &api("  streams:\n    main:\n      input:\n        http_server: {path: /say, ws_path: /say/ws}\n      output:\n        http_server: {stream_path: /events, ws_path: /events/ws, delivery: broadcast}\n"),
            &target(false),
        );
        assert_eq!(doc["asyncapi"], "3.0.0");
        assert_eq!(doc["info"]["version"], "2");
        assert_eq!(doc["info"]["description"], "Talk.");
        assert_eq!(doc["servers"]["gateway"]["protocol"], "https");
        assert_eq!(doc["servers"]["gateway"]["pathname"], "/chat");
        assert_eq!(doc["servers"]["gateway-ws"]["protocol"], "wss");
        let post = &doc["channels"]["main.in-post"];
        assert_eq!(post["address"], "/say");
        assert_eq!(doc["operations"]["main.in-post"]["action"], "receive");
        assert_eq!(
            doc["operations"]["main.in-post"]["bindings"]["http"]["method"],
            "POST"
        );
        let sse = &doc["channels"]["main.out-sse"];
        assert_eq!(sse["address"], "/events");
        assert!(sse["description"]
            .as_str()
            .unwrap()
            .contains("Last-Event-ID"));
        assert_eq!(doc["operations"]["main.out-sse"]["action"], "send");
        assert_eq!(
            doc["channels"]["main.out-ws"]["bindings"]["ws"]["method"],
            "GET"
        );
        assert_eq!(
            doc["operations"]["main.out-ws"]["messages"][0]["$ref"],
            "#/channels/main.out-ws/messages/message"
        );
        assert_eq!(doc["components"]["messages"]["main"]["name"], "main");
    }

    #[test]
    fn brokers_are_described_without_their_credentials_and_only_when_asked() {
        let streaming = "  streams:\n    feed:\n      input:\n        kafka: {addresses: ['k1:9092'], topics: [orders], consumer_group: g}\n      output:\n        broker:\n          outputs:\n            - http_server: {stream_path: /events}\n            - amqp_0_9: {urls: ['amqp://guest:secret@rabbit:5672/'], exchange: audit}\n";
        let doc = document(&api(streaming), &target(true));
        let kafka = &doc["channels"]["feed.in-0"];
        assert_eq!(kafka["address"], "orders");
        assert_eq!(kafka["bindings"]["kafka"]["topic"], "orders");
        assert_eq!(kafka["servers"][0]["$ref"], "#/servers/kafka-k1_9092");
        assert_eq!(doc["servers"]["kafka-k1_9092"]["host"], "k1:9092");
        assert_eq!(doc["operations"]["feed.in-0"]["action"], "receive");
        let amqp = &doc["channels"]["feed.out1-0"];
        assert_eq!(amqp["bindings"]["amqp"]["exchange"]["name"], "audit");
        assert_eq!(doc["servers"]["amqp-rabbit_5672"]["host"], "rabbit:5672");
        assert!(!doc.to_string().contains("secret"), "{doc}");
        assert!(doc["channels"]["feed.out0-sse"].is_object());

        let public = document(&api(streaming), &target(false));
        assert!(public["channels"].get("feed.in-0").is_none());
        assert!(public["servers"].get("kafka-k1_9092").is_none());
        assert!(public["channels"]["feed.out0-sse"].is_object());
    }
}
