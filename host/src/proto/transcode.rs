//! The walk from protobuf bytes to JSON text, driven by the generated
//! table: fields in Go's order, each written (or left out) as encoding/json
//! would write the Go value that protobuf decodes to.

use super::error::{ProtoError, Result};
use super::json;
use super::schema::{Field, Message, MessageId, Schema, Ty};
use super::wire::{self, Value};

/// Fields of one message on the wire.
type Fields<'a> = Vec<(u32, Value<'a>)>;

/// One transcoding: the table, the output and spare field lists (a message
/// borrows one while its fields are written, so nested messages do not
/// allocate once the pool is warm).
pub(crate) struct Writer<'s, 'a> {
    schema: &'s Schema,
    pub(crate) out: Vec<u8>,
    pool: Vec<Fields<'a>>,
    /// Spare span lists (see [`Writer::fields`]).
    span_pool: Vec<Vec<(u32, u32)>>,
}

/// No wire value for a table field.
const NONE: (u32, u32) = (u32::MAX, 0);

/// The envelope's TypeMeta, written where a top-level object inlines its
/// own (empty in protobuf).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypeMeta<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
}

fn wire_err(reason: &'static str) -> ProtoError {
    ProtoError::wire(reason)
}

impl<'s, 'a> Writer<'s, 'a> {
    pub(crate) fn new(schema: &'s Schema, capacity: usize) -> Self {
        Writer {
            schema,
            out: Vec::with_capacity(capacity),
            pool: Vec::new(),
            span_pool: Vec::new(),
        }
    }

    /// Writes a message as a JSON object.
    pub(crate) fn message(
        &mut self,
        id: MessageId,
        bytes: &'a [u8],
        type_meta: Option<TypeMeta<'_>>,
    ) -> Result<()> {
        let mut fields = self.spare();
        let result = wire::fields(bytes, &mut fields)
            .map_err(wire_err)
            .and_then(|()| {
                self.out.push(b'{');
                let mut first = true;
                self.fields(id, &fields, type_meta, &mut first)?;
                self.out.push(b'}');
                Ok(())
            });
        self.recycle(fields);
        result
    }

    /// A field list from the pool, empty.
    pub(crate) fn spare(&mut self) -> Fields<'a> {
        // Sized for a typical message: growing from empty cost more than
        // the walk itself on small objects.
        let mut fields = self.pool.pop().unwrap_or_else(|| Vec::with_capacity(32));
        fields.clear();
        fields
    }

    /// Returns a field list to the pool.
    pub(crate) fn recycle(&mut self, mut fields: Fields<'a>) {
        fields.clear();
        self.pool.push(fields);
    }

    fn key(&mut self, field: &Field, first: &mut bool) {
        if !std::mem::take(first) {
            self.out.push(b',');
        }
        self.out.extend_from_slice(field.key.as_bytes());
    }

    /// Writes a message's fields into the object being written (without
    /// braces: inline structs share their parent's object).
    fn fields(
        &mut self,
        id: MessageId,
        fields: &Fields<'a>,
        type_meta: Option<TypeMeta<'_>>,
        first: &mut bool,
    ) -> Result<()> {
        let schema = self.schema;
        let message = &schema.messages[id];
        // Where each table field's values are on the wire: the first and
        // last entry with its number (repeated fields are contiguous as
        // Go writes them; the run between is filtered by number anyway).
        let mut spans = self
            .span_pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(64));
        spans.clear();
        spans.resize(message.fields.len(), NONE);
        for (i, (number, _)) in fields.iter().enumerate() {
            let slot = usize::try_from(*number)
                .ok()
                .and_then(|n| message.slots.get(n))
                .copied()
                .unwrap_or(0);
            if let Some(span) = usize::from(slot)
                .checked_sub(1)
                .and_then(|s| spans.get_mut(s))
            {
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                if span.0 == u32::MAX {
                    span.0 = i;
                }
                span.1 = i;
            }
        }
        let result = self.fields_in_order(message, fields, &spans, type_meta, first);
        self.span_pool.push(spans);
        result
    }

    fn fields_in_order(
        &mut self,
        message: &Message,
        fields: &Fields<'a>,
        spans: &[(u32, u32)],
        type_meta: Option<TypeMeta<'_>>,
        first: &mut bool,
    ) -> Result<()> {
        for (field, &(start, end)) in message.fields.iter().zip(spans) {
            let Some(number) = field.number else {
                // TypeMeta: `kind` then `apiVersion`, both omitempty.
                if let Some(tm) = type_meta {
                    for (key, value) in
                        [("\"kind\":", tm.kind), ("\"apiVersion\":", tm.api_version)]
                    {
                        if !value.is_empty() {
                            if !std::mem::take(first) {
                                self.out.push(b',');
                            }
                            self.out.extend_from_slice(key.as_bytes());
                            json::string(&mut self.out, value.as_bytes());
                        }
                    }
                }
                continue;
            };
            let run = match fields.get(start as usize..=end as usize) {
                Some(run) if start != u32::MAX => run,
                _ => &[],
            };
            self.field(field, number, run, first)
                .map_err(|e| e.within(field.key.trim_matches(|c| c == '"' || c == ':')))?;
        }
        Ok(())
    }

    fn field(
        &mut self,
        field: &Field,
        number: u32,
        run: &[(u32, Value<'a>)],
        first: &mut bool,
    ) -> Result<()> {
        let fields = run;
        let last = run.last().map(|(_, v)| *v);
        match &field.ty {
            Ty::Message(id) if field.inline => {
                let bytes = match last {
                    Some(v) => v.bytes().map_err(wire_err)?,
                    None => &[],
                };
                let mut nested = self.spare();
                let result = wire::fields(bytes, &mut nested)
                    .map_err(wire_err)
                    .and_then(|()| self.fields(*id, &nested, None, first));
                self.recycle(nested);
                result
            }
            Ty::Slice(elem) => {
                let values = || fields.iter().filter(|(n, _)| *n == number).map(|(_, v)| *v);
                if values().all(|v| is_empty_packed(elem, v)) {
                    return self.nil(field, first);
                }
                self.key(field, first);
                self.out.push(b'[');
                let mut index = 0usize;
                for value in values() {
                    self.element(elem, value, &mut index)?;
                }
                self.out.push(b']');
                Ok(())
            }
            Ty::Map(key, value) => {
                let entries: Vec<&'a [u8]> = fields
                    .iter()
                    .filter(|(n, _)| *n == number)
                    .map(|(_, v)| v.bytes())
                    .collect::<Result<_, _>>()
                    .map_err(wire_err)?;
                if entries.is_empty() {
                    return self.nil(field, first);
                }
                self.key(field, first);
                self.map(key, value, &entries)
            }
            Ty::Wrapped(elem) => {
                let Some(value) = last else {
                    return self.nil(field, first);
                };
                // An empty wrapper: an empty slice, which omitempty leaves out.
                if field.omitempty && value.bytes().is_ok_and(<[u8]>::is_empty) {
                    return Ok(());
                }
                self.key(field, first);
                self.wrapped(elem, value)
            }
            Ty::Bytes | Ty::Ptr(_) | Ty::Other(_) => {
                let Some(value) = last else {
                    return self.nil(field, first);
                };
                if field.omitempty
                    && matches!(field.ty, Ty::Bytes)
                    && value.bytes().is_ok_and(<[u8]>::is_empty)
                {
                    return Ok(());
                }
                self.key(field, first);
                match &field.ty {
                    Ty::Ptr(inner) => self.value(inner, Some(value)),
                    ty => self.value(ty, Some(value)),
                }
            }
            Ty::Message(_) | Ty::Custom(_) => {
                // Structs: omitempty never leaves them out; omitzero does
                // when they are zero (absent or empty on the wire: only
                // metav1.Time has omitzero, and its Marshal writes nothing
                // for the zero time; a unit test keeps it so).
                if field.omitzero && last.is_none_or(|v| v.bytes().is_ok_and(<[u8]>::is_empty)) {
                    return Ok(());
                }
                self.key(field, first);
                self.value(&field.ty, last)
            }
            Ty::String | Ty::Bool | Ty::Int32 | Ty::Int64 | Ty::Float64 => {
                if (field.omitempty || field.omitzero) && is_zero_scalar(last) {
                    return Ok(());
                }
                self.key(field, first);
                self.value(&field.ty, last)
            }
        }
    }

    /// A nil slice, map or pointer: left out with omitempty, else `null`.
    fn nil(&mut self, field: &Field, first: &mut bool) -> Result<()> {
        if !(field.omitempty || field.omitzero) {
            self.key(field, first);
            self.out.extend_from_slice(b"null");
        }
        Ok(())
    }

    /// One occurrence of a repeated field: one element, or several when
    /// a scalar array is packed.
    fn element(&mut self, elem: &Ty, value: Value<'a>, index: &mut usize) -> Result<()> {
        let packed = matches!(elem, Ty::Bool | Ty::Int32 | Ty::Int64 | Ty::Float64);
        let mut write = |this: &mut Self, v: Value<'a>| {
            if *index > 0 {
                this.out.push(b',');
            }
            let i = *index;
            *index += 1;
            this.value(elem, Some(v))
                .map_err(|e| e.within(&format!("[{i}]")))
        };
        match value {
            Value::Bytes(mut b) if packed => {
                while !b.is_empty() {
                    let v = if matches!(elem, Ty::Float64) {
                        let (head, rest) = b
                            .split_at_checked(8)
                            .ok_or(wire_err("truncated packed double"))?;
                        b = rest;
                        Value::Fixed64(u64::from_le_bytes(
                            head.try_into().map_err(|_| wire_err("packed double"))?,
                        ))
                    } else {
                        Value::Varint(wire::varint(&mut b).map_err(wire_err)?)
                    };
                    write(self, v)?;
                }
                Ok(())
            }
            v => write(self, v),
        }
    }

    fn map(&mut self, key: &Ty, value: &Ty, entries: &[&'a [u8]]) -> Result<()> {
        if *key != Ty::String {
            return Err(ProtoError::Value {
                path: String::new(),
                reason: format!("map keys of type {key:?}"),
            });
        }
        let mut pairs: Vec<(&'a [u8], Option<Value<'a>>)> = Vec::with_capacity(entries.len());
        let mut entry = self.spare();
        for bytes in entries {
            entry.clear();
            wire::fields(bytes, &mut entry).map_err(wire_err)?;
            let k = match wire::last(&entry, 1) {
                Some(v) => v.bytes().map_err(wire_err)?,
                None => &[],
            };
            pairs.push((k, wire::last(&entry, 2)));
        }
        self.recycle(entry);
        // encoding/json sorts map keys; a key given twice keeps its last value.
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        pairs.dedup_by(|later, earlier| later.0 == earlier.0);
        self.out.push(b'{');
        for (i, (k, v)) in pairs.into_iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            json::string(&mut self.out, k);
            self.out.push(b':');
            let written = match value {
                // gogo decodes a map's bytes value as `[]byte{}` even when
                // the entry has none: `""`, not `null`.
                Ty::Bytes if v.is_none() => {
                    self.out.extend_from_slice(b"\"\"");
                    Ok(())
                }
                // gogo decodes a map entry's value into a fresh `&T{}`:
                // an empty, not nil, slice when the entry has none.
                Ty::Wrapped(elem) => self.wrapped(elem, v.unwrap_or(Value::Bytes(&[]))),
                ty => self.value(ty, v),
            };
            written.map_err(|e| e.within(&format!("[{:?}]", String::from_utf8_lossy(k))))?;
        }
        self.out.push(b'}');
        Ok(())
    }

    /// A named slice in its wrapper message: the items are field 1.
    /// The wrapper is there, so the slice is not nil.
    fn wrapped(&mut self, elem: &Ty, value: Value<'a>) -> Result<()> {
        let mut items = self.spare();
        let result = value
            .bytes()
            .and_then(|b| wire::fields(b, &mut items))
            .map_err(wire_err)
            .and_then(|()| {
                // Present, the slice is not nil: `[]` even when empty.
                self.out.push(b'[');
                let mut index = 0;
                for (_, v) in items.iter().filter(|(n, _)| *n == 1) {
                    self.element(elem, *v, &mut index)?;
                }
                self.out.push(b']');
                Ok(())
            });
        self.recycle(items);
        result
    }

    /// Writes one value of type `ty`; `None` is the Go zero value (what
    /// protobuf decodes an absent field of a value type to).
    fn value(&mut self, ty: &Ty, value: Option<Value<'a>>) -> Result<()> {
        match ty {
            Ty::String => {
                let s = match value {
                    Some(v) => v.bytes().map_err(wire_err)?,
                    None => &[],
                };
                json::string(&mut self.out, s);
            }
            Ty::Bool => {
                let b = value
                    .map(Value::varint)
                    .transpose()
                    .map_err(wire_err)?
                    .unwrap_or(0)
                    != 0;
                self.out
                    .extend_from_slice(if b { b"true" } else { b"false" });
            }
            Ty::Int32 => {
                let v = value
                    .map(Value::varint)
                    .transpose()
                    .map_err(wire_err)?
                    .unwrap_or(0) as i32;
                json::int(&mut self.out, i64::from(v));
            }
            Ty::Int64 => {
                let v = value
                    .map(Value::varint)
                    .transpose()
                    .map_err(wire_err)?
                    .unwrap_or(0) as i64;
                json::int(&mut self.out, v);
            }
            Ty::Float64 => {
                let bits = match value {
                    Some(Value::Fixed64(b)) => b,
                    None => 0,
                    Some(_) => return Err(wire_err("expected a double")),
                };
                json::float(&mut self.out, f64::from_bits(bits)).ok_or_else(|| {
                    ProtoError::Value {
                        path: String::new(),
                        reason: "a float that is not finite".into(),
                    }
                })?;
            }
            Ty::Bytes => match value {
                Some(v) => json::base64(&mut self.out, v.bytes().map_err(wire_err)?),
                None => self.out.extend_from_slice(b"null"),
            },
            Ty::Ptr(inner) => match value {
                Some(_) => self.value(inner, value)?,
                None => self.out.extend_from_slice(b"null"),
            },
            Ty::Slice(elem) => {
                // A slice as a map value or pointer target: one occurrence.
                let mut index = 0;
                self.out.push(b'[');
                if let Some(v) = value {
                    self.element(elem, v, &mut index)?;
                }
                self.out.push(b']');
            }
            Ty::Wrapped(elem) => match value {
                Some(v) => self.wrapped(elem, v)?,
                None => self.out.extend_from_slice(b"null"),
            },
            Ty::Map(..) => {
                return Err(ProtoError::Value {
                    path: String::new(),
                    reason: "a map outside a field".into(),
                });
            }
            Ty::Message(id) => {
                let bytes = match value {
                    Some(v) => v.bytes().map_err(wire_err)?,
                    None => &[],
                };
                self.message(*id, bytes, None)?;
            }
            Ty::Custom(custom) => {
                let bytes = value.map(Value::bytes).transpose().map_err(wire_err)?;
                self.custom(*custom, bytes)?;
            }
            Ty::Other(name) => {
                return Err(ProtoError::Value {
                    path: String::new(),
                    reason: format!("Go type {name} has no transcoding"),
                });
            }
        }
        Ok(())
    }
}

/// Whether a scalar is Go's zero value (absent means zero: gogo writes
/// value-type scalars always).
fn is_zero_scalar(value: Option<Value<'_>>) -> bool {
    match value {
        None => true,
        Some(Value::Varint(v)) => v == 0,
        // A double: -0 is empty to Go too.
        Some(Value::Fixed64(v)) => f64::from_bits(v) == 0.0,
        Some(Value::Fixed32(v)) => v == 0,
        Some(Value::Bytes(b)) => b.is_empty(),
    }
}

/// A packed scalar array with no elements counts as no occurrence.
fn is_empty_packed(elem: &Ty, value: Value<'_>) -> bool {
    matches!(elem, Ty::Bool | Ty::Int32 | Ty::Int64 | Ty::Float64)
        && matches!(value, Value::Bytes(b) if b.is_empty())
}
