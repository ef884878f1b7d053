//! Which path each request asks for: a weighted draw over a file set's manifest, or Zipf
//! (s = 1) over a URL list in popularity order.

use std::path::Path;

use anyhow::{bail, Context};
use rand::Rng;

use crate::fileset;

/// Paths with cumulative weights; a draw is a binary search (O(log n), no allocation).
#[derive(Debug, Clone)]
pub struct Names {
    paths: Vec<String>,
    cumulative: Vec<f64>,
}

impl Names {
    /// The files of a set made by `weft fileset`, weighted as its manifest says.
    pub fn from_fileset(dir: &Path) -> anyhow::Result<Names> {
        let entries = fileset::read_manifest(dir)?;
        Ok(Names::weighted(
            entries
                .into_iter()
                .map(|e| (format!("/{}", e.path), e.weight)),
        ))
    }

    /// One URL path per line (blank lines and `#` comments skipped), most popular first;
    /// the line of rank r is drawn with probability ∝ 1/r.
    pub fn from_url_file(file: &Path) -> anyhow::Result<Names> {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading URL list {}", file.display()))?;
        let mut paths = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if !line.starts_with('/') || line.contains(char::is_whitespace) {
                bail!(
                    "{}:{}: `{line}` is not a URL path (must start with / and hold no spaces)",
                    file.display(),
                    n + 1
                );
            }
            paths.push(line.to_string());
        }
        if paths.is_empty() {
            bail!("{} lists no URL paths", file.display());
        }
        Ok(Names::weighted(
            paths
                .into_iter()
                .enumerate()
                .map(|(r, p)| (p, 1.0 / (r + 1) as f64)),
        ))
    }

    fn weighted(items: impl Iterator<Item = (String, f64)>) -> Names {
        let (mut paths, mut cumulative) = (Vec::new(), Vec::new());
        let mut sum = 0.0;
        for (p, w) in items {
            sum += w.max(0.0);
            paths.push(p);
            cumulative.push(sum);
        }
        for c in &mut cumulative {
            *c /= sum;
        }
        Names { paths, cumulative }
    }

    /// How many names there are.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether there are none (never true for a constructed set).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// One path.
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> &str {
        let u: f64 = rng.random();
        let i = self.cumulative.partition_point(|&c| c <= u);
        &self.paths[i.min(self.paths.len() - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn url_list_is_zipf_by_line() {
        let file = std::env::temp_dir().join(format!("weft-urls-{}", std::process::id()));
        std::fs::write(&file, "# popular first\n/a\n\n/b\n/c\n").unwrap();
        let names = Names::from_url_file(&file).unwrap();
        assert_eq!(names.len(), 3);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..60_000 {
            *counts
                .entry(names.sample(&mut rng).to_string())
                .or_insert(0) += 1;
        }
        // Weights 1, 1/2, 1/3 → 6/11, 3/11, 2/11.
        let a = counts["/a"] as f64 / 60_000.0;
        assert!((a - 6.0 / 11.0).abs() < 0.02, "{a}");
        std::fs::write(&file, "a b\n").unwrap();
        assert!(Names::from_url_file(&file).is_err());
        std::fs::remove_file(&file).unwrap();
    }
}
