//! apimachinery's label key and value validation, with its messages.

/// apimachinery's `RegexError`, verbatim (its doubled spaces included) so
/// messages read as the API server's do.
pub(super) fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{re}')"));
    out
}

pub(super) const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
pub(super) const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
pub(super) const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
pub(super) const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
pub(super) const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
pub(super) const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
/// Longest label name part and label value.
pub(super) const LABEL_MAX_LEN: usize = 63;
/// Longest DNS-1123 subdomain (a label key's prefix).
pub(super) const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`, without a regex engine.
pub(super) fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// The DNS-1123 subdomain regex: dot-separated lowercase labels that start
/// and end with an alphanumeric. (The regex puts no length on a label.)
pub(super) fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(l)) => {
                (f.is_ascii_lowercase() || f.is_ascii_digit())
                    && (l.is_ascii_lowercase() || l.is_ascii_digit())
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            }
            _ => false,
        }
    })
}

/// apimachinery's `content.IsLabelKey`: the problems with `key`, if any.
pub(super) fn label_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    // At most three parts: a key of a million `/`s is refused as one
    // with more than two, without building a million slices.
    let mut parts = key.splitn(3, '/');
    let name = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => name,
        (Some(prefix), Some(name), None) => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > DNS1123_SUBDOMAIN_MAX_LEN {
                    errs.push(format!(
                        "prefix part must be no more than {DNS1123_SUBDOMAIN_MAX_LEN} bytes"
                    ));
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!(
                        "prefix part {}",
                        regex_error(
                            DNS1123_SUBDOMAIN_ERR,
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"]
                        )
                    ));
                }
            }
            name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_ERR,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > LABEL_MAX_LEN {
        errs.push(format!(
            "name part must be no more than {LABEL_MAX_LEN} bytes"
        ));
    }
    if !is_label_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_ERR,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery's `content.IsLabelValue`: the problems with `value`.
pub(super) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_MAX_LEN {
        errs.push(format!("must be no more than {LABEL_MAX_LEN} bytes"));
    }
    if !value.is_empty() && !is_label_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

pub(super) fn validate_label_key(key: &str) -> Result<(), String> {
    let errs = label_key_errors(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {:?}: {}",
            crate::names::excerpt(key),
            errs.join("; ")
        ))
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`, which `i64::from_str` matches:
/// optional sign, decimal digits, no spaces or underscores.
pub(super) fn parse_int(s: &str) -> Option<i64> {
    s.parse().ok()
}
