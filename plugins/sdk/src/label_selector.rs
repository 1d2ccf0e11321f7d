//! Conveniences around the host's [`LabelSelector`] (parsed and matched by
//! the host with the API server's grammar, so every language agrees).

use std::fmt;
use std::str::FromStr;

use crate::LabelSelector;

impl LabelSelector {
    /// Whether labels given as `&str` pairs match (they are copied to the
    /// host; for an object, [`LabelSelector::matches_object`] copies
    /// nothing).
    pub fn matches_pairs(&self, labels: &[(&str, &str)]) -> bool {
        let owned: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.matches(&owned)
    }

    /// Whether this is the empty selector, which matches everything (its
    /// canonical text is empty).
    pub fn is_everything(&self) -> bool {
        self.to_string().is_empty()
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical text (requirements sorted by key), from the host.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&LabelSelector::to_string(self))
    }
}

impl FromStr for LabelSelector {
    type Err = String;

    /// [`LabelSelector::parse`]: `"app=web,!legacy".parse::<LabelSelector>()`.
    fn from_str(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}
