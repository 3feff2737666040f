//! The `sluice blobl` command.
