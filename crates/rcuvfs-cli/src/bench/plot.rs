//! SVG plots of ops/s against threads, one line per mode.
//!
//! Written directly as SVG rather than with plotters: plotters measures text
//! with a font it must load (a TTF file at run time, or fontconfig and
//! freetype at build time), which a fresh machine may not have; SVG `<text>`
//! is laid out by whatever renders the file.

use std::fmt::Write as _;
use std::path::Path;

use super::Row;

const W: f64 = 820.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] =
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

pub fn write(path: &Path, workload: &str, rows: &[Row]) -> std::io::Result<()> {
    std::fs::write(path, svg(workload, rows))
}

/// The plot of one workload: ops/s against threads, one line per mode, a
/// distinct marker for each; the y axis logarithmic where the values span
/// more than a decade (a peer 50x slower would otherwise lie flat on the
/// axis); the modes a seed compares drawn heavier, and named in the
/// legend.
pub fn svg(workload: &str, rows: &[Row]) -> String {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.workload == workload && r.ops_per_sec > 0.0).collect();
    let mut modes: Vec<&str> = Vec::new();
    for r in &rows {
        if !modes.contains(&r.mode.as_str()) {
            modes.push(&r.mode);
        }
    }
    let max_t = rows.iter().map(|r| r.threads).max().unwrap_or(1).max(2) as f64;
    let hi = rows.iter().map(|r| r.ops_per_sec).fold(0.0, f64::max).max(1.0);
    let lo = rows.iter().map(|r| r.ops_per_sec).fold(f64::MAX, f64::min).min(hi);
    let log = hi / lo > 10.0;
    let x = |t: f64| LEFT + (t - 1.0) / (max_t - 1.0) * (W - LEFT - RIGHT);
    let (y0, y1) = if log { (lo.log10().floor(), hi.log10().ceil()) } else { (0.0, hi * 1.1) };
    let y = |v: f64| {
        let f = if log { (v.max(1.0).log10() - y0) / (y1 - y0) } else { v / y1 };
        H - BOTTOM - f * (H - TOP - BOTTOM)
    };
    let mut s = String::new();
    let scale = if log { ", log scale" } else { "" };
    frame(&mut s, &format!("{workload}: ops/s by threads{scale}"));
    let ticks: Vec<f64> = if log {
        (y0 as i32..=y1 as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=5).map(|i| y1 * i as f64 / 5.0).collect()
    };
    for v in ticks {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><line x1="{LEFT}" y1="{gy}" x2="{}" y2="{gy}" stroke="#ddd"/>"##,
            LEFT - 6.0,
            y(v) + 4.0,
            human(v),
            W - RIGHT,
            gy = y(v)
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
    let seeded = super::seeds::compared(workload);
    for (i, m) in modes.iter().enumerate() {
        let mut pts: Vec<(usize, f64)> =
            rows.iter().filter(|r| r.mode == *m).map(|r| (r.threads, r.ops_per_sec)).collect();
        pts.sort_by_key(|p| p.0);
        let px: Vec<(f64, f64)> = pts.iter().map(|&(t, v)| (x(t as f64), y(v))).collect();
        let style =
            Style { dashed: super::subject::PEERS.contains(m), heavy: seeded.iter().any(|(_, b, a)| b == m || a == m) };
        let label = match seeded.iter().find(|(_, b, a)| b == m || a == m) {
            Some((id, b, _)) if b == m => format!("{m} (seed {id}: before)"),
            Some((id, ..)) => format!("{m} (seed {id}: after)"),
            None => m.to_string(),
        };
        series(&mut s, i, &label, &px, style);
    }
    s.push_str("</svg>\n");
    s
}

/// 1.2k, 3.4M, 5G: an axis label.
fn human(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.1}G", v / 1e9),
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// How a series is drawn.
#[derive(Clone, Copy, Default)]
struct Style {
    /// A peer or the host (not a mode of rcuvfs).
    dashed: bool,
    /// A mode a seed compares.
    heavy: bool,
}

/// The `files` sweep: ns per file against N, both axes logarithmic, one
/// line per mode and phase.
pub fn write_files(path: &Path, rows: &[super::files::FilesRow]) -> std::io::Result<()> {
    std::fs::write(path, files_svg(rows))
}

/// The `files` plot as SVG text.
pub fn files_svg(rows: &[super::files::FilesRow]) -> String {
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut modes: Vec<&str> = Vec::new();
    for r in rows {
        if !modes.contains(&r.mode.as_str()) {
            modes.push(&r.mode);
        }
    }
    type Phase = (&'static str, fn(&super::files::FilesRow) -> f64);
    let phases: [Phase; 3] = [("create", |r| r.create_ns), ("stat", |r| r.stat_ns), ("unlink", |r| r.unlink_ns)];
    for m in &modes {
        for (name, f) in phases {
            let pts = rows.iter().filter(|r| r.mode == *m).map(|r| (r.files as f64, f(r).max(1.0))).collect();
            lines.push((format!("{m} {name}"), pts));
        }
    }
    let all = lines.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x.log10());
        x1 = x1.max(x.log10());
        y0 = y0.min(y.log10());
        y1 = y1.max(y.log10());
    }
    if x0 > x1 {
        return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n".to_string();
    }
    let (x0, x1) = (x0.floor(), x1.ceil().max(x0.floor() + 1.0));
    let (y0, y1) = (y0.floor(), y1.ceil().max(y0.floor() + 1.0));
    let x = |v: f64| LEFT + (v.log10() - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - (v.log10() - y0) / (y1 - y0) * (H - TOP - BOTTOM);
    let mut s = String::new();
    frame(&mut s, "files: ns per file by number of files (log-log)");
    for e in y0 as i32..=y1 as i32 {
        let v = 10f64.powi(e);
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{v}</text><line x1="{LEFT}" y1="{gy}" x2="{}" y2="{gy}" stroke="#ddd"/>"##,
            LEFT - 6.0,
            y(v) + 4.0,
            W - RIGHT,
            gy = y(v)
        );
    }
    for e in x0 as i32..=x1 as i32 {
        let v = 10f64.powi(e);
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{v}</text>"#, x(v), H - BOTTOM + 18.0);
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">files</text>"#, (W - RIGHT + LEFT) / 2.0, H - 10.0);
    for (i, (name, pts)) in lines.iter().enumerate() {
        let px: Vec<(f64, f64)> = pts.iter().map(|&(a, b)| (x(a), y(b))).collect();
        series(&mut s, i, name, &px, Style { dashed: name.starts_with("host"), heavy: false });
    }
    s.push_str("</svg>\n");
    s
}

/// Opens the SVG: background, title and axes.
fn frame(s: &mut String, title: &str) {
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" font-size="16" text-anchor="middle">{title}</text>
<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>
"#,
        (W - RIGHT + LEFT) / 2.0,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM,
        H - BOTTOM
    );
}

/// Draws series number `i` (points already in pixels) and its legend
/// entry: its colour and its marker (circle, square, triangle, diamond,
/// cross, in turn) tell it apart even in grey.
fn series(s: &mut String, i: usize, name: &str, pts: &[(f64, f64)], style: Style) {
    let color = COLORS[i % COLORS.len()];
    let dash = if style.dashed { r#" stroke-dasharray="5,3""# } else { "" };
    let width = if style.heavy { 4 } else { 2 };
    let line: Vec<String> = pts.iter().map(|&(a, b)| format!("{a:.1},{b:.1}")).collect();
    let _ = writeln!(
        s,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="{width}"{dash}/>"#,
        line.join(" ")
    );
    for &(a, b) in pts {
        marker(s, i, a, b, color);
    }
    let ly = TOP + 16.0 * i as f64;
    let _ = writeln!(
        s,
        r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="{width}"{dash}/><text x="{}" y="{}">{name}</text>"#,
        W - RIGHT + 8.0,
        W - RIGHT + 32.0,
        W - RIGHT + 38.0,
        ly + 4.0
    );
    marker(s, i, W - RIGHT + 20.0, ly, color);
}

/// Marker number `i` at (x, y).
fn marker(s: &mut String, i: usize, x: f64, y: f64, color: &str) {
    let _ = match i % 5 {
        0 => writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{color}"/>"#),
        1 => writeln!(s, r#"<rect x="{:.1}" y="{:.1}" width="8" height="8" fill="{color}"/>"#, x - 4.0, y - 4.0),
        2 => writeln!(
            s,
            r#"<polygon points="{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}"/>"#,
            y - 5.0,
            x - 5.0,
            y + 4.0,
            x + 5.0,
            y + 4.0
        ),
        3 => writeln!(
            s,
            r#"<polygon points="{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}" fill="{color}"/>"#,
            y - 5.0,
            x + 5.0,
            y + 5.0,
            x - 5.0
        ),
        _ => writeln!(
            s,
            r#"<path d="M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}" stroke="{color}" stroke-width="2"/>"#,
            x - 4.0,
            y - 4.0,
            x + 4.0,
            y + 4.0,
            x - 4.0,
            y + 4.0,
            x + 4.0,
            y - 4.0
        ),
    };
}
