//! A kind as a grant names it: API group and plural, as RBAC writes it,
//! never a version.

use std::fmt;

use crate::kind::KindInfo;

/// A kind as a grant names it: API group and plural.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantKind {
    pub group: String,
    pub plural: String,
}

impl GrantKind {
    pub fn parse(s: &str) -> Result<Self, String> {
        let valid = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !s.starts_with('.')
            && !s.ends_with('.')
            && !s.contains("..");
        if !valid {
            return Err(format!(
                "access kind {s:?} is not a resource name: write the lowercase plural, with its API group outside the core group (configmaps, deployments.apps, widgets.example.com)"
            ));
        }
        let (plural, group) = match s.split_once('.') {
            Some((p, g)) => (p, g),
            None => (s, ""),
        };
        if group.split('.').next().is_some_and(is_version) {
            return Err(format!(
                "access kind {s:?} names a version: grants hold for every version, write {plural}.{}",
                group.split_once('.').map_or("", |(_, g)| g)
            ));
        }
        Ok(Self {
            group: group.to_owned(),
            plural: plural.to_owned(),
        })
    }

    pub fn of(info: &KindInfo) -> Self {
        Self {
            group: info.gvk.group.clone(),
            plural: info.plural.clone(),
        }
    }
}

impl fmt::Display for GrantKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    rest.starts_with(|c: char| c.is_ascii_digit())
        && rest
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
}
