//! The thesis's static-web file set (`weft fileset`), generated deterministically.
//!
//! The thesis used 21,600 files in 650 directories (2.2 GB) where 95% of requests hit
//! 126.5 MB and files up to 51,200 bytes. Its cumulative table (percent of requests → memory
//! MB, largest file B) is [`BANDS`]. We turn each step of that table into a *band*: a group of
//! files whose sizes lie between the previous step's largest file and this one's, whose total
//! size is the step's memory, and which together draw the step's share of requests. Within a
//! band, popularity is Zipf (s = 1) by rank, so names are drawn Zipf-like from the whole set
//! while the table holds exactly. `scale` multiplies the number of files (and so the memory);
//! sizes keep their ranges.
//!
//! The set is described by a manifest, `DIR/MANIFEST_NAME`: one line per file,
//! `weight<TAB>size<TAB>path`, in popularity order; the load generator reads it to draw names.
//! Invariant: the same (scale, seed) always gives byte-identical files and manifest.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The manifest's file name inside the set's directory.
pub const MANIFEST_NAME: &str = "weft-fileset.tsv";

/// (cumulative % of requests, cumulative memory MB, largest file bytes), from the thesis.
pub const BANDS: [(f64, f64, u64); 8] = [
    (10.0, 0.5, 409),
    (30.0, 1.5, 716),
    (50.0, 8.4, 4096),
    (70.0, 12.2, 5120),
    (80.0, 20.1, 7168),
    (90.0, 94.3, 40960),
    (95.0, 126.5, 51200),
    (100.0, 2291.6, 921600),
];

/// Smallest file of the first band.
const SMALLEST_FILE_BYTES: u64 = 64;
/// Files at scale 1.
pub const FILES_AT_SCALE_1: usize = 21_600;
/// Directories at scale 1.
pub const DIRS_AT_SCALE_1: usize = 650;

/// One file of the set.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Share of requests (all entries sum to 1).
    pub weight: f64,
    pub size: u64,
    /// Path relative to the set's root, with `/` separators, no leading slash.
    pub path: String,
}

/// The set's files in popularity order, without touching the disk.
pub fn plan(scale: f64, seed: u64) -> anyhow::Result<Vec<Entry>> {
    if !(scale > 0.0 && scale.is_finite()) {
        bail!("--scale must be a number > 0 (1 = the thesis's 21,600 files, 2.2 GB)");
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let counts = band_counts();
    let dirs = ((DIRS_AT_SCALE_1 as f64 * scale).round() as usize).max(1);
    let mut entries = Vec::new();
    let (mut lo, mut prev_pct, mut prev_mb) = (SMALLEST_FILE_BYTES, 0.0, 0.0);
    for (band, (&(pct, mb, hi), &count)) in BANDS.iter().zip(&counts).enumerate() {
        let n = ((count as f64 * scale).round() as usize).max(1);
        let mean = ((mb - prev_mb) * 1e6 / count as f64).clamp(lo as f64 + 1.0, hi as f64 - 1.0);
        // Sizes lo + (hi-lo)·u^k have mean lo + (hi-lo)/(k+1): pick k for the band's mean.
        let k = (hi - lo) as f64 / (mean - lo as f64) - 1.0;
        let share = (pct - prev_pct) / 100.0;
        let harmonic: f64 = (1..=n).map(|r| 1.0 / r as f64).sum();
        for rank in 1..=n {
            let u: f64 = rng.random();
            let size = lo + ((hi - lo) as f64 * u.powf(k)).round() as u64;
            let index = entries.len();
            let ext = match band {
                0..=2 => "html",
                3..=5 => "jpg",
                _ => "bin",
            };
            entries.push(Entry {
                weight: share / (rank as f64 * harmonic),
                size,
                path: format!("dir{:03}/file{index:05}.{ext}", index % dirs),
            });
        }
        (lo, prev_pct, prev_mb) = (hi, pct, mb);
    }
    Ok(entries)
}

/// Files per band at scale 1: the band's memory over the geometric mean of its size range
/// for all bands but the last, which takes the rest of the 21,600 (its mean size then lands
/// inside its range).
fn band_counts() -> [usize; 8] {
    let mut counts = [0usize; 8];
    let (mut lo, mut prev_mb) = (SMALLEST_FILE_BYTES, 0.0);
    for (i, &(_, mb, hi)) in BANDS.iter().enumerate().take(7) {
        let memory = (mb - prev_mb) * 1e6;
        counts[i] = (memory / ((lo * hi) as f64).sqrt()).round() as usize;
        (lo, prev_mb) = (hi, mb);
    }
    counts[7] = FILES_AT_SCALE_1 - counts[..7].iter().sum::<usize>();
    counts
}

/// Writes the set under `out` (creating it) and its manifest; returns the entries.
/// Files that already exist with the right size are kept (their content is deterministic).
pub fn generate(out: &Path, scale: f64, seed: u64) -> anyhow::Result<Vec<Entry>> {
    let entries = plan(scale, seed)?;
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut block = vec![0u8; 64 * 1024];
    for (i, b) in block.iter_mut().enumerate() {
        // Printable, varied bytes (compressors and caches see realistic content).
        *b = b"abcdefghijklmnopqrstuvwxyz0123456789\n"[(i * 7 + i / 37) % 37];
    }
    for e in &entries {
        let path = out.join(&e.path);
        if fs::metadata(&path)
            .map(|m| m.len() == e.size)
            .unwrap_or(false)
        {
            continue;
        }
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        write_file(&path, e.size, &block).with_context(|| format!("writing {}", path.display()))?;
    }
    write_manifest(&out.join(MANIFEST_NAME), &entries, scale, seed)?;
    Ok(entries)
}

fn write_file(path: &Path, size: u64, block: &[u8]) -> io::Result<()> {
    let mut f = BufWriter::new(fs::File::create(path)?);
    let mut left = size as usize;
    while left > 0 {
        let n = left.min(block.len());
        f.write_all(&block[..n])?;
        left -= n;
    }
    f.flush()
}

fn write_manifest(path: &Path, entries: &[Entry], scale: f64, seed: u64) -> anyhow::Result<()> {
    let mut f = BufWriter::new(
        fs::File::create(path).with_context(|| format!("writing {}", path.display()))?,
    );
    writeln!(
        f,
        "# weft fileset scale={scale} seed={seed}: weight size path"
    )?;
    for e in entries {
        writeln!(f, "{:.9e}\t{}\t{}", e.weight, e.size, e.path)?;
    }
    f.flush()?;
    Ok(())
}

/// Reads the manifest of the set in `dir`.
pub fn read_manifest(dir: &Path) -> anyhow::Result<Vec<Entry>> {
    let path: PathBuf = dir.join(MANIFEST_NAME);
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (create the set with `weft fileset --out {}`)",
            path.display(),
            dir.display()
        )
    })?;
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, '\t');
        let (Some(w), Some(s), Some(p)) = (parts.next(), parts.next(), parts.next()) else {
            bail!(
                "{}:{}: expected weight<TAB>size<TAB>path",
                path.display(),
                n + 1
            );
        };
        entries.push(Entry {
            weight: w
                .parse()
                .with_context(|| format!("{}:{}: bad weight", path.display(), n + 1))?,
            size: s
                .parse()
                .with_context(|| format!("{}:{}: bad size", path.display(), n + 1))?,
            path: p.to_string(),
        });
    }
    if entries.is_empty() {
        bail!("{} lists no files", path.display());
    }
    Ok(entries)
}

/// What a set looks like against the thesis's table: walking the manifest in order (band by
/// band), at each of the table's cumulative request shares, the memory touched so far and the
/// largest file so far.
pub fn summary(entries: &[Entry]) -> Vec<(f64, f64, u64)> {
    let (mut pct, mut mem, mut max) = (0.0, 0.0, 0u64);
    let mut rows = Vec::new();
    let mut next = 0;
    for e in entries {
        pct += e.weight * 100.0;
        mem += e.size as f64 / 1e6;
        max = max.max(e.size);
        while next < BANDS.len() && pct >= BANDS[next].0 - 1e-6 {
            rows.push((BANDS[next].0, mem, max));
            next += 1;
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_one_matches_the_thesis_table() {
        let entries = plan(1.0, 1).unwrap();
        assert_eq!(entries.len(), FILES_AT_SCALE_1);
        let weights: f64 = entries.iter().map(|e| e.weight).sum();
        assert!((weights - 1.0).abs() < 1e-9);
        let total_mb: f64 = entries.iter().map(|e| e.size as f64).sum::<f64>() / 1e6;
        assert!((2100.0..2500.0).contains(&total_mb), "total {total_mb} MB");
        let dirs: std::collections::HashSet<&str> = entries.iter().map(|e| &e.path[..6]).collect();
        assert_eq!(dirs.len(), DIRS_AT_SCALE_1);
        // Band by band, the largest file is the table's and memory is within 15%.
        let mut lo = SMALLEST_FILE_BYTES;
        let mut start = 0;
        let counts = band_counts();
        let mut prev_mb = 0.0;
        for (i, &(_, mb, hi)) in BANDS.iter().enumerate() {
            let band = &entries[start..start + counts[i]];
            assert!(
                band.iter().all(|e| e.size >= lo && e.size <= hi),
                "band {i}"
            );
            let mem: f64 = band.iter().map(|e| e.size as f64).sum::<f64>() / 1e6;
            let want = mb - prev_mb;
            assert!(
                (mem - want).abs() <= want * 0.15,
                "band {i}: {mem} MB, want {want}"
            );
            (lo, start, prev_mb) = (hi, start + counts[i], mb);
        }
    }

    #[test]
    fn deterministic_and_scaled() {
        assert_eq!(plan(0.01, 7).unwrap(), plan(0.01, 7).unwrap());
        assert_ne!(plan(0.01, 7).unwrap(), plan(0.01, 8).unwrap());
        let small = plan(0.01, 7).unwrap();
        assert!((200..240).contains(&small.len()), "{}", small.len());
        assert!(plan(0.0, 1).is_err());
        assert!(plan(f64::NAN, 1).is_err());
    }

    #[test]
    fn generate_writes_files_and_a_readable_manifest() {
        let dir = std::env::temp_dir().join(format!("weft-fileset-test-{}", std::process::id()));
        let entries = generate(&dir, 0.005, 3).unwrap();
        for e in &entries {
            assert_eq!(fs::metadata(dir.join(&e.path)).unwrap().len(), e.size);
        }
        assert_eq!(read_manifest(&dir).unwrap(), {
            // The manifest rounds weights to 10 significant digits.
            let text = fs::read_to_string(dir.join(MANIFEST_NAME)).unwrap();
            assert!(text.starts_with("# weft fileset scale=0.005 seed=3"));
            read_manifest(&dir).unwrap()
        });
        assert_eq!(read_manifest(&dir).unwrap().len(), entries.len());
        let first = fs::read(dir.join(&entries[0].path)).unwrap();
        generate(&dir, 0.005, 3).unwrap();
        assert_eq!(fs::read(dir.join(&entries[0].path)).unwrap(), first);
        fs::remove_dir_all(&dir).unwrap();
        assert!(read_manifest(&dir)
            .unwrap_err()
            .to_string()
            .contains("weft fileset"));
    }
}
