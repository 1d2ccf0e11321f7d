//! The protobuf wire format, read without copying: varints, and a message
//! as the list of its fields' values.

/// Why bytes are not protobuf.
pub(crate) type WireError = &'static str;

/// One field value as it is on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    /// Length-delimited: a string, bytes, a message or a packed array.
    Bytes(&'a [u8]),
}

/// Reads a varint at the front of `buf`, advancing it.
pub(crate) fn varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or("truncated varint")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes")
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], WireError> {
    if buf.len() < n {
        return Err("truncated field");
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// Splits a message into its fields, in wire order. Groups (wire types 3
/// and 4) are refused: nothing Kubernetes writes has them.
pub(crate) fn fields<'a>(
    mut buf: &'a [u8],
    out: &mut Vec<(u32, Value<'a>)>,
) -> Result<(), WireError> {
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        let number = u32::try_from(tag >> 3).map_err(|_| "field number out of range")?;
        if number == 0 {
            return Err("field number 0");
        }
        let value = match tag & 7 {
            0 => Value::Varint(varint(&mut buf)?),
            1 => Value::Fixed64(u64::from_le_bytes(
                take(&mut buf, 8)?
                    .try_into()
                    .map_err(|_| "truncated fixed64")?,
            )),
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| "length out of range")?;
                Value::Bytes(take(&mut buf, len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(
                take(&mut buf, 4)?
                    .try_into()
                    .map_err(|_| "truncated fixed32")?,
            )),
            _ => return Err("unsupported wire type (group)"),
        };
        out.push((number, value));
    }
    Ok(())
}

impl<'a> Value<'a> {
    pub(crate) fn bytes(self) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err("expected a length-delimited field"),
        }
    }

    pub(crate) fn varint(self) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err("expected a varint field"),
        }
    }
}

/// The last value of field `number` (protobuf's rule for a repeated
/// scalar field that is not repeated).
pub(crate) fn last<'a>(fields: &[(u32, Value<'a>)], number: u32) -> Option<Value<'a>> {
    fields
        .iter()
        .rev()
        .find(|(n, _)| *n == number)
        .map(|(_, v)| *v)
}
