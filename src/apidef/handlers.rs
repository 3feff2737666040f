//! `server.eventHandlers`: which gateway events fire which webhook, checked at load.

use serde::Serialize;

use super::extension::EventHandler;
use crate::webhook::{self, Hook, Templates};

/// What went wrong for whom, as the gateway publishes it and handlers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    AuthFailure,
    RateLimitExceeded,
    QuotaExceeded,
    KeyExpired,
    UpstreamError,
    StreamError,
}

impl EventKind {
    /// Every event, for documentation and checks.
    pub const ALL: [EventKind; 6] = [
        EventKind::AuthFailure,
        EventKind::RateLimitExceeded,
        EventKind::QuotaExceeded,
        EventKind::KeyExpired,
        EventKind::UpstreamError,
        EventKind::StreamError,
    ];

    /// The event named `name` (as [`as_str`](EventKind::as_str) writes it).
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AuthFailure => "auth_failure",
            EventKind::RateLimitExceeded => "rate_limit_exceeded",
            EventKind::QuotaExceeded => "quota_exceeded",
            EventKind::KeyExpired => "key_expired",
            EventKind::UpstreamError => "upstream_error",
            EventKind::StreamError => "stream_error",
        }
    }
}

/// A checked event handler.
#[derive(Debug, Clone, PartialEq)]
pub struct Handler {
    pub events: Vec<EventKind>,
    pub target: Target,
}

/// The webhook a handler fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A webhook of the dashboard's `/api/hooks`, by id or webhook id, in the API's
    /// organisation; read when the event fires, so edits apply at once.
    Stored(String),
    Inline(Hook),
}

/// Checks the handlers at `at` (`x-sluice-api-gateway.server.eventHandlers`); problems go
/// to `errors` as (document path, message). Disabled handlers are dropped.
pub fn check(
    handlers: &[EventHandler],
    at: &str,
    egress: Option<&crate::egress::EgressPolicy>,
    errors: &mut Vec<(String, String)>,
) -> Vec<Handler> {
    let mut checked = Vec::new();
    for (i, h) in handlers.iter().enumerate() {
        let here = |field: &str| format!("{at}.{i}.{field}");
        let before = errors.len();
        if h.events.is_empty() {
            errors.push((here("events"), "list at least one event".into()));
        }
        let mut events = Vec::new();
        for (j, name) in h.events.iter().enumerate() {
            match EventKind::from_name(name) {
                Some(kind) => events.push(kind),
                None => errors.push((
                    format!("{at}.{i}.events.{j}"),
                    format!(
                        "`{name}` is not an event; the events are {}",
                        EventKind::ALL.map(EventKind::as_str).join(", ")
                    ),
                )),
            }
        }
        let inline_fields = h.method.is_some()
            || h.target_path.is_some()
            || !h.header_map.is_empty()
            || h.template_path.is_some()
            || h.template.is_some()
            || h.event_timeout.is_some();
        let target = match (&h.webhook, &h.target_path) {
            (Some(id), _) if inline_fields => {
                errors.push((
                    here("webhook"),
                    format!("webhook `{id}` is configured in the dashboard: give either `webhook` or `targetPath` with its settings, not both"),
                ));
                None
            }
            (Some(id), _) if id.trim().is_empty() => {
                errors.push((here("webhook"), "the webhook id is empty".into()));
                None
            }
            (Some(id), _) => Some(Target::Stored(id.trim().to_owned())),
            (None, None) => {
                errors.push((
                    here("targetPath"),
                    "give `targetPath` (the URL to call) or `webhook` (a webhook's id)".into(),
                ));
                None
            }
            (None, Some(url)) => inline(h, url, &here, egress, errors).map(Target::Inline),
        };
        if errors.len() == before && h.enabled {
            if let Some(target) = target {
                checked.push(Handler { events, target });
            }
        }
    }
    checked
}

fn inline(
    h: &EventHandler,
    url: &str,
    here: &dyn Fn(&str) -> String,
    egress: Option<&crate::egress::EgressPolicy>,
    errors: &mut Vec<(String, String)>,
) -> Option<Hook> {
    let before = errors.len();
    let url = webhook::check_url(url)
        .map_err(|e| errors.push((here("targetPath"), e)))
        .ok();
    // A posted definition's literal address is refused now; a name when delivered.
    if let (Some(policy), Some(parsed)) =
        (egress, url.as_deref().and_then(|u| url::Url::parse(u).ok()))
    {
        let port = parsed.port_or_known_default().unwrap_or(80);
        if let Err(e) = policy.check_literal(parsed.host_str().unwrap_or_default(), port) {
            errors.push((here("targetPath"), e.to_string()));
        }
    }
    let method = webhook::check_method(h.method.as_deref().unwrap_or("POST"))
        .map_err(|e| errors.push((here("method"), e)))
        .ok();
    if let Err((name, why)) = webhook::check_headers(&h.header_map) {
        errors.push((here(&format!("headerMap.{name}")), why.to_owned()));
    }
    let template_path = h.template_path.clone().unwrap_or_default();
    if let Err(e) = Templates::check_path(&template_path) {
        errors.push((here("templatePath"), e.to_string()));
    }
    if let Some(t) = &h.template {
        if let Err(e) = Templates::check("template", t) {
            errors.push((here("template"), e.to_string()));
        }
    }
    if errors.len() > before {
        return None;
    }
    Some(Hook {
        method: method?,
        url: url?,
        headers: h.header_map.clone(),
        template_path,
        template: h.template.clone(),
        event_timeout: h.event_timeout.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(yaml: &str) -> EventHandler {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn stored_and_inline_handlers() {
        let mut errors = Vec::new();
        let got = check(
            &[
                handler("events: [auth_failure]\nwebhook: ops-alerts\n"),
                handler(
                    "events: [quota_exceeded, stream_error]\ntargetPath: http://127.0.0.1:9/h\nmethod: put\nheaderMap: {X-A: b}\ntemplate: '{{ event }}'\neventTimeout: 60\n",
                ),
                handler("enabled: false\nevents: [auth_failure]\nwebhook: off\n"),
            ],
            "h",
            None,
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].target, Target::Stored("ops-alerts".into()));
        let Target::Inline(hook) = &got[1].target else {
            panic!("inline")
        };
        assert_eq!(hook.method, "PUT");
        assert_eq!(hook.event_timeout, 60);
        assert_eq!(
            got[1].events,
            [EventKind::QuotaExceeded, EventKind::StreamError]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let mut errors = Vec::new();
        check(
            &[
                handler("events: [auth_fail]\nwebhook: w\n"),
                handler("events: []\nwebhook: w\nmethod: GET\n"),
                handler("events: [auth_failure]\ntargetPath: ftp://x/\nmethod: BREW\ntemplatePath: ../etc/passwd\ntemplate: '{% if %}'\n"),
                handler("events: [auth_failure]\n"),
            ],
            "h",
            None,
            &mut errors,
        );
        let paths: Vec<&str> = errors.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "h.0.events.0",
                "h.1.events",
                "h.1.webhook",
                "h.2.targetPath",
                "h.2.method",
                "h.2.templatePath",
                "h.2.template",
                "h.3.targetPath"
            ]
        );
        assert!(errors[0].1.contains("auth_failure"), "{}", errors[0].1);
    }
}
