//! Which processors a thief tries, in which order: shared by the stealing policies.
//!
//! - [`Victims::All`]: every other processor once, starting at a random one (so thieves spread
//!   out instead of all hitting processor 0);
//! - [`Victims::Nearest`]: only the `k` processors nearest by index distance on a ring of
//!   processors (1 away on either side, then 2 away, ...), the side tried first picked at random.
//!   Processors with neighbouring indices are likely to share a core's caches (or, in a bigger
//!   machine, a socket), so stolen work stays close to where its data is.
//!
//! Invariant: an order never names the thief itself and never names a processor twice.

use super::rng::XorShift;

/// A thief's victim set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Victims {
    /// Every other processor.
    All,
    /// The `k` nearest processors by index distance (at least 1).
    Nearest(usize),
}

impl Victims {
    /// The victims of processor `me` of `n`, in the order to try them.
    pub(crate) fn order(self, me: usize, n: usize, rng: &mut XorShift) -> VictimIter {
        debug_assert!(me < n);
        let others = n.saturating_sub(1);
        match self {
            Victims::All => VictimIter {
                me,
                n,
                count: others,
                next: 0,
                start: if n > 1 { rng.below(n) } else { 0 },
                nearest: false,
                left_first: false,
            },
            Victims::Nearest(k) => VictimIter {
                me,
                n,
                count: k.max(1).min(others),
                next: 0,
                start: 0,
                nearest: true,
                left_first: rng.next_u64() & 1 == 1,
            },
        }
    }
}

/// The processors one steal tries; see [`Victims::order`].
#[derive(Debug)]
pub(crate) struct VictimIter {
    me: usize,
    n: usize,
    /// `Nearest`: how many victims to hand out in total.
    count: usize,
    /// `All`: how many processors were looked at; `Nearest`: how many victims were handed out.
    next: usize,
    /// `All`: the first processor looked at.
    start: usize,
    nearest: bool,
    /// `Nearest`: whether distance `d` tries `me - d` before `me + d`.
    left_first: bool,
}

impl Iterator for VictimIter {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if !self.nearest {
            // `start, start + 1, ...` around the ring, skipping the thief.
            while self.next < self.n {
                let candidate = (self.start + self.next) % self.n;
                self.next += 1;
                if candidate != self.me {
                    return Some(candidate);
                }
            }
            return None;
        }
        if self.next >= self.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        // Distances 1, 1, 2, 2, ...: the i-th victim is `d` away on side `i % 2`. On a ring of
        // `n` processors, `+d` and `-d` meet when `2d == n`; `count <= n - 1` hands that one out
        // only once because it is the last one.
        let d = i / 2 + 1;
        let left = (i % 2 == 0) == self.left_first;
        Some(if left {
            (self.me + self.n - d % self.n) % self.n
        } else {
            (self.me + d) % self.n
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(v: Victims, me: usize, n: usize) -> Vec<usize> {
        let mut rng = XorShift::new(me as u64);
        v.order(me, n, &mut rng).collect()
    }

    #[test]
    fn all_names_every_other_processor_once() {
        for n in 1..9 {
            for me in 0..n {
                for _ in 0..20 {
                    let mut got = collect(Victims::All, me, n);
                    got.sort_unstable();
                    let want: Vec<usize> = (0..n).filter(|&p| p != me).collect();
                    assert_eq!(got, want, "me {me} of {n}");
                }
            }
        }
    }

    #[test]
    fn nearest_names_the_closest_without_repeats() {
        for n in 1..10 {
            for me in 0..n {
                for k in 1..12 {
                    let got = collect(Victims::Nearest(k), me, n);
                    assert_eq!(got.len(), k.min(n - 1), "me {me} of {n}, k {k}");
                    assert!(!got.contains(&me));
                    let mut dedup = got.clone();
                    dedup.sort_unstable();
                    dedup.dedup();
                    assert_eq!(dedup.len(), got.len(), "repeat in {got:?}");
                    let dist = |p: usize| {
                        let d = p.abs_diff(me);
                        d.min(n - d)
                    };
                    let far = got.iter().map(|&p| dist(p)).max().unwrap_or(0);
                    assert!(far <= k.div_ceil(2), "{got:?} for me {me} of {n}, k {k}");
                }
            }
        }
    }
}
