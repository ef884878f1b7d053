//! memcached's `tokenize_command`, without copying: up to [`MAX_TOKENS`]` - 1` tokens split on
//! spaces, and when the line has more, the unsplit rest.
//!
//! The tokens are kept as `u32` offsets into the line, not as slices: 8 bytes a token instead
//! of 16, so a [`Tokens`] spans 4 cache lines of the parsing fiber's stack instead of 7, and
//! the split counts in a register. At thousands of connections that stack is cold when a
//! request arrives (each of thousands of fibers ran in between), and the old layout's
//! zeroing and reloaded count made `Tokens::new` about 1 % of the server's CPU
//! (`docs/notes/scale.md`). A line is at most [`super::LINE_MAX_BYTES`], far below `u32::MAX`.

use super::bytes;

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
    pub fn new(line: &'a [u8]) -> Tokens<'a> {
        let mut t = Tokens {
            line: &[],
            spans: [(0, 0); MAX_TOKENS - 1],
            count: 0,
            rest: NO_REST,
        };
        t.fill(line);
        t
    }

    /// Splits `line` into `self` (what [`Tokens::new`] gives, written in place: the parser
    /// fills the caller's slot instead of building a 200-byte value and copying it there).
    /// Spans past the new count keep whatever they held; nothing reads them.
    pub fn fill(&mut self, line: &'a [u8]) {
        self.split(line, false);
    }

    /// [`Tokens::fill`] for a request line read as a C string: the line ends at its first
    /// NUL byte, if any (memcached's parser works on C strings). [`Tokens::line`] then gives
    /// the line so cut.
    pub fn fill_c_line(&mut self, line: &'a [u8]) {
        self.split(line, true);
    }

    /// Eight bytes a step ([`super::bytes`]): only the spaces are visited, so a 24-byte
    /// `mg` line costs a few dozen instructions where the byte loop ran about 150, and the
    /// NUL cut is found in the same words.
    #[inline(always)]
    fn split(&mut self, line: &'a [u8], cut_at_nul: bool) {
        // Request lines are far shorter; a longer slice is split as if it ended there.
        let mut line = &line[..line.len().min(u32::MAX as usize - 1)];
        self.rest = NO_REST;
        // The count stays in a register until the end.
        let mut count = 0usize;
        // Start of the token being read.
        let mut s = 0usize;
        let mut at = 0usize;
        'words: while at < line.len() {
            let (w, real) = if at + 8 <= line.len() {
                (bytes::load(line, at), u64::MAX)
            } else {
                (
                    bytes::load_tail(line, at),
                    bytes::real_lanes(line.len() - at),
                )
            };
            let mut spaces = bytes::eq_mask(w, b' ');
            if cut_at_nul {
                let nul = bytes::eq_mask(w, 0) & real;
                if nul != 0 {
                    let end = at + bytes::first_lane(nul);
                    line = &line[..end];
                    // Only the spaces before the NUL.
                    spaces &= (nul & nul.wrapping_neg()) - 1;
                }
            }
            while spaces != 0 {
                let e = at + bytes::first_lane(spaces);
                spaces &= spaces - 1;
                if s != e {
                    self.spans[count] = (s as u32, e as u32);
                    count += 1;
                    if count == MAX_TOKENS - 1 {
                        // memcached stops splitting here; the rest starts after this space
                        // and, read as a C string, ends at a NUL after this word.
                        if cut_at_nul && at + 8 < line.len() {
                            if let Some(nul) = memchr::memchr(0, &line[at + 8..]) {
                                line = &line[..at + 8 + nul];
                            }
                        }
                        if e + 1 < line.len() {
                            self.rest = (e + 1) as u32;
                        }
                        break 'words;
                    }
                }
                s = e + 1;
            }
            at += 8;
        }
        if count < MAX_TOKENS - 1 && s < line.len() {
            self.spans[count] = (s as u32, line.len() as u32);
            count += 1;
        }
        self.line = line;
        self.count = count as u32;
    }

    /// The line the tokens were split from.
    pub fn line(&self) -> &'a [u8] {
        self.line
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

#[cfg(test)]
mod tests {
    use super::*;

    /// memcached's `tokenize_command` byte by byte (the split before the word-at-a-time one).
    fn reference(line: &[u8]) -> (Vec<&[u8]>, Option<&[u8]>) {
        let mut tokens = Vec::new();
        let (mut s, mut e) = (0, 0);
        while e < line.len() {
            if line[e] == b' ' {
                if s != e {
                    tokens.push(&line[s..e]);
                    if tokens.len() == MAX_TOKENS - 1 {
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
            tokens.push(&line[s..e]);
        }
        (tokens, (e < line.len()).then(|| &line[e..]))
    }

    fn split(t: &Tokens<'_>) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
        (
            t.from(0).map(<[u8]>::to_vec).collect(),
            t.rest().map(<[u8]>::to_vec),
        )
    }

    #[test]
    fn splits_as_memcached_does_at_every_length() {
        // Lines of spaces and letters from a fixed generator: every length to 120 bytes (15
        // words and a tail), runs of spaces, more tokens than fit, spaces at both ends.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 121) as usize;
            let space_every = 1 + (x >> 8) % 6;
            let line: Vec<u8> = (0..len as u64)
                .map(|i| {
                    let r = (x >> (i % 48)).wrapping_add(i * 0x9e37);
                    if r % space_every == 0 {
                        b' '
                    } else {
                        b'a' + (r % 26) as u8
                    }
                })
                .collect();
            let (want, want_rest) = reference(&line);
            let want = (
                want.iter().map(|t| t.to_vec()).collect::<Vec<_>>(),
                want_rest.map(<[u8]>::to_vec),
            );
            assert_eq!(split(&Tokens::new(&line)), want, "round {round} {line:?}");
            // Filled in place over a slot that held a longer line's tokens.
            let mut slot_line = line.clone();
            slot_line.extend_from_slice(b" y z");
            let mut again = Tokens::new(&slot_line);
            again.fill(&line);
            assert_eq!(split(&again), want, "round {round}, filled in place");
            // Cut at a NUL: the same as the line up to it.
            let mut with_nul = line.clone();
            let cut = (x >> 20) as usize % (len + 1);
            if cut < len {
                with_nul[cut] = 0;
            }
            let (want, want_rest) = reference(&with_nul[..cut.min(len)]);
            let want = (
                want.iter().map(|t| t.to_vec()).collect::<Vec<_>>(),
                want_rest.map(<[u8]>::to_vec),
            );
            let mut cut_line = Tokens::EMPTY;
            cut_line.fill_c_line(&with_nul);
            assert_eq!(split(&cut_line), want, "round {round}, cut at {cut}");
            assert_eq!(cut_line.line(), &with_nul[..cut.min(len)]);
        }
    }
}
