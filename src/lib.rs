//! Sluice: a stream gateway. Stream definitions compile into graphs of inputs, processors
//! and outputs joined by bounded channels, with at-least-once delivery end to end.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod mapping;
pub mod message;
pub mod value;
