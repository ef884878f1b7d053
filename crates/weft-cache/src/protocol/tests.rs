use super::*;

const LIMITS: Limits = Limits {
    item_size_max: 1024 * 1024,
};

/// `parse` with a slot of its own (leaked: a test's few hundred bytes).
fn parse_alone<'a>(buf: &'a [u8], limits: &Limits) -> Parse<'a> {
    parse(buf, limits, Box::leak(Box::new(Tokens::EMPTY)))
}

fn ready(buf: &[u8]) -> (usize, Command<'_>) {
    match parse_alone(buf, &LIMITS) {
        Parse::Ready { consumed, command } => (consumed, command),
        other => panic!("expected a command from {buf:?}, got {other:?}"),
    }
}

fn reply_line(buf: &[u8]) -> (&'static str, bool) {
    match ready(buf).1 {
        Command::Reply { line, noreply } => (line, noreply),
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn tokenizer_matches_memcached() {
    let t = Tokens::new(b"  get  a b ");
    assert_eq!(t.count(), 3);
    assert_eq!(t.get(1), b"a");
    assert!(t.rest().is_none());
    let long: Vec<u8> = (0..30)
        .flat_map(|i| format!("k{i} ").into_bytes())
        .collect();
    let t = Tokens::new(&long);
    assert_eq!(t.count(), 23);
    assert_eq!(t.ntokens(), 24);
    assert!(t.rest().unwrap().starts_with(b"k23"));
}

#[test]
fn tokens_give_offsets_and_the_tokens_from_one_on() {
    let line = b"mg  key v  t ";
    let t = Tokens::new(line);
    assert_eq!(t.count(), 4);
    assert_eq!(t.offset_of(1), 4);
    assert_eq!(&line[t.offset_of(2)..], b"v  t ");
    let from: Vec<&[u8]> = t.from(2).collect();
    assert_eq!(from, [&b"v"[..], &b"t"[..]]);
    assert_eq!(t.from(9).count(), 0);
    assert_eq!(t.get(4), b"");
    let empty = Tokens::new(b"   ");
    assert_eq!(
        (empty.count(), empty.get(0), empty.rest()),
        (0, &b""[..], None)
    );
}

#[test]
fn storage_waits_for_its_data_block() {
    assert!(matches!(
        parse_alone(b"set k 0 0 5\r\nhel", &LIMITS),
        Parse::NeedMore
    ));
    let (consumed, cmd) = ready(b"set k 1 2 5\r\nhello\r\nget k\r\n");
    assert_eq!(consumed, 20);
    match cmd {
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            noreply,
            ..
        } => {
            assert_eq!(mode, StoreMode::Set);
            assert_eq!(key, b"k");
            assert_eq!((flags, exptime, noreply), (1, 2, false));
            assert_eq!(data, Data::Inline(b"hello\r\n"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_and_noreply() {
    assert_eq!(reply_line(b"\r\n"), ("ERROR", false));
    assert_eq!(reply_line(b"get\r\n"), ("ERROR", false));
    assert_eq!(
        reply_line(b"set k 0 0 -1\r\n"),
        ("CLIENT_ERROR bad command line format", false)
    );
    assert_eq!(
        reply_line(b"set k 0 0 x noreply\r\n"),
        ("CLIENT_ERROR bad command line format", true)
    );
    assert_eq!(
        reply_line(b"incr k -1\r\n"),
        ("CLIENT_ERROR invalid numeric delta argument", false)
    );
    assert_eq!(
        reply_line(b"delete a 1\r\n").0,
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
    );
    let (_, cmd) = ready(b"set k 0 0 2000000\r\n");
    assert!(matches!(
        cmd,
        Command::Store {
            data: Data::Skipped(2_000_002),
            ..
        }
    ));
}

#[test]
fn overlong_lines_close_unless_get() {
    assert!(matches!(parse_alone(&[b'x'; 3000], &LIMITS), Parse::Close));
    let mut get = b"get ".to_vec();
    get.extend(std::iter::repeat_n(b'a', 3000));
    assert!(matches!(parse_alone(&get, &LIMITS), Parse::NeedMore));
}

#[test]
fn nul_ends_the_line() {
    match ready(b"get a\0b c\r\n").1 {
        Command::Get { keys, .. } => assert_eq!(keys, b"a"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn incomplete_request_bytes_sizes_pending_blocks_only() {
    use super::incomplete_request_bytes as need;
    assert_eq!(need(b"set k 0 0 10\r\nabc"), Some(14 + 12));
    assert_eq!(need(b"cas k 0 0 3 7\r\n"), Some(15 + 5));
    assert_eq!(need(b"ms k 100 T0\r\nxy"), Some(13 + 102));
    // Complete, not a storage command, no line yet, or a bad length: no hint.
    assert_eq!(need(b"set k 0 0 1\r\nx\r\n"), None);
    assert_eq!(need(b"get k\r\n"), None);
    assert_eq!(need(b"set k 0 0 10"), None);
    assert_eq!(need(b"set k 0 0 -1\r\n"), None);
}
