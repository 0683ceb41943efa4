//! `jobvisor stats`: the measured history as time series — the latest value of every series,
//! or one series over time — with values in their units (sizes, rates, durations, times).

use super::args::Cli;
use super::commands::reading;
use super::runs::parse_since;
use super::{Failure, render};
use crate::ops::OpError;
use crate::ops::stats::StatView;
use crate::ops::view::Time;
use crate::policy::{duration, size};

/// `jobvisor stats [TYPE] [--subject S] [--since 10m] [--limit N] [--all-nodes]`.
pub fn run(
    cli: &Cli,
    stat_type: Option<&str>,
    subject: Option<&str>,
    since: Option<&str>,
    limit: i64,
    all_nodes: bool,
) -> Result<(), Failure> {
    let since = match since {
        None => 0,
        Some(text) => parse_since(text, crate::catalog::now_ms()).map_err(|e| match e {
            OpError::Invalid { reason, .. } => OpError::invalid("--since", reason),
            other => other,
        })?,
    };
    let ops = reading(cli)?;
    let Some(stat_type) = stat_type else {
        let rows = ops.stats_latest(since, all_nodes)?;
        if cli.json {
            render::json(&rows);
        } else {
            let table = rows
                .iter()
                .map(|r| {
                    vec![
                        r.stat_type.clone(),
                        r.subject.clone().unwrap_or_else(|| "-".into()),
                        value_text(r),
                        render::time_long(Some(r.at)),
                        r.values.unwrap_or(0).to_string(),
                    ]
                })
                .collect();
            render::table(&["TYPE", "SUBJECT", "LATEST", "AT", "VALUES"], table);
        }
        return Ok(());
    };
    let rows = ops
        .stats_series(stat_type, subject, since, limit, all_nodes)
        .map_err(|e| match e {
            OpError::Invalid {
                field: Some(f),
                reason,
            } if f == "limit" => OpError::invalid("--limit", reason),
            other => other,
        })?;
    if cli.json {
        render::json(&rows);
        return Ok(());
    }
    let table = rows
        .iter()
        .map(|p| {
            vec![
                render::time_long(Some(p.at)),
                p.node.clone().unwrap_or_else(|| "-".into()),
                p.subject.clone().unwrap_or_else(|| "-".into()),
                value_text(p),
            ]
        })
        .collect();
    render::table(&["TIME", "NODE", "SUBJECT", stat_type], table);
    Ok(())
}

/// A value in its unit, for people.
fn value_text(p: &StatView) -> String {
    let v = p.value;
    match p.unit.as_deref() {
        Some("%") => format!("{v:.1}%"),
        Some("bytes") => size(v),
        Some("bytes/s") => format!("{}/s", size(v)),
        Some("ms") => duration(v as i64),
        Some("epoch ms") => render::time_long(Some(Time(v as i64))),
        Some("rows") => format!("{v:.0} rows"),
        Some("instances") => format!("{v:.0}"),
        Some("cores") => crate::policy::cores(v),
        Some(unit) => format!("{v} {unit}"),
        None => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_shown_in_their_units() {
        let p = |unit: &str, value: f64| StatView {
            at: Time(0),
            node: None,
            stat_type: "t".into(),
            unit: Some(unit.into()),
            subject: None,
            value,
            values: None,
        };
        assert_eq!(value_text(&p("%", 97.123)), "97.1%");
        assert_eq!(value_text(&p("bytes", 24_582_008_832.0)), "22.9 GiB");
        assert_eq!(value_text(&p("ms", 61_000.0)), "61 s");
        assert_eq!(value_text(&p("rows", 12.0)), "12 rows");
        assert_eq!(value_text(&p("cores", 0.5)), "0.5 cores");
    }
}
