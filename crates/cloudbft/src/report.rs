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
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// Room right of an x-y plot for its legend.
const LEGEND: f64 = 240.0;

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
            .max(1e-9);
        // Grid lines at round values, the top one above the highest point.
        let step = nice_step(y_max);
        let y_top = (y_max / step).ceil().max(1.0) * step;
        let y = |v: f64| bottom - v / y_top * (bottom - top);
        y_grid(&mut svg, y, y_top, step);
        let _ = writeln!(
            svg,
            "<rect x=\"{M}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" \
             stroke=\"#999\"/><text x=\"{M}\" y=\"{:.1}\">{}</text>",
            W - 2.0 * M,
            bottom - top,
            top - 4.0,
            panel.title,
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

/// One line of an x-y plot: a legend, its points, and whether it is a dashed reference line
/// (a bound, a guideline) rather than a measurement (drawn with markers).
pub struct Series<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// A round step of about `span / 5`: 1, 2 or 5 times a power of ten.
fn nice_step(span: f64) -> f64 {
    let raw = (span / 5.0).max(1e-9);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick label without needless decimals.
fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if (v * 10.0 - (v * 10.0).round()).abs() < 1e-9 {
        format!("{v:.1}")
    } else if (v * 100.0 - (v * 100.0).round()).abs() < 1e-9 {
        format!("{v:.2}")
    } else {
        // Small values (a decision log of some KiB on a MiB axis) must not read "0.00".
        format!("{v:.3}")
    }
}

/// Horizontal grid lines across the plot, labelled on the left, every `step` from 0 to `top`
/// (`y` maps a value to its height).
fn y_grid(svg: &mut String, y: impl Fn(f64) -> f64, top: f64, step: f64) {
    let mut v = 0.0;
    while v <= top + 1e-9 {
        let _ = writeln!(
            svg,
            "<line x1=\"{M}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
            y(v),
            W - M,
            M - 4.0,
            y(v) + 4.0,
            tick(v)
        );
        v += step;
    }
}

/// Axes from 0 to a round number above `max`, with grid lines, and room for a legend on the
/// right: returns the SVG so far and the axes' top values.
fn axes(title: &str, x_label: &str, y_label: &str, x_max: f64, y_max: f64) -> (String, f64, f64) {
    let (x_step, y_step) = (nice_step(x_max), nice_step(y_max));
    let x_top = (x_max / x_step).ceil().max(1.0) * x_step;
    let y_top = (y_max / y_step).ceil().max(1.0) * y_step;
    let width = W + LEGEND;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{M}\" y=\"20\">{}</text>\n",
        escape(title)
    );
    let x = |v: f64| M + v / x_top * (W - 2.0 * M);
    let y = |v: f64| H - M - v / y_top * (H - 2.0 * M);
    let mut v = 0.0;
    while v <= x_top + 1e-9 {
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{M}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{3}</text>",
            x(v),
            H - M,
            H - M + 16.0,
            tick(v)
        );
        v += x_step;
    }
    y_grid(&mut svg, y, y_top, y_step);
    let _ = writeln!(
        svg,
        "<rect x=\"{M}\" y=\"{M}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#999\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
        W - 2.0 * M,
        H - 2.0 * M,
        W / 2.0,
        H - 12.0,
        escape(x_label),
        H / 2.0,
        H / 2.0,
        escape(y_label)
    );
    (svg, x_top, y_top)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes an x-y plot with linear axes from 0: measured series as lines (with markers unless
/// they are dense), reference series dashed, the legend right of the plot.
pub fn write_xy(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_max = all().map(|p| p.0).fold(1e-9, f64::max);
    let y_max = all().map(|p| p.1).fold(1e-9, f64::max);
    let (mut svg, x_top, y_top) = axes(title, x_label, y_label, x_max, y_max);
    let x = |v: f64| M + v / x_top * (W - 2.0 * M);
    let y = |v: f64| H - M - v / y_top * (H - 2.0 * M);
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: String = s
            .points
            .iter()
            .map(|&(a, b)| format!("{:.1},{:.1} ", x(a), y(b)))
            .collect();
        let dash = if s.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash} points=\"{points}\"/>"
        );
        if !s.dashed && s.points.len() <= 40 {
            for &(a, b) in &s.points {
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                    x(a),
                    y(b)
                );
            }
        }
        let (lx, ly) = (W - M + 12.0, M + 18.0 * i as f64 + 6.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" \
             stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{}</text>",
            lx + 18.0,
            lx + 22.0,
            ly + 4.0,
            escape(s.label)
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

/// Writes horizontal bars, each made of named segments laid end to end (a segment's colour is
/// the same in every bar), with the segments' values written in them and a legend below.
pub fn write_stacked_bars(
    path: &Path,
    title: &str,
    unit: &str,
    bars: &[(&str, Vec<(&str, f64)>)],
) -> Result<()> {
    const BAR: f64 = 44.0;
    const LEFT: f64 = 130.0;
    let mut names: Vec<&str> = Vec::new();
    for (_, segments) in bars {
        for (name, _) in segments {
            if !names.contains(name) {
                names.push(name);
            }
        }
    }
    let total_max = bars
        .iter()
        .map(|(_, s)| s.iter().map(|(_, v)| v.max(0.0)).sum::<f64>())
        .fold(1e-9, f64::max);
    let step = nice_step(total_max);
    let top_value = (total_max / step).ceil().max(1.0) * step;
    let legend_rows = names.len().div_ceil(2);
    let height = M + BAR * 1.5 * bars.len() as f64 + 40.0 + 18.0 * legend_rows as f64;
    let x = |v: f64| LEFT + v / top_value * (W - LEFT - 20.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{M}\" y=\"20\">{}</text>\n",
        escape(title)
    );
    let axis_y = M + BAR * 1.5 * bars.len() as f64;
    let mut v = 0.0;
    while v <= top_value + 1e-9 {
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{M}\" x2=\"{0:.1}\" y2=\"{axis_y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{0:.1}\" y=\"{1:.1}\" text-anchor=\"middle\">{2} {unit}</text>",
            x(v),
            axis_y + 14.0,
            tick(v)
        );
        v += step;
    }
    for (i, (label, segments)) in bars.iter().enumerate() {
        let top = M + BAR * 1.5 * i as f64 + BAR * 0.25;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            top + BAR / 2.0 + 4.0,
            escape(label)
        );
        let mut at = 0.0;
        for (name, value) in segments {
            let value = value.max(0.0);
            let k = names.iter().position(|n| n == name).unwrap_or(0);
            let colour = COLOURS[k % COLOURS.len()];
            let (x0, x1) = (x(at), x(at + value));
            let _ = writeln!(
                svg,
                "<rect x=\"{x0:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{BAR}\" \
                 fill=\"{colour}\" stroke=\"white\"/>",
                (x1 - x0).max(0.0)
            );
            if x1 - x0 > 28.0 {
                let _ = writeln!(
                    svg,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"white\">{:.0}</text>",
                    (x0 + x1) / 2.0,
                    top + BAR / 2.0 + 4.0,
                    value
                );
            }
            at += value;
        }
    }
    for (k, name) in names.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let (col, row) = (k % 2, k / 2);
        let lx = M + 290.0 * col as f64;
        let ly = axis_y + 34.0 + 18.0 * row as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 10.0,
            lx + 16.0,
            escape(name)
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

/// Writes a histogram: `bins` of (from, to, count) as bars, and labelled vertical marker lines.
pub fn write_histogram(
    path: &Path,
    title: &str,
    x_label: &str,
    bins: &[(f64, f64, f64)],
    markers: &[(&str, f64)],
) -> Result<()> {
    let x_max = bins
        .iter()
        .map(|b| b.1)
        .chain(markers.iter().map(|m| m.1))
        .fold(1e-9, f64::max);
    let y_max = bins.iter().map(|b| b.2).fold(1e-9, f64::max);
    let (mut svg, x_top, y_top) = axes(title, x_label, "requests", x_max, y_max);
    let x = |v: f64| M + v / x_top * (W - 2.0 * M);
    let y = |v: f64| H - M - v / y_top * (H - 2.0 * M);
    for &(from, to, count) in bins {
        let _ = writeln!(
            svg,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" \
             stroke=\"white\" stroke-width=\"0.5\"/>",
            x(from),
            y(count),
            (x(to) - x(from)).max(0.5),
            y(0.0) - y(count),
            COLOURS[0]
        );
    }
    for (i, &(label, at)) in markers.iter().enumerate() {
        let colour = COLOURS[(i + 1) % COLOURS.len()];
        let (lx, ly) = (W - M + 12.0, M + 18.0 * i as f64 + 6.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{M}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"{colour}\" \
             stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\
             <line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{2:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" \
             stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\
             <text x=\"{3:.1}\" y=\"{4:.1}\" fill=\"{colour}\">{5}</text>",
            x(at),
            H - M,
            lx + 18.0,
            lx + 22.0,
            ly + 4.0,
            escape(label)
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(10.0), 2.0);
        assert_eq!(nice_step(1000.0), 200.0);
        assert_eq!(nice_step(1.0), 0.2);
        assert_eq!(nice_step(30.0), 10.0);
        assert_eq!(tick(0.2), "0.2");
        assert_eq!(tick(400.0), "400");
        assert_eq!(tick(0.05), "0.05");
        assert_eq!(tick(0.004), "0.004");
    }

    #[test]
    fn plots_are_svg_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let xy = dir.path().join("xy.svg");
        write_xy(
            &xy,
            "t <&>",
            "groups",
            "tx/min",
            &[
                Series {
                    label: "ours",
                    points: vec![(1.0, 290.0), (2.0, 580.0)],
                    dashed: false,
                },
                Series {
                    label: "bound",
                    points: vec![(1.0, 300.0), (2.0, 600.0)],
                    dashed: true,
                },
            ],
        )
        .unwrap();
        let text = std::fs::read_to_string(&xy).unwrap();
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert!(text.contains("t &lt;&amp;&gt;") && text.contains(">ours<"));
        assert_eq!(text.matches("<polyline").count(), 2);
        let bars = dir.path().join("bars.svg");
        write_stacked_bars(
            &bars,
            "stages",
            "ms",
            &[
                ("paper", vec![("page", 200.0), ("database", 71.0)]),
                ("ours", vec![("page", 201.0), ("other", 3.0)]),
            ],
        )
        .unwrap();
        let text = std::fs::read_to_string(&bars).unwrap();
        assert_eq!(text.matches("<rect x=").count(), 4 + 3, "{text}");
        let hist = dir.path().join("hist.svg");
        write_histogram(&hist, "h", "ms", &[(0.0, 10.0, 3.0)], &[("p95", 9.0)]).unwrap();
        assert!(std::fs::read_to_string(&hist).unwrap().contains("p95"));
    }
}
