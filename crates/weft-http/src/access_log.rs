//! The access log: one line per response in the combined log format, appended to a file.
//!
//! Each line is formatted first and written with one `write(2)` under a lock held only for
//! that call (no park inside it: the fiber contract), so lines never interleave. The write goes
//! to the page cache and does not wait for the disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// An open access log.
pub struct AccessLog {
    file: Mutex<File>,
}

/// What one log line records.
pub struct Entry<'a> {
    pub peer: SocketAddr,
    pub method: &'a str,
    pub target: &'a [u8],
    pub minor_version: u8,
    pub status: u16,
    pub body_bytes: u64,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
}

impl AccessLog {
    /// Opens (creating, appending to) `path`.
    pub fn open(path: &Path) -> io::Result<AccessLog> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("access log {}: {e}", path.display())))?;
        Ok(AccessLog {
            file: Mutex::new(file),
        })
    }

    /// Appends one line.
    pub fn record(&self, entry: &Entry<'_>) {
        let line = format_line(entry, SystemTime::now());
        let mut file = crate::fatal::lock(&self.file, "access log");
        // A full disk must not take the server down; the line is lost.
        let _ = file.write_all(line.as_bytes());
    }
}

fn format_line(e: &Entry<'_>, now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!(
        "{} - - [{}] \"{} {} HTTP/1.{}\" {} {} \"{}\" \"{}\"\n",
        e.peer.ip(),
        clf_time(secs),
        e.method,
        escape(e.target),
        e.minor_version,
        e.status,
        e.body_bytes,
        e.referer.map_or_else(|| "-".to_owned(), escape),
        e.user_agent.map_or_else(|| "-".to_owned(), escape),
    )
}

/// Bytes as text with `"`, `\` and non-printable bytes escaped as `\xHH` (as nginx does), so
/// a client cannot forge a log line.
fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
            s.push_str(&format!("\\x{c:02X}"));
        } else {
            s.push(c as char);
        }
    }
    s
}

/// `10/Oct/2000:13:55:36 +0000` for `secs` since the epoch (UTC).
fn clf_time(secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{day:02}/{}/{year}:{:02}:{:02}:{:02} +0000",
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_format() {
        let e = Entry {
            peer: "127.0.0.1:5000".parse().unwrap(),
            method: "GET",
            target: b"/a\"b",
            minor_version: 1,
            status: 200,
            body_bytes: 42,
            referer: None,
            user_agent: Some(b"curl/8"),
        };
        let line = format_line(&e, UNIX_EPOCH + std::time::Duration::from_secs(971_186_136));
        assert_eq!(
            line,
            "127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] \"GET /a\\x22b HTTP/1.1\" 200 42 \"-\" \
             \"curl/8\"\n"
        );
    }

    #[test]
    fn leap_days() {
        assert_eq!(clf_time(951_782_400), "29/Feb/2000:00:00:00 +0000");
        assert_eq!(clf_time(0), "01/Jan/1970:00:00:00 +0000");
    }
}
