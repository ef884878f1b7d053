//! Open-loop arrival schedules: Poisson arrivals at a given rate.
//!
//! Each connection (or session source) owns one schedule so the sum of N independent Poisson
//! processes of rate Q/N is a Poisson process of rate Q — the load does not depend on how fast
//! the server answers (open loop).

use std::time::{Duration, Instant};

use rand::Rng;
use rand_distr::{Distribution, Exp};

/// The intended send times of one source.
#[derive(Debug, Clone)]
pub struct Poisson {
    next: Instant,
    gap: Exp<f64>,
}

impl Poisson {
    /// Arrivals at `rate_per_sec` (> 0) starting at a random offset after `start`.
    pub fn new(rate_per_sec: f64, start: Instant, rng: &mut impl Rng) -> Poisson {
        assert!(rate_per_sec > 0.0 && rate_per_sec.is_finite());
        let gap = Exp::new(rate_per_sec).expect("rate checked > 0");
        let first = Duration::from_secs_f64(gap.sample(rng));
        Poisson {
            next: start + first,
            gap,
        }
    }

    /// The next intended send time; advances the schedule.
    #[inline]
    pub fn next(&mut self, rng: &mut impl Rng) -> Instant {
        let at = self.next;
        self.next += Duration::from_secs_f64(self.gap.sample(rng));
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn mean_rate_matches() {
        let mut rng = SmallRng::seed_from_u64(3);
        let start = Instant::now();
        let mut p = Poisson::new(1000.0, start, &mut rng);
        let mut last = start;
        for _ in 0..100_000 {
            let t = p.next(&mut rng);
            assert!(t >= last);
            last = t;
        }
        let secs = (last - start).as_secs_f64();
        assert!(
            (95.0..105.0).contains(&secs),
            "100k arrivals at 1000/s took {secs}s"
        );
    }
}
