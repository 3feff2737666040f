//! The steps of the middleware chain that act on an API's requests, decided once when the
//! API is compiled. The chain runs exactly these, in this order, and an API with none
//! goes straight to the proxy: one list answers both "what runs" and "can it be skipped",
//! so a step cannot run for an API yet be skipped for it, or the reverse.

use super::Api;

/// One step of the chain, in the order the chain runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// `middleware.global.cors`: preflights answered, answers to allowed origins marked.
    Cors,
    /// The API's security requirements.
    Auth,
    /// The authenticated key's state and rights, and the operations' allow and block
    /// lists.
    KeyChecks,
    /// The authenticated key's rate limit and quota.
    KeyLimits,
    /// `upstream.rateLimit` and the operations' `rateLimit`.
    ApiLimit,
    /// `requestSizeLimit`, global or per operation.
    SizeLimit,
    /// The operations' `validateRequest`.
    Validate,
    /// `middleware.global.transformRequestHeaders`.
    RequestHeaders,
    /// `x-sluice-streaming`: requests on the streams' paths go to the streams.
    Streams,
    /// `middleware.global.cache`.
    Cache,
    /// The operations' `mockResponse`.
    Mock,
    /// `middleware.global.transformResponseHeaders`.
    ResponseHeaders,
}

impl Step {
    /// Every step, in the chain's order.
    pub const ALL: [Step; 12] = [
        Step::Cors,
        Step::Auth,
        Step::KeyChecks,
        Step::KeyLimits,
        Step::ApiLimit,
        Step::SizeLimit,
        Step::Validate,
        Step::RequestHeaders,
        Step::Streams,
        Step::Cache,
        Step::Mock,
        Step::ResponseHeaders,
    ];

    /// The step's name, as its trace span is called.
    pub fn name(self) -> &'static str {
        match self {
            Step::Cors => "cors",
            Step::Auth => "auth",
            Step::KeyChecks => "key_checks",
            Step::KeyLimits => "key_limits",
            Step::ApiLimit => "rate_limit",
            Step::SizeLimit => "size_limit",
            Step::Validate => "validate",
            Step::RequestHeaders => "request_headers",
            Step::Streams => "streams",
            Step::Cache => "cache",
            Step::Mock => "mock",
            Step::ResponseHeaders => "response_headers",
        }
    }

    /// Whether this step can act on a request for `api`.
    fn acts_on(self, api: &Api) -> bool {
        let ops = || api.operations.iter();
        let global = &api.global;
        let on = |t: Option<bool>| t.unwrap_or(false);
        match self {
            Step::Cors => on(global.cors.as_ref().map(|c| c.enabled)),
            Step::Auth => api.auth.is_some(),
            // A key is there only once authentication found one.
            Step::KeyChecks => api.auth.is_some() || api.allow_list || ops().any(|op| op.block),
            Step::KeyLimits => api.auth.is_some(),
            Step::ApiLimit => api.rate.is_some() || ops().any(|op| op.rate.is_some()),
            Step::SizeLimit => {
                on(global.request_size_limit.as_ref().map(|l| l.enabled))
                    || ops().any(|op| op.size_limit.is_some())
            }
            Step::Validate => ops().any(|op| op.validator.is_some()),
            Step::RequestHeaders => {
                on(global.transform_request_headers.as_ref().map(|t| t.enabled))
            }
            Step::Streams => !api.streams.is_empty(),
            // An operation's `cache` marks it for the global cache; without one it does
            // nothing.
            Step::Cache => on(global.cache.as_ref().map(|c| c.enabled)),
            Step::Mock => ops().any(|op| op.mock.is_some()),
            Step::ResponseHeaders => on(global
                .transform_response_headers
                .as_ref()
                .map(|t| t.enabled)),
        }
    }
}

/// The steps that act on `api`'s requests, in the chain's order.
pub fn plan(api: &Api) -> Box<[Step]> {
    Step::ALL
        .into_iter()
        .filter(|step| step.acts_on(api))
        .collect()
}
