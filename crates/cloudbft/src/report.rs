//! The benchmark's plot: the latency CDF as a self-contained SVG (no plotting dependency).

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use std::fmt::Write;
use std::path::Path;

const W: f64 = 640.0;
const H: f64 = 400.0;
const M: f64 = 50.0;

/// Writes the cumulative distribution of `histogram` (microseconds) with a logarithmic x axis.
pub fn write_cdf(path: &Path, histogram: &Histogram<u64>, title: &str) -> Result<()> {
    let lo = (histogram.min().max(1) as f64).log10().floor();
    let hi = (histogram.max().max(10) as f64)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let x = |us: f64| M + (us.max(1.0).log10() - lo) / (hi - lo) * (W - 2.0 * M);
    let y = |q: f64| H - M - q * (H - 2.0 * M);
    let mut points = String::new();
    for v in histogram.iter_recorded() {
        let q = v.quantile_iterated_to();
        let _ = write!(
            points,
            "{:.1},{:.1} ",
            x(v.value_iterated_to() as f64),
            y(q)
        );
    }
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{M}\" y=\"20\">{title}: latency CDF ({} operations)</text>\n",
        histogram.len()
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
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{points}\"/>\n</svg>"
    );
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}
