//! memcached's `tokenize_command`, without copying: up to [`MAX_TOKENS`]` - 1` tokens split on
//! spaces, and when the line has more, the unsplit rest.
//!
//! The tokens are kept as `u32` offsets into the line, not as slices: 8 bytes a token instead
//! of 16, so a [`Tokens`] spans 4 cache lines of the parsing fiber's stack instead of 7, and
//! the split counts in a register. At thousands of connections that stack is cold when a
//! request arrives (each of thousands of fibers ran in between), and the old layout's
//! zeroing and reloaded count made `Tokens::new` about 1 % of the server's CPU
//! (`docs/notes/scale.md`). A line is at most [`super::LINE_MAX_BYTES`], far below `u32::MAX`.

/// memcached's `MAX_TOKENS`; the last slot is the terminal token, so 23 real tokens at most.
pub const MAX_TOKENS: usize = 24;

/// `rest` when the line had no more than the tokens that fit.
const NO_REST: u32 = u32::MAX;

/// The tokens of one request line, borrowed from it.
#[derive(Clone, Copy, Debug)]
pub struct Tokens<'a> {
    line: &'a [u8],
    /// Start and end of each token in `line`; the first `count` are real.
    spans: [(u32, u32); MAX_TOKENS - 1],
    count: u32,
    /// Where the unsplit rest starts in `line`, or [`NO_REST`].
    rest: u32,
}

impl Tokens<'static> {
    /// No tokens: a slot for [`super::parse`] to split a line into.
    pub const EMPTY: Tokens<'static> = Tokens {
        line: &[],
        spans: [(0, 0); MAX_TOKENS - 1],
        count: 0,
        rest: NO_REST,
    };
}

impl<'a> Tokens<'a> {
    /// Splits `line` on spaces exactly like `tokenize_command`.
    ///
    /// Not inlined: called, it writes the tokens straight into the caller's slot; inlined into
    /// `parse`, they were built in one place of its frame and copied to another.
    #[inline(never)]
    pub fn new(line: &'a [u8]) -> Tokens<'a> {
        // Request lines are far shorter; a longer slice is split as if it ended there.
        let line = &line[..line.len().min(u32::MAX as usize - 1)];
        // Built in place (a local array moved into the struct was copied with `memcpy`, one
        // more pass over cold lines); the count stays in a register until the end.
        let mut t = Tokens {
            line,
            spans: [(0, 0); MAX_TOKENS - 1],
            count: 0,
            rest: NO_REST,
        };
        let mut count = 0usize;
        let mut s = 0;
        let mut e = 0;
        while e < line.len() {
            if line[e] == b' ' {
                if s != e {
                    t.spans[count] = (s as u32, e as u32);
                    count += 1;
                    if count == MAX_TOKENS - 1 {
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
            t.spans[count] = (s as u32, e as u32);
            count += 1;
        }
        if e < line.len() {
            t.rest = e as u32;
        }
        t.count = count as u32;
        t
    }

    /// memcached's `ntokens`: the real tokens plus the terminal one.
    pub fn ntokens(&self) -> usize {
        self.count() + 1
    }

    /// How many real tokens.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Token `i`, or an empty slice past the end (memcached's terminal token has length 0).
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.count() {
            self.span(i)
        } else {
            &[]
        }
    }

    /// The unsplit remainder when the line had more tokens than fit.
    pub fn rest(&self) -> Option<&'a [u8]> {
        (self.rest != NO_REST).then(|| &self.line[self.rest as usize..])
    }

    /// The real tokens from `from` on.
    pub fn from(&self, from: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        (from.min(self.count())..self.count()).map(|i| self.span(i))
    }

    /// Where token `i` starts in the line it was split from.
    pub fn offset_of(&self, i: usize) -> usize {
        self.spans[i].0 as usize
    }

    fn span(&self, i: usize) -> &'a [u8] {
        let (s, e) = self.spans[i];
        &self.line[s as usize..e as usize]
    }
}
