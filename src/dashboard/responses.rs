//! The error answers that more than one operation of the OpenAPI document gives, each
//! written once: a handler names them by type in its `responses(...)`, beside the
//! answers that are its own. Each is an [`ErrorBody`] with a status, and its doc comment
//! is the description the document gives it. Nothing builds these values: the field is
//! public only so that the type, which the document reads, is not taken for dead code.

use utoipa::IntoResponses;

use super::error::ErrorBody;

// Any resource.

/// Bad JSON or an invalid field (named).
#[derive(IntoResponses)]
#[response(status = 400)]
pub struct BadJson(pub ErrorBody);

/// A bad query parameter.
#[derive(IntoResponses)]
#[response(status = 400)]
pub struct BadQuery(pub ErrorBody);

/// Missing or unknown credentials.
#[derive(IntoResponses)]
#[response(status = 401)]
pub struct Unauthorized(pub ErrorBody);

/// The path names nothing in the caller's organisation.
#[derive(IntoResponses)]
#[response(status = 404)]
pub struct NotFound(pub ErrorBody);

/// The body is too large.
#[derive(IntoResponses)]
#[response(status = 413)]
pub struct TooLarge(pub ErrorBody);

/// The body is not JSON.
#[derive(IntoResponses)]
#[response(status = 415)]
pub struct NotJson(pub ErrorBody);

// Organisations and users.

/// The caller is not an admin.
#[derive(IntoResponses)]
#[response(status = 403)]
pub struct NotAdmin(pub ErrorBody);

// API definitions, plain and streaming.

/// Not a JSON or YAML document, or a bad field or parameter.
#[derive(IntoResponses)]
#[response(status = 400)]
pub struct BadDefinition(pub ErrorBody);

/// Streaming is disabled in the dashboard's config.
#[derive(IntoResponses)]
#[response(status = 403)]
pub struct StreamingOff(pub ErrorBody);

/// The id or the listen path is taken.
#[derive(IntoResponses)]
#[response(status = 409)]
pub struct IdOrListenPathTaken(pub ErrorBody);

/// The listen path is taken.
#[derive(IntoResponses)]
#[response(status = 409)]
pub struct ListenPathTaken(pub ErrorBody);

/// Not JSON or YAML.
#[derive(IntoResponses)]
#[response(status = 415)]
pub struct NotJsonOrYaml(pub ErrorBody);

/// Not `application/vnd.sluice.streams.oas`.
#[derive(IntoResponses)]
#[response(status = 415)]
pub struct NotStreamsMediaType(pub ErrorBody);

/// The definition does not compile; `Errors` says where.
#[derive(IntoResponses)]
#[response(status = 422)]
pub struct DoesNotCompile(pub ErrorBody);

// The portal's publisher side.

/// The dashboard has no `secret` to seal subscription secrets with.
#[derive(IntoResponses)]
#[response(status = 409)]
pub struct NoSealer(pub ErrorBody);

// The portal's own API, for its readers and developers.

/// Not signed in.
#[derive(IntoResponses)]
#[response(status = 401)]
pub struct NotSignedIn(pub ErrorBody);

/// The CSRF token is wrong.
#[derive(IntoResponses)]
#[response(status = 403)]
pub struct BadCsrf(pub ErrorBody);

/// No such portal.
#[derive(IntoResponses)]
#[response(status = 404)]
pub struct NoPortal(pub ErrorBody);

/// The developer has no such app.
#[derive(IntoResponses)]
#[response(status = 404)]
pub struct NoSuchApp(pub ErrorBody);

/// No such app or subscription.
#[derive(IntoResponses)]
#[response(status = 404)]
pub struct NoSuchSubscription(pub ErrorBody);

/// Too many attempts from this address.
#[derive(IntoResponses)]
#[response(status = 429)]
pub struct TooManyAttempts(pub ErrorBody);

/// Too many reads from this address (`portal.reads_per_address` a minute).
#[derive(IntoResponses)]
#[response(status = 429)]
pub struct TooManyReads(pub ErrorBody);
