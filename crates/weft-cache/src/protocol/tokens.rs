//! memcached's `tokenize_command`, without copying: up to [`MAX_TOKENS`]` - 1` tokens split on
//! spaces, and when the line has more, the unsplit rest.

/// memcached's `MAX_TOKENS`; the last slot is the terminal token, so 23 real tokens at most.
pub const MAX_TOKENS: usize = 24;

/// The tokens of one request line, borrowed from it.
#[derive(Clone, Copy, Debug)]
pub struct Tokens<'a> {
    items: [&'a [u8]; MAX_TOKENS - 1],
    count: usize,
    rest: Option<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    /// Splits `line` on spaces exactly like `tokenize_command`.
    pub fn new(line: &'a [u8]) -> Tokens<'a> {
        let mut t = Tokens {
            items: [&[]; MAX_TOKENS - 1],
            count: 0,
            rest: None,
        };
        let mut s = 0;
        let mut e = 0;
        while e < line.len() {
            if line[e] == b' ' {
                if s != e {
                    t.items[t.count] = &line[s..e];
                    t.count += 1;
                    if t.count == MAX_TOKENS - 1 {
                        e += 1;
                        s = e;
                        break;
                    }
                }
                s = e + 1;
            }
            e += 1;
        }
        if s != e {
            t.items[t.count] = &line[s..e];
            t.count += 1;
        }
        if e < line.len() {
            t.rest = Some(&line[e..]);
        }
        t
    }

    /// memcached's `ntokens`: the real tokens plus the terminal one.
    pub fn ntokens(&self) -> usize {
        self.count + 1
    }

    /// How many real tokens.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Token `i`, or an empty slice past the end (memcached's terminal token has length 0).
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.count {
            self.items[i]
        } else {
            &[]
        }
    }

    /// The unsplit remainder when the line had more tokens than fit.
    pub fn rest(&self) -> Option<&'a [u8]> {
        self.rest
    }

    /// The real tokens from `from` on.
    pub fn from(&self, from: usize) -> &[&'a [u8]] {
        &self.items[from.min(self.count)..self.count]
    }

    /// Where token `i` starts in `line` (which must be the line it was split from).
    pub fn offset_of(&self, i: usize, line: &[u8]) -> usize {
        self.items[i].as_ptr() as usize - line.as_ptr() as usize
    }
}
