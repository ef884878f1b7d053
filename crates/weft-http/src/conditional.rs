//! The conditional request headers (RFC 9110 §13), decided against a file's validators in the
//! order of §13.2.2. Pure.
//!
//! Only GET and HEAD reach this module, and only for a file that exists (§13.2.1: preconditions
//! are ignored when the answer without them would not be 2xx), so `*` always matches.

/// The validators of the selected representation (RFC 9110 §8.8).
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// The strong entity-tag, quotes included (`"…"`).
    pub etag: &'a [u8],
    /// The modification time, whole seconds since the epoch.
    pub mtime_secs: u64,
    /// The `Last-Modified` value as sent.
    pub last_modified: &'a [u8],
}

/// The conditional headers of one request, as sent (`None`: absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Conditions<'a, 'b> {
    pub if_match: Option<&'a [&'b [u8]]>,
    pub if_none_match: Option<&'a [&'b [u8]]>,
    pub if_modified_since: Option<&'b [u8]>,
    pub if_unmodified_since: Option<&'b [u8]>,
}

/// What evaluating the preconditions decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Perform the request (200, or 206 if a range applies).
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// RFC 9110 §13.2.2, steps 1 to 4 (step 5, `If-Range`, is [`if_range_holds`]).
pub fn evaluate(c: &Conditions<'_, '_>, v: &Validators<'_>) -> Outcome {
    if let Some(lines) = c.if_match {
        // Step 1: If-Match, strong comparison (§13.1.1).
        if !list_matches(lines, v.etag, Comparison::Strong) {
            return Outcome::Failed;
        }
    } else if let Some(value) = c.if_unmodified_since {
        // Step 2: If-Unmodified-Since, only without If-Match; an invalid date is ignored
        // (§13.1.4).
        if let Some(since) = http_date_secs(value) {
            if v.mtime_secs > since {
                return Outcome::Failed;
            }
        }
    }
    if let Some(lines) = c.if_none_match {
        // Step 3: If-None-Match, weak comparison (§13.1.2); GET/HEAD → 304.
        if list_matches(lines, v.etag, Comparison::Weak) {
            return Outcome::NotModified;
        }
    } else if let Some(value) = c.if_modified_since {
        // Step 4: If-Modified-Since, only without If-None-Match; an invalid date is ignored
        // (§13.1.3).
        if let Some(since) = http_date_secs(value) {
            if v.mtime_secs <= since {
                return Outcome::NotModified;
            }
        }
    }
    Outcome::Proceed
}

/// Step 5 (§13.1.5): whether `If-Range` lets a `Range` through. An entity-tag must match the
/// current one by strong comparison (a weak tag never does); a date must be exactly the
/// `Last-Modified` sent. Anything else (malformed, several values) does not hold.
pub fn if_range_holds(value: &[u8], v: &Validators<'_>) -> bool {
    let value = trim(value);
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return match parse_entity_tag(value) {
            Some((tag, rest)) if trim(rest).is_empty() => strong_match(tag, v.etag),
            _ => false,
        };
    }
    !value.is_empty() && value == trim(v.last_modified)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

/// Whether a list field (`If-Match`, `If-None-Match`; every line of it) names `etag`. `*`
/// matches (the file exists). A malformed list matches nothing.
fn list_matches(lines: &[&[u8]], etag: &[u8], how: Comparison) -> bool {
    if lines.len() == 1 && trim(lines[0]) == b"*" {
        return true;
    }
    let mut any = false;
    for line in lines {
        match tags(line) {
            Some(found) => {
                any |= found.into_iter().any(|t| match how {
                    Comparison::Strong => strong_match(t, etag),
                    Comparison::Weak => weak_match(t, etag),
                })
            }
            None => return false,
        }
    }
    any
}

/// The entity-tags of one `#entity-tag` list (RFC 9110 §5.6.1: empty elements and OWS
/// allowed); `None` if malformed.
pub fn tags(mut list: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    loop {
        list = skip_ows_and_commas(list);
        if list.is_empty() {
            return Some(out);
        }
        let (tag, rest) = parse_entity_tag(list)?;
        out.push(tag);
        let rest = trim_start(rest);
        if !rest.is_empty() && rest[0] != b',' {
            return None;
        }
        list = rest;
    }
}

/// `[ "W/" ] DQUOTE *etagc DQUOTE` at the front of `v`: the tag (with `W/` if weak) and the
/// rest.
fn parse_entity_tag(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let opaque_start = if v.starts_with(b"W/") { 2 } else { 0 };
    if v.get(opaque_start) != Some(&b'"') {
        return None;
    }
    let body = &v[opaque_start + 1..];
    let close = body.iter().position(|&b| b == b'"')?;
    if !body[..close]
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
    {
        return None;
    }
    let end = opaque_start + 1 + close + 1;
    Some((&v[..end], &v[end..]))
}

fn is_weak(tag: &[u8]) -> bool {
    tag.starts_with(b"W/")
}

fn opaque(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// §8.8.3.2: both strong and identical.
fn strong_match(a: &[u8], b: &[u8]) -> bool {
    !is_weak(a) && !is_weak(b) && a == b
}

/// §8.8.3.2: the opaque tags are identical.
fn weak_match(a: &[u8], b: &[u8]) -> bool {
    opaque(a) == opaque(b)
}

/// An HTTP-date (§5.6.7, all three formats) → seconds since the epoch.
fn http_date_secs(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(trim(value)).ok()?;
    let t = httpdate::parse_http_date(text).ok()?;
    Some(
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

fn skip_ows_and_commas(v: &[u8]) -> &[u8] {
    let n = v
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t' | b','))
        .unwrap_or(v.len());
    &v[n..]
}

fn trim_start(v: &[u8]) -> &[u8] {
    let n = v
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(v.len());
    &v[n..]
}

fn trim(v: &[u8]) -> &[u8] {
    let v = trim_start(v);
    let end = v
        .iter()
        .rposition(|&b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |i| i + 1);
    &v[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    // 784111777 = Sun, 06 Nov 1994 08:49:37 GMT
    const LM: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const V: Validators<'static> = Validators {
        etag: b"\"e-1\"",
        mtime_secs: 784111777,
        last_modified: LM,
    };

    fn eval(
        im: Option<&[u8]>,
        inm: Option<&[u8]>,
        ims: Option<&[u8]>,
        ius: Option<&[u8]>,
    ) -> Outcome {
        let im = im.map(|v| vec![v]);
        let inm = inm.map(|v| vec![v]);
        let c = Conditions {
            if_match: im.as_deref(),
            if_none_match: inm.as_deref(),
            if_modified_since: ims,
            if_unmodified_since: ius,
        };
        evaluate(&c, &V)
    }

    #[test]
    fn entity_tag_lists() {
        assert_eq!(
            tags(b"\"a\", W/\"b\" ,,\"c,d\""),
            Some(vec![&b"\"a\""[..], b"W/\"b\"", b"\"c,d\""])
        );
        assert_eq!(tags(b""), Some(vec![]));
        assert_eq!(tags(b"a"), None);
        assert_eq!(tags(b"\"a"), None);
        assert_eq!(tags(b"\"a\" \"b\""), None);
        assert_eq!(tags(b"w/\"a\""), None);
    }

    #[test]
    fn if_match_is_strong_and_first() {
        use Outcome::*;
        assert_eq!(eval(Some(b"\"e-1\""), None, None, None), Proceed);
        assert_eq!(eval(Some(b"*"), None, None, None), Proceed);
        assert_eq!(eval(Some(b"\"x\", \"e-1\""), None, None, None), Proceed);
        assert_eq!(eval(Some(b"\"nope\""), None, None, None), Failed);
        assert_eq!(eval(Some(b"W/\"e-1\""), None, None, None), Failed);
        assert_eq!(eval(Some(b"garbage"), None, None, None), Failed);
        // Fails before If-None-Match could answer 304.
        assert_eq!(
            eval(Some(b"\"nope\""), Some(b"\"e-1\""), None, None),
            Failed
        );
        // With If-Match, If-Unmodified-Since is ignored (§13.1.4).
        let past = Some(&b"Sat, 05 Nov 1994 08:49:37 GMT"[..]);
        assert_eq!(eval(Some(b"\"e-1\""), None, None, past), Proceed);
    }

    #[test]
    fn if_unmodified_since() {
        use Outcome::*;
        let past = Some(&b"Sat, 05 Nov 1994 08:49:37 GMT"[..]);
        assert_eq!(eval(None, None, None, past), Failed);
        assert_eq!(eval(None, None, None, Some(LM)), Proceed);
        assert_eq!(
            eval(None, None, None, Some(b"Sunday, 06-Nov-94 08:49:37 GMT")),
            Proceed
        );
        assert_eq!(eval(None, None, None, Some(b"not a date")), Proceed);
        assert_eq!(eval(None, Some(b"\"e-1\""), None, past), Failed);
    }

    #[test]
    fn if_none_match_is_weak_and_beats_if_modified_since() {
        use Outcome::*;
        assert_eq!(eval(None, Some(b"\"e-1\""), None, None), NotModified);
        assert_eq!(eval(None, Some(b"W/\"e-1\""), None, None), NotModified);
        assert_eq!(eval(None, Some(b"*"), None, None), NotModified);
        assert_eq!(eval(None, Some(b"\"x\""), Some(LM), None), Proceed);
        assert_eq!(eval(None, None, Some(LM), None), NotModified);
        let later = Some(&b"Mon, 07 Nov 1994 08:49:37 GMT"[..]);
        assert_eq!(eval(None, None, later, None), NotModified);
        let earlier = Some(&b"Sat, 05 Nov 1994 08:49:37 GMT"[..]);
        assert_eq!(eval(None, None, earlier, None), Proceed);
        assert_eq!(eval(None, None, Some(b"yesterday"), None), Proceed);
    }

    #[test]
    fn several_lines_of_a_list_field() {
        let lines: [&[u8]; 2] = [b"\"x\"", b"\"e-1\""];
        let c = Conditions {
            if_match: Some(&lines),
            ..Conditions::default()
        };
        assert_eq!(evaluate(&c, &V), Outcome::Proceed);
        // `*` is only valid alone.
        let lines: [&[u8]; 2] = [b"*", b"\"x\""];
        let c = Conditions {
            if_match: Some(&lines),
            ..Conditions::default()
        };
        assert_eq!(evaluate(&c, &V), Outcome::Failed);
    }

    #[test]
    fn if_range() {
        assert!(if_range_holds(b"\"e-1\"", &V));
        assert!(if_range_holds(LM, &V));
        assert!(!if_range_holds(b"W/\"e-1\"", &V));
        assert!(!if_range_holds(b"\"f\"", &V));
        assert!(!if_range_holds(b"\"e-1\", \"e-1\"", &V));
        assert!(!if_range_holds(b"Sun, 06 Nov 1994 08:49:38 GMT", &V));
        assert!(!if_range_holds(b"", &V));
    }
}
