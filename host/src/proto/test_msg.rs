//! A tiny protobuf writer for hand-built messages, shared by the
//! transcoder's tests and the wire layer's.

use std::borrow::Borrow;

#[derive(Debug, Default, Clone)]
pub(crate) struct Msg(pub(crate) Vec<u8>);

impl Msg {
    pub(crate) fn varint(mut self, n: u32, v: u64) -> Self {
        put_varint(&mut self.0, u64::from(n) << 3);
        put_varint(&mut self.0, v);
        self
    }

    pub(crate) fn bytes(mut self, n: u32, b: &[u8]) -> Self {
        put_varint(&mut self.0, (u64::from(n) << 3) | 2);
        put_varint(&mut self.0, b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    pub(crate) fn msg(self, n: u32, m: impl Borrow<Msg>) -> Self {
        self.bytes(n, &m.borrow().0)
    }

    pub(crate) fn str(self, n: u32, s: &str) -> Self {
        self.bytes(n, s.as_bytes())
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `raw` in the `k8s\0` envelope (`runtime.Unknown`) of `api_version`/`kind`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: impl Borrow<Msg>) -> Vec<u8> {
    let mut out = super::MAGIC.to_vec();
    let unknown = Msg::default()
        .msg(1, Msg::default().str(1, api_version).str(2, kind))
        .msg(2, raw);
    out.extend_from_slice(&unknown.0);
    out
}
