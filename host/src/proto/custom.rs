//! The types with their own MarshalJSON, written as that method writes
//! the value protobuf decodes to.

use super::error::{ProtoError, Result};
use super::json;
use super::schema::Custom;
use super::transcode::Writer;
use super::wire::{self, Value};

fn value_err(reason: impl Into<String>) -> ProtoError {
    ProtoError::Value {
        path: String::new(),
        reason: reason.into(),
    }
}

impl<'a> Writer<'_, 'a> {
    /// Writes a custom type from its message bytes (`None`: absent, Go's
    /// zero value).
    pub(crate) fn custom(&mut self, custom: Custom, bytes: Option<&'a [u8]>) -> Result<()> {
        let mut fields = self.spare();
        let result = wire::fields(bytes.unwrap_or_default(), &mut fields)
            .map_err(ProtoError::wire)
            .and_then(|()| self.custom_fields(custom, &fields));
        self.recycle(fields);
        result
    }

    fn custom_fields(&mut self, custom: Custom, fields: &[(u32, Value<'a>)]) -> Result<()> {
        let varint = |n| -> Result<u64> {
            wire::last(fields, n)
                .map(Value::varint)
                .transpose()
                .map_err(ProtoError::wire)
                .map(Option::unwrap_or_default)
        };
        let bytes_field = |n| -> Result<Option<&'a [u8]>> {
            wire::last(fields, n)
                .map(Value::bytes)
                .transpose()
                .map_err(ProtoError::wire)
        };
        match custom {
            // Time and MicroTime write nothing when zero, and decode empty
            // bytes as the zero time, which MarshalJSON writes as null.
            // Time keeps seconds only (its Unmarshal drops the nanos).
            Custom::Time | Custom::MicroTime if fields.is_empty() => {
                self.out.extend_from_slice(b"null")
            }
            Custom::Time => json::time(&mut self.out, varint(1)? as i64, None)
                .ok_or_else(|| value_err("a time outside years 0-9999"))?,
            Custom::MicroTime => {
                let nanos = (varint(2)? as i32).max(0) as u32;
                json::time(&mut self.out, varint(1)? as i64, Some(nanos / 1000))
                    .ok_or_else(|| value_err("a time outside years 0-9999"))?;
            }
            // The canonical text the proto already carries; zero is "0".
            Custom::Quantity => match bytes_field(1)? {
                Some(s) => json::string(&mut self.out, s),
                None => self.out.extend_from_slice(b"\"0\""),
            },
            Custom::IntOrString => match varint(1)? {
                0 => json::int(&mut self.out, i64::from(varint(2)? as i32)),
                1 => json::string(&mut self.out, bytes_field(3)?.unwrap_or_default()),
                t => return Err(value_err(format!("IntOrString of type {t}"))),
            },
            // RawExtension and FieldsV1: nil is null, else the raw JSON.
            Custom::RawJson => match bytes_field(1)? {
                None => self.out.extend_from_slice(b"null"),
                Some(raw) => self.embed(raw)?,
            },
            Custom::ApiextJson => match bytes_field(1)? {
                Some(raw) if !raw.is_empty() => self.embed(raw)?,
                _ => self.out.extend_from_slice(b"null"),
            },
            // Items (field 2) when there are any, else the schema (field 1).
            Custom::PropsOrArray(props) => {
                let items: Vec<&'a [u8]> = fields
                    .iter()
                    .filter(|(n, _)| *n == 2)
                    .map(|(_, v)| v.bytes())
                    .collect::<Result<_, _>>()
                    .map_err(ProtoError::wire)?;
                if items.is_empty() {
                    match bytes_field(1)? {
                        Some(schema) => self.message(props, schema, None)?,
                        None => self.out.extend_from_slice(b"null"),
                    }
                } else {
                    self.out.push(b'[');
                    for (i, item) in items.into_iter().enumerate() {
                        if i > 0 {
                            self.out.push(b',');
                        }
                        self.message(props, item, None)
                            .map_err(|e| e.within(&format!("[{i}]")))?;
                    }
                    self.out.push(b']');
                }
            }
            // The schema (field 2) when set, else allows (field 1).
            Custom::PropsOrBool(props) => match bytes_field(2)? {
                Some(schema) => self.message(props, schema, None)?,
                None => {
                    self.out
                        .extend_from_slice(if varint(1)? != 0 { b"true" } else { b"false" })
                }
            },
            // The property names (field 2) when there are any, else the
            // schema (field 1), else null.
            Custom::PropsOrStringArray(props) => {
                let names: Vec<&'a [u8]> = fields
                    .iter()
                    .filter(|(n, _)| *n == 2)
                    .map(|(_, v)| v.bytes())
                    .collect::<Result<_, _>>()
                    .map_err(ProtoError::wire)?;
                if !names.is_empty() {
                    self.out.push(b'[');
                    for (i, name) in names.into_iter().enumerate() {
                        if i > 0 {
                            self.out.push(b',');
                        }
                        json::string(&mut self.out, name);
                    }
                    self.out.push(b']');
                } else {
                    match bytes_field(1)? {
                        Some(schema) => self.message(props, schema, None)?,
                        None => self.out.extend_from_slice(b"null"),
                    }
                }
            }
        }
        Ok(())
    }

    fn embed(&mut self, raw: &[u8]) -> Result<()> {
        json::embed(&mut self.out, raw).map_err(|cause| ProtoError::EmbeddedJson {
            path: String::new(),
            cause,
        })
    }
}
