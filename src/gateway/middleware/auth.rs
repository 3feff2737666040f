//! Authentication: the request must satisfy one of the API's security requirements
//! (each a set of schemes that must all pass). Missing or bad credentials answer 401.

use std::sync::Arc;

use http::StatusCode;
use smallvec::SmallVec;

use super::{error, Ctx, Verdict};
use crate::gateway::api::{self, Api, Scheme};
use crate::gateway::auth::{api_key, basic, hmac, jwt, AuthError};
use crate::gateway::events::EventKind;
use crate::gateway::keys::Session;

/// What one scheme established.
enum Passed {
    Key(Arc<Session>),
    Identity(String, serde_json::Map<String, serde_json::Value>),
}

/// The API's security requirements, with their schemes' verifiers.
pub struct Auth {
    requirements: Arc<api::Auth>,
    /// A refusal asks for HTTP basic credentials: a scheme takes them.
    asks_basic: bool,
}

impl Auth {
    /// When the API has security requirements.
    pub fn compile(api: &Api) -> Option<Self> {
        let requirements = api.auth.clone()?;
        let asks_basic = requirements
            .schemes
            .iter()
            .any(|s| matches!(s.scheme, Scheme::Basic));
        Some(Auth {
            requirements,
            asks_basic,
        })
    }

    pub async fn run(&self, ctx: &mut Ctx<'_>) -> Verdict {
        run(&self.requirements, self.asks_basic, ctx).await
    }
}

async fn run(auth: &api::Auth, asks_basic: bool, ctx: &mut Ctx<'_>) -> Verdict {
    let req = ctx.take_req();
    let (parts, body) = req.into_parts();
    let mut first_error: Option<AuthError> = None;
    // Most requirements name one or two schemes: no allocation for them.
    let mut passed_alt: Option<SmallVec<[Passed; 2]>> = None;
    'alternatives: for alt in &auth.alternatives {
        let mut passed = SmallVec::new();
        for &i in alt {
            match check(ctx, &auth.schemes[i].scheme, &parts).await {
                Ok(p) => passed.push(p),
                Err(e) => {
                    // A real failure says more than "missing" from another scheme.
                    if first_error.as_ref().is_none_or(|f| {
                        matches!(f, AuthError::Missing) && !matches!(e, AuthError::Missing)
                    }) {
                        first_error = Some(e);
                    }
                    continue 'alternatives;
                }
            }
        }
        passed_alt = Some(passed);
        break;
    }
    ctx.req = http::Request::from_parts(parts, body);
    match passed_alt {
        Some(passed) => {
            for p in passed {
                match p {
                    Passed::Key(s) => {
                        if ctx.session.is_none() {
                            ctx.identity = Some(s.id.clone());
                            ctx.session = Some(s);
                        }
                    }
                    Passed::Identity(id, claims) => {
                        if ctx.identity.is_none() {
                            ctx.identity = Some(id);
                        }
                        if ctx.claims.is_none() {
                            ctx.claims = Some(claims);
                        }
                    }
                }
            }
            Ok(())
        }
        None => {
            let e = first_error.unwrap_or(AuthError::Missing);
            let message = match &e {
                AuthError::Missing => "authorization missing".to_owned(),
                other => other.to_string(),
            };
            ctx.gw.events.publish(
                EventKind::AuthFailure,
                &ctx.api.id,
                None,
                ctx.rest,
                &message,
            );
            let status = match e {
                AuthError::KeyFetch(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            };
            let mut resp = error(status, &message);
            if asks_basic {
                resp.headers_mut().insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Basic realm=\"sluice\""),
                );
            }
            Err(resp)
        }
    }
}

/// Schemes other than API keys are boxed where they wait (a key fetch, a password
/// hash, a store query): their futures are large, and every request's future would
/// otherwise carry their room, whichever scheme it uses.
async fn check(
    ctx: &Ctx<'_>,
    scheme: &Scheme,
    parts: &http::request::Parts,
) -> Result<Passed, AuthError> {
    let store_down = |_| AuthError::KeyFetch("the key store is unavailable".into());
    match scheme {
        Scheme::ApiKey {
            location,
            name,
            header,
        } => {
            let token = api_key::extract(parts, *location, name, header.as_ref())
                .ok_or(AuthError::Missing)?;
            let session = ctx
                .gw
                .keys
                .by_token(&token)
                .await
                .map_err(store_down)?
                .ok_or_else(|| AuthError::Invalid("the key is not valid".into()))?;
            Ok(Passed::Key(session))
        }
        Scheme::Basic => {
            let (user, password) = basic::credentials(parts)?;
            let session = Box::pin(ctx.gw.keys.by_basic(&user, &password))
                .await
                .map_err(store_down)?
                .ok_or_else(|| AuthError::Invalid("user name or password is wrong".into()))?;
            Ok(Passed::Key(session))
        }
        Scheme::Jwt(verifier) => {
            let token = jwt::bearer(parts)?;
            let claims = Box::pin(verifier.verify(token)).await?;
            Ok(Passed::Identity(claims.identity, claims.claims))
        }
        Scheme::Hmac(settings) => {
            let sig = hmac::parse(parts)?;
            let (session, secret) = Box::pin(ctx.gw.keys.hmac_secret(&sig.key_id))
                .await
                .map_err(store_down)?
                .ok_or_else(|| AuthError::Invalid("unknown signing key".into()))?;
            hmac::verify(parts, &sig, &secret, settings)?;
            Ok(Passed::Key(session))
        }
    }
}
