//! The developer portal: what a publisher manages under `/api/portal/` (products, apps,
//! events published to a product) and what the portal's own pages call under
//! `/portal/api/` (the public catalogue, developer accounts and sessions, a developer's
//! apps). The rules of products, apps, subscriptions, sealed secrets and events are in
//! `domain`, and the gateway keys of apps in `keys`, over the store and with no HTTP in
//! them; the other modules are handlers over those.

pub mod catalogue;
pub mod devapps;
pub mod developers;
pub mod domain;
pub mod keys;
pub mod publisher;

use crate::dashboard::error::ApiError;
use domain::PortalError;

/// What the developer portal keeps between requests, in this process.
pub struct PortalState {
    /// The attempt limits and password hashing of developer accounts.
    pub accounts: developers::Accounts,
}

/// A rule's refusal as the API answers it.
impl From<PortalError> for ApiError {
    fn from(e: PortalError) -> ApiError {
        match e {
            PortalError::Invalid { .. } => ApiError::BadRequest(e.to_string()),
            PortalError::NotFound(what) => ApiError::not_found(what),
            PortalError::Conflict(message) => ApiError::Conflict(message),
            PortalError::NoSealer => ApiError::Conflict(e.to_string()),
            PortalError::Seal(message) => ApiError::Internal(message),
            PortalError::Store(e) => ApiError::Store(e),
            PortalError::Keys(e) => ApiError::from(e),
        }
    }
}
