//! SVG plots of ops/s against threads, one line per mode.
//!
//! Written directly as SVG rather than with plotters: plotters measures text
//! with a font it must load (a TTF file at run time, or fontconfig and
//! freetype at build time), which a fresh machine may not have; SVG `<text>`
//! is laid out by whatever renders the file.

use std::fmt::Write as _;
use std::path::Path;

use super::Row;

const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] =
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

pub fn write(path: &Path, workload: &str, rows: &[Row]) -> std::io::Result<()> {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.workload == workload).collect();
    let mut modes: Vec<&str> = Vec::new();
    for r in &rows {
        if !modes.contains(&r.mode.as_str()) {
            modes.push(&r.mode);
        }
    }
    let max_t = rows.iter().map(|r| r.threads).max().unwrap_or(1).max(2) as f64;
    let max_y = rows.iter().map(|r| r.ops_per_sec).fold(0.0, f64::max).max(1.0) * 1.1;
    let x = |t: f64| LEFT + (t - 1.0) / (max_t - 1.0) * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / max_y * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" font-size="16" text-anchor="middle">{workload}: ops/s by threads</text>
<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>
"#,
        (W - RIGHT + LEFT) / 2.0,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM,
        H - BOTTOM
    );
    for i in 0..=5 {
        let v = max_y * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{:.1}M</text><line x1="{LEFT}" y1="{1}" x2="{}" y2="{1}" stroke="#ddd"/>"##,
            LEFT - 6.0,
            y(v) + 4.0,
            v / 1e6,
            W - RIGHT
        );
    }
    let mut ts: Vec<usize> = rows.iter().map(|r| r.threads).collect();
    ts.sort_unstable();
    ts.dedup();
    for t in ts {
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{t}</text>"#, x(t as f64), H - BOTTOM + 18.0);
    }
    let _ =
        writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">threads</text>"#, (W - RIGHT + LEFT) / 2.0, H - 10.0);
    for (i, m) in modes.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(usize, f64)> =
            rows.iter().filter(|r| r.mode == *m).map(|r| (r.threads, r.ops_per_sec)).collect();
        pts.sort_by_key(|p| p.0);
        let line: Vec<String> = pts.iter().map(|&(t, v)| format!("{:.1},{:.1}", x(t as f64), y(v))).collect();
        let _ = writeln!(s, r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#, line.join(" "));
        for &(t, v) in &pts {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, x(t as f64), y(v));
        }
        let ly = TOP + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{m}</text>"#,
            W - RIGHT + 15.0,
            W - RIGHT + 35.0,
            W - RIGHT + 40.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    std::fs::write(path, s)
}
