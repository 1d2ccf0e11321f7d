//! The reads a pull makes from a registry, each body capped, through one
//! authenticated session per pull.
//!
//! oci-client reads manifests, token responses and error bodies whole
//! (`Response::bytes`), so a registry answering a manifest request with
//! gigabytes costs the host gigabytes. A pull therefore does its own
//! requests, with the distribution protocol's few steps: a request, on
//! `401` the `WWW-Authenticate` challenge answered once (a bearer token
//! from the realm it names, with the pull's credentials, or the
//! credentials as Basic auth), then the request again. Every body is read
//! by [`Session::read_capped`] under a limit known before the first byte:
//! a `Content-Length` over it is refused unread, and a body without one is
//! cut off at the limit, so a hostile registry costs at most the limit in
//! memory. Error bodies are read to [`MAX_ERROR_BODY_BYTES`] and reach a
//! message only as an excerpt. The pull's deadline ([`super::PullOptions`])
//! bounds the time; this module bounds the bytes.
//!
//! Redirects are followed ([`super::Transport::http_client`]): registries
//! send blobs to their storage on another host. There the `Authorization`
//! header is dropped, the same caps apply, and the bytes are checked
//! against their digest as any others.

use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url};

use super::{Credentials, Error, Reference, Result, Transport, transport};

/// Largest manifest or index read: containerd's limit.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest token response read. Tokens are a few KiB of JWT.
pub const MAX_TOKEN_BYTES: u64 = 1 << 20;
/// The most of an error body read, enough for an OCI error envelope; a
/// message quotes an excerpt of it.
pub const MAX_ERROR_BODY_BYTES: u64 = 16 << 10;

/// One pull's requests to one repository of one registry, with the
/// credentials the pull was given and the authorization they earned.
pub(crate) struct Session<'a> {
    http: reqwest::Client,
    /// `scheme://registry/v2/repository/`.
    base: Url,
    reference: &'a str,
    registry: String,
    repository: String,
    credentials: &'a Credentials,
    /// The `Authorization` header the challenge earned.
    authorization: Option<HeaderValue>,
    /// Answered a challenge already: a second `401` is a refusal.
    challenged: bool,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("base", &self.base.as_str())
            .field("credentials", self.credentials)
            .finish_non_exhaustive()
    }
}

/// What a `WWW-Authenticate` header asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// The OCI error envelope (`{"errors":[{"code":..,"message":..}]}`).
#[derive(serde::Deserialize)]
struct Envelope {
    errors: Vec<EnvelopeError>,
}

#[derive(serde::Deserialize)]
struct EnvelopeError {
    code: String,
    #[serde(default)]
    message: String,
}

impl<'a> Session<'a> {
    /// A session for `parsed`'s repository; no request is sent yet.
    pub(crate) fn new(
        transport: &Transport,
        reference: &'a str,
        parsed: &Reference,
        credentials: &'a Credentials,
    ) -> Result<Self> {
        let registry = parsed.resolve_registry().to_owned();
        let repository = parsed.repository().to_owned();
        let scheme = transport.scheme_for(&registry);
        let base = Url::parse(&format!("{scheme}://{registry}/v2/{repository}/")).map_err(|e| {
            Error::Protocol {
                reference: reference.to_owned(),
                registry: registry.clone(),
                reason: format!("the reference makes no URL ({e})"),
            }
        })?;
        Ok(Self {
            http: transport.http_client()?,
            base,
            reference,
            registry,
            repository,
            credentials,
            authorization: None,
            challenged: false,
        })
    }

    /// The registry as the reference resolves it (`host[:port]`).
    pub(crate) fn registry(&self) -> &str {
        &self.registry
    }

    /// The manifest `tag_or_digest` of the repository, at most
    /// [`MAX_MANIFEST_BYTES`]. Its digest is the caller's to check.
    pub(crate) async fn manifest(
        &mut self,
        tag_or_digest: &str,
        accept: &[&str],
    ) -> Result<Vec<u8>> {
        let url = self.url(&format!("manifests/{tag_or_digest}"))?;
        let accept = accept.join(", ");
        let response = self.get(&url, Some(&accept)).await?;
        if response.status() != StatusCode::OK {
            return Err(self.refusal(response).await);
        }
        self.read_capped(response, MAX_MANIFEST_BYTES, "manifest")
            .await
    }

    /// The blob `digest`'s response, its status checked; the caller
    /// streams it under its own limit and checks the digest.
    pub(crate) async fn blob(&mut self, digest: &str) -> Result<reqwest::Response> {
        let url = self.url(&format!("blobs/{digest}"))?;
        let response = self.get(&url, None).await?;
        if response.status() != StatusCode::OK {
            return Err(self.refusal(response).await);
        }
        Ok(response)
    }

    /// Reads `response`'s body, refusing more than `limit` bytes: at once
    /// when `Content-Length` says so, else when the bytes read pass it.
    /// `what` names the body in the error.
    pub(crate) async fn read_capped(
        &self,
        mut response: reqwest::Response,
        limit: u64,
        what: &'static str,
    ) -> Result<Vec<u8>> {
        let too_large = || Error::BodyTooLarge {
            reference: self.reference.to_owned(),
            registry: self.registry.clone(),
            what,
            limit,
        };
        let declared = response.content_length();
        if declared.is_some_and(|len| len > limit) {
            return Err(too_large());
        }
        let mut body = Vec::with_capacity(usize::try_from(declared.unwrap_or(0)).unwrap_or(0));
        while let Some(chunk) = response.chunk().await.map_err(|e| self.failed(e))? {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The next chunk of a blob's body.
    pub(crate) async fn chunk(
        &self,
        response: &mut reqwest::Response,
    ) -> Result<Option<bytes::Bytes>> {
        response.chunk().await.map_err(|e| self.failed(e))
    }

    fn url(&self, path: &str) -> Result<Url> {
        self.base.join(path).map_err(|e| Error::Protocol {
            reference: self.reference.to_owned(),
            registry: self.registry.clone(),
            reason: format!("{path:?} makes no URL ({e})"),
        })
    }

    fn failed(&self, e: reqwest::Error) -> Error {
        transport::classify_http(self.reference, &self.registry, e)
    }

    /// GET `url` with the authorization earned so far; on the first `401`,
    /// answers its challenge and asks again.
    async fn get(&mut self, url: &Url, accept: Option<&str>) -> Result<reqwest::Response> {
        let response = self.send(url, accept).await?;
        if response.status() != StatusCode::UNAUTHORIZED || self.challenged {
            return Ok(response);
        }
        self.challenged = true;
        let challenge = challenge(response.headers());
        self.authorize(challenge).await?;
        if self.authorization.is_none() {
            // Nothing to answer with (anonymous, Basic asked): refused.
            return Ok(response);
        }
        // The 401's body is not read: dropping it closes the connection.
        drop(response);
        self.send(url, accept).await
    }

    async fn send(&self, url: &Url, accept: Option<&str>) -> Result<reqwest::Response> {
        let mut request = self.http.get(url.clone());
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization.clone());
        }
        request.send().await.map_err(|e| self.failed(e))
    }

    /// Earns an `Authorization` header for `challenge` with the session's
    /// credentials; anonymous and Basic-challenged, there is none to earn
    /// (the request is then refused as unauthorized).
    async fn authorize(&mut self, challenge: Option<Challenge>) -> Result<()> {
        match (challenge, self.credentials) {
            (Some(Challenge::Bearer { realm, service }), _) => {
                let token = self.token(&realm, service.as_deref()).await?;
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        self.protocol("its token service sent a token that is not a header value")
                    })?;
                value.set_sensitive(true);
                self.authorization = Some(value);
            }
            // A Basic challenge, or one this client does not read: the
            // credentials as Basic auth, as oci-client does.
            (_, Credentials::Basic { username, password }) => {
                let mut value = basic(username, password).map_err(|_| {
                    self.protocol("the credentials are not a header value (control characters?)")
                })?;
                value.set_sensitive(true);
                self.authorization = Some(value);
            }
            (_, Credentials::Anonymous) => {}
        }
        Ok(())
    }

    /// A pull token for the repository from `realm`, with the credentials
    /// as Basic auth (anonymous: a token for public repositories).
    async fn token(&self, realm: &str, service: Option<&str>) -> Result<String> {
        let mut url = Url::parse(realm).map_err(|e| {
            self.protocol(&format!(
                "its token realm {} is not a URL ({e})",
                crate::names::excerpt(realm)
            ))
        })?;
        // Credentials go to the realm: never in the clear unless the
        // registry itself is plain HTTP (named so by the operator).
        let allowed =
            url.scheme() == "https" || (url.scheme() == "http" && self.base.scheme() == "http");
        if !allowed {
            return Err(self.protocol(&format!(
                "its token realm {} is not https; refused, credentials would travel in the clear",
                crate::names::excerpt(realm)
            )));
        }
        url.query_pairs_mut()
            .append_pair("scope", &format!("repository:{}:pull", self.repository));
        if let Some(service) = service {
            url.query_pairs_mut().append_pair("service", service);
        }
        let mut request = self.http.get(url);
        if let Credentials::Basic { username, password } = self.credentials {
            request = request.basic_auth(username, Some(password));
        }
        let response = request.send().await.map_err(|e| self.failed(e))?;
        if response.status() != StatusCode::OK {
            return Err(self.refusal(response).await);
        }
        let body = self
            .read_capped(response, MAX_TOKEN_BYTES, "token response")
            .await?;
        let parsed: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
            self.protocol(&format!(
                "its token response is not JSON with a token ({e})"
            ))
        })?;
        parsed
            .token
            .or(parsed.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.protocol("its token response holds no token"))
    }

    fn protocol(&self, reason: &str) -> Error {
        Error::Protocol {
            reference: self.reference.to_owned(),
            registry: self.registry.clone(),
            reason: crate::names::excerpt(reason),
        }
    }

    /// The error a non-200 answer means: unauthorized and not found by
    /// status or by the OCI error code, else the status with an excerpt of
    /// the body's first [`MAX_ERROR_BODY_BYTES`].
    pub(crate) async fn refusal(&self, mut response: reqwest::Response) -> Error {
        let reference = self.reference.to_owned();
        let registry = self.registry.clone();
        let status = response.status();
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return Error::Unauthorized {
                reference,
                registry,
            };
        }
        // A body that fails mid-way still says what it said so far.
        let mut head = Vec::new();
        let mut complete = true;
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = (MAX_ERROR_BODY_BYTES as usize).saturating_sub(head.len());
            if chunk.len() > room {
                head.extend_from_slice(&chunk[..room]);
                complete = false;
                break;
            }
            head.extend_from_slice(&chunk);
        }
        drop(response);
        let envelope = serde_json::from_slice::<Envelope>(&head)
            .ok()
            .and_then(|e| e.errors.into_iter().next());
        if let Some(error) = &envelope {
            match error.code.as_str() {
                "UNAUTHORIZED" | "DENIED" => {
                    return Error::Unauthorized {
                        reference,
                        registry,
                    };
                }
                "MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "BLOB_UNKNOWN" | "NOT_FOUND" => {
                    return Error::NotFound {
                        reference,
                        registry,
                    };
                }
                _ => {}
            }
        }
        if status == StatusCode::NOT_FOUND {
            return Error::NotFound {
                reference,
                registry,
            };
        }
        let message = match envelope {
            Some(e) => body_excerpt(format!("{}: {}", e.code, e.message).as_bytes(), true),
            None => body_excerpt(&head, complete),
        };
        Error::Status {
            reference,
            registry,
            status: status.as_u16(),
            message,
        }
    }
}

fn basic(username: &str, password: &str) -> Result<HeaderValue, header::InvalidHeaderValue> {
    use base64::Engine as _;
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    HeaderValue::from_str(&format!("Basic {encoded}"))
}

/// How many bytes of registry text a message quotes.
const SHOWN: usize = 200;

/// A registry's text as a message quotes it: control characters as
/// spaces, at most [`SHOWN`] bytes, and the length when cut (`complete`:
/// the bytes are the whole body; else more followed, unread).
pub(crate) fn body_excerpt(bytes: &[u8], complete: bool) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.trim();
    if text.is_empty() && complete {
        return "(no body)".to_owned();
    }
    if complete && text.len() <= SHOWN {
        return text.to_owned();
    }
    let cut = text.floor_char_boundary(SHOWN.min(text.len()));
    if complete {
        format!("{}... ({} bytes)", &text[..cut], text.len())
    } else {
        format!("{}... (over {} bytes, not read)", &text[..cut], bytes.len())
    }
}

/// The first challenge of `headers` this client answers: Bearer with a
/// realm, or Basic; `None` for none (or none readable).
pub(crate) fn challenge(headers: &HeaderMap) -> Option<Challenge> {
    let mut basic = false;
    for value in headers.get_all(header::WWW_AUTHENTICATE) {
        let Ok(text) = value.to_str() else { continue };
        for (scheme, params) in challenges(text) {
            if scheme.eq_ignore_ascii_case("bearer") {
                let param = |name: &str| {
                    params
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.clone())
                };
                if let Some(realm) = param("realm") {
                    return Some(Challenge::Bearer {
                        realm,
                        service: param("service"),
                    });
                }
            } else if scheme.eq_ignore_ascii_case("basic") {
                basic = true;
            }
        }
    }
    basic.then_some(Challenge::Basic)
}

/// The challenges of one `WWW-Authenticate` value (RFC 9110 11.6.1):
/// `Scheme k=v, k="quoted, \"v\"", Other k=v`, each with its parameters.
fn challenges(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        // A token: either a scheme (followed by a space or the end) or a
        // parameter name (followed by '=').
        let end = rest
            .find(|c: char| c == '=' || c == ',' || c.is_whitespace())
            .unwrap_or(rest.len());
        let token = &rest[..end];
        rest = rest[end..].trim_start();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (value, remaining) = match after.strip_prefix('"') {
                Some(quoted) => quoted_string(quoted),
                None => {
                    let end = after.find(',').unwrap_or(after.len());
                    (after[..end].trim().to_owned(), &after[end..])
                }
            };
            if let Some((_, params)) = out.last_mut() {
                params.push((token.to_owned(), value));
            }
            rest = remaining.trim_start();
        } else if !token.is_empty() {
            out.push((token.to_owned(), Vec::new()));
        }
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
    }
    out
}

/// A quoted string's value (after its opening quote) and what follows its
/// closing quote; an unclosed one runs to the end.
fn quoted_string(text: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (value, &text[i + 1..]),
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            c => value.push(c),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(header::WWW_AUTHENTICATE, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn bearer_and_basic_challenges_are_read_with_quoted_parameters() {
        assert_eq!(
            challenge(&headers(&[
                r#"Bearer realm="https://auth.example/token",service="reg.example",scope="repository:a/b:pull""#
            ])),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("reg.example".into()),
            })
        );
        // Escapes and commas inside quotes; another scheme first.
        assert_eq!(
            challenge(&headers(&[
                r#"Negotiate abc, Bearer service="a, \"b\"", realm="https://r/t""#
            ])),
            Some(Challenge::Bearer {
                realm: "https://r/t".into(),
                service: Some("a, \"b\"".into()),
            })
        );
        assert_eq!(
            challenge(&headers(&[r#"Basic realm="Registry Realm""#])),
            Some(Challenge::Basic)
        );
        // A Bearer challenge without a realm cannot be answered.
        assert_eq!(challenge(&headers(&["Bearer service=x"])), None);
        assert_eq!(challenge(&headers(&[])), None);
        // An unclosed quote does not loop or panic.
        assert_eq!(
            challenge(&headers(&[r#"Bearer realm="https://r/t"#])),
            Some(Challenge::Bearer {
                realm: "https://r/t".into(),
                service: None
            })
        );
    }

    #[test]
    fn registry_text_is_quoted_short_and_on_one_line() {
        assert_eq!(body_excerpt(b"denied\r\n", true), "denied");
        assert_eq!(body_excerpt(b"", true), "(no body)");
        let long = "x".repeat(10_000);
        assert_eq!(
            body_excerpt(long.as_bytes(), true),
            format!("{}... (10000 bytes)", "x".repeat(SHOWN))
        );
        let cut = body_excerpt(long.as_bytes(), false);
        assert!(cut.ends_with("(over 10000 bytes, not read)"), "{cut}");
        assert!(cut.len() < 300, "{cut}");
        assert_eq!(body_excerpt(b"a\x1b[31mred", true), "a [31mred");
    }
}
