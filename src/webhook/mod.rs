//! Outgoing webhooks: the signature scheme, body templates, and the worker that delivers
//! the store's queue of calls at least once.

pub mod delivery;
pub mod sign;
pub mod template;

pub use delivery::{Deliverer, DeliveryConfig, DeliveryError};
pub use template::{TemplateError, Templates};
