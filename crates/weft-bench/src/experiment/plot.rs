//! SVG plots in the thesis's style: one line per server (the median of the runs) inside a
//! shaded min–max band, the servers compared in the same panel, one panel per setting.
//!
//! A log-scale y axis (p99 latency) is drawn as log10(value) on a linear axis whose ticks are
//! chosen here ([`log_ticks`]: decades, or 1-2-5 steps over a short range) and labelled with
//! the real value and its unit ("100 µs", "1 ms", "2 s"), never with exponents.

use std::path::Path;

use anyhow::anyhow;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
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

/// What the y values are, which decides how ticks are labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count or a rate: "800", "25k", "1.5M" (the axis title names the unit).
    Count,
    /// A duration in microseconds: "100 µs", "1 ms", "2.5 s".
    Micros,
    /// A percentage: "0.5%", "20%".
    Percent,
}

impl Unit {
    /// `v` as a tick label.
    pub fn label(self, v: f64) -> String {
        match self {
            Unit::Count => human(v),
            Unit::Micros => micros(v),
            Unit::Percent => format!("{}%", short(v)),
        }
    }
}

/// Axis text and scale of a figure. The titles say what is measured and in which unit
/// ("throughput (req/s)"); a log-scale axis says "log scale", its ticks carry the unit.
#[derive(Debug, Clone)]
pub struct Axes<'a> {
    pub x: &'a str,
    pub y: &'a str,
    pub y_unit: Unit,
    pub log_y: bool,
}

const PANEL_WIDTH: u32 = 640;
const PANEL_HEIGHT: u32 = 420;

/// Draws `panels` (two columns when more than one) into the SVG file `path`.
pub fn draw(path: &Path, title: &str, axes: &Axes<'_>, panels: &[Panel]) -> anyhow::Result<()> {
    let cols = if panels.len() > 1 { 2 } else { 1 };
    draw_grid(path, title, cols, panels.iter().map(|p| (p, axes)))
}

/// Like [`draw`], but each panel has its own axes (a figure of different measures side by
/// side, such as throughput, p99 and memory).
pub fn draw_each(path: &Path, title: &str, panels: &[(Panel, Axes<'_>)]) -> anyhow::Result<()> {
    let cols = if panels.len() % 3 == 0 {
        3
    } else if panels.len() > 1 {
        2
    } else {
        1
    };
    draw_grid(path, title, cols, panels.iter().map(|(p, a)| (p, a)))
}

/// Draws panels with their axes, `cols` to a row, under `title`.
fn draw_grid<'p, 'a: 'p>(
    path: &Path,
    title: &str,
    cols: usize,
    panels: impl ExactSizeIterator<Item = (&'p Panel, &'p Axes<'a>)>,
) -> anyhow::Result<()> {
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
    let all = || panel.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for &(x, ..) in all() {
        x0 = x0.min(x);
        x1 = x1.max(x);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    let values = || all().flat_map(|&(_, med, lo, hi)| [med, lo, hi]);
    let y = YAxis::new(axes, values());
    let xpad = ((x1 - x0) * 0.05).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0 - xpad)..(x1 + xpad),
            Ticked {
                inner: y.range.clone().into(),
                ticks: y.ticks.clone(),
            },
        )
        .map_err(|e| anyhow!("{e}"))?;
    let y_fmt = |v: &f64| y.label(*v);
    let x_fmt = |v: &f64| human(*v);
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_max_light_lines(4)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, series) in panel.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut band: Vec<(f64, f64)> = series.points.iter().map(|p| (p.0, y.at(p.3))).collect();
        band.extend(series.points.iter().rev().map(|p| (p.0, y.at(p.2))));
        if band.len() >= 3 {
            chart
                .draw_series(std::iter::once(Polygon::new(
                    band,
                    color.mix(0.18).filled(),
                )))
                .map_err(|e| anyhow!("{e}"))?;
        }
        let line: Vec<(f64, f64)> = series.points.iter().map(|p| (p.0, y.at(p.1))).collect();
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

/// A linear coordinate whose tick marks are exactly `ticks` (plotters' own `with_key_points`
/// loses the label formatter of an `f64` range).
struct Ticked {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// A panel's y axis: its range and ticks in plotted coordinates (log10 of the value on a log
/// axis), and how a plotted coordinate reads back as a labelled value.
struct YAxis {
    log: bool,
    unit: Unit,
    range: std::ops::Range<f64>,
    ticks: Vec<f64>,
}

impl YAxis {
    fn new(axes: &Axes<'_>, values: impl Iterator<Item = f64>) -> YAxis {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for v in values.filter(|v| v.is_finite() && (!axes.log_y || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if axes.log_y {
            let ticks = if lo > hi {
                vec![1.0, 10.0]
            } else {
                log_ticks(lo, hi)
            };
            let ticks: Vec<f64> = ticks.iter().map(|t| t.log10()).collect();
            return YAxis {
                log: true,
                unit: axes.y_unit,
                range: ticks[0]..ticks[ticks.len() - 1],
                ticks,
            };
        }
        // Linear axes start at zero.
        let top = if lo > hi { 1.0 } else { hi.max(0.0) };
        let top = top + (top * 0.08).max(if top < 10.0 { 0.1 } else { 1.0 });
        let range = 0.0..top;
        let ticks = RangedCoordf64::from(range.clone()).key_points(8usize);
        YAxis {
            log: false,
            unit: axes.y_unit,
            range,
            ticks,
        }
    }

    /// Where `v` is drawn (a log axis puts what is not positive on its floor).
    fn at(&self, v: f64) -> f64 {
        if self.log {
            if v > 0.0 {
                v.log10()
            } else {
                self.range.start
            }
        } else {
            v
        }
    }

    /// The label of the tick at plotted coordinate `y`.
    fn label(&self, y: f64) -> String {
        let v = if self.log {
            significant(10f64.powf(y), 6)
        } else {
            y
        };
        self.unit.label(v)
    }
}

/// The ticks of a log axis over `lo..=hi` (both > 0), the first at or below `lo` and the last
/// at or above `hi` (with 10 % to spare), so the axis runs from tick to tick: decades
/// (1, 10, 100…) when the data spans more than three of them, else 1-2-5 steps (100, 200,
/// 500, 1000…).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = (lo.min(hi) / 1.1, hi.max(lo) * 1.1);
    let steps: &[f64] = if hi / lo > 1.1 * 1.1 * 1e3 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let all: Vec<f64> = (first..=last)
        .flat_map(|d| steps.iter().map(move |s| significant(s * 10f64.powi(d), 6)))
        .collect();
    let start = all.iter().rposition(|&t| t <= lo).unwrap_or(0);
    let end = all.iter().position(|&t| t >= hi).unwrap_or(all.len() - 1);
    all[start..=end].to_vec()
}

/// `v` rounded to `digits` significant digits (10^log10(1000) is 999.9999999999998).
fn significant(v: f64, digits: i32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(digits - v.abs().log10().ceil() as i32);
    (v * scale).round() / scale
}

/// A duration in microseconds in the unit that reads best: "80 µs", "1 ms", "2.5 s".
pub fn micros(v: f64) -> String {
    let v = significant(v, 6);
    if v.abs() >= 1e6 {
        format!("{} s", short(v / 1e6))
    } else if v.abs() >= 1e3 {
        format!("{} ms", short(v / 1e3))
    } else {
        format!("{} µs", short(v))
    }
}

/// At most three significant digits, without trailing zeros: 2.0 → "2", 0.25 → "0.25".
fn short(v: f64) -> String {
    let a = v.abs();
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// 1234567 → "1.23M", 25000 → "25k", 1500 → "1.5k", 0.5 → "0.5".
pub fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", short(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", short(v / 1e3))
    } else {
        short(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, k: f64) -> Series {
        Series {
            name: name.into(),
            points: (1..=5)
                .map(|i| {
                    let x = i as f64 * 10_000.0;
                    (x, x * k, x * k * 0.9, x * k * 1.1)
                })
                .collect(),
        }
    }

    /// The text of every `<text>` element of an SVG.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                Some(
                    t.split_once('>')?
                        .1
                        .split_once("</text>")?
                        .0
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn draws_an_svg_with_lines_bands_and_legend() {
        let path = std::env::temp_dir().join(format!("weft-plot-{}.svg", std::process::id()));
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
            x: "offered load (req/s)",
            y: "throughput (req/s)",
            y_unit: Unit::Count,
            log_y: false,
        };
        draw(&path, "test", &axes, &panels).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("memcached") && svg.contains("50% updates"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
        // One band (a filled polygon) per series.
        assert_eq!(svg.matches("<polygon").count(), 3, "{svg}");
        let texts = texts(&svg);
        assert!(texts.iter().any(|t| t == "20k"), "{texts:?}");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(human(25_000.0), "25k");
        assert_eq!(human(1_500_000.0), "1.5M");
        assert_eq!(human(12_500.0), "12.5k");
        assert_eq!(human(0.5), "0.5");
    }

    #[test]
    fn log_ticks_are_decades_or_1_2_5_steps_ending_on_ticks() {
        assert_eq!(
            log_ticks(80.0, 25_000.0),
            [50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4]
        );
        assert_eq!(
            log_ticks(100.0, 2_000_000.0),
            [10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7]
        );
        // A narrow range still gets two labelled ticks, the data between them.
        assert_eq!(log_ticks(120.0, 130.0), [100.0, 200.0]);
        assert_eq!(log_ticks(1000.0, 1000.0), [500.0, 1000.0, 2000.0]);
    }

    #[test]
    fn tick_labels_are_values_with_units() {
        assert_eq!(micros(80.0), "80 µs");
        assert_eq!(micros(1_000.0), "1 ms");
        assert_eq!(micros(10f64.powf(1e4f64.log10())), "10 ms");
        assert_eq!(micros(250_000.0), "250 ms");
        assert_eq!(micros(2_500_000.0), "2.5 s");
        assert_eq!(Unit::Percent.label(0.5), "0.5%");
        assert_eq!(Unit::Count.label(20_000.0), "20k");
    }

    #[test]
    fn a_log_axis_is_labelled_in_real_values_with_units() {
        let path = std::env::temp_dir().join(format!("weft-plot-log-{}.svg", std::process::id()));
        let p99 = |name: &str, us: f64| Series {
            name: name.into(),
            points: vec![
                (20_000.0, us, us * 0.8, us * 1.3),
                (60_000.0, us * 10.0, us * 8.0, us * 13.0),
                (100_000.0, us * 1_000.0, us * 800.0, us * 1_300.0),
            ],
        };
        let panels = [Panel {
            title: "3% updates".into(),
            series: vec![p99("weft", 100.0), p99("memcached", 150.0)],
        }];
        let axes = Axes {
            x: "offered load (req/s)",
            y: "p99 latency (log scale)",
            y_unit: Unit::Micros,
            log_y: true,
        };
        draw(&path, "p99", &axes, &panels).unwrap();
        let texts = texts(&std::fs::read_to_string(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        for tick in ["100 µs", "1 ms", "10 ms", "100 ms"] {
            assert!(texts.iter().any(|t| t == tick), "no tick {tick}: {texts:?}");
        }
        // No exponents or log10 numbers: every y tick is a value with a unit.
        assert!(
            !texts
                .iter()
                .any(|t| t.contains("10^") || t.contains("log10") || t == "2" || t == "3"),
            "{texts:?}"
        );
    }
}
