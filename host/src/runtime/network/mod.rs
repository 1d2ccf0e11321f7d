//! The sidecar's network grant: the destinations (host or CIDR, and port) a
//! plugin may connect or send to. Host names are resolved when an instance
//! is created (at load, and again whenever a trapped instance is replaced),
//! and every connect or send is checked against the resulting addresses, so
//! a guest that resolves a name itself and connects to the address is
//! treated the same as one that is given an address. A guest may look up
//! only the names its grant lists (any other lookup would carry data out
//! to whoever serves that name's zone), and a grant may name only what the
//! host config's `grants.network` ceiling allows.
//!
//! A name allows only what it resolves to outside the host's own reach:
//! a loopback, link-local (the cloud metadata service at 169.254.169.254)
//! or unspecified address, in any spelling (IPv4-mapped IPv6 among them),
//! is dropped from what a name allows, since whoever serves the name's zone
//! (not the operator) picks its addresses, and these reach the host's admin
//! listeners or the node's credentials. Only an address or network entry
//! of the grant (which the ceiling must allow) opens them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::SocketError;
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{
    Host as LookupHost, HostResolveAddressStream, ResolveAddressStream,
};
use wasmtime_wasi::p2::bindings::sockets::network::{
    Error as NetworkError, ErrorCode, Host as NetworkHost, HostNetwork, IpAddress, Network,
};
use wasmtime_wasi::sockets::{SocketAddrUse, WasiSocketsCtxView};

/// Where a destination points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name, resolved when an instance is created.
    Name(String),
    /// An address or a network (`10.0.0.0/8`; a bare address is a /32 or /128).
    Net(IpAddr, u8),
}

/// One `host:port` entry; `port` `None` is `host:*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub host: Host,
    pub port: Option<u16>,
    text: String,
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Destination {
    pub fn parse(s: &str) -> Result<Self, String> {
        let err = |why: &str| {
            format!(
                "grants.network.allow entry {s:?}: {why} (write host:port, e.g. api.example.com:443, 10.0.0.0/8:5432, [::1]:8080, or host:* for any port)"
            )
        };
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, p) = rest.split_once("]:").ok_or_else(|| err("no port"))?;
            (h, p)
        } else {
            s.rsplit_once(':').ok_or_else(|| err("no port"))?
        };
        let port = match port {
            "*" => None,
            p => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| err("the port is not 1 to 65535 or *"))?,
            ),
        };
        let host = match host.split_once('/') {
            Some((ip, bits)) => {
                let ip: IpAddr = ip.parse().map_err(|_| err("not an IP network"))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let bits: u8 = bits
                    .parse()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| err("bad prefix length"))?;
                Host::Net(ip, bits)
            }
            None => match host.parse::<IpAddr>() {
                Ok(ip) => Host::Net(ip, if ip.is_ipv4() { 32 } else { 128 }),
                Err(_) => {
                    let name = host.trim_end_matches('.').to_ascii_lowercase();
                    if name.is_empty() || name == "*" {
                        return Err(err("a host is required; every host is not grantable"));
                    }
                    crate::names::dns1123_subdomain("host", &name)
                        .map_err(|e| err(&e.to_string()))?;
                    Host::Name(name)
                }
            },
        };
        Ok(Self {
            host,
            port,
            text: s.to_owned(),
        })
    }
}

/// `grants.network` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkGrant {
    pub allow: Vec<Destination>,
}

impl<'de> Deserialize<'de> for NetworkGrant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Allow {
            allow: Vec<String>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            Allow(Allow),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "grants.network must be {allow: [\"host:port\", ...]} (or false)",
            )
        })?;
        match raw {
            Raw::Flag(false) => Ok(Self::default()),
            Raw::Flag(true) => Err(serde::de::Error::custom(
                "grants.network: true (every destination) is no longer accepted: list the destinations the plugin needs, e.g. `network: {allow: [\"api.example.com:443\", \"10.0.0.0/8:5432\"]}`",
            )),
            Raw::Allow(a) => a
                .allow
                .iter()
                .map(|s| Destination::parse(s))
                .collect::<Result<Vec<_>, _>>()
                .map(|allow| Self { allow })
                .map_err(serde::de::Error::custom),
        }
    }
}

/// An address of the host itself or of its link, which a granted name may
/// not resolve into (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// `127.0.0.0/8`, `::1`: the host's own listeners.
    Loopback,
    /// `169.254.0.0/16` (cloud metadata services), `fe80::/10`.
    LinkLocal,
    /// `0.0.0.0/8` (`0.0.0.0` reaches loopback on Linux), `::`.
    Unspecified,
}

impl fmt::Display for Reserved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reserved::Loopback => "loopback",
            Reserved::LinkLocal => "link-local (where cloud metadata services answer)",
            Reserved::Unspecified => "unspecified",
        })
    }
}

/// `ip` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4
/// address it is: the socket layer connects to both alike.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Which reserved class `ip` is in, if any: checked on its canonical form,
/// and on the IPv4 address inside the NAT64 (`64:ff9b::/96`) and
/// IPv4-compatible (`::a.b.c.d`) spellings.
pub fn reserved(ip: IpAddr) -> Option<Reserved> {
    fn v4(ip: Ipv4Addr) -> Option<Reserved> {
        if ip.is_loopback() {
            Some(Reserved::Loopback)
        } else if ip.is_link_local() {
            Some(Reserved::LinkLocal)
        } else if ip.octets()[0] == 0 {
            Some(Reserved::Unspecified)
        } else {
            None
        }
    }
    match canonical(ip) {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            let s = ip.segments();
            if ip.is_loopback() {
                Some(Reserved::Loopback)
            } else if ip.is_unspecified() {
                Some(Reserved::Unspecified)
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some(Reserved::LinkLocal)
            } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..6] == [0; 6] {
                let [.., a, b, c, d] = ip.octets();
                v4(Ipv4Addr::new(a, b, c, d))
            } else {
                None
            }
        }
    }
}

/// A network with an IPv4-mapped IPv6 prefix (`::ffff:10.0.0.0/104`) as
/// the IPv4 network it is, so it matches the canonical addresses checked.
fn canonical_net(net: IpAddr, bits: u8) -> (IpAddr, u8) {
    match canonical(net) {
        IpAddr::V4(v4) if net.is_ipv6() => match bits.checked_sub(96) {
            Some(bits) => (IpAddr::V4(v4), bits),
            None => (net, bits),
        },
        other => (other, bits),
    }
}

fn in_net(addr: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The resolved allow list of one instance.
#[derive(Debug, Clone, Default)]
pub struct NetworkPolicy {
    /// (network, prefix, port) triples; names are resolved into /32, /128.
    allowed: Vec<(IpAddr, u8, Option<u16>)>,
}

impl NetworkPolicy {
    /// Resolves the names of `grant` with the system's resolver. A name
    /// that does not resolve allows nothing (logged); the instance still
    /// starts.
    pub fn resolve(plugin: &str, grant: &NetworkGrant) -> Self {
        Self::resolve_with(plugin, grant, |name, port| {
            (name, port).to_socket_addrs().map(Iterator::collect)
        })
    }

    /// [`resolve`](Self::resolve) with `lookup` as the resolver. A name's
    /// [`Reserved`] addresses are dropped (logged, unless an address or
    /// network entry of the grant allows them anyway).
    pub fn resolve_with(
        plugin: &str,
        grant: &NetworkGrant,
        lookup: impl Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>,
    ) -> Self {
        let nets: Vec<_> = grant
            .allow
            .iter()
            .filter_map(|d| match d.host {
                Host::Net(ip, bits) => {
                    let (ip, bits) = canonical_net(ip, bits);
                    Some((ip, bits, d.port))
                }
                Host::Name(_) => None,
            })
            .collect();
        let mut allowed = nets.clone();
        for d in &grant.allow {
            let Host::Name(name) = &d.host else { continue };
            let addrs = match lookup(name, d.port.unwrap_or(1)) {
                Ok(addrs) => addrs,
                Err(e) => {
                    tracing::warn!(plugin, destination = %d, error = %e, "granted host does not resolve: no connection to it is allowed");
                    continue;
                }
            };
            for a in addrs {
                let ip = canonical(a.ip());
                if let Some(class) = reserved(ip) {
                    let by_address = nets.iter().any(|(net, bits, port)| {
                        in_net(ip, *net, *bits) && port.is_none_or(|p| d.port == Some(p))
                    });
                    if !by_address {
                        tracing::warn!(plugin, destination = %d, address = %ip, class = %class, "granted name resolves to an address of the host or its link: no connection to it is allowed (grant the address itself, within the host's ceiling, to allow it)");
                    }
                    continue;
                }
                let bits = if ip.is_ipv4() { 32 } else { 128 };
                allowed.push((ip, bits, d.port));
            }
        }
        Self { allowed }
    }

    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// Whether `addr` may be used for `use_`: connects, sends and received
    /// datagrams of an allowed destination, and binds to an ephemeral port
    /// (the implicit bind of a connect or send). Listening and accepting
    /// are refused.
    pub fn allows(&self, addr: SocketAddr, use_: SocketAddrUse) -> bool {
        match use_ {
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => addr.port() == 0,
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => false,
            SocketAddrUse::TcpConnect | SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => {
                let ip = canonical(addr.ip());
                self.allowed.iter().any(|(net, bits, port)| {
                    port.is_none_or(|p| p == addr.port()) && in_net(ip, *net, *bits)
                })
            }
        }
    }

    /// Installs the policy on a WASI context builder (TCP, UDP and name
    /// lookup on; each address checked).
    pub fn install(self, b: &mut wasmtime_wasi::WasiCtxBuilder) {
        let policy = Arc::new(self);
        b.allow_tcp(true)
            .allow_udp(true)
            .allow_ip_name_lookup(true)
            .socket_addr_check(move |addr, use_| {
                let ok = policy.allows(addr, use_);
                Box::pin(async move { ok })
            });
    }
}

/// The name lookups a grant allows: exactly the names it lists (IP
/// literals need no lookup and always pass).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LookupPolicy {
    names: Vec<String>,
}

impl LookupPolicy {
    pub fn new(grant: &NetworkGrant) -> Self {
        let mut names: Vec<String> = grant
            .allow
            .iter()
            .filter_map(|d| match &d.host {
                Host::Name(n) => Some(n.clone()),
                Host::Net(..) => None,
            })
            .collect();
        names.sort();
        names.dedup();
        Self { names }
    }

    /// Whether the guest may look `name` up.
    pub fn allows(&self, name: &str) -> bool {
        let bare = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
        if name.parse::<IpAddr>().is_ok() || bare.is_some_and(|b| b.parse::<IpAddr>().is_ok()) {
            return true;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.names.binary_search(&name).is_ok()
    }
}

/// `wasi:sockets/ip-name-lookup` as the guest sees it: wasmtime-wasi's own
/// lookup for the names the grant allows, `access-denied` for any other
/// (wasmtime-wasi can only allow every name or none).
pub struct GuardedLookup;

impl wasmtime::component::HasData for GuardedLookup {
    type Data<'a> = GuardedLookupView<'a>;
}

/// The state one lookup call borrows from the store.
pub struct GuardedLookupView<'a> {
    pub plugin: &'a str,
    pub policy: &'a LookupPolicy,
    /// Set once a refusal has been logged: a guest retrying in a loop logs
    /// once per instance.
    pub refused_logged: &'a mut bool,
    pub sockets: WasiSocketsCtxView<'a>,
}

impl LookupHost for GuardedLookupView<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> Result<Resource<ResolveAddressStream>, SocketError> {
        if !self.policy.allows(&name) {
            if !*self.refused_logged {
                *self.refused_logged = true;
                tracing::warn!(
                    plugin = self.plugin,
                    name = %name.chars().take(256).collect::<String>(),
                    "name lookup refused: the plugin may look up only the names its grants.network lists (further refusals of this instance are not logged)"
                );
            }
            return Err(ErrorCode::AccessDenied.into());
        }
        LookupHost::resolve_addresses(&mut self.sockets, network, name)
    }
}

// The lookup interface's traits require the network interface's: both
// are wasmtime-wasi's own.
impl NetworkHost for GuardedLookupView<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        NetworkHost::convert_error_code(&mut self.sockets, error)
    }

    fn network_error_code(
        &mut self,
        err: Resource<NetworkError>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        NetworkHost::network_error_code(&mut self.sockets, err)
    }
}

impl HostNetwork for GuardedLookupView<'_> {
    fn drop(&mut self, network: Resource<Network>) -> wasmtime::Result<()> {
        HostNetwork::drop(&mut self.sockets, network)
    }
}

impl HostResolveAddressStream for GuardedLookupView<'_> {
    fn resolve_next_address(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> Result<Option<IpAddress>, SocketError> {
        HostResolveAddressStream::resolve_next_address(&mut self.sockets, stream)
    }

    fn subscribe(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<wasmtime_wasi::p2::DynPollable>> {
        HostResolveAddressStream::subscribe(&mut self.sockets, stream)
    }

    fn drop(&mut self, stream: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        HostResolveAddressStream::drop(&mut self.sockets, stream)
    }
}

/// One entry of the host config's `grants.network` ceiling: a destination
/// as a grant writes it, or `*.domain:port` for every name under a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Exact(Destination),
    /// Names strictly under `suffix` (`*.example.com` covers
    /// `api.example.com`, not `example.com`).
    Subdomains {
        suffix: String,
        port: Option<u16>,
    },
}

impl Pattern {
    pub fn parse(s: &str) -> Result<Self, String> {
        let Some(rest) = s.strip_prefix("*.") else {
            return Destination::parse(s)
                .map(Pattern::Exact)
                .map_err(|e| e.replacen("grants.network.allow", "grants.network", 1));
        };
        // The same checks as a destination of the domain itself.
        let domain = Destination::parse(rest).map_err(|e| {
            e.replacen("grants.network.allow", "grants.network", 1)
                .replacen(&format!("{rest:?}"), &format!("{s:?}"), 1)
        })?;
        match domain.host {
            Host::Name(suffix) => Ok(Pattern::Subdomains {
                suffix,
                port: domain.port,
            }),
            Host::Net(..) => Err(format!(
                "grants.network entry {s:?}: `*.` goes before a domain name, not an address (write 10.0.0.0/8:443 for a network)"
            )),
        }
    }

    /// Whether a grant's destination `d` is within this pattern: the same
    /// port (or any, `*`), and a name equal to or under the pattern's, or
    /// an address range inside the pattern's network. A name is covered
    /// only by names: what it resolves to is not known until an instance
    /// starts.
    pub fn covers(&self, d: &Destination) -> bool {
        let port = |p: &Option<u16>| p.is_none_or(|p| d.port == Some(p));
        match (self, &d.host) {
            (Pattern::Exact(e), _) if !port(&e.port) => false,
            (Pattern::Exact(e), host) => match (&e.host, host) {
                (Host::Name(a), Host::Name(b)) => a == b,
                (Host::Net(net, bits), Host::Net(ip, dbits)) => {
                    ip.is_ipv4() == net.is_ipv4() && dbits >= bits && in_net(*ip, *net, *bits)
                }
                _ => false,
            },
            (Pattern::Subdomains { suffix, port: p }, Host::Name(name)) => {
                port(p)
                    && name.len() > suffix.len() + 1
                    && name.ends_with(suffix.as_str())
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
            }
            (Pattern::Subdomains { .. }, Host::Net(..)) => false,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(d) => d.fmt(f),
            Pattern::Subdomains { suffix, port } => match port {
                Some(p) => write!(f, "*.{suffix}:{p}"),
                None => write!(f, "*.{suffix}:*"),
            },
        }
    }
}

/// The host config's `grants.network`: where sidecars' network grants may
/// point. Empty (the default): no sidecar may grant any network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkCeiling {
    pub allow: Vec<Pattern>,
}

impl<'de> Deserialize<'de> for NetworkCeiling {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Vec::<String>::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "grants.network must be a list of destinations, e.g. [\"*.example.com:443\", \"10.0.0.0/8:*\"]",
            )
        })?;
        raw.iter()
            .map(|s| Pattern::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map(|allow| Self { allow })
            .map_err(serde::de::Error::custom)
    }
}

impl NetworkCeiling {
    /// The first destination of `grant` no pattern covers, as an error
    /// naming it and the ceiling.
    pub fn check(&self, grant: &NetworkGrant) -> Result<(), String> {
        for d in &grant.allow {
            if !self.allow.iter().any(|p| p.covers(d)) {
                let ceiling = if self.allow.is_empty() {
                    "none: the default".to_owned()
                } else {
                    self.allow
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(format!(
                    "the sidecar's grants.network.allow entry {:?} is outside the host's ceiling grants.network ({ceiling}; host config): remove it from the sidecar, or add it (or a network or *.domain covering it) to the host config's grants.network",
                    d.to_string()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
