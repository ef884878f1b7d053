//! SVG plots in the thesis's style: one line per server (the median of the runs) inside a
//! shaded min–max band, one panel per setting, optional log-scale y axis.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// One server's curve: (x, median, min, max) points in x order.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// One panel of a figure.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// Axis text and scale of a figure.
#[derive(Debug, Clone)]
pub struct Axes<'a> {
    pub x: &'a str,
    pub y: &'a str,
    pub log_y: bool,
}

const PANEL_WIDTH: u32 = 640;
const PANEL_HEIGHT: u32 = 420;

/// Draws `panels` (two columns when more than one) into the SVG file `path`.
pub fn draw(path: &Path, title: &str, axes: &Axes<'_>, panels: &[Panel]) -> anyhow::Result<()> {
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols).max(1);
    let size = (PANEL_WIDTH * cols as u32, PANEL_HEIGHT * rows as u32 + 40);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| anyhow!("{e}"))?;
    let areas = root.split_evenly((rows, cols));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel, axes)?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Like [`draw`], but each panel has its own axes (a figure of different measures side by
/// side, such as throughput, p99 and memory).
pub fn draw_each(path: &Path, title: &str, panels: &[(Panel, Axes<'_>)]) -> anyhow::Result<()> {
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let cols = if panels.len() % 3 == 0 { 3 } else { cols };
    let rows = panels.len().div_ceil(cols).max(1);
    let size = (PANEL_WIDTH * cols as u32, PANEL_HEIGHT * rows as u32 + 40);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| anyhow!("{e}"))?;
    let areas = root.split_evenly((rows, cols));
    for (area, (panel, axes)) in areas.iter().zip(panels) {
        draw_panel(area, panel, axes)?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    panel: &Panel,
    axes: &Axes<'_>,
) -> anyhow::Result<()> {
    // Log scale: plot log10(y) on a linear axis and label ticks with 10^v.
    let ty = |v: f64| {
        if axes.log_y {
            v.max(1e-3).log10()
        } else {
            v
        }
    };
    let all = panel.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, med, lo, hi) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(ty(lo.min(med)));
        y1 = y1.max(ty(hi.max(med)));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let xpad = ((x1 - x0) * 0.05).max(1.0);
    let ypad = ((y1 - y0) * 0.08).max(if axes.log_y { 0.1 } else { 1.0 });
    let y_min = if axes.log_y { y0 - ypad } else { 0.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - xpad)..(x1 + xpad), y_min..(y1 + ypad))
        .map_err(|e| anyhow!("{e}"))?;
    let log_y = axes.log_y;
    let y_fmt = move |v: &f64| {
        let v = if log_y { 10f64.powf(*v) } else { *v };
        human(v)
    };
    let x_fmt = |v: &f64| human(*v);
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, series) in panel.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut band: Vec<(f64, f64)> = series.points.iter().map(|p| (p.0, ty(p.3))).collect();
        band.extend(series.points.iter().rev().map(|p| (p.0, ty(p.2))));
        if band.len() >= 3 {
            chart
                .draw_series(std::iter::once(Polygon::new(
                    band,
                    color.mix(0.18).filled(),
                )))
                .map_err(|e| anyhow!("{e}"))?;
        }
        let line: Vec<(f64, f64)> = series.points.iter().map(|p| (p.0, ty(p.1))).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(&series.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(line.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// 1234567 → "1.2M", 25000 → "25k", 0.5 → "0.5".
pub fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_lines_bands_and_legend() {
        let path = std::env::temp_dir().join(format!("weft-plot-{}.svg", std::process::id()));
        let series = |name: &str, k: f64| Series {
            name: name.into(),
            points: (1..=5)
                .map(|i| {
                    let x = i as f64 * 10_000.0;
                    (x, x * k, x * k * 0.9, x * k * 1.1)
                })
                .collect(),
        };
        let panels = vec![
            Panel {
                title: "3% updates".into(),
                series: vec![series("weft", 1.0), series("memcached", 0.8)],
            },
            Panel {
                title: "50% updates".into(),
                series: vec![series("weft", 0.7)],
            },
        ];
        let axes = Axes {
            x: "target QPS",
            y: "p99 latency (us)",
            log_y: true,
        };
        draw(&path, "test", &axes, &panels).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("memcached") && svg.contains("50% updates"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(human(25_000.0), "25k");
        assert_eq!(human(1_500_000.0), "1.5M");
    }
}
