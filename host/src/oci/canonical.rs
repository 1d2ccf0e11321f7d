//! One spelling for each repository, so that a signature rule cannot be
//! evaded by writing its registry another way. `reg.internal/x`,
//! `REG.internal:443/x` and `reg.internal:0443/x` reach the same server;
//! `nginx`, `library/nginx`, `docker.io/nginx`, `index.docker.io/nginx`
//! and `registry-1.docker.io/library/nginx` are one Docker Hub repository.
//! References and rule prefixes are both brought to that spelling before
//! they are compared.
//!
//! Matching errs towards a match: ports 443 and 80 are both dropped
//! (whichever the registry speaks, one of them is its default) and
//! repositories are compared lowercased (the grammar allows only
//! lowercase, except in Docker Hub names, where the hub refuses it). What
//! cannot be seen from the text is not matched: another name or an
//! address that resolves to the same server is another registry to the
//! policy; give it its own rule, or use `*`.

use super::Reference;

/// Docker Hub's canonical host; its aliases are read as it.
pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_ALIASES: [&str; 3] = [DOCKER_HUB, "index.docker.io", "registry-1.docker.io"];

/// `host[:port]` as one spelling: lowercase, without a trailing dot,
/// without a default port (443, 80), the port without leading zeros, and
/// Docker Hub's aliases as `docker.io`.
pub fn registry(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    // An IPv6 literal keeps its brackets; its port follows the `]`.
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((addr, after)) => (format!("[{addr}]"), after.strip_prefix(':')),
            None => (host.clone(), None),
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                (name.to_owned(), Some(port))
            }
            _ => (host.clone(), None),
        },
    };
    let name = name.trim_end_matches('.');
    let name = if DOCKER_HUB_ALIASES.contains(&name) {
        DOCKER_HUB
    } else {
        name
    };
    let port = port
        .map(|p| p.trim_start_matches('0'))
        .and_then(|p| match p {
            // "0", "00": port zero, kept as written.
            "" => Some("0".to_owned()),
            "443" | "80" => None,
            p => Some(p.to_owned()),
        });
    match port {
        Some(port) => format!("{name}:{port}"),
        None => name.to_owned(),
    }
}

/// `reference`'s `registry/repository` in the one spelling.
pub fn name(reference: &Reference) -> String {
    join(&registry(reference.registry()), reference.repository())
}

/// The canonical `registry/repository` prefixes a rule's prefix covers:
/// one, except for a single name under Docker Hub (`docker.io/nginx`),
/// which covers both the official image (`library/nginx`) and the
/// namespace (`nginx/...`). A first segment with no `.` or `:` that is not
/// `localhost` is a Docker Hub path, as in references.
pub fn prefixes(prefix: &str) -> Vec<String> {
    let prefix = prefix.trim().trim_end_matches('/');
    let (host, path) = match prefix.split_once('/') {
        Some((first, rest)) if is_host(first) => (registry(first), rest),
        None if is_host(prefix) => (registry(prefix), ""),
        _ => (DOCKER_HUB.to_owned(), prefix),
    };
    let path = path.to_ascii_lowercase();
    if path.is_empty() {
        return vec![host];
    }
    if host == DOCKER_HUB && !path.contains('/') {
        return vec![format!("{host}/library/{path}"), format!("{host}/{path}")];
    }
    vec![format!("{host}/{path}")]
}

/// Whether `name` (canonical) is `prefix` (canonical) or lies under it,
/// on whole path segments.
pub fn covers(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Docker's rule for whether a reference's first segment is a registry.
fn is_host(segment: &str) -> bool {
    segment.contains('.') || segment.contains(':') || segment.eq_ignore_ascii_case("localhost")
}

fn join(registry: &str, repository: &str) -> String {
    let repository = repository.to_ascii_lowercase();
    if registry == DOCKER_HUB && !repository.contains('/') {
        return format!("{registry}/library/{repository}");
    }
    format!("{registry}/{repository}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn canonical(reference: &str) -> String {
        name(&reference.parse().unwrap())
    }

    #[test]
    fn registry_spellings_of_one_server_are_one() {
        for (written, want) in [
            ("reg.internal", "reg.internal"),
            ("REG.Internal", "reg.internal"),
            ("reg.internal:443", "reg.internal"),
            ("reg.internal:80", "reg.internal"),
            ("reg.internal:0443", "reg.internal"),
            ("reg.internal.", "reg.internal"),
            ("reg.internal:5000", "reg.internal:5000"),
            ("reg.internal:05000", "reg.internal:5000"),
            ("index.docker.io", "docker.io"),
            ("registry-1.docker.io:443", "docker.io"),
            ("[::1]:443", "[::1]"),
            ("[::1]:5000", "[::1]:5000"),
            ("localhost:5000", "localhost:5000"),
        ] {
            assert_eq!(registry(written), want, "{written}");
        }
    }

    /// Every spelling of a reference to one repository has one name, and
    /// the rule prefixes written for it cover all of them.
    #[test]
    fn a_rule_covers_every_spelling_of_its_repositories() {
        let table: &[(&str, &[&str], &[&str])] = &[
            (
                "reg.internal",
                &[
                    "reg.internal/x:1",
                    "reg.internal:443/x:1",
                    "reg.internal:80/x:1",
                    "reg.internal:0443/x:1",
                    "REG.internal/x:1",
                    "Reg.Internal:443/team/x@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                ],
                &[
                    "reg.internal:5000/x:1",
                    "reg.internalx/x:1",
                    "other.internal/reg.internal/x:1",
                    "x:1",
                ],
            ),
            (
                "REG.internal:443/team",
                &["reg.internal/team/x:1", "reg.internal:443/team/y/z:1"],
                &["reg.internal/teamx/x:1", "reg.internal/other/x:1"],
            ),
            (
                "reg.internal:5000",
                &["reg.internal:5000/x:1", "REG.INTERNAL:05000/x:1"],
                &["reg.internal/x:1", "reg.internal:5001/x:1"],
            ),
            (
                "docker.io/library/nginx",
                &[
                    "nginx",
                    "nginx:1.27",
                    "library/nginx:1",
                    "docker.io/nginx:1",
                    "docker.io/library/nginx:1",
                    "index.docker.io/nginx:1",
                    "index.docker.io/library/nginx:1",
                    "registry-1.docker.io/nginx:1",
                    "registry-1.docker.io/library/nginx:1",
                    "registry-1.docker.io:443/library/nginx:1",
                    "DOCKER.IO/library/nginx:1",
                ],
                &["nginxx:1", "someone/nginx:1", "docker.io/library/nginx2:1"],
            ),
            (
                "index.docker.io/nginx",
                &[
                    "nginx:1",
                    "registry-1.docker.io/library/nginx:1",
                    // A single name is both the official image and the
                    // namespace.
                    "nginx/tools:1",
                ],
                &["someone/nginx:1"],
            ),
            (
                "registry-1.docker.io",
                &["busybox:1", "someone/x:1", "docker.io/a/b/c:1"],
                &["quay.io/x:1"],
            ),
            (
                "library",
                &["busybox:1", "index.docker.io/alpine:3"],
                &["someone/x:1"],
            ),
        ];
        for (prefix, covered, not_covered) in table {
            let prefixes = prefixes(prefix);
            for reference in *covered {
                let name = canonical(reference);
                assert!(
                    prefixes.iter().any(|p| covers(p, &name)),
                    "rule {prefix:?} ({prefixes:?}) must cover {reference:?} ({name})"
                );
            }
            for reference in *not_covered {
                let name = canonical(reference);
                assert!(
                    !prefixes.iter().any(|p| covers(p, &name)),
                    "rule {prefix:?} ({prefixes:?}) must not cover {reference:?} ({name})"
                );
            }
        }
    }
}
