//! Differential tests: the same request scripts go to weft and to the real memcached 1.6
//! (Debian's package, started here on its own port), and the replies must be byte-identical.
//! Masked: `stats` (only the format is compared: memcached reports internals weft does not
//! have) and the clock-derived numbers of `me` and the `t` flag (the two servers' clocks tick
//! at different instants). Skipped with a note when memcached is not installed.

mod common;

use std::net::SocketAddr;

use common::{session, show, test_settings, WeftServer};
use proptest::prelude::*;
use weft_cache::Settings;
use weft_testkit::{start_memcached, ChildGuard};

/// Hand-written cases, run in order on one server pair (state carries over, identically).
const CASES: &[&str] = &[
    // --- storage and retrieval
    "set a 0 0 1\r\nx\r\nget a\r\n",
    "gets a\r\n",
    "set b 5 0 3\r\nabc\r\nget a b c\r\n",
    "gets a b\r\n",
    "add a 0 0 1\r\ny\r\nadd new1 0 0 2\r\nhi\r\nget new1\r\n",
    "replace nope 0 0 1\r\nx\r\nreplace a 7 0 2\r\nzz\r\ngets a\r\n",
    "append a 0 0 3\r\n123\r\nprepend a 0 0 3\r\n000\r\ngets a\r\n",
    "append missing 0 0 1\r\nx\r\nprepend missing 0 0 1\r\nx\r\n",
    "gets b\r\ncas b 0 0 1 999\r\nq\r\ncas nokey 0 0 1 1\r\nq\r\n",
    "set c 0 0 1\r\n1\r\ngets c\r\n",
    "cas c 3 0 2 10\r\nok\r\ngets c\r\n",
    "set n 0 0 1\r\nx\r\nset n 0 0 1 noreply\r\ny\r\nget n\r\n",
    "add n 0 0 1 noreply\r\nz\r\nreplace n 0 0 1 noreply\r\nw\r\nget n\r\n",
    "set empty 0 0 0\r\n\r\nget empty\r\n",
    "set sp 0 0 5\r\na b c\r\nget sp\r\n",
    "set crlf 0 0 4\r\n\r\n\r\n\r\nget crlf\r\n",
    "set fl 4294967295 0 1\r\nx\r\nget fl\r\n",
    "set fl2 4294967297 0 1\r\nx\r\nget fl2\r\n",
    "set fl3 +5 0 1\r\nx\r\nget fl3\r\n",
    "set fl4 -1 0 1\r\nx\r\n",
    "set fl5 1x 0 1\r\nx\r\n",
    "set neg 0 -1 1\r\nx\r\nget neg\r\n",
    "set big32 0 2147483648 1\r\nx\r\nget big32\r\n",
    "set abs 0 100 1\r\nx\r\nget abs\r\n",
    "set len 0 0 4294967297\r\nx\r\nget len\r\n",
    "set len2 0 0 2147483648\r\n",
    "set len3 0 0 -1\r\n",
    "set len4 0 0 abc\r\n",
    "set k 0 0\r\n",
    "set k 0 0 1 noreply extra\r\n",
    "set\r\n",
    "cas k 0 0 1\r\n",
    "cas k 0 0 1 abc\r\nx\r\n",
    "cas k 0 0 1 -1\r\nx\r\n",
    // --- bad data blocks
    "set bad 0 0 1\r\nxyz\r\nget bad\r\n",
    "set bad 0 0 3\r\nab\r\n\r\nget bad\r\n",
    "set bad2 0 0 2 noreply\r\nabcd\r\nget bad2\r\n",
    // --- key limits
    "get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    "get a aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    "set aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0 0 1\r\nx\r\n",
    "set aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0 0 1\r\nx\r\nget aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    "delete aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    "incr aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1\r\n",
    "touch aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1\r\n",
    "get \x01ctl\r\nset \x01ctl 0 0 1\r\nx\r\nget \x01ctl\r\n",
    "get a\x00b a\r\n",
    "get a\tb\r\n",
    // --- get family shapes
    "get\r\n",
    "gets\r\n",
    "get  a   b  \r\n",
    "gat\r\n",
    "gat 10\r\n",
    "gat x a\r\n",
    "gat 100 a b nothere\r\n",
    "gats 0 a\r\n",
    "bget a\r\n",
    "gx a\r\n",
    "get k1 k2 k3 k4 k5 k6 k7 k8 k9 k10 k11 k12 k13 k14 k15 k16 k17 k18 k19 k20 k21 k22 k23 k24 k25 a b\r\n",
    // --- delete
    "delete a\r\ndelete a\r\n",
    "set d 0 0 1\r\nx\r\ndelete d 0\r\ndelete d 1\r\n",
    "set d 0 0 1\r\nx\r\ndelete d noreply\r\nget d\r\n",
    "set d 0 0 1\r\nx\r\ndelete d 0 noreply\r\nget d\r\n",
    "delete d 0 1\r\ndelete\r\ndelete a b c d\r\n",
    // --- incr / decr
    "set num 0 0 2\r\n10\r\nincr num 5\r\ndecr num 3\r\nget num\r\n",
    "set num 0 0 3\r\n100\r\ndecr num 1\r\nget num\r\nincr num 1\r\ngets num\r\n",
    "decr num 1000\r\nget num\r\n",
    "set max 0 0 20\r\n18446744073709551615\r\nincr max 1\r\nget max\r\nincr max 18446744073709551615\r\n",
    "incr num -1\r\nincr num abc\r\nincr num 18446744073709551616\r\n",
    "incr nothere 1\r\ndecr nothere 1\r\n",
    "set txt 0 0 3\r\nabc\r\nincr txt 1\r\nset z 0 0 0\r\n\r\nincr z 1\r\n",
    "set sp2 0 0 3\r\n 12\r\nincr sp2 1\r\nget sp2\r\n",
    "set neg2 0 0 2\r\n-1\r\nincr neg2 1\r\n",
    "incr num 1 noreply\r\nget num\r\n",
    "incr\r\nincr num\r\nincr num 1 2 3\r\n",
    "set grow 0 0 1\r\n9\r\nincr grow 1\r\ngets grow\r\n",
    // --- touch
    "set t 0 0 1\r\nx\r\ntouch t 100\r\ntouch nothere 100\r\n",
    "touch t\r\ntouch t abc\r\ntouch t 10 x\r\ntouch t 10 noreply\r\n",
    "touch t -1\r\nget t\r\n",
    // --- flush_all
    "set f 0 0 1\r\nx\r\nflush_all\r\nget f\r\nset f 0 0 1\r\ny\r\ngets f\r\n",
    "flush_all 0\r\nflush_all abc\r\nflush_all noreply\r\nflush_all 0 noreply\r\nflush_all 1 2 3\r\n",
    "flush_all -1\r\n",
    // --- misc
    "version\r\nversion extra\r\n",
    "verbosity 1\r\nverbosity\r\nverbosity x\r\nverbosity noreply\r\nverbosity 1 noreply\r\nverbosity 0\r\n",
    "\r\n",
    "\n",
    "x\r\n",
    "xy\r\n",
    "GET a\r\n",
    "sets a\r\n",
    "shutdown\r\n",
    "cache_memlimit\r\ncache_memlimit abc\r\ncache_memlimit 2\r\ncache_memlimit 64\r\n",
    "stats detail\r\nstats detail on\r\nstats detail off\r\nstats nonsense\r\n",
    "stats reset\r\n",
    "stats cachedump 100 0\r\nstats cachedump x 0\r\nstats cachedump 1\r\nstats cachedump 1 x\r\nstats cachedump 60 1\r\nstats cachedump\r\n",
    "slabs automove 5\r\nslabs automove x\r\nslabs\r\n",
    "lru_crawler\r\n",
    "lru\r\n",
    // --- meta: mn, mg
    "mg\r\nmg missing\r\nmg missing v\r\nmg missing k O123 v\r\nmg missing q\r\n",
    "ms mk 2\r\nhi\r\nmg mk v\r\nmg mk s f v k\r\nmg mk c\r\n",
    "mg mk v v\r\nmg mk zz\r\nmg mk Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nmg missing Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    "mg mk h l\r\nmg mk h\r\nmg mk u h\r\n",
    "mg mk q v\r\nmg mk q\r\nmg nothere q v k\r\n",
    "mg mk a b c d e f g h i j k l m n o p q r s t u v w x\r\n",
    "mg aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa v\r\n",
    "mg mk T\r\nmg mk Tabc\r\nmg mk N\r\nmg mk Rx\r\n",
    "mg viv N30 s c v\r\nmg viv N30 s v\r\nmg viv v\r\n",
    "mg mk T0 v\r\nmg mk t\r\n",
    "mg mk E5\r\nmg mk P L\r\n",
    // --- meta: ms
    "ms\r\nms mk\r\nms mk abc\r\nms mk -1\r\n",
    "ms mk 2 MX\r\nhi\r\nms mk 2 M\r\nhi\r\nms mk 2 MEE\r\nhi\r\n",
    "ms mk 2 c k O99\r\nhi\r\nms mk 2 q\r\nho\r\nmg mk v\r\n",
    "ms newkey 3 ME\r\nabc\r\nms newkey 3 ME c\r\nabc\r\n",
    "ms nokey 3 MR\r\nabc\r\nms nokey 1 MA\r\nx\r\nms mk 1 MA\r\n!\r\nms mk 1 MP\r\n<\r\nmg mk v\r\n",
    "ms mk 2 F7 T0\r\nhi\r\nmg mk f v\r\nms mk 2 Fx\r\nhi\r\n",
    "ms mk 2 C1\r\nhi\r\nmg mk c\r\n",
    "ms mk 2 bad\r\nhi\r\nms mk 2 v v\r\nhi\r\n",
    "ms mk 2\r\nhiX\r\nmg mk v\r\n",
    "ms mk 2 q\r\nhiX\r\n",
    "ms x 2 b\r\nhi\r\nms eA== 2 b\r\nhi\r\nmg eA== b v k\r\nmg x v\r\n",
    "ms mk 2 I\r\nhi\r\n",
    "ms mk 2 Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nhi\r\n",
    // --- stale items (md I): which flags keep the TTL and the stale marks
    "set st1 0 100 1\r\nx\r\nmd st1 I T30\r\nmg st1 v c\r\nms st1 1 I T5\r\ny\r\nmg st1 v c\r\nms st1 1 I\r\nz\r\nmg st1 v c\r\n",
    "set st2 0 100 1\r\nx\r\nmd st2 I\r\nms st2 1 I T0 C1\r\ny\r\nmg st2 t v\r\nms st2 1 T7\r\nw\r\nmg st2 t v\r\n",
    "set st3 0 0 1\r\nx\r\nmd st3 I\r\nmg st3 c\r\nms st3 1 I C1\r\nq\r\nmg st3 v\r\nms st3 1 I C999\r\nr\r\nmg st3 v\r\n",
    // --- meta: md
    "md\r\nmd nothere\r\nmd nothere q\r\nmd nothere k O1\r\n",
    "ms del 1\r\nx\r\nmd del q\r\nmg del v\r\n",
    "ms del 1\r\nx\r\nmd del C1\r\nmd del zz\r\nmd del x\r\n",
    "ms stale 1\r\nx\r\nmd stale I T30\r\nmg stale v c\r\nmg stale v\r\n",
    "md stale I\r\nmd nothere I q\r\n",
    // --- meta: ma
    "ma\r\nma nothere\r\nma nothere q\r\nma nothere N0 J13 v\r\nma nothere v\r\n",
    "ms cnt 2\r\n10\r\nma cnt\r\nma cnt v\r\nma cnt MD D5 v\r\nma cnt M- D100 v c\r\n",
    "ma cnt MX\r\nma cnt Dabc\r\nma cnt Jabc N0\r\nma cnt q\r\nmg cnt v\r\n",
    "ma cnt C1 v\r\nma cnt k O5 v\r\n",
    "ms txt2 3\r\nabc\r\nma txt2\r\n",
    // A result that needs a new item (longer than the old value, or the item held by an
    // earlier reply of the same batch) gets a fresh one: not stale, no token sent, not fetched.
    "ms grow1 1\r\n5\r\nmd grow1 I\r\nincr grow1 64\r\nmg grow1 v\r\n",
    "ms grow2 1\r\n5\r\nmg grow2 v\r\nincr grow2 64\r\nmg grow2 h v\r\n",
    "ms grow3 1\r\n5\r\nmd grow3 I\r\nma grow3 D64 v\r\nmg grow3 v\r\n",
    "ms held1 2\r\n10\r\nmd held1 I\r\nmg held1\r\ndecr held1 1\r\nmg held1 h v\r\n",
    // --- meta: me
    "me\r\nme nothere\r\n",
    // --- quit ends the connection after earlier replies
    "get a\r\nquit\r\nget a\r\n",
];

/// Replaces values that legitimately differ (clock readings) with `#`.
fn mask(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut out = String::new();
    for line in text.split_inclusive("\r\n") {
        if line.starts_with("ME ") {
            let masked: Vec<String> = line
                .split(' ')
                .map(|w| {
                    if w.starts_with("la=") {
                        "la=#".to_owned()
                    } else if w.starts_with("exp=") && w != "exp=-1" {
                        "exp=#".to_owned()
                    } else {
                        w.to_owned()
                    }
                })
                .collect();
            out.push_str(&masked.join(" "));
        } else if line.starts_with("VA ") || line.starts_with("HD") || line.starts_with("EN") {
            let masked: Vec<String> = line
                .split(' ')
                .map(|w| {
                    if (w.starts_with('t') || w.starts_with('l'))
                        && w.len() > 1
                        && w[1..].trim_end().bytes().all(|b| b.is_ascii_digit())
                    {
                        let end = if w.ends_with("\r\n") { "\r\n" } else { "" };
                        format!("{}#{end}", &w[..1])
                    } else {
                        w.to_owned()
                    }
                })
                .collect();
            out.push_str(&masked.join(" "));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

fn compare(weft: SocketAddr, memcached: SocketAddr, script: &[u8]) -> Result<(), String> {
    let want = session(memcached, script);
    let got = session(weft, script);
    if mask(&want) == mask(&got) {
        Ok(())
    } else {
        Err(format!(
            "script: {}\n  memcached: {}\n  weft:      {}",
            show(script),
            show(&want),
            show(&got)
        ))
    }
}

#[test]
fn hand_written_cases_match_memcached() {
    let Some((_mc, mc_addr)) = start_memcached(&["-t", "1"]) else {
        return;
    };
    let weft = WeftServer::start(test_settings());
    let mut failures = Vec::new();
    for case in CASES {
        if let Err(e) = compare(weft.addr, mc_addr, case.as_bytes()) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

/// Large values (referenced, not copied, on the way out) and the item size limit, both sides.
#[test]
fn large_values_and_size_limit_match_memcached() {
    let Some((_mc, mc_addr)) = start_memcached(&["-t", "1"]) else {
        return;
    };
    let weft = WeftServer::start(test_settings());
    let mut failures = Vec::new();
    for (flags, n) in [
        (0, 100_000usize),
        (0, 1_048_516),
        (0, 1_048_517),
        (1, 1_048_512),
        (1, 1_048_513),
        (0, 2_000_000),
    ] {
        let mut script = format!("set big {flags} 0 {n}\r\n").into_bytes();
        script.extend(std::iter::repeat_n(b'v', n));
        script.extend_from_slice(b"\r\nget big\r\nappend big 0 0 100\r\n");
        script.extend(std::iter::repeat_n(b'w', 100));
        script.extend_from_slice(b"\r\nms big 10 T0\r\n0123456789\r\nmg big s v\r\n");
        if let Err(e) = compare(weft.addr, mc_addr, &script) {
            failures.push(e.chars().take(600).collect::<String>());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `stats`, `stats settings`, `stats items`, `stats slabs`: memcached's key set in memcached's
/// order (weft adds only `scheduler` to `stats settings`); `stats items` and `stats slabs`
/// per size class, with the same classes as memcached for the same items.
#[test]
fn stats_have_memcached_keys_in_memcached_order() {
    let Some((_mc, mc_addr)) = start_memcached(&["-t", "1"]) else {
        return;
    };
    let weft = WeftServer::start(test_settings());
    let mut load = b"set a 0 0 1\r\nx\r\nset b 0 100 2000\r\n".to_vec();
    load.extend(std::iter::repeat_n(b'y', 2000));
    load.extend_from_slice(b"\r\nset c 5 0 30000\r\n");
    load.extend(std::iter::repeat_n(b'z', 30000));
    load.extend_from_slice(b"\r\nget a\r\n");
    session(mc_addr, &load);
    session(weft.addr, &load);
    let names = |addr, sub: &str| -> Vec<String> {
        let reply = session(addr, format!("{sub}\r\n").as_bytes());
        String::from_utf8(reply)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .collect()
    };
    for sub in ["stats", "stats settings", "stats items", "stats slabs"] {
        let want = names(mc_addr, sub);
        let mut got = names(weft.addr, sub);
        if sub == "stats settings" {
            assert_eq!(got.pop().as_deref(), Some("scheduler"));
        }
        assert_eq!(
            got, want,
            "{sub}: weft's keys (left) differ from memcached's"
        );
    }
}

/// `stats` `bytes` and `limit_maxbytes` mean what memcached means: the items' own sizes
/// (memcached's `ITEM_ntotal`, not what weft charges them against `-m`) and `-m` in bytes.
#[test]
fn stats_bytes_and_limit_maxbytes_are_memcacheds() {
    let Some((_mc, mc_addr)) = start_memcached(&["-t", "1", "-m", "7"]) else {
        return;
    };
    let weft = WeftServer::start(Settings {
        memory_limit_mb: 7,
        ..test_settings()
    });
    let mut load = Vec::new();
    for (i, len) in [0usize, 1, 100, 2000, 30_000, 200_000]
        .into_iter()
        .enumerate()
    {
        load.extend_from_slice(format!("set key{i} {i} 0 {len}\r\n").as_bytes());
        load.resize(load.len() + len, b'v');
        load.extend_from_slice(b"\r\n");
    }
    load.extend_from_slice(b"delete key1\r\n");
    session(mc_addr, &load);
    session(weft.addr, &load);
    let stat = |addr, name: &str| -> String {
        let reply = String::from_utf8(session(addr, b"stats\r\n")).unwrap();
        reply
            .lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {name} in {reply}"))
    };
    for name in ["bytes", "curr_items", "limit_maxbytes"] {
        assert_eq!(stat(weft.addr, name), stat(mc_addr, name), "stats {name}");
    }
}

/// `stats`: the same shape (STAT lines then END) and the names weft reports exist in memcached.
#[test]
fn stats_have_memcached_format() {
    let Some((_mc, mc_addr)) = start_memcached(&["-t", "1"]) else {
        return;
    };
    let weft = WeftServer::start(test_settings());
    for sub in [
        "stats",
        "stats settings",
        "stats items",
        "stats slabs",
        "stats conns",
    ] {
        let script = format!("set s 0 0 1\r\nx\r\n{sub}\r\n");
        let want = String::from_utf8(session(mc_addr, script.as_bytes())).unwrap();
        let got = String::from_utf8(session(weft.addr, script.as_bytes())).unwrap();
        let names = |s: &str| -> Vec<String> {
            s.lines()
                .filter_map(|l| l.strip_prefix("STAT "))
                .map(|l| l.split(' ').next().unwrap().to_owned())
                .collect()
        };
        assert!(got.ends_with("END\r\nMN\r\n"), "{sub}: {got}");
        for line in got.lines().filter(|l| l.starts_with("STAT ")) {
            assert_eq!(line.split(' ').count(), 3, "{sub}: malformed {line:?}");
        }
        let memcached_names = names(&want);
        if sub == "stats" || sub == "stats settings" {
            for n in names(&got) {
                let ours = ["scheduler"];
                assert!(
                    memcached_names.contains(&n) || ours.contains(&n.as_str()),
                    "{sub}: memcached has no stat {n}"
                );
            }
        }
    }
}

/// One generated request: a mix of valid and malformed commands over a few keys.
///
/// Counters (`num`, `cnt`) are only set to digits, incremented, decremented and read with
/// `get`/`gets`/`ma`; the other keys never see `incr`/`decr`. The reason: memcached rewrites an
/// `incr`/`decr` result in place, padded with spaces, only when nothing else holds a
/// reference to the item, and its LRU maintainer thread takes such references at moments of
/// its own choosing; so whether "100" decremented reads back as "99 " or "99" is not
/// deterministic in memcached itself. Replies are compared with that padding masked
/// ([`mask_padding`]), and no other command ever sees a padded value.
fn request() -> impl Strategy<Value = String> {
    let key = prop_oneof![Just("k1".to_owned()), Just("k2".to_owned()), "[a-m]{1,3}",];
    let counter = prop_oneof![Just("num"), Just("cnt")];
    // Never all blanks: memcached's `incr` of a value of only spaces runs its `strtoull`
    // past the item's `\r\n` into whatever the slab holds next (a number left there by an
    // earlier item, or a non-numeric error), a memcached bug weft does not copy.
    let value = "[a-z0-9 ]{0,12}".prop_filter("all blanks", |v: &String| {
        v.is_empty() || !v.trim().is_empty()
    });
    let number = prop_oneof![
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551615".to_owned()),
        (0u32..100).prop_map(|n| n.to_string()),
        Just("x".to_owned()),
    ];
    let noreply = prop_oneof![3 => Just(""), 1 => Just(" noreply")];
    let verb = prop_oneof![
        Just("set"),
        Just("add"),
        Just("replace"),
        Just("append"),
        Just("prepend")
    ];
    prop_oneof![
        (verb, key.clone(), 0u32..10, value, noreply.clone()).prop_map(|(v, k, f, val, nr)| {
            format!("{v} {k} {f} 0 {}{nr}\r\n{val}\r\n", val.len())
        }),
        (key.clone(), 0u64..40, "[0-9]{1,3}")
            .prop_map(|(k, c, val)| { format!("cas {k} 0 0 {} {c}\r\n{val}\r\n", val.len()) }),
        (counter.clone(), "[0-9]{1,4}")
            .prop_map(|(k, val)| format!("set {k} 0 0 {}\r\n{val}\r\n", val.len())),
        prop::collection::vec(key.clone(), 1..4).prop_map(|ks| format!("get {}\r\n", ks.join(" "))),
        prop::collection::vec(key.clone(), 1..4)
            .prop_map(|ks| format!("gets {}\r\n", ks.join(" "))),
        counter.clone().prop_map(|k| format!("gets {k}\r\n")),
        (counter.clone(), number.clone(), noreply.clone())
            .prop_map(|(k, n, nr)| format!("incr {k} {n}{nr}\r\n")),
        (counter.clone(), number.clone(), noreply.clone())
            .prop_map(|(k, n, nr)| format!("decr {k} {n}{nr}\r\n")),
        (key.clone(), number.clone()).prop_map(|(k, n)| format!("incr {k} {n}\r\n")),
        (key.clone(), noreply.clone()).prop_map(|(k, nr)| format!("delete {k}{nr}\r\n")),
        // Only expiry times that are not near a clock tick: the two servers' clocks tick at
        // different instants, so "expires in 3 s" may already differ.
        (
            key.clone(),
            prop_oneof![Just("0"), Just("-1"), Just("100000"), Just("x")]
        )
            .prop_map(|(k, n)| format!("touch {k} {n}\r\n")),
        (key.clone(), "[vkcfsq]{0,3}").prop_map(|(k, f)| {
            let flags: Vec<String> = f
                .chars()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .map(String::from)
                .collect();
            format!("mg {k} {}\r\n", flags.join(" "))
        }),
        (key.clone(), "[0-9]{0,4}", "(| q| c| MA| ME| MP| MR| I)")
            .prop_map(|(k, v, f)| { format!("ms {k} {}{f}\r\n{v}\r\n", v.len()) }),
        (counter.clone(), "(| q| v| MD| N0 J5| D3 v)").prop_map(|(k, f)| format!("ma {k}{f}\r\n")),
        (key.clone(), "(| q| I| k)").prop_map(|(k, f)| format!("md {k}{f}\r\n")),
        // Junk that cannot start a command with a clock-dependent effect.
        "[ -~]{0,20}"
            .prop_filter("clock-dependent or counter", |j| {
                !j.contains("touch")
                    && !j.contains("flush")
                    && !j.contains("incr")
                    && !j.contains("decr")
                    && !j.contains("ma ")
            })
            .prop_map(|junk| format!("{junk}\r\n")),
    ]
}

/// Normalizes `VALUE <key> <flags> <len>[ <cas>]` + a value of digits and trailing spaces to
/// the unpadded number (see [`request`] for why).
fn mask_padding(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let lines: Vec<&str> = text.split("\r\n").collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let words: Vec<&str> = line.split(' ').collect();
        if words.len() >= 4 && words[0] == "VALUE" && i + 1 < lines.len() {
            let data = lines[i + 1];
            let trimmed = data.trim_end_matches(' ');
            if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
                let mut w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
                w[3] = trimmed.len().to_string();
                out.push(w.join(" "));
                out.push(trimmed.to_owned());
                i += 2;
                continue;
            }
        }
        out.push(line.to_owned());
        i += 1;
    }
    out.join("\r\n").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn generated_sessions_match_memcached(reqs in prop::collection::vec(request(), 1..25)) {
        let servers = generated_servers();
        let Some((weft, mc)) = servers else { return Ok(()); };
        let script: String = reqs.concat();
        // `mn` inside a generated junk line could end the read early; skip such scripts.
        prop_assume!(!script.contains("mn"));
        let want = mask_padding(&mask(&session(mc, script.as_bytes())));
        let got = mask_padding(&mask(&session(weft, script.as_bytes())));
        prop_assert!(
            want == got,
            "script: {}\n  memcached: {}\n  weft:      {}",
            show(script.as_bytes()),
            show(&want),
            show(&got)
        );
    }
}

/// memcached writes its pending replies after every classic get (one segment each), which
/// lets go of the items earlier `mg` replies of the batch held: an `incr` after that rewrites
/// the value in place, space-padded, where right after the `mg` it makes a new item. A pair
/// of its own (memcached's LRU threads off, so nothing else holds the item): sharing the
/// generated cases' pair would move their CAS values while they run.
#[test]
fn incr_after_a_classic_get_rewrites_in_place_as_memcached() {
    let Some((_mc, mc)) = start_memcached(&["-t", "1", "-o", "no_lru_maintainer,no_lru_crawler"])
    else {
        return;
    };
    let server = WeftServer::start(test_settings());
    let weft = server.addr;
    for script in [
        "set pad1 0 0 9\r\n6 lyh67zo\r\nmg pad1 v\r\nget nothere\r\nincr pad1 20\r\nmg pad1 v\r\n",
        "set pad2 0 0 9\r\n6 lyh67zo\r\nmg pad2 v\r\ngets pad2\r\nincr pad2 20\r\nmg pad2 v\r\n",
        "set pad3 0 0 9\r\n6 lyh67zo\r\nmg pad3 v\r\nmg pad2 v\r\nincr pad3 20\r\nmg pad3 v\r\n",
    ] {
        let want = mask(&session(mc, script.as_bytes()));
        let got = mask(&session(weft, script.as_bytes()));
        assert_eq!(
            show(&got),
            show(&want),
            "script: {}",
            show(script.as_bytes())
        );
    }
}

/// One server pair shared by every generated case (state carries over identically).
fn generated_servers() -> Option<(SocketAddr, SocketAddr)> {
    use std::sync::OnceLock;
    static PAIR: OnceLock<Option<(SocketAddr, SocketAddr)>> = OnceLock::new();
    *PAIR.get_or_init(|| {
        // Without the LRU maintainer and crawler threads, nothing else holds a reference to
        // an item while a session's `incr`/`decr` runs, so memcached always rewrites a shorter
        // number in place (space-padded) as weft does; with them, it now and then allocated a
        // fresh unpadded item instead, so a later `append`/`prepend` could see other bytes
        // (the likely cause of this test's one failure in ~10 runs, whose shrinking ran on the
        // already diverged shared servers and so could not show it). Neither thread changes
        // a reply otherwise: these sessions never fill the cache.
        let (mc, mc_addr) =
            start_memcached(&["-t", "1", "-o", "no_lru_maintainer,no_lru_crawler"])?;
        let weft = WeftServer::start(test_settings());
        let addr = weft.addr;
        // Both live until the test process exits; memcached is then killed by its PID.
        std::mem::forget(weft);
        register_child_for_exit(mc);
        Some((addr, mc_addr))
    })
}

/// Keeps the memcached child until the process exits, then kills it by PID.
fn register_child_for_exit(child: ChildGuard) {
    use std::sync::Mutex;
    static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    extern "C" fn kill_children() {
        if let Ok(pids) = CHILDREN.lock() {
            for pid in pids.iter() {
                // SAFETY: kill on a PID we spawned.
                unsafe {
                    libc::kill(*pid as i32, libc::SIGKILL);
                }
            }
        }
    }
    let pid = child.0.id();
    std::mem::forget(child);
    let mut c = CHILDREN.lock().unwrap();
    if c.is_empty() {
        // SAFETY: registering a plain extern "C" function.
        unsafe {
            libc::atexit(kill_children);
        }
    }
    c.push(pid);
}
