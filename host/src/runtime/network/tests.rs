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
        "{{allow: ['127.0.0.1:{port}', '10.0.0.0/8:5432']}}"
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

fn at(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A resolver answering `names` (name, addresses), nothing else.
fn resolver(
    names: &'static [(&'static str, &'static [&'static str])],
) -> impl Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>> {
    move |name, port| {
        let (_, ips) = names
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))?;
        Ok(ips
            .iter()
            .map(|ip| SocketAddr::new(ip.parse().unwrap(), port))
            .collect())
    }
}

/// Each reserved class, in each spelling a resolver may hand back.
const RESERVED: [(&str, Reserved); 16] = [
    ("127.0.0.1", Reserved::Loopback),
    ("127.1.2.3", Reserved::Loopback),
    ("::1", Reserved::Loopback),
    ("::ffff:127.0.0.1", Reserved::Loopback),
    ("::127.0.0.1", Reserved::Loopback),
    ("169.254.169.254", Reserved::LinkLocal),
    ("::ffff:169.254.169.254", Reserved::LinkLocal),
    ("::ffff:a9fe:a9fe", Reserved::LinkLocal),
    ("64:ff9b::169.254.169.254", Reserved::LinkLocal),
    ("fe80::1", Reserved::LinkLocal),
    ("febf::1", Reserved::LinkLocal),
    ("0.0.0.0", Reserved::Unspecified),
    ("0.1.2.3", Reserved::Unspecified),
    ("::", Reserved::Unspecified),
    ("::ffff:0.0.0.0", Reserved::Unspecified),
    ("64:ff9b::7f00:1", Reserved::Loopback),
];

#[test]
fn reserved_addresses_are_known_in_every_spelling() {
    for (ip, class) in RESERVED {
        assert_eq!(reserved(ip.parse().unwrap()), Some(class), "{ip}");
    }
    for ip in [
        "10.1.2.3",
        "8.8.8.8",
        "169.255.0.1",
        "128.0.0.1",
        "::ffff:10.1.2.3",
        "2001:db8::1",
        "fec0::1",
        "fe7f::1",
        "64:ff9b::8.8.8.8",
        "64:ff9b:1::7f00:1",
    ] {
        assert_eq!(reserved(ip.parse().unwrap()), None, "{ip}");
    }
}

#[test]
fn a_granted_name_never_allows_an_address_of_the_host_or_its_link() {
    const NAMES: &[(&str, &[&str])] = &[(
        "api.example.com",
        &[
            "10.1.2.3",
            "2001:db8::1",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "::ffff:a9fe:a9fe",
            "64:ff9b::169.254.169.254",
            "fe80::1",
            "febf::1",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "::ffff:0.0.0.0",
            "64:ff9b::7f00:1",
        ],
    )];
    let g = grant("{allow: ['api.example.com:443']}").unwrap();
    let p = NetworkPolicy::resolve_with("p", &g, resolver(NAMES));
    // What the name resolves to elsewhere is reachable, in either
    // spelling.
    for ok in ["10.1.2.3:443", "[::ffff:10.1.2.3]:443", "[2001:db8::1]:443"] {
        assert!(p.allows(at(ok), SocketAddrUse::TcpConnect), "{ok}");
    }
    // The reserved ones are not, whatever the spelling resolved or
    // connected to.
    for (ip, _) in RESERVED {
        let ip: IpAddr = ip.parse().unwrap();
        let mapped = match ip {
            IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
            v6 => v6,
        };
        for addr in [ip, mapped, canonical(ip)] {
            for use_ in [SocketAddrUse::TcpConnect, SocketAddrUse::UdpSend] {
                assert!(
                    !p.allows(SocketAddr::new(addr, 443), use_),
                    "{addr} ({ip}) {use_:?}"
                );
            }
        }
    }
    assert_eq!(p.allowed.len(), 2, "{:?}", p.allowed);
    // The system's resolver: `localhost` alone opens no loopback port.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let g = grant(&format!("{{allow: ['localhost:{port}']}}")).unwrap();
    let p = NetworkPolicy::resolve("p", &g);
    assert!(p.is_empty(), "{:?}", p.allowed);
    assert!(!p.allows(at(&format!("127.0.0.1:{port}")), SocketAddrUse::TcpConnect));
}

#[test]
fn an_address_entry_of_the_grant_opens_what_a_name_may_not() {
    const NAMES: &[(&str, &[&str])] = &[("metadata.example.com", &["169.254.169.254", "::1"])];
    let g = grant(
        "{allow: ['metadata.example.com:80', '[::ffff:169.254.169.254]:80', '127.0.0.0/8:9090']}",
    )
    .unwrap();
    let p = NetworkPolicy::resolve_with("p", &g, resolver(NAMES));
    // Named by address (an IPv4-mapped one is the IPv4 address): open,
    // on that entry's port only.
    for ok in [
        "169.254.169.254:80",
        "[::ffff:169.254.169.254]:80",
        "127.0.0.1:9090",
        "[::ffff:127.0.0.1]:9090",
    ] {
        assert!(p.allows(at(ok), SocketAddrUse::TcpConnect), "{ok}");
    }
    for refused in [
        "169.254.169.254:81",
        "127.0.0.1:80",
        "[::1]:80",
        "[::1]:9090",
    ] {
        assert!(
            !p.allows(at(refused), SocketAddrUse::TcpConnect),
            "{refused}"
        );
    }
}

fn ceiling(list: &[&str]) -> NetworkCeiling {
    NetworkCeiling {
        allow: list.iter().map(|s| Pattern::parse(s).unwrap()).collect(),
    }
}

#[test]
fn grants_must_stay_inside_the_hosts_network_ceiling() {
    let c = ceiling(&[
        "*.example.com:443",
        "10.0.0.0/8:*",
        "db.internal:5432",
        "[fd00::/8]:53",
    ]);
    for ok in [
        "{allow: ['api.example.com:443', 'a.b.example.com:443']}",
        "{allow: ['10.1.2.3:80', '10.1.0.0/16:5432']}",
        "{allow: ['db.internal:5432', '[fd00::1]:53']}",
        "{allow: []}",
    ] {
        assert!(c.check(&grant(ok).unwrap()).is_ok(), "{ok}");
    }
    for (bad, entry) in [
        ("{allow: ['example.com:443']}", "example.com:443"),
        ("{allow: ['api.example.com:80']}", "api.example.com:80"),
        ("{allow: ['api.example.com:*']}", "api.example.com:*"),
        ("{allow: ['notexample.com:443']}", "notexample.com:443"),
        ("{allow: ['10.0.0.0/7:80']}", "10.0.0.0/7:80"),
        ("{allow: ['11.0.0.1:80']}", "11.0.0.1:80"),
        // A name that resolves into 10/8 is still a name.
        ("{allow: ['db.other:5432']}", "db.other:5432"),
        ("{allow: ['db.internal:5433']}", "db.internal:5433"),
        ("{allow: ['[fd00::1]:54']}", "[fd00::1]:54"),
    ] {
        let e = c.check(&grant(bad).unwrap()).unwrap_err();
        assert!(
            e.contains(&format!("{entry:?}"))
                && e.contains("ceiling grants.network")
                && e.contains("*.example.com:443"),
            "{bad}: {e}"
        );
    }
    // The default ceiling allows nothing, and says so.
    let e = NetworkCeiling::default()
        .check(&grant("{allow: ['127.0.0.1:80']}").unwrap())
        .unwrap_err();
    assert!(e.contains("none: the default"), "{e}");
    // Ceiling entries are validated like grants.
    let parsed: Result<NetworkCeiling, _> = serde_yaml_ng::from_str("['*.10.0.0.1:80']");
    assert!(parsed.unwrap_err().to_string().contains("*.10.0.0.1:80"));
    let parsed: Result<NetworkCeiling, _> = serde_yaml_ng::from_str("['*:80']");
    assert!(parsed.is_err());
}

#[test]
fn only_granted_names_may_be_looked_up() {
    let p = LookupPolicy::new(
        &grant("{allow: ['API.example.com:443', '10.0.0.0/8:5432', 'db.internal:*']}").unwrap(),
    );
    for ok in [
        "api.example.com",
        "API.Example.com.",
        "db.internal",
        "10.1.2.3",
        "::1",
        "[::1]",
    ] {
        assert!(p.allows(ok), "{ok}");
    }
    for refused in [
        "example.com",
        "x.api.example.com",
        "leak-c2VjcmV0.attacker.example",
        "",
        ".",
    ] {
        assert!(!p.allows(refused), "{refused}");
    }
    assert!(!LookupPolicy::default().allows("api.example.com"));
}
