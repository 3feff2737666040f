//! Sluice: a stream gateway. Stream definitions compile into graphs of inputs, processors
//! and outputs joined by bounded channels, with at-least-once delivery end to end.

#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod apidef;
pub mod backoff;
pub mod batching;
pub mod bus;
pub mod cache;
pub mod cli;
pub mod codec;
pub mod component;
pub mod config;
pub mod connect;
pub mod dashboard;
pub mod duration;
pub mod egress;
pub mod gateway;
pub mod http;
pub mod input;
pub mod limit;
pub mod logging;
pub mod mapping;
pub mod message;
pub mod metrics;
pub mod output;
pub mod processor;
pub mod rate_limit;
pub mod reserved;
pub mod secret;
pub mod server;
pub mod store;
pub mod stream;
pub mod telemetry;
pub mod testing;
pub mod value;
pub mod webhook;
