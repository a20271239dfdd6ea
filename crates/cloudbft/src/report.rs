//! What the benchmarks write: results as JSON, and plots as self-contained SVG (no plotting
//! dependency): latency CDFs, and time series in stacked panels.

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use std::fmt::Write;
use std::path::Path;

const W: f64 = 640.0;
const H: f64 = 400.0;
const M: f64 = 50.0;

/// Line colours of the series, in order.
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// Writes a run's `report` as JSON to `path` and says so.
pub fn write_json(path: &Path, report: &impl serde::Serialize) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Writes the cumulative distributions of `series` (label, latencies in microseconds) with a
/// logarithmic x axis, one line each.
pub fn write_cdf(path: &Path, series: &[(&str, &Histogram<u64>)], title: &str) -> Result<()> {
    let recorded = series.iter().filter(|(_, h)| !h.is_empty());
    let min = recorded.clone().map(|(_, h)| h.min()).min().unwrap_or(1);
    let max = recorded.map(|(_, h)| h.max()).max().unwrap_or(10);
    let lo = (min.max(1) as f64).log10().floor();
    let hi = (max.max(10) as f64).log10().ceil().max(lo + 1.0);
    let x = |us: f64| M + (us.max(1.0).log10() - lo) / (hi - lo) * (W - 2.0 * M);
    let y = |q: f64| H - M - q * (H - 2.0 * M);
    let total: u64 = series.iter().map(|(_, h)| h.len()).sum();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{M}\" y=\"20\">{title}: latency CDF ({total} operations)</text>\n"
    );
    for decade in (lo as i32)..=(hi as i32) {
        let px = x(10f64.powi(decade));
        let label = match decade {
            d if d < 3 => format!("{} µs", 10u64.pow(d as u32)),
            d if d < 6 => format!("{} ms", 10u64.pow(d as u32 - 3)),
            d => format!("{} s", 10u64.pow(d as u32 - 6)),
        };
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" y1=\"{M}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            H - M,
            H - M + 18.0
        );
    }
    for q in [0.0, 0.5, 0.95, 0.99, 1.0] {
        let py = y(q);
        let _ = writeln!(
            svg,
            "<line x1=\"{M}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{q}</text>",
            W - M,
            M - 6.0,
            py + 4.0,
        );
    }
    for (i, (label, histogram)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points = String::new();
        for v in histogram.iter_recorded() {
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                x(v.value_iterated_to() as f64),
                y(v.quantile_iterated_to())
            );
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{points}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{label}</text>",
            M + 8.0,
            M + 16.0 * (i as f64 + 1.0)
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

/// One panel of a time-series plot: a label, its unit, and one or more (legend, points) lines
/// over seconds.
pub struct Panel<'a> {
    pub title: &'a str,
    pub lines: Vec<(&'a str, Vec<(f64, f64)>)>,
}

/// Writes panels stacked over a shared time axis (seconds), each with its own y scale from 0,
/// as a self-contained SVG.
pub fn write_timeline(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    const PANEL: f64 = 170.0;
    let height = M + PANEL * panels.len() as f64 + 30.0;
    let t_max = panels
        .iter()
        .flat_map(|p| {
            p.lines
                .iter()
                .flat_map(|(_, pts)| pts.iter().map(|&(t, _)| t))
        })
        .fold(1.0f64, f64::max);
    let x = |t: f64| M + t / t_max * (W - 2.0 * M);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{M}\" y=\"20\">{title}</text>\n"
    );
    for (i, panel) in panels.iter().enumerate() {
        let top = M + PANEL * i as f64;
        let bottom = top + PANEL - 30.0;
        let y_max = panel
            .lines
            .iter()
            .flat_map(|(_, pts)| pts.iter().map(|&(_, v)| v))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let y = |v: f64| bottom - v / y_max * (bottom - top);
        let _ = writeln!(
            svg,
            "<rect x=\"{M}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" \
             stroke=\"#999\"/><text x=\"{M}\" y=\"{:.1}\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>\
             <text x=\"{:.1}\" y=\"{bottom:.1}\" text-anchor=\"end\">0</text>",
            W - 2.0 * M,
            bottom - top,
            top - 4.0,
            panel.title,
            M - 4.0,
            top + 10.0,
            y_max / 1.1,
            M - 4.0,
        );
        for (j, (legend, points)) in panel.lines.iter().enumerate() {
            let colour = COLOURS[j % COLOURS.len()];
            let pts: String = points
                .iter()
                .map(|&(t, v)| format!("{:.1},{:.1} ", x(t), y(v)))
                .collect();
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{pts}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{colour}\">{legend}</text>",
                W - M - 4.0,
                top + 14.0 * (j as f64 + 1.0),
            );
        }
    }
    let axis = M + PANEL * panels.len() as f64 - 12.0;
    for k in 0..=5 {
        let t = t_max * f64::from(k) / 5.0;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{axis:.1}\" text-anchor=\"middle\">{t:.0} s</text>",
            x(t)
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}
