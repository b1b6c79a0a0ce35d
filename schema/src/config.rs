//! Loading a binary's TOML configuration file (feature `config`): the error type both binaries
//! share, and the read + parse step. Each binary's own config module owns its sections, defaults
//! and validation.

use std::path::{Path, PathBuf};

/// Configuration failed to load or validate.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// File.
        path: PathBuf,
        /// Parser message (names the key and line).
        message: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Parses TOML text (`path` only names it in errors). Unknown keys are refused where the types
/// say `deny_unknown_fields`.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })
}

/// Reads and parses a TOML file.
pub fn load_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    parse_toml(&text, path)
}
