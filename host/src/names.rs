//! Object names and namespaces, validated as the API server validates them
//! (apimachinery's `validation` package), so that what the local cluster
//! accepts a real one would too, and no name can become a path that leaves
//! the local cluster's folder.

/// Why a name or namespace is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what} {value:?} is invalid: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
}

/// Longest DNS-1123 label (namespaces, most names that become hostnames).
pub const LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (most object names).
pub const SUBDOMAIN_MAX: usize = 253;

/// How an error quotes a name, key or selector a caller gave: whole up to
/// 256 bytes, beyond that its start and its length. A plugin can pass 16
/// MiB as a namespace; quoted whole in each message that wraps the last,
/// it was eight copies of host heap, and a line no one reads in the log.
pub fn excerpt(text: &str) -> String {
    excerpt_of(&text)
}

/// [`excerpt`] of a value's text, formatted without building all of it
/// (a kind whose group is 16 MiB is not copied to be cut to 256 bytes).
pub fn excerpt_of(value: &dyn std::fmt::Display) -> String {
    use std::fmt::Write;
    const SHOWN: usize = 256;
    /// Keeps the first bytes written, up to one more than are shown (so
    /// a text of exactly `SHOWN` bytes is known whole), and counts them
    /// all. Once a piece is cut, nothing after it is kept: the start stays
    /// one run of the text.
    struct Head {
        kept: String,
        len: usize,
        full: bool,
    }
    impl Write for Head {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.len += s.len();
            if !self.full {
                let room = (SHOWN + 1).saturating_sub(self.kept.len());
                if s.len() <= room {
                    self.kept.push_str(s);
                } else {
                    self.kept.push_str(&s[..s.floor_char_boundary(room)]);
                    self.full = true;
                }
            }
            Ok(())
        }
    }
    let mut head = Head {
        kept: String::new(),
        len: 0,
        full: false,
    };
    // Writing to a String-like buffer cannot fail; a Display that fails
    // leaves what it wrote.
    let _ = write!(head, "{value}");
    if head.len <= SHOWN {
        return head.kept;
    }
    let cut = head.kept.floor_char_boundary(SHOWN);
    format!("{}... ({} bytes)", &head.kept[..cut], head.len)
}

fn invalid(what: &'static str, value: &str, reason: impl Into<String>) -> NameError {
    NameError::Invalid {
        what,
        value: excerpt(value),
        reason: reason.into(),
    }
}

fn label_chars(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-';
    if b.is_empty() {
        return Err("it is empty".into());
    }
    if !b.iter().all(|c| ok(*c)) {
        return Err("only lowercase letters, digits and '-' are allowed".into());
    }
    if !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return Err("it must start and end with a letter or digit".into());
    }
    Ok(())
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn dns1123_label(what: &'static str, s: &str) -> Result<(), NameError> {
    if s.len() > LABEL_MAX {
        return Err(invalid(
            what,
            s,
            format!("it is longer than {LABEL_MAX} characters"),
        ));
    }
    label_chars(s).map_err(|r| invalid(what, s, format!("{r} (a DNS-1123 label)")))
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn dns1123_subdomain(what: &'static str, s: &str) -> Result<(), NameError> {
    if s.len() > SUBDOMAIN_MAX {
        return Err(invalid(
            what,
            s,
            format!("it is longer than {SUBDOMAIN_MAX} characters"),
        ));
    }
    for part in s.split('.') {
        label_chars(part).map_err(|r| {
            invalid(
                what,
                s,
                format!("{r} in each dot-separated part (a DNS-1123 subdomain)"),
            )
        })?;
    }
    Ok(())
}

/// A path segment name (RBAC kinds: `system:controller:x` is valid): not
/// `.` or `..`, no `/` or `%`.
pub fn path_segment(what: &'static str, s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(invalid(what, s, "it is empty"));
    }
    if s == "." || s == ".." {
        return Err(invalid(what, s, "it may not be '.' or '..'"));
    }
    if s.contains('/') || s.contains('%') {
        return Err(invalid(what, s, "it may not contain '/' or '%'"));
    }
    if s.len() > SUBDOMAIN_MAX {
        return Err(invalid(
            what,
            s,
            format!("it is longer than {SUBDOMAIN_MAX} characters"),
        ));
    }
    Ok(())
}

/// Validates an object's namespace and name for a kind (by its `Kind`
/// name): namespaces are DNS-1123 labels, a Namespace's name too; the RBAC
/// kinds take path-segment names; every other kind a DNS-1123 subdomain.
pub fn validate_object(kind: &str, namespace: Option<&str>, name: &str) -> Result<(), NameError> {
    if let Some(ns) = namespace {
        dns1123_label("namespace", ns)?;
    }
    match kind {
        "Namespace" => dns1123_label("name", name),
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => path_segment("name", name),
        _ => dns1123_subdomain("name", name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_keep_short_text_and_cut_long_text_at_a_character() {
        assert_eq!(excerpt("default"), "default");
        assert_eq!(excerpt_of(&"default"), "default");
        let long = format!("{}{}", "a".repeat(255), "é".repeat(1000));
        let want = format!("{}... (2255 bytes)", "a".repeat(255));
        assert_eq!(excerpt(&long), want);
        assert_eq!(excerpt_of(&long), want);
        let exact = "b".repeat(256);
        assert_eq!(excerpt(&exact), exact);
        assert_eq!(excerpt_of(&exact), exact);
        // Written in pieces, one cut mid-character: the start is one run.
        struct Pieces;
        impl std::fmt::Display for Pieces {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a")?;
                f.write_str(&"é".repeat(200))?;
                f.write_str(&"b".repeat(100))
            }
        }
        let whole = format!("a{}{}", "é".repeat(200), "b".repeat(100));
        assert_eq!(excerpt_of(&Pieces), excerpt(&whole));
        assert_eq!(
            excerpt(&whole),
            format!("a{}... (501 bytes)", "é".repeat(127))
        );
    }

    #[test]
    fn names_follow_the_api_servers_rules() {
        for ok in ["a", "web-1", "a.b.c", "x9"] {
            assert!(
                validate_object("ConfigMap", Some("default"), ok).is_ok(),
                "{ok}"
            );
        }
        let long = "a".repeat(254);
        for bad in [
            "", "..", ".", "a/b", "../x", "A", "-a", "a-", "a..b", "a_b", &long,
        ] {
            let e = validate_object("ConfigMap", Some("default"), bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        for bad in ["", "..", "../../x", "a.b", "Default", &"n".repeat(64)] {
            let e = validate_object("ConfigMap", Some(bad), "ok").unwrap_err();
            assert!(e.to_string().starts_with("namespace"), "{e}");
        }
        assert!(validate_object("Namespace", None, "a.b").is_err());
        assert!(validate_object("ClusterRole", None, "system:controller:x").is_ok());
        assert!(validate_object("ClusterRole", None, "..").is_err());
        assert!(validate_object("ClusterRole", None, "a/b").is_err());
    }
}
