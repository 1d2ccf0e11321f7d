//! wit-fuzz: drives every WIT 0.2 host function with arbitrary arguments,
//! for the host's WIT-boundary fuzz test (`host/tests/wit_fuzz.rs`). Each
//! delta's object carries a program (hex in `data.program`) that this
//! plugin interprets as a sequence of host calls; see README.md.
//!
//! `unsafe` is allowed here, and only here among the plugins: handing the
//! host handles it never gave and pointers outside linear memory is the
//! point.
#![allow(unsafe_code)]

use kubewasm_sdk::bindings::kubewasm::plugin::{actions, cache, clock, log, selectors, types};
use kubewasm_sdk::prelude::*;

/// Raw core imports of WIT 0.2, declared with the canonical ABI's flat
/// signatures (the same module and name wit-bindgen imports them under):
/// what the typed bindings cannot express.
mod raw {
    #[link(wasm_import_module = "kubewasm:plugin/types@0.2.0")]
    unsafe extern "C" {
        #[link_name = "[method]object.name"]
        pub fn object_name(handle: i32, ret: i32);
        #[link_name = "[method]object.field"]
        pub fn object_field(handle: i32, ptr: i32, len: i32, ret: i32);
        #[link_name = "[resource-drop]object"]
        pub fn object_drop(handle: i32);
    }

    #[link(wasm_import_module = "kubewasm:plugin/log@0.2.0")]
    unsafe extern "C" {
        #[link_name = "enabled"]
        pub fn log_enabled(level: i32) -> i32;
        #[link_name = "write"]
        pub fn log_write(level: i32, msg: i32, msg_len: i32, fields: i32, fields_len: i32);
    }

    #[link(wasm_import_module = "kubewasm:plugin/selectors@0.2.0")]
    unsafe extern "C" {
        #[link_name = "[static]label-selector.parse"]
        pub fn selector_parse(ptr: i32, len: i32, ret: i32);
        #[link_name = "[method]label-selector.matches"]
        pub fn selector_matches(handle: i32, list: i32, list_len: i32) -> i32;
    }
}

/// Words the host's parsers know, so random bytes make near-valid input.
const TOKENS: &[&str] = &[
    "",
    "default",
    "kube-system",
    "pods",
    "configmaps",
    "secrets",
    "deployments.apps",
    "v1",
    "apps",
    "ConfigMap",
    "Pod",
    "Secret",
    "app",
    "app=web",
    "app in (a,b)",
    "!legacy",
    "x notin (",
    "=",
    "==",
    "!=",
    ",",
    "(",
    ")",
    "/",
    "~1",
    "~0",
    "~",
    "/metadata/name",
    "/data",
    "/spec/containers/*/image",
    "/metadata/labels/app",
    "/0",
    "/-",
    "//",
    "example.com/",
    "a.b.c",
    "\u{0}",
    "\u{fffd}",
    "é",
    "\u{10ffff}",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    "null",
    "1e999",
    "-0",
    "9223372036854775808",
    // Repeated, a selector of as many requirements as fit (new words go
    // last, so the crafted programs' indices stay).
    "a,",
];

/// The input program, read byte by byte; past its end every read is 0.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) << 32 | u64::from(self.u32())
    }

    /// A size: mostly small, sometimes up to 16 MiB (more than the fuzz
    /// plugin's memory limit, so some allocations trap in the guest).
    fn size(&mut self) -> usize {
        let class = self.byte();
        let b = usize::from(self.byte());
        match class % 8 {
            0 => 0,
            1..=3 => b % 64,
            4 | 5 => (b << 4 | usize::from(self.byte() & 15)) % 4096,
            6 => 1 << (10 + b % 12),
            _ => 1 << (20 + b % 5),
        }
    }

    /// An arbitrary string: a known word, input bytes, a long run, several
    /// words or odd characters.
    fn text(&mut self) -> String {
        match self.byte() % 7 {
            0 | 1 => TOKENS[usize::from(self.byte()) % TOKENS.len()].to_owned(),
            2 => {
                let n = usize::from(self.byte() % 32);
                let start = self.pos.min(self.data.len());
                let end = (start + n).min(self.data.len());
                self.pos = start + n;
                String::from_utf8_lossy(&self.data[start..end]).into_owned()
            }
            3 => {
                let c = TOKENS[usize::from(self.byte()) % TOKENS.len()];
                let n = self.size();
                if c.is_empty() {
                    "a".repeat(n)
                } else {
                    c.repeat(n / c.len().max(1) + 1)
                }
            }
            4 => (0..self.byte() % 8)
                .map(|_| TOKENS[usize::from(self.byte()) % TOKENS.len()])
                .collect(),
            5 => "\u{0}\u{fffd}é\u{10ffff}".repeat(usize::from(self.byte())),
            _ => String::new(),
        }
    }

    fn opt_text(&mut self) -> Option<String> {
        (!self.byte().is_multiple_of(3)).then(|| self.text())
    }

    /// JSON: valid objects with arbitrary fields, deep nesting, huge
    /// arrays, truncated or ill-typed documents, or plain garbage.
    fn json(&mut self) -> String {
        let quote = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
        match self.byte() % 9 {
            0 | 1 => {
                let (api, kind) = match self.byte() % 4 {
                    0 => ("v1".to_owned(), "ConfigMap".to_owned()),
                    1 => ("v1".to_owned(), "Pod".to_owned()),
                    2 => ("v1".to_owned(), "Secret".to_owned()),
                    _ => (self.text(), self.text()),
                };
                let (name, ns, value) = (self.text(), self.text(), self.text());
                format!(
                    "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{{\"name\":{},\"namespace\":{}}},\"data\":{{\"k\":{}}}}}",
                    quote(&api),
                    quote(&kind),
                    quote(&name),
                    quote(&ns),
                    quote(&value)
                )
            }
            2 => {
                let n = self.size();
                let close = self.byte().is_multiple_of(2);
                let mut s = "[".repeat(n);
                if close {
                    s.push_str(&"]".repeat(n));
                }
                s
            }
            3 => "{\"a\":".repeat(self.size()),
            4 => {
                let n = self.size() / 2;
                let mut s = String::with_capacity(n * 2 + 2);
                s.push('[');
                for i in 0..n {
                    s.push_str(if i == 0 { "0" } else { ",0" });
                }
                s.push(']');
                s
            }
            5 => {
                let mut s = self.json_small();
                let cut = usize::from(self.byte()) % (s.len() + 1);
                s.truncate(s.floor_char_boundary(cut));
                s
            }
            6 => "{\"apiVersion\":5,\"kind\":[],\"metadata\":\"x\"}".to_owned(),
            7 => format!(
                "[{{\"op\":{},\"path\":{},\"value\":{}}}]",
                quote(&self.text()),
                quote(&self.text()),
                quote(&self.text())
            ),
            _ => self.text(),
        }
    }

    fn json_small(&mut self) -> String {
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{}\",\"namespace\":\"default\"}}}}",
            self.byte()
        )
    }

    fn kind(&mut self) -> KindRef {
        match self.byte() % 3 {
            0 => KindRef::ResourceName(self.text()),
            1 => KindRef::Gvk(GroupVersionKind {
                group: self.text(),
                version: self.text(),
                kind: self.text(),
            }),
            _ => KindRef::Gvk(GroupVersionKind {
                group: String::new(),
                version: "v1".to_owned(),
                kind: ["ConfigMap", "Pod", "Secret", "Node"][usize::from(self.byte() % 4)]
                    .to_owned(),
            }),
        }
    }

    fn target(&mut self) -> ObjectRef {
        ObjectRef {
            kind: self.kind(),
            namespace: self.opt_text(),
            name: self.text(),
        }
    }

    fn preconditions(&mut self) -> Preconditions {
        Preconditions {
            uid: self.opt_text(),
            resource_version: self.opt_text(),
        }
    }

    fn level(&mut self) -> log::Level {
        [
            log::Level::Trace,
            log::Level::Debug,
            log::Level::Info,
            log::Level::Warn,
            log::Level::Error,
        ][usize::from(self.byte() % 5)]
    }

    /// A core address: in range, at the edge, or far outside memory.
    fn address(&mut self) -> i32 {
        match self.byte() % 5 {
            0 => 0,
            1 => 1,
            2 => -1,
            3 => i32::MAX - i32::from(self.byte()),
            _ => self.u32() as i32,
        }
    }
}

/// One instruction of a program: the byte's value modulo the count.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `object.name` through the raw import, on an arbitrary handle and
    /// return area.
    RawName,
    /// `object.field` through the raw import: the delta's handle with a
    /// pointer and length anywhere (or invalid UTF-8 in range).
    RawField,
    /// `[resource-drop]object` on an arbitrary handle (or the delta's, so
    /// the typed binding drops it again at the end).
    RawDrop,
    /// `log.enabled` with a discriminant out of range.
    RawLogLevel,
    /// `log.write` with a message and field list anywhere.
    RawLogWrite,
    /// `label-selector.parse` with a string anywhere or invalid UTF-8.
    RawSelectorParse,
    /// `label-selector.matches` on an object's handle (wrong resource
    /// type) or an arbitrary one.
    RawSelectorMatches,
    /// `cache.get` with a garbage kind, namespace and name; hits are kept.
    Get,
    /// `cache.list` with a garbage kind, namespace and selector; hits kept.
    List,
    /// `cache.by-index` with a garbage index and value.
    ByIndex,
    /// `label-selector.parse` of garbage; a parsed one is matched against a
    /// long label list and the delta's object, printed and kept.
    Selector,
    /// `object.field` and `object.fields` with garbage pointers, many at once.
    Fields,
    /// Every other `object` method on a held object (or the delta's).
    ObjectMethods,
    /// `object` methods on a handle the host never gave.
    ForgedHandle,
    /// `actions.apply` with garbage JSON.
    Apply,
    /// `actions.apply-status` with garbage JSON.
    ApplyStatus,
    /// `actions.patch` with a garbage target and patch.
    Patch,
    /// `actions.delete` with a garbage target.
    Delete,
    /// `actions.record-event` with garbage fields and a long note.
    Event,
    /// `log.write` with a long message and many fields.
    Log,
    /// `clock.now` and `clock.now-rfc3339`.
    Clock,
    /// Runs the next op up to 255 times with the same arguments.
    Repeat,
    /// Allocates and keeps guest memory (up to 16 MiB: past the limit).
    Hoard,
    /// Drops every held object and selector.
    Release,
    /// Ends the program with the handler's result taken from the input.
    Return,
    /// `log.write` through the raw import with one string passed as every
    /// key and value of a long field list: a few bytes of guest memory per
    /// entry, a copy of the whole string per entry on the host.
    RawAliasedList,
}

const OPS: [Op; 26] = [
    Op::RawName,
    Op::RawField,
    Op::RawDrop,
    Op::RawLogLevel,
    Op::RawLogWrite,
    Op::RawSelectorParse,
    Op::RawSelectorMatches,
    Op::Get,
    Op::List,
    Op::ByIndex,
    Op::Selector,
    Op::Fields,
    Op::ObjectMethods,
    Op::ForgedHandle,
    Op::Apply,
    Op::ApplyStatus,
    Op::Patch,
    Op::Delete,
    Op::Event,
    Op::Log,
    Op::Clock,
    Op::Repeat,
    Op::Hoard,
    Op::Release,
    Op::Return,
    Op::RawAliasedList,
];

/// Ops run per call at most (a repeat counts each run).
const BUDGET: usize = 4096;

/// Invalid UTF-8, in linear memory.
static NOT_UTF8: [u8; 4] = [0xff, 0xfe, 0xc3, 0x28];

struct Machine<'d> {
    delta: &'d Delta,
    held: Vec<Object>,
    selectors: Vec<selectors::LabelSelector>,
    hoard: Vec<Vec<u8>>,
    budget: usize,
    /// Set by `Return`.
    result: Option<Result<Handled, HandlerError>>,
}

impl Machine<'_> {
    fn object(&self, pick: u8) -> Option<&Object> {
        let n = self.held.len() + 1;
        match usize::from(pick) % n {
            0 => self.delta.object.as_ref(),
            i => self.held.get(i - 1),
        }
    }

    fn delta_handle(&self) -> i32 {
        self.delta.object.as_ref().map_or(1, |o| o.handle() as i32)
    }

    fn step(&mut self, input: &mut Input<'_>) {
        if self.budget == 0 {
            return;
        }
        self.budget -= 1;
        let op = OPS[usize::from(input.byte()) % OPS.len()];
        self.run(op, input);
    }

    fn run(&mut self, op: Op, input: &mut Input<'_>) {
        match op {
            Op::RawName => {
                let handle = match input.byte() % 3 {
                    0 => self.delta_handle(),
                    1 => self.delta_handle() + i32::from(input.byte()),
                    _ => input.u32() as i32,
                };
                let ret = match input.byte() % 3 {
                    0 => {
                        let area = Box::leak(Box::new([0u32; 4]));
                        area.as_mut_ptr() as i32
                    }
                    _ => input.address(),
                };
                unsafe { raw::object_name(handle, ret) };
            }
            Op::RawField => {
                let area = Box::leak(Box::new([0u64; 4]));
                let (ptr, len) = match input.byte() % 3 {
                    0 => (NOT_UTF8.as_ptr() as i32, NOT_UTF8.len() as i32),
                    1 => (input.address(), input.u32() as i32),
                    _ => (NOT_UTF8.as_ptr() as i32, i32::MAX),
                };
                unsafe {
                    raw::object_field(self.delta_handle(), ptr, len, area.as_mut_ptr() as i32)
                };
            }
            Op::RawDrop => {
                let handle = match input.byte() % 2 {
                    0 => self.delta_handle(),
                    _ => input.u32() as i32,
                };
                unsafe { raw::object_drop(handle) };
            }
            Op::RawLogLevel => {
                let level = i32::from(input.byte()) + 5;
                unsafe { raw::log_enabled(level) };
            }
            Op::RawLogWrite => {
                let level = i32::from(input.byte() % 8);
                let (msg, msg_len) = match input.byte() % 3 {
                    0 => (NOT_UTF8.as_ptr() as i32, NOT_UTF8.len() as i32),
                    _ => (input.address(), input.u32() as i32),
                };
                let (fields, fields_len) = (input.address(), input.u32() as i32);
                unsafe { raw::log_write(level, msg, msg_len, fields, fields_len) };
            }
            Op::RawSelectorParse => {
                let area = Box::leak(Box::new([0u32; 4]));
                let (ptr, len) = match input.byte() % 2 {
                    0 => (NOT_UTF8.as_ptr() as i32, NOT_UTF8.len() as i32),
                    _ => (input.address(), input.u32() as i32),
                };
                unsafe { raw::selector_parse(ptr, len, area.as_mut_ptr() as i32) };
            }
            Op::RawSelectorMatches => {
                let handle = match input.byte() % 2 {
                    0 => self.delta_handle(),
                    _ => input.u32() as i32,
                };
                let (list, len) = (input.address(), input.u32() as i32 & 0xffff);
                unsafe { raw::selector_matches(handle, list, len) };
            }
            Op::Get => {
                let (kind, ns, name) = (input.kind(), input.opt_text(), input.text());
                if let Ok(Some(o)) = cache::get(&kind, ns.as_deref(), &name) {
                    self.held.push(o);
                }
            }
            Op::List => {
                let (kind, ns, sel) = (input.kind(), input.opt_text(), input.opt_text());
                if let Ok(list) = cache::list(&kind, ns.as_deref(), sel.as_deref()) {
                    self.held.extend(list);
                }
            }
            Op::ByIndex => {
                let (index, value) = (input.text(), input.text());
                if let Ok(list) = cache::by_index(&index, &value) {
                    self.held.extend(list);
                }
            }
            Op::Selector => {
                let text = input.text();
                if let Ok(sel) = selectors::LabelSelector::parse(&text) {
                    let n = input.size() / 16;
                    let (k, v) = (input.text(), input.text());
                    let labels: Vec<(String, String)> = vec![(k, v); n];
                    sel.matches(&labels);
                    if let Some(o) = self.delta.object.as_ref() {
                        sel.matches_object(o);
                    }
                    sel.to_string();
                    self.selectors.push(sel);
                }
            }
            Op::Fields => {
                let pick = input.byte();
                let pointer = input.text();
                let n = input.size() / 8;
                if let Some(o) = self.object(pick) {
                    o.field(&pointer);
                    o.fields(&vec![pointer; n]);
                }
            }
            Op::ObjectMethods => {
                let pick = input.byte();
                let (label, annotation) = (input.text(), input.text());
                if let Some(o) = self.object(pick) {
                    o.kind();
                    o.namespace();
                    o.name();
                    o.uid();
                    o.resource_version();
                    o.generation();
                    o.label(&label);
                    o.labels();
                    o.annotation(&annotation);
                    o.annotations();
                    o.owner_references();
                    o.controller();
                    o.finalizers();
                    o.deletion_timestamp();
                    o.meta();
                    o.to_json();
                }
            }
            Op::ForgedHandle => {
                let handle = input.u32();
                // SAFETY: none; a handle the host never gave is the test.
                let o = unsafe { types::Object::from_handle(handle) };
                o.name();
                o.field("/metadata");
            }
            Op::Apply => {
                let (json, force, pre) = (
                    input.json(),
                    input.byte().is_multiple_of(2),
                    input.preconditions(),
                );
                let _ = actions::apply(&json, force, &pre);
            }
            Op::ApplyStatus => {
                let (json, pre) = (input.json(), input.preconditions());
                let _ = actions::apply_status(&json, &pre);
            }
            Op::Patch => {
                let target = input.target();
                let kind = [PatchType::Merge, PatchType::Json][usize::from(input.byte() % 2)];
                let (patch, pre) = (input.json(), input.preconditions());
                let _ = actions::patch(&target, kind, &patch, &pre);
            }
            Op::Delete => {
                let target = input.target();
                let propagation = [
                    Propagation::Background,
                    Propagation::Foreground,
                    Propagation::Orphan,
                ][usize::from(input.byte() % 3)];
                let pre = input.preconditions();
                let _ = actions::delete(&target, propagation, &pre);
            }
            Op::Event => {
                let event = EventRecord {
                    regarding: input.target(),
                    regarding_uid: input.opt_text(),
                    event_type: [EventType::Normal, EventType::Warning]
                        [usize::from(input.byte() % 2)],
                    reason: input.text(),
                    note: input.text(),
                };
                let _ = actions::record_event(&event);
            }
            Op::Log => {
                let level = input.level();
                let message = input.text();
                let n = input.size() / 16;
                let (k, v) = (input.text(), input.text());
                log::enabled(level);
                log::write(level, &message, &vec![(k, v); n]);
            }
            Op::Clock => {
                clock::now();
                clock::now_rfc3339();
            }
            Op::Repeat => {
                let times = input.byte();
                let start = input.pos;
                let mut end = start;
                for _ in 0..times {
                    input.pos = start;
                    self.step(input);
                    end = input.pos;
                    if self.result.is_some() {
                        break;
                    }
                }
                input.pos = end;
            }
            Op::Hoard => {
                let n = input.size();
                self.hoard.push(vec![input.byte(); n]);
            }
            Op::Release => {
                self.held.clear();
                self.selectors.clear();
                self.hoard.clear();
            }
            Op::RawAliasedList => {
                let text = vec![b'x'; input.size()];
                let entry = [text.as_ptr() as i32, text.len() as i32];
                let list = vec![[entry, entry]; input.size()];
                unsafe {
                    raw::log_write(
                        2,
                        text.as_ptr() as i32,
                        0,
                        list.as_ptr() as i32,
                        list.len() as i32,
                    )
                };
            }
            Op::Return => {
                self.result = Some(match input.byte() % 4 {
                    0 => Ok(Done),
                    1 => Ok(Handled::RequeueAfter(input.u64())),
                    2 => Err(HandlerError::Retry(input.text())),
                    _ => Err(HandlerError::Permanent(input.text())),
                });
            }
        }
    }
}

/// The program's bytes, from hex.
fn program(delta: &Delta) -> Vec<u8> {
    let Some(FieldValue::Text(hex)) = delta.object.as_ref().and_then(|o| o.field("/data/program"))
    else {
        return Vec::new();
    };
    hex.as_bytes()
        .chunks(2)
        .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

struct WitFuzz;

impl Plugin for WitFuzz {
    fn new(_ctx: &Context) -> Result<Self, String> {
        Ok(Self)
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(Subscription::kind::<ConfigMap>().deltas(DeltaType::SUBSCRIBABLE))
            .subscribe(Subscription::kind::<Pod>().cache_only())
            .subscribe(Subscription::kind::<Secret>().cache_only())
            .index(Index::new::<Pod>("by-node", "/spec/nodeName"))
            .writes::<ConfigMap>()
            .writes::<Pod>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        let bytes = program(&delta);
        let mut input = Input {
            data: &bytes,
            pos: 0,
        };
        let mut machine = Machine {
            delta: &delta,
            held: Vec::new(),
            selectors: Vec::new(),
            hoard: Vec::new(),
            budget: BUDGET,
            result: None,
        };
        while !input.done() && machine.budget > 0 && machine.result.is_none() {
            machine.step(&mut input);
        }
        let result = machine.result.take().unwrap_or(Ok(Done));
        // Held handles and selectors are dropped here, with the delta.
        drop(machine);
        result
    }
}

kubewasm_sdk::export_plugin!(WitFuzz);
