//! Distributions named on the command line: which key a request uses, how large a value is.
//!
//! `--key-dist uniform | zipf:S` and `--value-size fixed:N | uniform:A:B | gpareto:LOC:SCALE:SHAPE
//! | etc` (Facebook's ETC pool value sizes as fitted by Atikoglu et al. and used by mutilate:
//! generalized Pareto with location 0, scale 214.476, shape 0.348238). Every sampled size is
//! clamped to `1..=MAX_VALUE_BYTES` so a heavy tail never asks for more than an item may hold.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use rand_distr::{Distribution, Zipf};

/// The largest value the generator sends (memcached's default item size limit, minus headroom
/// for the item header).
pub const MAX_VALUE_BYTES: usize = 1_000_000;

/// Key popularity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Key of rank k drawn with probability ∝ 1/k^s.
    Zipf(f64),
}

impl FromStr for KeyDist {
    type Err = String;

    fn from_str(s: &str) -> Result<KeyDist, String> {
        if s == "uniform" {
            return Ok(KeyDist::Uniform);
        }
        if let Some(exp) = s.strip_prefix("zipf:") {
            let exp: f64 = exp
                .parse()
                .map_err(|_| format!("zipf exponent `{exp}` is not a number"))?;
            if !(exp.is_finite() && exp >= 0.0) {
                return Err(format!("zipf exponent must be finite and >= 0, got {exp}"));
            }
            return Ok(KeyDist::Zipf(exp));
        }
        Err(format!(
            "unknown key distribution `{s}`: expected uniform or zipf:S (e.g. zipf:0.99)"
        ))
    }
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => write!(f, "uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

/// Draws key indices in `0..keys`.
#[derive(Debug, Clone)]
pub enum KeySampler {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

impl KeySampler {
    /// A sampler over `keys` keys (`keys` ≥ 1).
    pub fn new(dist: KeyDist, keys: u64) -> KeySampler {
        assert!(keys >= 1, "at least one key");
        match dist {
            KeyDist::Uniform => KeySampler::Uniform(keys),
            KeyDist::Zipf(s) => {
                KeySampler::Zipf(Zipf::new(keys as f64, s).expect("checked: keys >= 1 and s >= 0"))
            }
        }
    }

    /// One key index.
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match self {
            KeySampler::Uniform(n) => rng.random_range(0..*n),
            KeySampler::Zipf(z) => z.sample(rng) as u64 - 1,
        }
    }
}

/// Value sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueSize {
    Fixed(usize),
    /// Uniform in `a..=b`.
    Uniform(usize, usize),
    /// Generalized Pareto with location, scale and shape.
    GPareto {
        loc: f64,
        scale: f64,
        shape: f64,
    },
}

/// Facebook ETC value sizes (mutilate's `fb_value`).
pub const ETC: ValueSize = ValueSize::GPareto {
    loc: 0.0,
    scale: 214.476,
    shape: 0.348238,
};

impl FromStr for ValueSize {
    type Err = String;

    fn from_str(s: &str) -> Result<ValueSize, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let int = |p: &str| -> Result<usize, String> {
            p.parse::<usize>()
                .map_err(|_| format!("`{p}` in value size `{s}` is not a byte count"))
        };
        let float = |p: &str| -> Result<f64, String> {
            p.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("`{p}` in value size `{s}` is not a number"))
        };
        let size = match parts.as_slice() {
            ["etc"] => ETC,
            ["fixed", n] => ValueSize::Fixed(int(n)?),
            ["uniform", a, b] => {
                let (a, b) = (int(a)?, int(b)?);
                if a > b {
                    return Err(format!("value size `{s}`: {a} > {b}"));
                }
                ValueSize::Uniform(a, b)
            }
            ["gpareto", loc, scale, shape] => {
                let (loc, scale, shape) = (float(loc)?, float(scale)?, float(shape)?);
                if scale <= 0.0 {
                    return Err(format!("value size `{s}`: scale must be > 0"));
                }
                ValueSize::GPareto { loc, scale, shape }
            }
            _ => {
                return Err(format!(
                    "unknown value size `{s}`: expected fixed:N, uniform:A:B, gpareto:LOC:SCALE:SHAPE or etc"
                ))
            }
        };
        let max = match size {
            ValueSize::Fixed(n) | ValueSize::Uniform(_, n) => n,
            ValueSize::GPareto { .. } => 0,
        };
        if max > MAX_VALUE_BYTES {
            return Err(format!(
                "value size `{s}`: {max} bytes is above the {MAX_VALUE_BYTES}-byte limit"
            ));
        }
        Ok(size)
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            v if v == ETC => write!(f, "etc"),
            ValueSize::Fixed(n) => write!(f, "fixed:{n}"),
            ValueSize::Uniform(a, b) => write!(f, "uniform:{a}:{b}"),
            ValueSize::GPareto { loc, scale, shape } => write!(f, "gpareto:{loc}:{scale}:{shape}"),
        }
    }
}

impl ValueSize {
    /// One size, clamped to `1..=MAX_VALUE_BYTES` (a fixed 0 stays 0: an empty value).
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        match *self {
            ValueSize::Fixed(n) => n,
            ValueSize::Uniform(a, b) => rng.random_range(a..=b),
            ValueSize::GPareto { loc, scale, shape } => {
                // Inverse CDF: x = loc + scale * ((1-u)^-shape - 1) / shape.
                let u: f64 = rng.random();
                let x = if shape.abs() < 1e-12 {
                    loc - scale * (1.0 - u).ln()
                } else {
                    loc + scale * ((1.0 - u).powf(-shape) - 1.0) / shape
                };
                (x.round() as usize).clamp(1, MAX_VALUE_BYTES)
            }
        }
    }

    /// The largest size this can produce.
    pub fn max(&self) -> usize {
        match *self {
            ValueSize::Fixed(n) | ValueSize::Uniform(_, n) => n,
            ValueSize::GPareto { .. } => MAX_VALUE_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn parses_and_prints_back() {
        for s in ["uniform", "zipf:0.99"] {
            assert_eq!(s.parse::<KeyDist>().unwrap().to_string(), s);
        }
        for s in ["fixed:200", "uniform:10:1000", "etc", "gpareto:0:100:0.5"] {
            assert_eq!(s.parse::<ValueSize>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        assert!("zipf".parse::<KeyDist>().unwrap_err().contains("unknown"));
        assert!("zipf:x"
            .parse::<KeyDist>()
            .unwrap_err()
            .contains("not a number"));
        assert!("zipf:-1".parse::<KeyDist>().unwrap_err().contains(">= 0"));
        assert!("uniform:9:1"
            .parse::<ValueSize>()
            .unwrap_err()
            .contains("9 > 1"));
        assert!("fixed:2000000"
            .parse::<ValueSize>()
            .unwrap_err()
            .contains("limit"));
        assert!("fixed:-1"
            .parse::<ValueSize>()
            .unwrap_err()
            .contains("byte count"));
        assert!("normal:3"
            .parse::<ValueSize>()
            .unwrap_err()
            .contains("expected"));
    }

    #[test]
    fn zipf_prefers_low_ranks_and_stays_in_range() {
        let mut rng = SmallRng::seed_from_u64(1);
        let sampler = KeySampler::new(KeyDist::Zipf(1.0), 1000);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[sampler.sample(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > counts[9] * 5, "{} vs {}", counts[0], counts[9]);
        let uniform = KeySampler::new(KeyDist::Uniform, 3);
        for _ in 0..1000 {
            assert!(uniform.sample(&mut rng) < 3);
        }
    }

    #[test]
    fn etc_sizes_have_the_published_shape() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut sizes: Vec<usize> = (0..100_000).map(|_| ETC.sample(&mut rng)).collect();
        sizes.sort_unstable();
        // Median of GPareto(0, 214.476, 0.348238) is scale*(2^shape-1)/shape ≈ 167.
        let median = sizes[sizes.len() / 2];
        assert!((150..185).contains(&median), "median {median}");
        assert!(*sizes.last().unwrap() <= MAX_VALUE_BYTES);
        assert!(sizes[0] >= 1);
    }
}
