//! HMAC signature settings of an API definition (a `signature` scheme): which algorithms
//! are accepted and how fresh a request must be, checked when the definition loads.

use serde::Deserialize;

/// Default for [`HmacSettings::allowed_clock_skew`]: five minutes.
pub const DEFAULT_CLOCK_SKEW: u64 = 300;

/// A supported signature algorithm, named as in the draft (`hmac-sha256`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HmacAlgorithm {
    /// `hmac-sha1`: weak, accepted only for old clients and only when allowed.
    Sha1,
    /// `hmac-sha256`.
    Sha256,
    /// `hmac-sha384`.
    Sha384,
    /// `hmac-sha512`.
    Sha512,
}

impl HmacAlgorithm {
    /// Every supported algorithm.
    pub const ALL: [HmacAlgorithm; 4] = [Self::Sha1, Self::Sha256, Self::Sha384, Self::Sha512];

    /// The name used in the `algorithm` parameter.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha1 => "hmac-sha1",
            Self::Sha256 => "hmac-sha256",
            Self::Sha384 => "hmac-sha384",
            Self::Sha512 => "hmac-sha512",
        }
    }

    /// The algorithm called `name` (case-insensitive), if supported.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for HmacAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// HMAC settings of an API definition.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HmacSettings {
    /// Whether the API requires HMAC signatures; read by the middleware, not by
    /// [`verify`].
    #[serde(default)]
    pub enabled: bool,
    /// Algorithm names accepted (`hmac-sha256`, ...). Empty accepts every supported
    /// algorithm.
    #[serde(default)]
    pub allowed_algorithms: Vec<String>,
    /// How far, in seconds, the signed `Date` header (or `(created)`) may be from the
    /// gateway's clock. 0 turns the freshness check off, which allows replays.
    #[serde(default = "default_clock_skew")]
    pub allowed_clock_skew: u64,
}

fn default_clock_skew() -> u64 {
    DEFAULT_CLOCK_SKEW
}

impl Default for HmacSettings {
    fn default() -> Self {
        HmacSettings {
            enabled: false,
            allowed_algorithms: Vec::new(),
            allowed_clock_skew: DEFAULT_CLOCK_SKEW,
        }
    }
}

impl HmacSettings {
    /// Checks the settings when an API definition loads, so a typo in an algorithm name
    /// is an error at load time instead of every request being refused.
    pub fn validate(&self) -> Result<(), String> {
        for name in &self.allowed_algorithms {
            if HmacAlgorithm::from_name(name).is_none() {
                let known: Vec<_> = HmacAlgorithm::ALL.iter().map(|a| a.name()).collect();
                return Err(format!(
                    "allowedAlgorithms: unknown algorithm {name:?}; expected one of {}",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }

    pub fn allows(&self, algorithm: HmacAlgorithm) -> bool {
        self.allowed_algorithms.is_empty()
            || self
                .allowed_algorithms
                .iter()
                .any(|n| n.eq_ignore_ascii_case(algorithm.name()))
    }
}
