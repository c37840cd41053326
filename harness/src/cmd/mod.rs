//! The subcommands of the `harness` binary that have files of their own.

pub mod calibrate;
pub mod capture;
pub mod corpus;
pub mod structure;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use harness::compare::{plan::names, Options, Paths};

/// The repository root: `given` (`--repo`), else the nearest directory
/// from the current one up that holds ci/thresholds.toml and
/// reference-data/ ([`find_repo`]), as a relative path (`.`, `..`, ...).
/// The error is one line saying what to do.
pub fn repo_root(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    find_repo(&cwd).ok_or_else(|| {
        format!(
            "{} is not inside the sharpi repository (no directory from it up holds \
             ci/thresholds.toml and reference-data/): run harness inside the repository or pass --repo DIR",
            cwd.display()
        )
    })
}

/// The repository root of `dir` as a path relative to it: `.` when `dir`
/// is the root, `..` one level below, and so on; `None` when no
/// directory from `dir` up holds ci/thresholds.toml and reference-data/.
pub fn find_repo(dir: &Path) -> Option<PathBuf> {
    let up = dir.ancestors().position(|d| {
        d.join("ci").join("thresholds.toml").is_file() && d.join("reference-data").is_dir()
    })?;
    Some(if up == 0 {
        PathBuf::from(".")
    } else {
        std::iter::repeat_n("..", up).collect()
    })
}

/// The one line that a subcommand built out of this binary prints:
/// which cargo feature it needs and how to run it with that feature.
pub fn feature_message(command: &str, feature: &str) -> String {
    format!(
        "harness: error: {command} needs the {feature} feature: \
         cargo run -p harness --release --features {feature} -- {command}"
    )
}

/// Prints [`feature_message`] on stderr; exit code 2.
pub fn feature_missing(command: &str, feature: &str) -> ExitCode {
    eprintln!("{}", feature_message(command, feature));
    ExitCode::from(2)
}

/// What `compare` and `calibrate` both take to pick the items and run the
/// engine: models and prompts by id or path, the paths, the device.
pub struct Selection<'a> {
    pub models: &'a [String],
    pub prompts: &'a [String],
    pub paths: &'a [String],
    pub greedy_steps: usize,
    pub threads: usize,
    pub device: Option<&'a str>,
    pub no_validation: bool,
}

impl Selection<'_> {
    /// Sets `opts` (whose `reference_dir` is set) from the selection; the
    /// error is one line naming the argument.
    pub fn apply(&self, opts: &mut Options) -> Result<(), String> {
        let models = names::resolve_models(&opts.reference_dir, self.models)?;
        opts.prompts = names::resolve_prompts(&opts.reference_dir, self.prompts)?;
        opts.models = models.ids;
        opts.model_files = models.files;
        opts.paths = Paths::parse(self.paths).map_err(|e| format!("--paths: {e}"))?;
        opts.greedy_steps = self.greedy_steps;
        opts.threads = self.threads;
        opts.progress = true;
        if let Some(d) = self.device {
            opts.device = d.parse().expect("infallible");
        }
        opts.validation &= !self.no_validation;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_feature_is_named_in_one_line() {
        let m = feature_message("mutants", "fault-injection");
        assert_eq!(
            m,
            "harness: error: mutants needs the fault-injection feature: \
             cargo run -p harness --release --features fault-injection -- mutants"
        );
        assert!(!m.contains('\n'));
    }

    #[test]
    fn the_repository_is_found_from_below_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(find_repo(&root), Some(PathBuf::from(".")));
        let below = root.join("harness").join("src");
        assert_eq!(find_repo(&below), Some(PathBuf::from("../..")));
        assert_eq!(find_repo(Path::new("/")), None);
    }
}
