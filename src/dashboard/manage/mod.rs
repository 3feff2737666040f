//! The management API under `/api`: an organisation's assets, certificates, webhooks,
//! APIs (plain OpenAPI and streaming) with their live view, status and AsyncAPI
//! documents, organisations, users and keys, gateway keys, the webhook delivery log and
//! the mapping playground; and the web console's files (a client of this API only).
//! One file per resource.

pub mod apis;
pub mod assets;
pub mod asyncapi;
pub mod certs;
pub mod console;
pub mod deliveries;
pub mod gateway_keys;
pub mod hooks;
pub mod live;
pub mod mapping;
pub mod orgs;
pub mod owned;
pub mod status;

/// What the management API keeps between requests, in this process.
pub struct ManageState {
    /// The web console's embedded files.
    pub console: console::Console,
    /// Serialises API writes in this process, so that the check for a listen path in use
    /// and the write that takes it are not interleaved with another such pair; it holds
    /// the listen paths in use, so a check need not read every stored API.
    pub api_writes: tokio::sync::Mutex<apis::ListenPaths>,
    /// Stored definitions compiled for their AsyncAPI documents, by id and a hash of
    /// the stored text, so that the public catalogue's readers do not compile one at
    /// every request.
    pub compiled: asyncapi::Compiled,
}

impl ManageState {
    pub fn new() -> ManageState {
        ManageState {
            console: console::Console::new(),
            api_writes: tokio::sync::Mutex::new(apis::ListenPaths::default()),
            compiled: asyncapi::Compiled::default(),
        }
    }
}

impl Default for ManageState {
    fn default() -> ManageState {
        ManageState::new()
    }
}
