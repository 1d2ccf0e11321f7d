//! Label selectors in the guest (`app=web,env in (a,b),!legacy`), for
//! plugins that match objects against configured selectors.

/// One parsed requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Req>);

fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("set {rest:?} must be written (a,b)"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl Selector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top(s) {
            let p = part.trim();
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_owned())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::NotEq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                Req::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(i) = p.find(" notin ") {
                Req::NotIn(p[..i].trim().to_owned(), set(&p[i + 7..])?)
            } else if let Some(i) = p.find(" in ") {
                Req::In(p[..i].trim().to_owned(), set(&p[i + 4..])?)
            } else if !p.is_empty() && !p.contains(' ') {
                Req::Exists(p.to_owned())
            } else {
                return Err(format!("cannot parse selector requirement {p:?} in {s:?}"));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        let get = |k: &str| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        };
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v),
            Req::NotEq(k, v) => get(k) != Some(v),
            Req::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        let labels = vec![
            ("app".to_owned(), "web".to_owned()),
            ("env".to_owned(), "prod".to_owned()),
        ];
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app!=web", false),
            ("env in (prod,dev)", true),
            ("env notin (prod)", false),
            ("!legacy,app", true),
            ("app=web,env=dev", false),
        ] {
            assert_eq!(Selector::parse(s).unwrap().matches(&labels), want, "{s}");
        }
        assert!(Selector::parse("env in prod").is_err());
    }
}
