//! The sidecar's network grant: the destinations (host or CIDR, and port) a
//! plugin may connect or send to. Host names are resolved when an instance
//! is created (at load, and again whenever a trapped instance is replaced),
//! and every connect or send is checked against the resulting addresses, so
//! a guest that resolves a name itself and connects to the address is
//! treated the same as one that is given an address.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use wasmtime_wasi::sockets::SocketAddrUse;

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
    /// Resolves the names of `grant`. A name that does not resolve allows
    /// nothing (logged); the instance still starts.
    pub fn resolve(plugin: &str, grant: &NetworkGrant) -> Self {
        let mut allowed = Vec::new();
        for d in &grant.allow {
            match &d.host {
                Host::Net(ip, bits) => allowed.push((*ip, *bits, d.port)),
                Host::Name(name) => match (name.as_str(), d.port.unwrap_or(1)).to_socket_addrs() {
                    Ok(addrs) => {
                        for a in addrs {
                            let bits = if a.is_ipv4() { 32 } else { 128 };
                            allowed.push((a.ip(), bits, d.port));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(plugin, destination = %d, error = %e, "granted host does not resolve: no connection to it is allowed");
                    }
                },
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
                let ip = match addr.ip() {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                    v4 => v4,
                };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(yaml: &str) -> Result<NetworkGrant, String> {
        serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn true_is_refused_with_the_migration() {
        let e = grant("true").unwrap_err();
        assert!(
            e.contains("no longer accepted") && e.contains("allow:"),
            "{e}"
        );
        assert_eq!(grant("false").unwrap(), NetworkGrant::default());
        for bad in [
            "{allow: [example.com]}",
            "{allow: ['example.com:0']}",
            "{allow: ['*:443']}",
            "{allow: ['10.0.0.0/33:1']}",
            "{allow: ['bad_host!:1']}",
        ] {
            assert!(grant(bad).unwrap_err().contains("host:port"), "{bad}");
        }
        let g = grant("{allow: ['API.example.com:443', '10.0.0.0/8:*', '[::1]:80']}").unwrap();
        assert_eq!(g.allow[0].host, Host::Name("api.example.com".into()));
        assert_eq!(g.allow[1].port, None);
        assert_eq!(g.allow[2].host, Host::Net("::1".parse().unwrap(), 128));
    }

    #[test]
    fn only_granted_destinations_may_be_reached() {
        // A real listener: the granted port passes, another port and
        // another host do not.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let g = grant(&format!(
            "{{allow: ['localhost:{port}', '10.0.0.0/8:5432']}}"
        ))
        .unwrap();
        let p = NetworkPolicy::resolve("p", &g);
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(p.allows(at(&format!("127.0.0.1:{port}")), SocketAddrUse::TcpConnect));
        assert!(!p.allows(
            at(&format!("127.0.0.1:{}", port.wrapping_add(1).max(1))),
            SocketAddrUse::TcpConnect
        ));
        assert!(!p.allows(at(&format!("127.0.0.2:{port}")), SocketAddrUse::TcpConnect));
        assert!(p.allows(at("10.1.2.3:5432"), SocketAddrUse::UdpSend));
        assert!(!p.allows(at("11.1.2.3:5432"), SocketAddrUse::TcpConnect));
        // IPv4-mapped IPv6 is the same address.
        assert!(p.allows(at("[::ffff:10.0.0.1]:5432"), SocketAddrUse::TcpConnect));
        // Implicit binds pass, serving does not.
        assert!(p.allows(at("0.0.0.0:0"), SocketAddrUse::TcpBind));
        assert!(!p.allows(at("0.0.0.0:8080"), SocketAddrUse::TcpBind));
        assert!(!p.allows(at(&format!("127.0.0.1:{port}")), SocketAddrUse::TcpListen));
        // Nothing granted: nothing reachable.
        let none = NetworkPolicy::resolve("p", &NetworkGrant::default());
        assert!(!none.allows(at(&format!("127.0.0.1:{port}")), SocketAddrUse::TcpConnect));
        drop(listener);
    }
}
