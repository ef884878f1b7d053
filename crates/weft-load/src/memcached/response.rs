//! Parsing memcached text-protocol replies, classic or meta, from the front of a receive buffer.
//!
//! Replies arrive in request order, so the generator only needs to know where one ends and
//! what kind it was. Invariant: [`parse`] never consumes a partial reply — it returns `None`
//! until the whole reply (a `VALUE` block includes its data and the closing `END`, a `VA` block
//! its data) is in the buffer. The two protocols' reply words differ, so one parser reads both.

/// Longest reply line accepted before the stream is declared out of sync.
pub const MAX_LINE_BYTES: usize = 4096;

/// What one reply said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// A get found its item (`VALUE ... END`, or `VA <n> ...` and the data).
    Hit,
    /// A get found nothing (`END`, or `EN`).
    Miss,
    /// A storage command's answer (`STORED`, `NOT_STORED`, `EXISTS`, `NOT_FOUND`, or `HD`,
    /// `NS`, `EX`, `NF`).
    Stored,
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`.
    Error,
}

/// The byte stream is not memcached's text protocol (or not in step with our requests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desync(pub String);

impl std::fmt::Display for Desync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unexpected reply from server: {}", self.0)
    }
}

/// Parses one reply from the front of `buf`: `Ok(Some((reply, bytes consumed)))`, `Ok(None)`
/// when more bytes are needed (`needed` hint: total bytes the reply will take, if known).
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, Desync> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE_BYTES {
            return Err(Desync(format!("{}-byte line", buf.len())));
        }
        return Ok(None);
    };
    let line_end = nl + 1;
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let reply = match line {
        b"END" | b"EN" => Reply::Miss,
        b"STORED" | b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Reply::Stored,
        l if matches!(l.get(..2), Some(b"HD" | b"NS" | b"EX" | b"NF"))
            && matches!(l.get(2), None | Some(b' ')) =>
        {
            Reply::Stored
        }
        l if l.starts_with(b"VA ") => {
            let bytes = meta_value_length(l)?;
            let total = line_end + bytes + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Err(Desync("VA block not closed by \\r\\n".into()));
            }
            return Ok(Some((Reply::Hit, total)));
        }
        b"ERROR" => Reply::Error,
        l if l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"SERVER_ERROR") => Reply::Error,
        l if l.starts_with(b"VALUE ") => {
            let bytes = value_length(l)?;
            let total = line_end + bytes + 2 + b"END\r\n".len();
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[line_end + bytes..line_end + bytes + 2] != b"\r\n"
                || &buf[total - 5..total] != b"END\r\n"
            {
                return Err(Desync("value block not closed by \\r\\nEND\\r\\n".into()));
            }
            return Ok(Some((Reply::Hit, total)));
        }
        other => {
            return Err(Desync(format!(
                "`{}`",
                String::from_utf8_lossy(&other[..other.len().min(80)])
            )))
        }
    };
    Ok(Some((reply, line_end)))
}

/// Bytes a complete reply starting at the front of `buf` needs, when the front is a `VALUE`
/// line whose data has not fully arrived (so the caller can grow its buffer).
pub fn needed(buf: &[u8]) -> Option<usize> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    if line.starts_with(b"VA ") {
        return meta_value_length(line).ok().map(|n| nl + 1 + n + 2);
    }
    if !line.starts_with(b"VALUE ") {
        return None;
    }
    value_length(line)
        .ok()
        .map(|n| nl + 1 + n + 2 + b"END\r\n".len())
}

/// `VA <bytes> [<flags>...]` → bytes.
fn meta_value_length(line: &[u8]) -> Result<usize, Desync> {
    let text = std::str::from_utf8(line).map_err(|_| Desync("non-UTF-8 VA line".into()))?;
    text.split(' ')
        .nth(1)
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| Desync(format!("bad VA line `{text}`")))
}

/// `VALUE <key> <flags> <bytes> [<cas>]` → bytes.
fn value_length(line: &[u8]) -> Result<usize, Desync> {
    let text = std::str::from_utf8(line).map_err(|_| Desync("non-UTF-8 VALUE line".into()))?;
    text.split(' ')
        .nth(3)
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| Desync(format!("bad VALUE line `{text}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_lines() {
        assert_eq!(parse(b"STORED\r\nEND"), Ok(Some((Reply::Stored, 8))));
        assert_eq!(parse(b"END\r\n"), Ok(Some((Reply::Miss, 5))));
        assert_eq!(
            parse(b"SERVER_ERROR out of memory\r\n"),
            Ok(Some((Reply::Error, 28)))
        );
        assert_eq!(parse(b"ERROR\r\n"), Ok(Some((Reply::Error, 7))));
        assert_eq!(parse(b"STOR"), Ok(None));
    }

    #[test]
    fn value_blocks_wait_for_all_their_bytes() {
        let full = b"VALUE key:1 0 5\r\nhello\r\nEND\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(full), Ok(Some((Reply::Hit, full.len()))));
        assert_eq!(needed(&full[..20]), Some(full.len()));
        let with_cas = b"VALUE k 3 2 99\r\nhi\r\nEND\r\nEND\r\n";
        assert_eq!(parse(with_cas), Ok(Some((Reply::Hit, 25))));
    }

    #[test]
    fn meta_replies() {
        assert_eq!(parse(b"EN\r\n"), Ok(Some((Reply::Miss, 4))));
        assert_eq!(parse(b"HD\r\nEN\r\n"), Ok(Some((Reply::Stored, 4))));
        assert_eq!(parse(b"NS\r\n"), Ok(Some((Reply::Stored, 4))));
        assert_eq!(parse(b"HD c123\r\n"), Ok(Some((Reply::Stored, 9))));
        let full = b"VA 5 t-1\r\nhello\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(full), Ok(Some((Reply::Hit, full.len()))));
        assert_eq!(needed(&full[..11]), Some(full.len()));
        assert!(parse(b"VA 5\r\nhelloXX").is_err());
        assert!(parse(b"VA x\r\n").is_err());
        assert!(parse(b"HDX\r\n").is_err());
    }

    #[test]
    fn garbage_is_a_desync() {
        assert!(parse(b"HELLO\r\n").is_err());
        assert!(parse(b"VALUE k 0 x\r\n").is_err());
        assert!(parse(b"VALUE k 0 2\r\nhiXXEND\r\n").is_err());
        assert!(parse(&[b'x'; MAX_LINE_BYTES + 1]).is_err());
    }
}
