//! The writer side of the hub outputs (`http_server`, `websocket_server`), which serve
//! HTTP clients from a hub. Only they need to know of the cluster's bus and of the
//! input's record by position, so the stream builder hands them these as their
//! [`HubWiring`] instead of carrying them on every component's build context.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::hubs::Hubs;
use crate::component::{bus, BuildContext, BuildError, ConnectorError, Output};
use crate::config::mapped::MappingText;
use crate::http::caller;
use crate::http::filter::Filter;
use crate::http::history::{History, HistoryError, Past};
use crate::http::hub::{DeliveryMode, Hub, HubOptions};
use crate::http::outbox::{SlowClients, SlowPolicy};
use crate::http::{self as h, HttpRequest, HttpResponse};
use crate::message::Batch;
use crate::value::Value;

/// What the stream builder gives a hub output beyond its build context.
#[derive(Clone, Default)]
pub struct HubWiring {
    /// The cluster's bus, in a stream fed by HTTP clients on a gateway that has one
    /// (`cluster.bus`): the output then reaches the clients of every node.
    pub bus: Option<Arc<dyn bus::Bus>>,
    /// In a stream that hands on what its one input read unchanged to one hub output:
    /// the input's record by position, which the output's resuming clients catch up from.
    pub history: Option<Arc<dyn History>>,
    /// Where the hubs of a gateway API's streams are kept across a change of the stream,
    /// so that its clients stay connected (see [`super::hubs`]); unset, a hub lives and
    /// dies with its stream.
    pub hubs: Option<Arc<Hubs>>,
}

impl HubWiring {
    /// The ids of a broadcast hub: those the output names (`id_metadata`), else the bus's
    /// positions when it has a bus, so that a client resumes on any node.
    pub(crate) fn id_key(&self, delivery: DeliveryMode, own: Option<&String>) -> Option<String> {
        match (own, &self.bus) {
            (Some(own), _) => Some(own.clone()),
            (None, Some(bus)) if delivery == DeliveryMode::Broadcast => {
                bus.position_key().map(str::to_owned)
            }
            _ => None,
        }
    }

    /// The hub of the output of `cx` that serves `routes`: its earlier version's when the
    /// stream was changed and the hub kept for it, else a new one.
    pub(crate) fn hub(&self, cx: &BuildContext, routes: &[&str], opts: HubOptions) -> Arc<Hub> {
        match &self.hubs {
            Some(hubs) => {
                let place = format!("{}|{}", cx.id.path, routes.join("|"));
                hubs.hub(&cx.id.stream, &place, opts)
            }
            None => Hub::new(opts, cx.lifecycle.shutdown.clone()),
        }
    }

    /// The writer of a hub output: its own clients, or, in a stream fed by HTTP clients on a
    /// gateway with a cluster bus, the bus, which feeds the hub of every node (see
    /// [`crate::component::bus`]).
    pub(crate) fn writer(&self, cx: &BuildContext, hub: Arc<Hub>) -> Box<dyn Output> {
        match &self.bus {
            Some(bus) => {
                let topic = bus::topic(&cx.id.stream, &cx.id.path);
                hub.set_history(Some(Arc::new(BusHistory {
                    bus: bus.clone(),
                    topic: topic.clone(),
                })));
                Box::new(BusOutput {
                    bus: bus.clone(),
                    topic,
                    hub,
                })
            }
            None => {
                // Also when none: a hub kept from an earlier version of the stream must
                // not go on catching clients up from that version's source.
                hub.set_history(self.history.clone());
                Box::new(HubOutput {
                    hub,
                    stop: cx.lifecycle.shutdown.clone(),
                })
            }
        }
    }
}

/// The filter of a hub (`filter:` of a broadcast output), compiled as the config was read.
pub(crate) fn hub_filter(
    cx: &BuildContext,
    filter: Option<&MappingText>,
    delivery: DeliveryMode,
) -> Result<Option<Filter>, BuildError> {
    let Some(filter) = filter else {
        return Ok(None);
    };
    if delivery != DeliveryMode::Broadcast {
        return Err(cx.error(
            "`filter` needs `delivery: broadcast`: in round robin a message goes to one \
             client only, whichever its filter would admit",
        ));
    }
    Ok(Some(Filter::new(filter.source(), filter.shared())))
}

/// Checks the slow-client policy of a hub output: a policy that drops messages or
/// clients needs a broadcast, where every client has the messages of the others too.
pub(crate) fn slow_policy(
    cx: &BuildContext,
    slow: &SlowClients,
    delivery: DeliveryMode,
) -> Result<(), BuildError> {
    slow.check().map_err(|e| cx.error(e))?;
    if slow.policy != SlowPolicy::Hold && delivery != DeliveryMode::Broadcast {
        return Err(cx.error(format!(
            "`slow_clients.policy: {}` needs `delivery: broadcast`: in round robin a \
             message goes to one client only, and would be lost with it",
            slow.policy.as_str()
        )));
    }
    Ok(())
}

/// Who the client of `req` is for `hub`'s filter (`@caller`), or the answer to a
/// request whose values are too large to keep. Kept for every client, as a change of the
/// stream may give the hub a filter while it is connected; a client that could not be
/// kept is null to a filter added later, which admits nothing for it.
pub(crate) fn subscriber(hub: &Hub, req: &HttpRequest) -> Result<Value, Box<HttpResponse>> {
    match caller::value_of(req) {
        Ok(caller) => Ok(caller),
        Err(e) if hub.filters() => Err(Box::new(h::text(
            http::StatusCode::BAD_REQUEST,
            format!("{e}\n"),
        ))),
        Err(_) => Ok(Value::Null),
    }
}

/// The output side of a hub: writes publish to its clients.
pub struct HubOutput {
    pub(crate) hub: Arc<Hub>,
    /// The writer's shutdown: a write waiting for a client gives up with it, while the
    /// hub may live on for the stream's next version.
    pub(crate) stop: CancellationToken,
}

#[async_trait]
impl Output for HubOutput {
    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        Ok(self.hub.publish_until(batch, &self.stop).await?)
    }
}

/// A topic of the bus, read back by position for clients resuming from before the
/// replay buffer.
struct BusHistory {
    bus: Arc<dyn bus::Bus>,
    topic: String,
}

impl History for BusHistory {
    fn after(&self, after: u64) -> futures::future::BoxFuture<'static, Result<Past, HistoryError>> {
        self.bus.clone().history(self.topic.clone(), after)
    }

    fn position_key(&self) -> &str {
        self.bus.position_key().unwrap_or_default()
    }
}

/// How far before a stream's start on a node its new bus reader starts: the clocks of
/// the node and of the bus's server differ a little.
const FEED_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Publishes to the cluster's bus; the node's hub is fed from the bus, as every node's is.
struct BusOutput {
    bus: Arc<dyn bus::Bus>,
    topic: String,
    hub: Arc<Hub>,
}

#[async_trait]
impl Output for BusOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        // The node's reader starts with the hub and stops when it is retired: a hub kept
        // across a change of the stream goes on being fed by the same reader, so that
        // nothing is read twice.
        if self.hub.start_feeding() {
            let hub = self.hub.clone();
            let shared = hub.mode() == DeliveryMode::RoundRobin;
            let ready = {
                let hub = hub.clone();
                Arc::new(move || !shared || hub.clients() > 0)
            };
            tokio::spawn(self.bus.clone().feed(bus::Feed {
                topic: self.topic.clone(),
                shared,
                sink: Arc::new(HubOutput {
                    stop: hub.retired().clone(),
                    hub,
                }),
                ready,
                stop: self.hub.retired().clone(),
                from: std::time::SystemTime::now() - FEED_MARGIN,
            }));
        }
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        self.bus.publish(&self.topic, batch).await
    }
}
