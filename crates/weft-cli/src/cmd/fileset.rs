//! `weft fileset`: writes the thesis's static-web file set (deterministic) for `weft load
//! http` and `weft experiment static`.

use std::path::PathBuf;

use clap::Args;
use weft_load::fileset;

#[derive(Debug, Args)]
pub struct FilesetArgs {
    /// Directory to create the files in (created if missing; files already there with the
    /// right size are kept).
    #[arg(long)]
    out: PathBuf,
    /// Size factor: 1 = the thesis's 21,600 files in 650 directories (about 2.3 GB);
    /// 0.01 = 216 files (about 23 MB).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seed: the same scale and seed always give the same files.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Writes the set and prints how it compares with the thesis's table.
pub fn run(args: FilesetArgs) -> anyhow::Result<()> {
    let entries = fileset::generate(&args.out, args.scale, args.seed)?;
    let total: u64 = entries.iter().map(|e| e.size).sum();
    println!(
        "wrote {} files ({:.1} MB) and {} to {}",
        entries.len(),
        total as f64 / 1e6,
        fileset::MANIFEST_NAME,
        args.out.display()
    );
    println!("% of requests -> memory MB (thesis at scale 1), largest file B");
    for ((pct, mb, max), (_, thesis_mb, thesis_max)) in
        fileset::summary(&entries).into_iter().zip(fileset::BANDS)
    {
        println!(
            "{pct:5.0}% -> {mb:9.2} MB ({:9.2}), {max:7} B ({thesis_max})",
            thesis_mb * args.scale
        );
    }
    Ok(())
}
