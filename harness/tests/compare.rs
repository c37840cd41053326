//! The harness's integration tests: compare's command line, its report
//! formats, shards and merges, the faults it must catch, and the reference
//! data. One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

#[path = "adhoc_cli.rs"]
mod adhoc_cli;
#[path = "cli_support.rs"]
mod cli_support;
#[path = "compare_baseline.rs"]
mod compare_baseline;
#[path = "compare_cli.rs"]
mod compare_cli;
#[path = "compare_faults.rs"]
mod compare_faults;
#[path = "compare_html.rs"]
mod compare_html;
#[path = "compare_shards.rs"]
mod compare_shards;
#[path = "harness_cli.rs"]
mod harness_cli;
#[path = "reference_data.rs"]
mod reference_data;
#[path = "../../engine/tests/test_binaries.rs"]
mod test_binaries;
