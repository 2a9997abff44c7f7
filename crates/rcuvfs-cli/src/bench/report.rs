//! `rcuvfs bench --report FILE.html`: one self-contained page (no script,
//! no outside file) with the machine, the seeds' table, and for each
//! workload what one operation is, its table and its plot (inline SVG).

use std::fmt::Write as _;
use std::path::Path;

use super::{plot, seeds, Report};

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A workload shown on the page: its name, seed and operation.
pub struct Section<'a> {
    pub name: &'a str,
    pub seed: &'a str,
    pub op: &'a str,
}

pub fn write(path: &Path, report: &Report, sections: &[Section]) -> std::io::Result<()> {
    let mut h = String::new();
    let m = &report.machine;
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rcuvfs bench</title>
<style>
body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; }}
td.l, th.l {{ text-align: left; }}
tr.seed td {{ font-weight: bold; }}
.yes {{ color: #1a7f37; }} .no {{ color: #b35900; }}
.why {{ color: #666; font-size: 90%; }}
</style></head><body>
<h1>rcuvfs bench</h1>
<p>{} cores, kernel {}, {}. Each cell is the median of its runs; ratios are taken within this run.</p>
<h2>The seeds</h2>
<table><tr><th class="l">seed</th><th class="l">technique</th><th class="l">the seed's figure</th><th class="l">measured here</th><th class="l">shows?</th></tr>
"#,
        m.cpus,
        esc(&m.kernel),
        esc(&m.date)
    );
    for r in &report.seeds {
        let shows = match r.shows {
            Some(true) => r#"<span class="yes">yes</span>"#.to_string(),
            Some(false) => {
                format!(r#"<span class="no">no</span><div class="why">{}</div>"#, esc(r.why_not.unwrap_or("")))
            }
            None => "-".to_string(),
        };
        let _ = writeln!(
            h,
            r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{shows}</td></tr>"#,
            r.seed,
            esc(r.technique),
            esc(r.headline),
            esc(&seeds::measured(r)),
        );
    }
    h.push_str("</table>\n");
    for s in sections {
        let rows: Vec<_> = report.results.iter().filter(|r| r.workload == s.name).collect();
        if rows.is_empty() {
            continue;
        }
        let seed = if s.seed == "-" { String::new() } else { format!(" (seed {})", s.seed) };
        let _ = writeln!(h, "<h2>{}{seed}</h2>\n<p>{}</p>", esc(s.name), esc(s.op));
        let compared = seeds::compared(s.name);
        h.push_str("<table><tr><th class=\"l\">mode</th><th>threads</th><th>ops/s</th><th>ns/op</th><th>speedup vs 1 thread</th></tr>\n");
        for r in &rows {
            let base = rows.iter().find(|x| x.mode == r.mode).map_or(r.ops_per_sec, |x| x.ops_per_sec);
            let class =
                if compared.iter().any(|(_, b, a)| *b == r.mode || *a == r.mode) { " class=\"seed\"" } else { "" };
            let _ = writeln!(
                h,
                r#"<tr{class}><td class="l">{}</td><td>{}</td><td>{:.0}</td><td>{:.1}</td><td>{:.2}x</td></tr>"#,
                esc(&r.mode),
                r.threads,
                r.ops_per_sec,
                r.ns_per_op,
                r.ops_per_sec / base
            );
        }
        h.push_str("</table>\n");
        h.push_str(&plot::svg(s.name, &report.results));
    }
    if !report.files.is_empty() {
        h.push_str("<h2>files</h2>\n<p>Create, stat and unlink of N empty files in 1,000 directories: ns per file against N.</p>\n");
        h.push_str(&plot::files_svg(&report.files));
        if let Some(m) = &report.files_memory {
            h.push_str(&format!(
                "<p>On this machine a load that depends on the one before costs {:.0} ns from memory and {:.0} ns \
                 within 4 MB: a cold stat at a million files makes at least one load from memory.</p>\n",
                m.memory_ns, m.cached_ns
            ));
        }
    }
    if !report.churn.is_empty() {
        h.push_str(
            "<h2>churn</h2>\n<p>One directory keeps N names; a step removes the oldest, creates one, stats a live \
             and a removed name. ns per operation in the run's fifth tenth (half-way) and in its last.</p>\n",
        );
        h.push_str(
            "<table><tr><th class=\"l\">mode</th><th>names</th><th>steps</th><th>unlink</th><th>create</th>\
             <th>stat</th><th>miss</th><th>last/mid</th><th>B/name</th></tr>\n",
        );
        for r in &report.churn {
            h.push_str("<tr>");
            for (k, c) in r.cells().iter().enumerate() {
                let class = if k == 0 { " class=\"l\"" } else { "" };
                let _ = write!(h, "<td{class}>{}</td>", esc(c));
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    h.push_str("</body></html>\n");
    std::fs::write(path, h)
}

#[cfg(test)]
mod tests {
    use super::super::{Machine, Row};
    use super::*;

    #[test]
    fn the_page_stands_alone_with_every_table_and_plot() {
        let results = vec![
            Row::for_test("stat-same", "rcuwalk+packed", 1, 1e7),
            Row::for_test("stat-same", "rcuwalk+packed", 2, 1.5e7),
            Row::for_test("stat-same", "rcuwalk", 1, 1e7),
            Row::for_test("stat-same", "rcuwalk", 2, 2e7),
            Row::for_test("stat-same", "host", 1, 4e5),
            Row::for_test("stat-same", "host", 2, 8e5),
        ];
        let report = Report {
            machine: Machine { cpus: 2, kernel: "k<1>".into(), date: "d".into() },
            seeds: seeds::summarize(&results),
            results,
            files: Vec::new(),
            files_memory: None,
            big_dir: Vec::new(),
            churn: vec![super::super::churn::ChurnRow {
                mode: "norefs".into(),
                live: 10_000,
                steps: 1_000_000,
                tenths: (0..10)
                    .map(|k| super::super::churn::Tenth {
                        unlink_ns: 1000.0 + k as f64,
                        create_ns: 2000.0,
                        stat_ns: 300.0,
                        miss_ns: 400.0,
                    })
                    .collect(),
                last_over_middle: 1.0,
                bytes_per_name: 900.0,
                memory: "process RSS",
            }],
        };
        let path = std::env::temp_dir().join(format!("rcuvfs-report-{}.html", std::process::id()));
        let sections = [Section { name: "stat-same", seed: "002", op: "stat <x>" }];
        write(&path, &report, &sections).unwrap();
        let page = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // Self-contained: no script, no outside file.
        for outside in ["<script", "src=", "href=", "@import"] {
            assert!(!page.contains(outside), "{outside}");
        }
        // Every seed has a row; the one measured says what it measured.
        for id in ["000", "001", "002", "003", "004"] {
            assert!(page.contains(&format!(r#"<td class="l">{id}</td>"#)), "seed {id}");
        }
        assert!(page.contains("stat-same rcuwalk/rcuwalk+packed at 2 thr: 1.33x"));
        // The workload's table (its seed's modes in bold) and its plot,
        // logarithmic since host is 25x slower; text escaped.
        assert!(page.contains(r#"<tr class="seed"><td class="l">rcuwalk</td><td>2</td><td>20000000</td>"#));
        assert!(page.contains("<svg") && page.contains("log scale") && page.contains("seed 002: after"));
        assert!(page.contains("stat &lt;x&gt;") && page.contains("k&lt;1&gt;"));
        // The churn table: half-way (the fifth tenth) and the last.
        assert!(page.contains(r#"<td class="l">norefs</td><td>10000</td><td>1000000</td><td>1004 / 1009</td>"#));
    }
}
