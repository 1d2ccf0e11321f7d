//! `--metrics-auth`: `/metrics` and `/dead-letters` behind Kubernetes
//! authentication and authorization, as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` and kube-rbac-proxy put
//! them: the request's bearer token is reviewed by the API server
//! (TokenReview), then the user it names is checked (SubjectAccessReview)
//! for `get` on the request's path as a non-resource URL. A scraper needs
//! a ClusterRole with `nonResourceURLs: ["/metrics"]`, `verbs: ["get"]`
//! bound to its identity; the host needs `create` on `tokenreviews` and
//! `subjectaccessreviews`. Probes are never behind it (the kubelet sends
//! no token).
//!
//! Answers are cached for a short while per token and path (a scrape every
//! few seconds costs the API server two reviews a minute, not two a
//! scrape): an allowed request for [`ALLOWED_FOR`], a refused one for
//! [`REFUSED_FOR`], so a new RoleBinding takes effect within seconds. A
//! review the API server cannot answer is not cached. Allowed and refused
//! answers are kept apart, each in a bounded least-recently-used cache:
//! anyone can send random tokens, and each one's refusal evicts only other
//! refusals, never the answer a real scraper's token earned.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use lru::LruCache;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How long an allowed request's answer is kept.
pub const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refused (401 or 403) request's answer is kept.
pub const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Allowed answers kept at most, the least recently used evicted first.
/// Only a token the API server accepts and RBAC allows earns one.
pub const ALLOWED_MAX: NonZeroUsize = NonZeroUsize::new(1024).unwrap();
/// Refused answers kept at most (apart from the allowed ones), the least
/// recently used evicted first.
pub const REFUSED_MAX: NonZeroUsize = NonZeroUsize::new(4096).unwrap();

/// The identity a token review found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(
        "TokenReview failed: {0} (the host needs create on authentication.k8s.io tokenreviews)"
    )]
    Token(#[source] kube::Error),
    #[error(
        "SubjectAccessReview failed: {0} (the host needs create on authorization.k8s.io subjectaccessreviews)"
    )]
    Access(#[source] kube::Error),
}

/// Asks the API server who a token is and what it may do.
pub trait Reviewer: Send + Sync + 'static {
    /// The user `token` authenticates, `None` when it authenticates none.
    fn user<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, ReviewError>>;
    /// Whether `user` may `verb` the non-resource URL `path`; when not,
    /// the authorizer's reason if it gave one.
    fn allowed<'a>(
        &'a self,
        user: &'a User,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Result<(), Option<String>>, ReviewError>>;
}

/// [`Reviewer`] through the API server's TokenReview and
/// SubjectAccessReview.
#[derive(Clone)]
pub struct KubeReviewer {
    client: kube::Client,
}

impl std::fmt::Debug for KubeReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeReviewer").finish_non_exhaustive()
    }
}

impl KubeReviewer {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl Reviewer for KubeReviewer {
    fn user<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_owned()),
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let answer = Api::<TokenReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::Token)?;
            let Some(status) = answer.status else {
                return Ok(None);
            };
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let info = status.user.unwrap_or_default();
            Ok(Some(User {
                name: info.username.unwrap_or_default(),
                uid: info.uid,
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default(),
            }))
        })
    }

    fn allowed<'a>(
        &'a self,
        user: &'a User,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Result<(), Option<String>>, ReviewError>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: user.uid.clone(),
                    groups: Some(user.groups.clone()),
                    extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(path.to_owned()),
                        verb: Some(verb.to_owned()),
                    }),
                    resource_attributes: None,
                },
                ..SubjectAccessReview::default()
            };
            let answer = Api::<SubjectAccessReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::Access)?;
            let status = answer.status.unwrap_or_default();
            if status.allowed {
                Ok(Ok(()))
            } else {
                Ok(Err(status.reason.filter(|r| !r.is_empty())))
            }
        })
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token, or one the API server does not accept (401).
    Unauthenticated(&'static str),
    /// The user may not get the path (403).
    Forbidden { user: String, path: String },
    /// The API server could not answer (503; not cached).
    Unavailable(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
        match self {
            Refusal::Unauthenticated(why) => (
                StatusCode::UNAUTHORIZED,
                [
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                    (header::WWW_AUTHENTICATE, "Bearer"),
                ],
                format!(
                    "Unauthorized: {why}; send a Kubernetes bearer token (Authorization: Bearer TOKEN), as Prometheus does with its service account token\n"
                ),
            )
                .into_response(),
            Refusal::Forbidden { user, path } => (
                StatusCode::FORBIDDEN,
                text,
                format!(
                    "Forbidden: user {user:?} may not get {path}: bind it a ClusterRole with nonResourceURLs [\"{path}\"] and verbs [\"get\"]\n"
                ),
            )
                .into_response(),
            Refusal::Unavailable(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                text,
                format!("cannot check the request's token with the API server: {why}\n"),
            )
                .into_response(),
        }
    }
}

#[derive(Debug, Clone)]
enum Answer {
    Allowed,
    Refused(Refusal),
}

/// (the token's SHA-256, the path): tokens are kept only as digests.
type Key = ([u8; 32], String);

/// Answers by [`Key`], with when they were given: allowed and refused
/// apart, so refusals (which anyone can cause) never evict an allowance.
struct Cache {
    allowed: LruCache<Key, Instant>,
    refused: LruCache<Key, (Instant, Refusal)>,
}

/// Checks requests against the API server, with a short cache.
pub struct Authenticator {
    reviewer: Arc<dyn Reviewer>,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cache = self.cache.lock();
        f.debug_struct("Authenticator")
            .field("allowed", &cache.allowed.len())
            .field("refused", &cache.refused.len())
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(reviewer: impl Reviewer) -> Self {
        Self {
            reviewer: Arc::new(reviewer),
            cache: Mutex::new(Cache {
                allowed: LruCache::new(ALLOWED_MAX),
                refused: LruCache::new(REFUSED_MAX),
            }),
        }
    }

    /// Answers cached now: (allowed, refused), expired ones included.
    pub fn cached_answers(&self) -> (usize, usize) {
        let cache = self.cache.lock();
        (cache.allowed.len(), cache.refused.len())
    }

    /// `Ok` when the request's bearer token may `get` `path`.
    pub async fn check(&self, headers: &HeaderMap, path: &str) -> Result<(), Refusal> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(Refusal::Unauthenticated("no bearer token"))?;
        let key: Key = (Sha256::digest(token.as_bytes()).into(), path.to_owned());
        if let Some(answer) = self.cached(&key) {
            return match answer {
                Answer::Allowed => Ok(()),
                Answer::Refused(r) => Err(r),
            };
        }
        let answer = self.review(token, path).await?;
        self.remember(key, answer.clone());
        match answer {
            Answer::Allowed => Ok(()),
            Answer::Refused(r) => Err(r),
        }
    }

    async fn review(&self, token: &str, path: &str) -> Result<Answer, Refusal> {
        let unavailable = |e: ReviewError| {
            tracing::warn!(path, error = %e, "cannot review a metrics request's token");
            Refusal::Unavailable(e.to_string())
        };
        let Some(user) = self.reviewer.user(token).await.map_err(unavailable)? else {
            return Ok(Answer::Refused(Refusal::Unauthenticated(
                "the API server does not accept the token",
            )));
        };
        match self
            .reviewer
            .allowed(&user, "get", path)
            .await
            .map_err(unavailable)?
        {
            Ok(()) => Ok(Answer::Allowed),
            Err(reason) => {
                tracing::info!(user = %user.name, path, reason = reason.as_deref().unwrap_or(""), "refused a request: no RBAC for it");
                Ok(Answer::Refused(Refusal::Forbidden {
                    user: user.name,
                    path: path.to_owned(),
                }))
            }
        }
    }

    /// The answer for `key` while fresh (an expired one is dropped).
    fn cached(&self, key: &Key) -> Option<Answer> {
        let mut cache = self.cache.lock();
        if let Some(at) = cache.allowed.get(key) {
            if at.elapsed() < ALLOWED_FOR {
                return Some(Answer::Allowed);
            }
            cache.allowed.pop(key);
        }
        if let Some((at, refusal)) = cache.refused.get(key) {
            if at.elapsed() < REFUSED_FOR {
                return Some(Answer::Refused(refusal.clone()));
            }
            cache.refused.pop(key);
        }
        None
    }

    fn remember(&self, key: Key, answer: Answer) {
        let mut cache = self.cache.lock();
        let now = Instant::now();
        match answer {
            Answer::Allowed => {
                cache.refused.pop(&key);
                cache.allowed.put(key, now);
            }
            Answer::Refused(refusal) => {
                cache.allowed.pop(&key);
                cache.refused.put(key, (now, refusal));
            }
        }
    }
}

/// The middleware of the guarded routes.
pub async fn require(State(auth): State<Arc<Authenticator>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    match auth.check(req.headers(), &path).await {
        Ok(()) => next.run(req).await,
        Err(r) => r.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens `alice` and `ok-*` (may get /metrics), `bob` and `user-*`
    /// (may get nothing); `down` fails the review; counts reviews.
    #[derive(Default)]
    struct Fake {
        tokens: AtomicUsize,
        accesses: AtomicUsize,
        /// Token reviews of `alice`.
        alice: AtomicUsize,
    }

    impl Reviewer for Arc<Fake> {
        fn user<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
            self.tokens.fetch_add(1, Ordering::SeqCst);
            if token == "alice" {
                self.alice.fetch_add(1, Ordering::SeqCst);
            }
            Box::pin(async move {
                match token {
                    "alice" | "bob" => Ok(Some(User {
                        name: token.to_owned(),
                        ..User::default()
                    })),
                    t if t.starts_with("ok-") || t.starts_with("user-") => Ok(Some(User {
                        name: token.to_owned(),
                        ..User::default()
                    })),
                    "down" => Err(ReviewError::Token(
                        kube::Error::LinesCodecMaxLineLengthExceeded,
                    )),
                    _ => Ok(None),
                }
            })
        }

        fn allowed<'a>(
            &'a self,
            user: &'a User,
            verb: &'a str,
            path: &'a str,
        ) -> BoxFuture<'a, Result<Result<(), Option<String>>, ReviewError>> {
            self.accesses.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let may = user.name == "alice" || user.name.starts_with("ok-");
                Ok(if may && verb == "get" && path == "/metrics" {
                    Ok(())
                } else {
                    Err(None)
                })
            })
        }
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    #[tokio::test]
    async fn tokens_are_reviewed_then_authorized_per_path_and_answers_cached() {
        let fake = Arc::new(Fake::default());
        let auth = Authenticator::new(fake.clone());
        assert_eq!(
            auth.check(&HeaderMap::new(), "/metrics").await,
            Err(Refusal::Unauthenticated("no bearer token"))
        );
        let mut basic = HeaderMap::new();
        basic.insert(header::AUTHORIZATION, "Basic YTpi".parse().unwrap());
        assert!(matches!(
            auth.check(&basic, "/metrics").await,
            Err(Refusal::Unauthenticated(_))
        ));
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 0);
        assert!(matches!(
            auth.check(&bearer("mallory"), "/metrics").await,
            Err(Refusal::Unauthenticated(_))
        ));
        assert_eq!(auth.check(&bearer("alice"), "/metrics").await, Ok(()));
        assert_eq!(
            auth.check(&bearer("alice"), "/dead-letters").await,
            Err(Refusal::Forbidden {
                user: "alice".into(),
                path: "/dead-letters".into()
            })
        );
        assert!(matches!(
            auth.check(&bearer("bob"), "/metrics").await,
            Err(Refusal::Forbidden { .. })
        ));
        let (t, a) = (
            fake.tokens.load(Ordering::SeqCst),
            fake.accesses.load(Ordering::SeqCst),
        );
        assert_eq!((t, a), (4, 3));
        // Asked again: answered from the cache, allowed and refused alike.
        for _ in 0..5 {
            assert_eq!(auth.check(&bearer("alice"), "/metrics").await, Ok(()));
            assert!(auth.check(&bearer("bob"), "/metrics").await.is_err());
            assert!(auth.check(&bearer("mallory"), "/metrics").await.is_err());
        }
        assert_eq!(
            (
                fake.tokens.load(Ordering::SeqCst),
                fake.accesses.load(Ordering::SeqCst)
            ),
            (t, a)
        );
        // An API server that cannot answer: 503, and asked again next time.
        for _ in 0..2 {
            assert!(matches!(
                auth.check(&bearer("down"), "/metrics").await,
                Err(Refusal::Unavailable(_))
            ));
        }
        assert_eq!(fake.tokens.load(Ordering::SeqCst), t + 2);
        let r = Refusal::Forbidden {
            user: "bob".into(),
            path: "/metrics".into(),
        }
        .into_response();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let r = Refusal::Unauthenticated("no bearer token").into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    /// Anyone can send random tokens: each costs a review, but their
    /// refusals evict only refusals, never a scraper's allowed answer
    /// (which the old cache, cleared whole at 4,096 answers, lost).
    #[tokio::test(start_paused = true)]
    async fn valid_tokens_stay_cached_under_a_flood_of_random_ones() {
        let fake = Arc::new(Fake::default());
        let auth = Authenticator::new(fake.clone());
        let alice = || async { auth.check(&bearer("alice"), "/metrics").await };
        assert_eq!(alice().await, Ok(()));
        assert_eq!(fake.alice.load(Ordering::SeqCst), 1);
        // Five times the refused cache: tokens the API server rejects and
        // tokens of users without the RBAC.
        let flood = REFUSED_MAX.get() * 5;
        for i in 0..flood {
            let token = if i % 2 == 0 {
                format!("random-{i}")
            } else {
                format!("user-{i}")
            };
            assert!(auth.check(&bearer(&token), "/metrics").await.is_err());
        }
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 1 + flood);
        assert_eq!(auth.cached_answers(), (1, REFUSED_MAX.get()));
        assert_eq!(alice().await, Ok(()));
        assert_eq!(
            fake.alice.load(Ordering::SeqCst),
            1,
            "alice's answer survived the flood"
        );
        // The answer still expires on time.
        tokio::time::advance(ALLOWED_FOR - Duration::from_secs(1)).await;
        assert_eq!(alice().await, Ok(()));
        assert_eq!(fake.alice.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(alice().await, Ok(()));
        assert_eq!(fake.alice.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn allowed_answers_are_evicted_least_recently_used_first() {
        let fake = Arc::new(Fake::default());
        let auth = Authenticator::new(fake.clone());
        let ok = |i: usize| format!("ok-{i}");
        for i in 0..ALLOWED_MAX.get() {
            assert_eq!(auth.check(&bearer(&ok(i)), "/metrics").await, Ok(()));
        }
        // ok-0 used again: ok-1 is now the least recently used.
        assert_eq!(auth.check(&bearer(&ok(0)), "/metrics").await, Ok(()));
        let reviews = fake.tokens.load(Ordering::SeqCst);
        assert_eq!(reviews, ALLOWED_MAX.get());
        assert_eq!(auth.check(&bearer("ok-new"), "/metrics").await, Ok(()));
        assert_eq!(auth.cached_answers(), (ALLOWED_MAX.get(), 0));
        assert_eq!(auth.check(&bearer(&ok(0)), "/metrics").await, Ok(()));
        assert_eq!(fake.tokens.load(Ordering::SeqCst), reviews + 1);
        assert_eq!(auth.check(&bearer(&ok(1)), "/metrics").await, Ok(()));
        assert_eq!(
            fake.tokens.load(Ordering::SeqCst),
            reviews + 2,
            "ok-1 was evicted and reviewed again"
        );
    }
}
