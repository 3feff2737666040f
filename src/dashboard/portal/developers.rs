//! The developer portal's accounts. Developers sign up (by e-mail address and password,
//! while the organisation's portal lets them: `open`, by `invite` or `off`), sign in to a
//! session kept in an HttpOnly cookie, sign out, and set a new password with a one-time
//! token that the operator's log or one of the organisation's webhooks delivers. A
//! developer is not a member of the organisation: their session reaches only the
//! portal's own endpoints (`/portal/api/orgs/{orgId}/...`) and their own apps.
//!
//! Every write carries an `X-CSRF-Token` header. Signed in, the token is derived from the
//! session (which a page reads from `GET .../session`); signed out, it is the value of a
//! cookie the same call sets (a double-submitted cookie). A site elsewhere can neither
//! read the one nor set the header. Sign-in always starts a new session and ends the one
//! the browser had, so a session planted before sign-in never becomes signed in.
//!
//! Anyone may call these endpoints, so each is bounded: attempts per client address per
//! minute and per account, Argon2 runs at once (each takes 19 MiB), developers per
//! portal, and the length of every field.

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Duration;

use http::{header, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;
use tracing::info;
use utoipa::{IntoParams, ToSchema};

use crate::dashboard::auth::{generate_key, hash_key};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::dashboard::request::{Ctx, PageQuery, Reply};
use crate::dashboard::responses::{
    BadCsrf, BadJson, BadQuery, NoPortal, NotFound, NotSignedIn, TooManyAttempts, Unauthorized,
};
use crate::http::cookie;
use crate::limit::{LocalLimiter, Rate};
use crate::secret::{hash_password, verify_password};
use crate::store::{DeveloperRecord, HookRecord, PortalSettings, TokenKind};

/// The path of an organisation's portal, and of everything under it.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct OrgPath {
    /// The organisation whose portal it is.
    #[serde(rename = "orgId")]
    pub org: String,
}

/// The path of one developer.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct DeveloperPath {
    /// The developer's id.
    #[serde(rename = "developerId")]
    id: String,
}

/// The session cookie: a random token; the store keeps its hash.
pub const SESSION_COOKIE: &str = "sluice_portal";
/// The signed-out double-submit cookie.
pub const CSRF_COOKIE: &str = "sluice_portal_csrf";
/// The header every write carries.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Where the cookies are sent: the portal's pages and its API, nothing else.
const COOKIE_PATH: &str = "/portal";
/// The shortest password: long enough that a guess per sign-in limit is hopeless.
pub const MIN_PASSWORD_LEN: usize = 10;
/// The longest password, so that hashing one stays cheap.
pub const MAX_PASSWORD_LEN: usize = 128;
/// The longest e-mail address (RFC 5321's path limit).
const MAX_EMAIL_LEN: usize = 254;
/// Argon2 runs at once: each holds 19 MiB and a core for tens of milliseconds.
const HASHING_AT_ONCE: usize = 2;
/// How long a request waits for a turn at Argon2 before it is told to come back.
const HASHING_WAIT: Duration = Duration::from_secs(5);
/// The event a reset token is delivered as through a webhook.
pub const RESET_EVENT: &str = "portal.password_reset";
/// What the delivery log shows in place of a reset token.
const REDACTED: &str = "[redacted]";

/// Who may sign up to an organisation's portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Signup {
    /// Anyone.
    Open,
    /// Whoever holds an invitation for their address.
    Invite,
    /// Nobody: the default.
    Off,
}

impl Signup {
    pub fn as_str(self) -> &'static str {
        match self {
            Signup::Open => "open",
            Signup::Invite => "invite",
            Signup::Off => "off",
        }
    }

    fn stored(text: &str) -> Signup {
        match text {
            "open" => Signup::Open,
            "invite" => Signup::Invite,
            _ => Signup::Off,
        }
    }
}

/// The limits and the hashing of the portal's accounts, shared by every request.
pub struct Accounts {
    limits: LocalLimiter,
    hashing: Semaphore,
    /// `portal.trusted_proxies`: peers whose `X-Forwarded-For` names the client.
    proxies: Vec<ipnet::IpNet>,
}

impl Default for Accounts {
    fn default() -> Self {
        Accounts::new(Vec::new())
    }
}

impl Accounts {
    pub fn new(proxies: Vec<ipnet::IpNet>) -> Self {
        Accounts {
            limits: LocalLimiter::new(),
            hashing: Semaphore::new(HASHING_AT_ONCE),
            proxies,
        }
    }

    /// One attempt against `bucket`'s `rate` per `per`; 429 when it is used up.
    pub(super) fn attempt(&self, bucket: &str, rate: u64, per: Duration) -> Result<(), ApiError> {
        let Ok(rate) = Rate::new(rate.max(1), per) else {
            return Ok(());
        };
        match self.limits.check_rate(bucket, rate) {
            Ok(d) if !d.allowed => Err(ApiError::TooManyRequests {
                message: "too many attempts: wait and try again".into(),
                retry_after: d.retry_after.map_or(1, |t| t.as_secs() + 1),
            }),
            _ => Ok(()),
        }
    }

    /// A turn at Argon2; refused after a short wait when the portal is busy hashing, so
    /// that waiters cannot pile up without end.
    async fn hashing_turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ApiError> {
        match tokio::time::timeout(HASHING_WAIT, self.hashing.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(e)) => Err(ApiError::Internal(e.to_string())),
            Err(_) => Err(ApiError::TooManyRequests {
                message: "the portal is busy: try again in a moment".into(),
                retry_after: 1,
            }),
        }
    }

    /// The Argon2id hash of `password`, made off the request threads.
    async fn hash(&self, password: String) -> Result<String, ApiError> {
        let _turn = self.hashing_turn().await?;
        let hash = tokio::task::spawn_blocking(move || hash_password(&password))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if hash.is_empty() {
            return Err(ApiError::Internal(
                "the password could not be hashed".into(),
            ));
        }
        Ok(hash)
    }

    /// Whether `password` is the one behind `phc`; with no account (`None`) a hash of
    /// its own is checked, so that an unknown address takes as long as a wrong password.
    async fn verify(&self, password: String, phc: Option<String>) -> Result<bool, ApiError> {
        let _turn = self.hashing_turn().await?;
        tokio::task::spawn_blocking(move || match phc {
            Some(phc) => verify_password(&password, &phc),
            None => {
                verify_password(&password, dummy_hash());
                false
            }
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))
    }
}

fn dummy_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| hash_password("no account has this password"))
}

/// A developer as the portal shows them.
#[derive(Debug, Serialize, ToSchema)]
pub struct Developer {
    pub id: String,
    pub email: String,
    pub created_at: String,
}

fn developer_view(d: &DeveloperRecord) -> Developer {
    Developer {
        id: d.id.clone(),
        email: d.email.clone(),
        created_at: rfc3339(d.created_at),
    }
}

/// Who is calling the portal, and the token every write of theirs must carry.
#[derive(Debug, Serialize, ToSchema)]
pub struct Session {
    /// Null when signed out.
    pub developer: Option<Developer>,
    /// Send it as `X-CSRF-Token` with every write.
    pub csrf: String,
    /// Whether this portal takes sign-ups.
    pub signup: Signup,
}

/// A signed-in developer and their session's token.
pub struct SignedIn {
    pub developer: DeveloperRecord,
    token: String,
}

/// Whether the client reached us over TLS: a proxy in front says so.
fn over_tls(ctx: &Ctx) -> bool {
    ctx.state.config.portal.secure_cookies
        || ctx
            .headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` value; `max_age` 0 removes the cookie.
fn set_cookie(ctx: &Ctx, name: &str, value: &str, max_age: u64) -> HeaderValue {
    let secure = if over_tls(ctx) { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path={COOKIE_PATH}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    );
    // Tokens are base64url and names are constants: always a valid header.
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""))
}

/// The CSRF token of a session: derived from its secret token, so nothing more is kept.
fn session_csrf(token: &str) -> String {
    let digest = Sha256::digest(format!("sluice-portal-csrf:{token}").as_bytes());
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, digest)
}

/// Whether `text` is a token this module made: `sk_` and 43 base64url characters.
fn well_formed(text: &str) -> bool {
    text.len() == 46
        && text.starts_with("sk_")
        && text[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The organisation whose portal the path names; 404 when there is none.
async fn portal_org(ctx: &Ctx) -> Result<String, ApiError> {
    let OrgPath { org } = ctx.path()?;
    match ctx.state.store.org(&org).await? {
        Some(o) => Ok(o.id),
        None => Err(ApiError::not_found("portal")),
    }
}

/// The developer signed in to this organisation's portal, if any.
pub async fn session(ctx: &Ctx) -> Result<Option<SignedIn>, ApiError> {
    let Some(token) = cookie(&ctx.headers, SESSION_COOKIE).filter(|t| well_formed(t)) else {
        return Ok(None);
    };
    let OrgPath { org } = ctx.path()?;
    let found = ctx
        .state
        .store
        .session_developer(&hash_key(token), now())
        .await?;
    Ok(found.filter(|d| d.org_id == org).map(|developer| SignedIn {
        developer,
        token: token.to_owned(),
    }))
}

/// The signed-in developer; 401 otherwise.
pub async fn signed_in(ctx: &Ctx) -> Result<SignedIn, ApiError> {
    session(ctx).await?.ok_or_else(|| {
        ApiError::Unauthorized(
            "sign in to the portal first (the session cookie is missing or has expired)".into(),
        )
    })
}

/// Refuses a write whose `X-CSRF-Token` is not the session's (signed in) or the CSRF
/// cookie's (signed out).
pub fn check_csrf(ctx: &Ctx, signed: Option<&SignedIn>) -> Result<(), ApiError> {
    let expected = match signed {
        Some(s) => session_csrf(&s.token),
        None => cookie(&ctx.headers, CSRF_COOKIE)
            .filter(|t| well_formed(t))
            .ok_or_else(|| {
                ApiError::Forbidden(
                    "no CSRF cookie: read GET /portal/api/orgs/{orgId}/session first".into(),
                )
            })?
            .to_owned(),
    };
    let sent = ctx
        .headers
        .get(CSRF_HEADER)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if bool::from(sent.ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "missing or wrong X-CSRF-Token: send the `csrf` of GET /portal/api/orgs/{orgId}/session".into(),
        ))
    }
}

fn invalid(field: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("invalid field `{field}`: {why}"))
}

/// An e-mail address, trimmed and in lower case; 400 naming `field` when it is not one.
pub fn check_email(field: &str, text: &str) -> Result<String, ApiError> {
    let email = text.trim().to_lowercase();
    let ok = email.len() <= MAX_EMAIL_LEN
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.is_empty() && !domain.contains('@')
        });
    if ok {
        Ok(email)
    } else {
        Err(invalid(
            field,
            format!("not an e-mail address (local@domain, at most {MAX_EMAIL_LEN} characters)"),
        ))
    }
}

fn check_password(field: &str, password: &str) -> Result<(), ApiError> {
    let n = password.chars().count();
    if !(MIN_PASSWORD_LEN..=MAX_PASSWORD_LEN).contains(&n) || password.contains('\0') {
        return Err(invalid(
            field,
            format!("a password is {MIN_PASSWORD_LEN} to {MAX_PASSWORD_LEN} characters"),
        ));
    }
    Ok(())
}

/// A bucket name for an address: hashed, so that what a caller sends stays short.
fn account_bucket(kind: &str, org: &str, email: &str) -> String {
    let digest = Sha256::digest(email.as_bytes());
    format!("portal:{kind}:{org}:{}", hex::encode(&digest[..12]))
}

/// The client's address as the limits count it: the TCP peer, or, when the peer is one
/// of `portal.trusted_proxies`, the nearest address in `X-Forwarded-For` that is not.
/// An IPv6 client counts by its /64, which one host usually holds whole.
pub(super) fn client(ctx: &Ctx) -> String {
    let trusted = &ctx.state.portal.accounts.proxies;
    let is_proxy = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut ip: IpAddr = ctx.peer;
    if is_proxy(&ip) {
        let forwarded = ctx
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|a| a.trim().parse::<IpAddr>().ok())
            .collect::<Vec<_>>();
        if let Some(found) = forwarded.into_iter().rev().find(|a| !is_proxy(a)) {
            ip = found;
        }
    }
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// One more attempt from the caller's address.
fn address_attempt(ctx: &Ctx) -> Result<(), ApiError> {
    ctx.state.portal.accounts.attempt(
        &format!("portal:addr:{}", client(ctx)),
        ctx.state.config.portal.attempts_per_address,
        Duration::from_secs(60),
    )
}

/// Failures one account may have from all addresses together, per attempts it may have
/// from one: an attacker with many addresses cannot lock a developer out cheaply.
const ACCOUNT_CEILING: u64 = 10;

/// The two limits on an account's failures: from this client, and from everywhere.
fn account_limits(ctx: &Ctx, kind: &str, org: &str, email: &str) -> [(String, u64); 2] {
    let per = ctx.state.config.portal.attempts_per_account;
    let account = account_bucket(kind, org, email);
    [
        (format!("{account}:{}", client(ctx)), per),
        (account, per.saturating_mul(ACCOUNT_CEILING)),
    ]
}

/// The checks of a write to the account endpoints (sign-up, sign-in, resets), which
/// anyone may call: one more attempt from the address, a portal that exists, and the
/// CSRF token of whatever session the browser has. Returns the portal's organisation.
async fn account_write(ctx: &Ctx) -> Result<String, ApiError> {
    address_attempt(ctx)?;
    let org = portal_org(ctx).await?;
    let current = session(ctx).await?;
    check_csrf(ctx, current.as_ref())?;
    Ok(org)
}

/// One more catalogue read from the caller's address.
pub(super) fn address_read(ctx: &Ctx) -> Result<(), ApiError> {
    ctx.state.portal.accounts.attempt(
        &format!("portal:read:{}", client(ctx)),
        ctx.state.config.portal.reads_per_address,
        Duration::from_secs(60),
    )
}

/// Starts a session for `developer` (ending the one the browser had): the reply's
/// cookie and body.
async fn start_session(
    ctx: &Ctx,
    developer: &DeveloperRecord,
    status: StatusCode,
) -> Result<Reply, ApiError> {
    if let Some(old) = cookie(&ctx.headers, SESSION_COOKIE).filter(|t| well_formed(t)) {
        ctx.state.store.delete_session(&hash_key(old)).await?;
    }
    let token = generate_key();
    let ttl = ctx.state.config.portal.session_ttl.0.as_secs().max(1);
    let at = now();
    ctx.state
        .store
        .insert_session(
            &hash_key(&token),
            developer,
            at,
            at.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX)),
        )
        .await?;
    let signup = portal_signup(ctx, &developer.org_id).await?;
    let mut reply = Reply::json(
        status,
        Session {
            developer: Some(developer_view(developer)),
            csrf: session_csrf(&token),
            signup,
        },
    )?;
    reply.headers.append(
        header::SET_COOKIE,
        set_cookie(ctx, SESSION_COOKIE, &token, ttl),
    );
    // The signed-out token is of no more use.
    reply
        .headers
        .append(header::SET_COOKIE, set_cookie(ctx, CSRF_COOKIE, "", 0));
    Ok(reply)
}

async fn portal_signup(ctx: &Ctx, org: &str) -> Result<Signup, ApiError> {
    Ok(Signup::stored(
        &ctx.state.store.portal_settings(org).await?.signup,
    ))
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/session",
    tag = "portal-developers",
    params(OrgPath),
    responses(
        (status = 200, description = "Who is signed in (null when nobody), and the CSRF token to send with writes; signed out, it also sets the CSRF cookie.", body = Session),
        NoPortal,
    ),
)]
pub async fn get_session(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = portal_org(&ctx).await?;
    let signup = portal_signup(&ctx, &org).await?;
    if let Some(s) = session(&ctx).await? {
        return Reply::json(
            StatusCode::OK,
            Session {
                developer: Some(developer_view(&s.developer)),
                csrf: session_csrf(&s.token),
                signup,
            },
        );
    }
    let (csrf, fresh) = match cookie(&ctx.headers, CSRF_COOKIE).filter(|t| well_formed(t)) {
        Some(token) => (token.to_owned(), false),
        None => (generate_key(), true),
    };
    let mut reply = Reply::json(
        StatusCode::OK,
        Session {
            developer: None,
            csrf: csrf.clone(),
            signup,
        },
    )?;
    if fresh {
        let ttl = ctx.state.config.portal.session_ttl.0.as_secs().max(1);
        reply.headers.append(
            header::SET_COOKIE,
            set_cookie(&ctx, CSRF_COOKIE, &csrf, ttl),
        );
    }
    Ok(reply)
}

/// What a developer sends to sign up.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignUp {
    /// At most 254 characters; the account's name in this portal.
    pub email: String,
    /// 10 to 128 characters.
    pub password: String,
    /// The invitation token, when sign-up is by invitation.
    pub invitation: Option<String>,
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/signup",
    tag = "portal-developers",
    params(OrgPath),
    request_body(content = SignUp, content_type = "application/json"),
    responses(
        (status = 201, description = "Signed up and signed in: the session cookie is set.", body = Session),
        BadJson,
        (status = 403, description = "Sign-up is off, the invitation is not valid for the address, or the CSRF token is wrong.", body = ErrorBody),
        NoPortal,
        (status = 409, description = "The address has an account, or the portal is full.", body = ErrorBody),
        TooManyAttempts,
    ),
)]
pub async fn signup(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = account_write(&ctx).await?;
    let input: SignUp = ctx.json()?;
    let email = check_email("email", &input.email)?;
    check_password("password", &input.password)?;
    let store = &ctx.state.store;
    let mode = portal_signup(&ctx, &org).await?;
    if mode == Signup::Off {
        return Err(ApiError::Forbidden(
            "this portal does not take sign-ups".into(),
        ));
    }
    let max = ctx.state.config.portal.max_developers;
    let full = || ApiError::Conflict(format!("this portal has its most developers ({max})"));
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    if store.count_developers(&org).await? >= max {
        return Err(full());
    }
    // By invitation, the invitation is checked first: without one, the answer must not
    // tell whether the address has an account.
    if mode == Signup::Invite {
        let token = input
            .invitation
            .as_deref()
            .filter(|t| well_formed(t))
            .ok_or_else(|| {
                ApiError::Forbidden(
                    "invalid field `invitation`: this portal takes sign-ups by invitation only"
                        .into(),
                )
            })?;
        let invited = store
            .take_token(&hash_key(token), TokenKind::Invite, &org, now())
            .await?;
        if invited.as_deref() != Some(email.as_str()) {
            return Err(ApiError::Forbidden(
                "invalid field `invitation`: unknown, used, expired, or for another address".into(),
            ));
        }
    }
    if store.developer_by_email(&org, &email).await?.is_some() {
        return Err(ApiError::Conflict(
            "the address has an account: sign in, or reset its password".into(),
        ));
    }
    let password_hash = ctx.state.portal.accounts.hash(input.password).await?;
    let at = now();
    let developer = DeveloperRecord {
        id: new_id(),
        org_id: org,
        email,
        password_hash,
        created_at: at,
        updated_at: at,
    };
    let added = store
        .insert_developer(&developer, max)
        .await
        .map_err(|e| match e {
            crate::store::StoreError::Conflict(_) => ApiError::Conflict(
                "the address has an account: sign in, or reset its password".into(),
            ),
            e => e.into(),
        })?;
    if !added {
        return Err(full());
    }
    info!(org_id = %developer.org_id, developer_id = %developer.id, "Portal: a developer signed up.");
    start_session(&ctx, &developer, StatusCode::CREATED).await
}

/// What a developer sends to sign in.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub email: String,
    pub password: String,
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/signin",
    tag = "portal-developers",
    params(OrgPath),
    request_body(content = SignIn, content_type = "application/json"),
    responses(
        (status = 200, description = "Signed in: a new session cookie is set and the old session, if any, ended.", body = Session),
        BadJson,
        (status = 401, description = "Wrong address or password.", body = ErrorBody),
        BadCsrf,
        NoPortal,
        (status = 429, description = "Too many attempts from this address or at this account; `Retry-After` says when to try again.", body = ErrorBody),
    ),
)]
pub async fn signin(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = account_write(&ctx).await?;
    let input: SignIn = ctx.json()?;
    let email = check_email("email", &input.email)?;
    if input.password.chars().count() > MAX_PASSWORD_LEN {
        return Err(invalid(
            "password",
            format!("at most {MAX_PASSWORD_LEN} characters"),
        ));
    }
    // Every attempt at the account counts, from this client and from all, and is
    // counted before the password is checked: counting only failures, after the check,
    // would let a burst of attempts sent at once all pass the limit.
    let window = Duration::from_secs(15 * 60);
    for (bucket, rate) in account_limits(&ctx, "signin", &org, &email) {
        ctx.state.portal.accounts.attempt(&bucket, rate, window)?;
    }
    let found = ctx.state.store.developer_by_email(&org, &email).await?;
    let phc = found.as_ref().map(|d| d.password_hash.clone());
    let ok = ctx
        .state
        .portal
        .accounts
        .verify(input.password, phc)
        .await?;
    match found {
        Some(developer) if ok => start_session(&ctx, &developer, StatusCode::OK).await,
        _ => {
            info!(org_id = %org, "Portal: a sign-in failed.");
            Err(ApiError::Unauthorized(
                "wrong e-mail address or password".into(),
            ))
        }
    }
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/signout",
    tag = "portal-developers",
    params(OrgPath),
    responses(
        (status = 200, description = "Signed out: the session is ended and its cookie removed.", body = Session),
        NotSignedIn,
        BadCsrf,
    ),
    security(("portal_session" = []))
)]
pub async fn signout(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = signed_in(&ctx).await?;
    check_csrf(&ctx, Some(&signed))?;
    ctx.state
        .store
        .delete_session(&hash_key(&signed.token))
        .await?;
    let csrf = generate_key();
    let signup = portal_signup(&ctx, &ctx.path::<OrgPath>()?.org).await?;
    let mut reply = Reply::json(
        StatusCode::OK,
        Session {
            developer: None,
            csrf: csrf.clone(),
            signup,
        },
    )?;
    let ttl = ctx.state.config.portal.session_ttl.0.as_secs().max(1);
    reply
        .headers
        .append(header::SET_COOKIE, set_cookie(&ctx, SESSION_COOKIE, "", 0));
    reply.headers.append(
        header::SET_COOKIE,
        set_cookie(&ctx, CSRF_COOKIE, &csrf, ttl),
    );
    Ok(reply)
}

/// What a developer sends to ask for a reset token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    pub email: String,
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/password-reset",
    tag = "portal-developers",
    params(OrgPath),
    request_body(content = ResetRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "Whether or not the address has an account: when it has, a reset token is delivered through the portal's reset webhook, or written to the dashboard's log when it has none.", body = Object),
        BadJson,
        BadCsrf,
        NoPortal,
        (status = 429, description = "Too many attempts from this address or for this account.", body = ErrorBody),
    ),
)]
pub async fn reset_request(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = account_write(&ctx).await?;
    let input: ResetRequest = ctx.json()?;
    let email = check_email("email", &input.email)?;
    for (bucket, rate) in account_limits(&ctx, "reset", &org, &email) {
        ctx.state
            .portal
            .accounts
            .attempt(&bucket, rate, Duration::from_secs(3600))?;
    }
    if let Some(developer) = ctx.state.store.developer_by_email(&org, &email).await? {
        let token = generate_key();
        let at = now();
        let ttl = i64::try_from(ctx.state.config.portal.reset_ttl.0.as_secs()).unwrap_or(3600);
        let expires_at = at.saturating_add(ttl);
        ctx.state
            .store
            .insert_token(
                &hash_key(&token),
                TokenKind::Reset,
                &org,
                &email,
                at,
                expires_at,
            )
            .await?;
        deliver_reset(&ctx, &developer, &token, expires_at).await?;
    }
    Reply::json(
        StatusCode::ACCEPTED,
        serde_json::json!({
            "Status": "OK",
            "Message": "if the address has an account, a reset token is on its way",
        }),
    )
}

/// Sends a reset token through the portal's reset webhook, or to the operator's log.
///
/// The delivery log is read by every member of the organisation, and a reset token opens
/// a developer's account: the delivery keeps the body it sends sealed (`body_sealed`),
/// and its `body`, which the log shows, has the token redacted. Without the dashboard's
/// secret nothing can be sealed, so the token goes to the operator's log instead.
async fn deliver_reset(
    ctx: &Ctx,
    developer: &DeveloperRecord,
    token: &str,
    expires_at: i64,
) -> Result<(), ApiError> {
    let (hook, sealer) = match (reset_hook(ctx, &developer.org_id).await?, &ctx.state.sealer) {
        (Some(hook), Some(sealer)) => (hook, sealer),
        (hook, _) => {
            let why = if hook.is_none() {
                "the portal has no reset webhook"
            } else {
                "the dashboard has no `secret` to seal it for the reset webhook"
            };
            // No mail server is assumed: the operator hands the token over.
            info!(
                org_id = %developer.org_id,
                developer_id = %developer.id,
                email = %developer.email,
                token = %token,
                expires_at = %rfc3339(expires_at),
                "Portal: password reset token ({why}; hand it to the developer)."
            );
            return Ok(());
        }
    };
    let body = |token: &str| {
        serde_json::json!({
            "event": RESET_EVENT,
            "org_id": developer.org_id,
            "email": developer.email,
            "token": token,
            "expires_at": rfc3339(expires_at),
        })
        .to_string()
        .into_bytes()
    };
    let max_attempts = i64::from(ctx.state.config.webhooks.max_attempts.max(1));
    let mut delivery = crate::webhook::stored::stored_delivery(
        hook,
        Some(sealer),
        RESET_EVENT,
        body(REDACTED),
        max_attempts,
    )
    .map_err(|e| ApiError::Internal(format!("the reset webhook cannot be opened: {e}")))?;
    delivery.body_sealed = Some(
        sealer
            .seal(&body(token))
            .map_err(|e| ApiError::Internal(e.to_string()))?,
    );
    let now_ms = chrono::Utc::now().timestamp_millis();
    ctx.state
        .store
        .enqueue_deliveries(
            std::slice::from_ref(&delivery),
            now_ms,
            ctx.state.config.webhooks.bounds(),
        )
        .await?;
    ctx.state.deliveries_queued.notify_one();
    info!(org_id = %developer.org_id, developer_id = %developer.id, delivery_id = %delivery.id, "Portal: a password reset token was sent through the reset webhook.");
    Ok(())
}

/// The portal's reset webhook: the one the settings name by its database id, and only
/// that one (a webhook whose webhook id happens to be that text is not it).
async fn reset_hook(ctx: &Ctx, org: &str) -> Result<Option<HookRecord>, ApiError> {
    let settings = ctx.state.store.portal_settings(org).await?;
    let Some(id) = settings.reset_hook_id else {
        return Ok(None);
    };
    Ok(ctx.state.store.hook(org, &id).await?.filter(|h| h.id == id))
}

/// What a developer sends to set a new password.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetConfirm {
    /// The reset token.
    pub token: String,
    /// 10 to 128 characters.
    pub password: String,
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/password-reset/confirm",
    tag = "portal-developers",
    params(OrgPath),
    request_body(content = ResetConfirm, content_type = "application/json"),
    responses(
        (status = 200, description = "The password is set and every session of the account ended; sign in with it.", body = Object),
        (status = 400, description = "Bad JSON, an invalid field (named), or a token that is unknown, used or expired.", body = ErrorBody),
        BadCsrf,
        NoPortal,
        TooManyAttempts,
    ),
)]
pub async fn reset_confirm(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = account_write(&ctx).await?;
    let input: ResetConfirm = ctx.json()?;
    check_password("password", &input.password)?;
    let bad_token = || invalid("token", "unknown, used or expired: ask for a new one");
    if !well_formed(&input.token) {
        return Err(bad_token());
    }
    let store = &ctx.state.store;
    let email = store
        .take_token(&hash_key(&input.token), TokenKind::Reset, &org, now())
        .await?
        .ok_or_else(bad_token)?;
    let developer = store
        .developer_by_email(&org, &email)
        .await?
        .ok_or_else(bad_token)?;
    let hash = ctx.state.portal.accounts.hash(input.password).await?;
    if !store
        .set_developer_password(&org, &developer.id, &hash, now())
        .await?
    {
        return Err(bad_token());
    }
    info!(org_id = %org, developer_id = %developer.id, "Portal: a password was reset.");
    Reply::json(
        StatusCode::OK,
        serde_json::json!({"Status": "OK", "Message": "password set: sign in with it"}),
    )
}

// The organisation's side: settings, invitations and its developers.

/// An organisation's portal settings; only an admin changes them.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `open`, `invite` or `off` (the default).
    pub signup: Signup,
    /// One of the organisation's webhooks (its id or webhook id) that carries
    /// password-reset tokens (event `portal.password_reset`); without one they go to
    /// the dashboard's log. It needs the dashboard's `secret`: a token travels sealed
    /// in its delivery, and the delivery log shows it `[redacted]`.
    #[serde(default)]
    pub reset_webhook: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/portal/settings",
    tag = "portal",
    responses(
        (status = 200, description = "The organisation's portal settings.", body = Settings),
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn get_settings(ctx: Ctx) -> Result<Reply, ApiError> {
    let s = ctx.state.store.portal_settings(&ctx.caller.org_id).await?;
    Reply::json(
        StatusCode::OK,
        Settings {
            signup: Signup::stored(&s.signup),
            reset_webhook: s.reset_hook_id,
        },
    )
}

#[utoipa::path(
    put,
    path = "/api/portal/settings",
    tag = "portal",
    request_body(content = Settings, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced.", body = Settings),
        BadJson,
        Unauthorized,
        (status = 403, description = "The caller is a member: only an admin changes the portal's settings.", body = ErrorBody),
        (status = 409, description = "A reset webhook while the dashboard has no `secret` to seal reset tokens with.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn put_settings(ctx: Ctx) -> Result<Reply, ApiError> {
    // Who sets the sign-up mode decides who gets in, and who names the reset webhook
    // receives every developer's reset token.
    ctx.caller
        .require_admin_to("change the portal's settings")?;
    let input: Settings = ctx.json()?;
    let org = ctx.caller.org_id.clone();
    let reset_hook_id = match input.reset_webhook.as_deref() {
        None => None,
        Some(id) => {
            // Tokens travel sealed in their deliveries, never readable in the log.
            super::domain::sealer(ctx.state.sealer.as_ref())?;
            let hook = if id.contains('\0') {
                None
            } else {
                ctx.state.store.hook(&org, id).await?
            };
            let hook = hook.ok_or_else(|| {
                invalid(
                    "reset_webhook",
                    format!("`{id}` is not a webhook of the organisation"),
                )
            })?;
            Some(hook.id)
        }
    };
    ctx.state
        .store
        .put_portal_settings(&PortalSettings {
            org_id: org,
            signup: input.signup.as_str().to_owned(),
            reset_hook_id: reset_hook_id.clone(),
            updated_at: now(),
        })
        .await?;
    Reply::json(
        StatusCode::OK,
        Settings {
            signup: input.signup,
            reset_webhook: reset_hook_id,
        },
    )
}

/// An invitation to ask for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvitationInput {
    /// The address that may sign up with it.
    pub email: String,
}

/// An invitation: its token is shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct Invitation {
    pub email: String,
    /// Hand it to the developer: they sign up with it.
    pub invitation: String,
    pub expires_at: String,
}

#[utoipa::path(
    post,
    path = "/api/portal/invitations",
    tag = "portal",
    request_body(content = InvitationInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Made; the token is shown this once and replaces any earlier invitation of the address.", body = Invitation),
        BadJson,
        Unauthorized,
        (status = 409, description = "The address has an account already.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn invite(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: InvitationInput = ctx.json()?;
    let email = check_email("email", &input.email)?;
    let org = ctx.caller.org_id.clone();
    if ctx
        .state
        .store
        .developer_by_email(&org, &email)
        .await?
        .is_some()
    {
        return Err(ApiError::Conflict(format!(
            "`{email}` has an account in the portal already"
        )));
    }
    let token = generate_key();
    let at = now();
    let ttl = i64::try_from(ctx.state.config.portal.invite_ttl.0.as_secs()).unwrap_or(86_400);
    let expires_at = at.saturating_add(ttl);
    ctx.state
        .store
        .insert_token(
            &hash_key(&token),
            TokenKind::Invite,
            &org,
            &email,
            at,
            expires_at,
        )
        .await?;
    Reply::json(
        StatusCode::CREATED,
        Invitation {
            email,
            invitation: token,
            expires_at: rfc3339(expires_at),
        },
    )
}

/// A page of the organisation's developers.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeveloperList {
    pub developers: Vec<Developer>,
    pub pages: i64,
}

#[utoipa::path(
    get,
    path = "/api/portal/developers",
    tag = "portal",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the portal's developers, oldest first.", body = DeveloperList),
        BadQuery,
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list_developers(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let (records, total) = ctx
        .state
        .store
        .list_developers(&ctx.caller.org_id, paging.page)
        .await?;
    Reply::json(
        StatusCode::OK,
        DeveloperList {
            developers: records.iter().map(developer_view).collect(),
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    delete,
    path = "/api/portal/developers/{developerId}",
    tag = "portal",
    params(DeveloperPath),
    responses(
        (status = 200, description = "Deleted with their sessions and apps; their apps' gateway keys are revoked.", body = Object),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete_developer(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = ctx.caller.org_id.clone();
    let DeveloperPath { id } = ctx.path()?;
    if !ctx.state.store.delete_developer(&org, &id).await? {
        return Err(ApiError::not_found("developer"));
    }
    super::keys::revoke_keys(&ctx.state.store, &org, super::keys::KeyOf::Developer(&id)).await?;
    Reply::outcome(StatusCode::OK, "developer deleted", Some(&id), &id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_passwords_are_checked() {
        assert_eq!(
            check_email("email", " Dev@Example.IO ").unwrap(),
            "dev@example.io"
        );
        for bad in [
            "",
            "a",
            "@x",
            "a@",
            "a@b@c",
            "a b@c",
            &format!("{}@x", "a".repeat(260)),
        ] {
            assert!(check_email("email", bad).is_err(), "{bad:?}");
        }
        assert!(check_password("password", "0123456789").is_ok());
        assert!(check_password("password", "short").is_err());
        assert!(check_password("password", &"x".repeat(129)).is_err());
    }

    #[test]
    fn tokens_are_recognised_and_the_csrf_token_is_not_the_session() {
        let token = generate_key();
        assert!(well_formed(&token), "{token}");
        assert!(!well_formed("sk_short"));
        assert!(!well_formed(&format!("{}!", &token[..45])));
        let csrf = session_csrf(&token);
        assert_ne!(csrf, token);
        assert_eq!(csrf, session_csrf(&token));
    }

    #[tokio::test]
    async fn attempts_run_out_and_say_when_to_come_back() {
        let accounts = Accounts::default();
        for _ in 0..3 {
            accounts.attempt("b", 3, Duration::from_secs(60)).unwrap();
        }
        match accounts.attempt("b", 3, Duration::from_secs(60)) {
            Err(ApiError::TooManyRequests { retry_after, .. }) => {
                assert!((1..=21).contains(&retry_after), "{retry_after}")
            }
            other => panic!("{other:?}"),
        }
        accounts
            .attempt("other", 3, Duration::from_secs(60))
            .unwrap();
    }
}
