//! The subcommands of the `harness` binary that have files of their own.

pub mod calibrate;
pub mod capture;
