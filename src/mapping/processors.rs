//! Processors that are pure mapping.
