//! An API's plan: the steps that act on its requests, each holding what it compiled from
//! the API, in the order they run. The list is the decision: a step not in it does not
//! run, and an API with none goes straight to the proxy. It is compiled when the table of
//! APIs is built, so nothing a step needs is worked out again per request.
//!
//! A new step is a file beside the others (its compiled form, `compile`, its run), and
//! here a variant, its place in [`compile`], its name and its arms in the phases.

use super::{
    api_limit, auth, cache, cors, headers, key_checks, key_limits, mock, size_limit, stream,
    validate, Ctx, Stop,
};
use crate::gateway::api::Api;
use crate::http::HttpResponse;
use crate::telemetry::{self, SpanKind};

/// One step with its compiled form.
pub enum Step {
    /// `middleware.global.cors`: preflights answered, answers to allowed origins marked.
    Cors(cors::Cors),
    /// The API's security requirements.
    Auth(auth::Auth),
    /// The authenticated key's state and rights, and the operations' allow and block
    /// lists.
    KeyChecks(key_checks::KeyChecks),
    /// The authenticated key's rate limit and quota.
    KeyLimits(key_limits::KeyLimits),
    /// `upstream.rateLimit` and the operations' `rateLimit`.
    ApiLimit(api_limit::ApiLimit),
    /// `requestSizeLimit`, global or per operation.
    SizeLimit(size_limit::SizeLimit),
    /// The operations' `validateRequest`.
    Validate(validate::Validate),
    /// `middleware.global.transformRequestHeaders`.
    RequestHeaders(headers::RequestHeaders),
    /// `x-sluice-streaming`: requests on the streams' paths go to the streams.
    Streams(stream::Streams),
    /// `middleware.global.cache`.
    Cache(cache::Cache),
    /// The operations' `mockResponse`.
    Mock(mock::Mock),
    /// `middleware.global.transformResponseHeaders`.
    ResponseHeaders(headers::ResponseHeaders),
}

/// The steps that act on an API's requests, in the order they run.
pub struct Plan(Box<[Step]>);

/// The plan of `api`: each step's compile says whether it acts on the API, and with what.
pub fn compile(api: &Api) -> Plan {
    let steps = [
        cors::Cors::compile(api).map(Step::Cors),
        auth::Auth::compile(api).map(Step::Auth),
        key_checks::KeyChecks::compile(api).map(Step::KeyChecks),
        key_limits::KeyLimits::compile(api).map(Step::KeyLimits),
        api_limit::ApiLimit::compile(api).map(Step::ApiLimit),
        size_limit::SizeLimit::compile(api).map(Step::SizeLimit),
        validate::Validate::compile(api).map(Step::Validate),
        headers::RequestHeaders::compile(api).map(Step::RequestHeaders),
        stream::Streams::compile(api).map(Step::Streams),
        cache::Cache::compile(api).map(Step::Cache),
        mock::Mock::compile(api).map(Step::Mock),
        headers::ResponseHeaders::compile(api).map(Step::ResponseHeaders),
    ];
    Plan(steps.into_iter().flatten().collect())
}

impl Step {
    /// The step's name, as its trace span is called.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Cors(_) => "cors",
            Step::Auth(_) => "auth",
            Step::KeyChecks(_) => "key_checks",
            Step::KeyLimits(_) => "key_limits",
            Step::ApiLimit(_) => "rate_limit",
            Step::SizeLimit(_) => "size_limit",
            Step::Validate(_) => "validate",
            Step::RequestHeaders(_) => "request_headers",
            Step::Streams(_) => "streams",
            Step::Cache(_) => "cache",
            Step::Mock(_) => "mock",
            Step::ResponseHeaders(_) => "response_headers",
        }
    }

    /// The step's part before the upstream. `span` is the step's own, when it has one.
    /// Every step has an arm: a new step cannot be listed yet never run.
    async fn request<'a>(
        &'a self,
        ctx: &mut Ctx<'a>,
        span: Option<&telemetry::Span>,
    ) -> Result<(), Stop> {
        match self {
            Step::Cors(cors) => cors.request(ctx)?,
            Step::Auth(auth) => auth.run(ctx).await?,
            Step::KeyChecks(checks) => checks.run(ctx)?,
            Step::KeyLimits(limits) => limits.run(ctx).await?,
            Step::ApiLimit(limit) => limit.run(ctx).await?,
            Step::SizeLimit(limit) => limit.run(ctx).await?,
            Step::Validate(validate) => validate.run(ctx).await?,
            Step::RequestHeaders(transform) => transform.run(ctx),
            Step::Streams(streams) => streams.run(ctx, span).await?,
            Step::Cache(cache) => cache.lookup(ctx)?,
            Step::Mock(mock) => mock.run(ctx)?,
            // It acts on the answer.
            Step::ResponseHeaders(_) => {}
        }
        Ok(())
    }

    /// The step's part on the answer.
    fn response(&self, ctx: &mut Ctx<'_>, resp: &mut HttpResponse) {
        match self {
            Step::Cors(cors) => cors.mark(ctx, resp),
            Step::ResponseHeaders(transform) => transform.run(resp),
            // They act on the request only.
            Step::Auth(_)
            | Step::KeyChecks(_)
            | Step::KeyLimits(_)
            | Step::ApiLimit(_)
            | Step::SizeLimit(_)
            | Step::Validate(_)
            | Step::RequestHeaders(_)
            | Step::Streams(_)
            | Step::Cache(_)
            | Step::Mock(_) => {}
        }
    }

    /// Whether the step gets a trace span of its own: those that act on the request.
    fn traced(&self) -> bool {
        !matches!(self, Step::Cors(_) | Step::ResponseHeaders(_))
    }
}

impl Plan {
    /// No step acts on the API's requests: they go straight to the proxy.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn steps(&self) -> &[Step] {
        &self.0
    }

    /// The request steps, in order, until one answers.
    pub async fn request<'a>(&'a self, ctx: &mut Ctx<'a>) -> Result<(), Stop> {
        for step in self.steps() {
            // A span for each step that acts on the request, ended as the step ends.
            let span = ctx
                .trace
                .filter(|_| step.traced())
                .and_then(|t| t.child(step.name(), SpanKind::Internal));
            step.request(ctx, span.as_ref()).await?;
        }
        Ok(())
    }

    /// The response steps on `resp`, whether the upstream or a step gave it: the
    /// `X-RateLimit-*` headers of the tightest limit met, then each step's part, the
    /// last step first, so that the first step (CORS) has the last word.
    pub fn response(&self, ctx: &mut Ctx<'_>, mut resp: HttpResponse) -> HttpResponse {
        if let Some(d) = ctx.limit {
            super::limit_headers(&mut resp, &d);
        }
        for step in self.steps().iter().rev() {
            step.response(ctx, &mut resp);
        }
        resp
    }
}

#[cfg(test)]
mod tests;
