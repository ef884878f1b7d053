//! Keeps the runtime's layering (ARCHITECTURE.md, "Layers"): every `crate::` path in
//! `crates/weft/src` is mapped to the module it names, and a module may only name modules of a
//! lower layer (or itself). Comments, string literals and `#[cfg(test)]` items are not looked at:
//! tests may use the whole crate. It also keeps `thread_local!` inside `ctx`.
//!
//! Inside the crate an item is named through the module that defines it: the re-exports of
//! `lib.rs` and `fiber/mod.rs` (the public face) count as the top layer, so `crate::yield_now`
//! or `crate::fiber::FiberRef` from a lower layer is an error; `crate::fiber::core::FiberRef`
//! is not.

use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first; a module may name modules of its own layer's index or lower,
/// except that two modules of the same layer may not name each other.
const LAYERS: &[(&str, &[&str])] = &[
    ("leaf: the loom shim", &["loom"]),
    (
        "leaf: utilities",
        &["poison", "error", "hint", "coarse_clock"],
    ),
    ("per-thread context", &["ctx"]),
    ("fiber record, stacks, park", &["fiber"]),
    ("I/O driver and operations", &["io"]),
    ("scheduling policies", &["sched"]),
    ("processors, clusters, timers, spawn", &["runtime"]),
    ("services on fibers", &["sync", "blocking"]),
    ("sockets", &["net"]),
    ("files", &["fs"]),
    ("public face: lib.rs, fiber/mod.rs", &["facade"]),
];

/// The submodules of `fiber` that make up the fiber layer; anything else named under
/// `crate::fiber::` is a re-export of the public face.
const FIBER_PARTS: &[&str] = &["core", "current", "local", "overflow", "park", "stack"];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, ms)| ms.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer: add it to LAYERS"))
}

/// The module a source file belongs to, from its path under `src`.
fn module_of_file(rel: &Path) -> String {
    let s = rel.to_string_lossy().replace('\\', "/");
    if s == "lib.rs" || s == "fiber/mod.rs" {
        return "facade".to_owned();
    }
    if s == "park.rs" {
        return "fiber".to_owned();
    }
    let first = s.split('/').next().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

/// The module a `crate::` path names.
fn module_of_path(segments: &[String]) -> String {
    let first = segments[0].as_str();
    match first {
        "fiber" => match segments.get(1) {
            Some(s) if FIBER_PARTS.contains(&s.as_str()) => "fiber".to_owned(),
            _ => "facade".to_owned(),
        },
        "park" => "fiber".to_owned(),
        m if LAYERS.iter().any(|(_, ms)| ms.contains(&m)) && m != "facade" => m.to_owned(),
        _ => "facade".to_owned(),
    }
}

/// `src` with comments and the contents of string and char literals blanked out (newlines
/// kept, so line numbers still match).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                out.push(blank(b[j]));
                j += 1;
            }
            out.push('"');
            i = j;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\''), or a lifetime (left alone).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                out.push_str("' '");
                i = j + 1;
            } else if b.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks out every item under a `#[cfg(...)]` attribute that mentions `test`, and returns the
/// names of the file modules declared that way (`#[cfg(test)] mod tests;`).
fn drop_test_items(src: &str) -> (String, Vec<String>) {
    let mut b: Vec<char> = src.chars().collect();
    let mut test_files = Vec::new();
    let text: String = b.iter().collect();
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(pos) = text[from..].find("#[cfg(") {
        let at = from + pos;
        let close = text[at..]
            .find(")]")
            .map(|p| at + p + 2)
            .unwrap_or(text.len());
        if text[at..close].contains("test") {
            starts.push((at, close));
        }
        from = close.min(text.len());
    }
    // Byte offsets to char offsets (sources are mostly ASCII; map to be safe).
    let char_at: Vec<usize> = {
        let mut m = vec![0; text.len() + 1];
        for (ci, (bi, _)) in text.char_indices().enumerate() {
            m[bi] = ci;
        }
        m[text.len()] = b.len();
        m
    };
    for (at, close) in starts {
        let (at, close) = (char_at[at], char_at[close]);
        // The item runs to the `;` or to the `}` matching its first `{`, whichever comes first.
        let mut j = close;
        let mut depth = 0usize;
        while j < b.len() {
            match b[j] {
                ';' if depth == 0 => break,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let item: String = b[close..j.min(b.len())].iter().collect();
        let words: Vec<&str> = item.split_whitespace().collect();
        if let Some(p) = words.iter().position(|w| *w == "mod") {
            if j < b.len() && b[j] == ';' {
                if let Some(name) = words.get(p + 1) {
                    test_files.push(name.trim_end_matches(';').to_owned());
                }
            }
        }
        for k in at..=j.min(b.len() - 1) {
            if b[k] != '\n' {
                b[k] = ' ';
            }
        }
    }
    (b.into_iter().collect(), test_files)
}

fn ident_at(b: &[char], mut i: usize) -> Option<(String, usize)> {
    while i < b.len() && b[i].is_whitespace() {
        i += 1;
    }
    let start = i;
    while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
        i += 1;
    }
    (i > start).then(|| (b[start..i].iter().collect(), i))
}

fn skip_ws(b: &[char], mut i: usize) -> usize {
    while i < b.len() && b[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Parses a path or use tree at `i` (just after `crate::`), pushing every path it names.
fn parse_tree(b: &[char], i: usize, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let i = skip_ws(b, i);
    if b.get(i) == Some(&'{') {
        let mut j = i + 1;
        loop {
            j = skip_ws(b, j);
            match b.get(j) {
                Some('}') | None => return j + 1,
                Some(',') => j += 1,
                _ => {
                    let before = j;
                    j = parse_tree(b, j, prefix, out);
                    if j == before {
                        j += 1;
                    }
                }
            }
        }
    }
    if b.get(i) == Some(&'*') {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return i + 1;
    }
    let Some((id, j)) = ident_at(b, i) else {
        return i;
    };
    let pushed = id != "self";
    if pushed {
        prefix.push(id);
    }
    let k = skip_ws(b, j);
    let end = if b.get(k) == Some(&':') && b.get(k + 1) == Some(&':') {
        parse_tree(b, k + 2, prefix, out)
    } else {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        j
    };
    if pushed {
        prefix.pop();
    }
    end
}

/// Every `crate::` path of `src` (already stripped), with its line number.
fn crate_paths(src: &str) -> Vec<(usize, Vec<String>)> {
    let b: Vec<char> = src.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        if b[i] == '\n' {
            line += 1;
        }
        let word_start = i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_');
        if word_start && b[i..].starts_with(&['c', 'r', 'a', 't', 'e', ':', ':']) {
            let mut paths = Vec::new();
            let end = parse_tree(&b, i + 7, &mut Vec::new(), &mut paths);
            for p in paths {
                found.push((line, p));
            }
            for c in &b[i..end.min(b.len())] {
                if *c == '\n' {
                    line += 1;
                }
            }
            i = end.max(i + 1);
            continue;
        }
        i += 1;
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The forbidden edges of the crate's sources: (file, line, message).
fn violations(src_dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src_dir, &mut files);
    files.sort();
    // Files declared as `#[cfg(test)] mod name;` are tests: skip them.
    let mut test_files = Vec::new();
    let mut parsed = Vec::new();
    for path in &files {
        let text = fs::read_to_string(path).unwrap();
        let (text, tests) = drop_test_items(&strip(&text));
        let dir = if path
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        for t in tests {
            test_files.push(dir.join(format!("{t}.rs")));
            test_files.push(dir.join(&t).join("mod.rs"));
        }
        parsed.push((path.clone(), text));
    }
    let mut bad = Vec::new();
    for (path, text) in parsed {
        if test_files.contains(&path) {
            continue;
        }
        let rel = path.strip_prefix(src_dir).unwrap();
        let from = module_of_file(rel);
        let from_layer = layer_of(&from);
        if from != "ctx" {
            for (n, line) in text.lines().enumerate() {
                if line.contains("thread_local!") {
                    bad.push(format!(
                        "{}:{}: a `thread_local!` outside `ctx`, the runtime's only home of \
                         thread-locals",
                        rel.display(),
                        n + 1
                    ));
                }
            }
        }
        for (line, segments) in crate_paths(&text) {
            let to = module_of_path(&segments);
            let to_layer = layer_of(&to);
            if to == from {
                continue;
            }
            if to_layer >= from_layer {
                bad.push(format!(
                    "{}:{line}: `{from}` (layer {from_layer}: {}) names `crate::{}`, which is \
                     `{to}` (layer {to_layer}: {})",
                    rel.display(),
                    LAYERS[from_layer].0,
                    segments.join("::"),
                    LAYERS[to_layer].0,
                ));
            }
        }
    }
    bad
}

#[test]
fn lower_layers_never_name_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "{} forbidden edge(s) between the runtime's layers (see ARCHITECTURE.md, \"Layers\"):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_grouped_uses_and_skips_comments_and_tests() {
    let src = strip(
        "use crate::{io::op, fiber::{core::Task, Builder}};\n\
         // crate::net in a comment\n\
         let s = \"crate::fs\";\n\
         let c = '\"'; crate::sync::Mutex::new(());\n\
         #[cfg(test)]\nmod tests { use crate::runtime; }\n",
    );
    let (src, _) = drop_test_items(&src);
    let paths: Vec<(usize, String)> = crate_paths(&src)
        .into_iter()
        .map(|(l, p)| (l, p.join("::")))
        .collect();
    assert_eq!(
        paths,
        vec![
            (1, "io::op".to_owned()),
            (1, "fiber::core::Task".to_owned()),
            (1, "fiber::Builder".to_owned()),
            (4, "sync::Mutex::new".to_owned()),
        ]
    );
    assert_eq!(module_of_path(&["fiber".into(), "core".into()]), "fiber");
    assert_eq!(
        module_of_path(&["fiber".into(), "Builder".into()]),
        "facade"
    );
    assert_eq!(module_of_path(&["yield_now".into()]), "facade");
}
