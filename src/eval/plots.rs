//! SVG plots of one run, drawn with plotters from the records alone (so `tableseek report`
//! redraws them): time by stage, calls of each kind per query, the top-1 hit rate by refine round,
//! and the answer score by the format of the gold table (a Mixed-format corpus shows whether one
//! serialization hurts). A plot with nothing to show for the run's method is not written.
//!
//! Bars carry their value in the axis label: an SVG viewer shows it without hovering, and the
//! file stays byte-identical between identical runs.

use std::collections::BTreeMap;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use super::report::Summary;
use super::run::QueryRecord;
use crate::agent::StepKind;

const SIZE: (u32, u32) = (720, 420);

/// One bar chart: labelled values, drawn left to right in the given order.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// File name under `plots/`.
    pub file: &'static str,
    pub title: &'static str,
    pub y_label: &'static str,
    pub bars: Vec<(String, f64)>,
    /// Fixed top of the y axis (1.0 for rates); `None` fits the largest bar.
    pub y_max: Option<f64>,
}

impl BarChart {
    /// The chart as an SVG document.
    pub fn to_svg(&self) -> Result<String, String> {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            self.draw(&root)
                .map_err(|e| format!("{}: {e}", self.file))?;
            root.present().map_err(|e| format!("{}: {e}", self.file))?;
        }
        Ok(svg)
    }

    fn draw(
        &self,
        root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    ) -> Result<(), DrawingAreaErrorKind<<SVGBackend<'_> as DrawingBackend>::ErrorType>> {
        root.fill(&WHITE)?;
        let largest = self.bars.iter().map(|(_, v)| *v).fold(0.0, f64::max);
        let y_max = self
            .y_max
            .unwrap_or(if largest > 0.0 { largest * 1.1 } else { 1.0 });
        let n = self.bars.len().max(1) as i32;
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(60)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..y_max)?;
        let labels: Vec<String> = self
            .bars
            .iter()
            .map(|(label, value)| format!("{label} ({})", short(*value)))
            .collect();
        let label_of = |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(i) => usize::try_from(*i)
                .ok()
                .and_then(|i| labels.get(i).cloned())
                .unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(self.bars.len().max(1))
            .x_label_formatter(&label_of)
            .x_label_style(("sans-serif", 12))
            .y_desc(self.y_label)
            .draw()?;
        chart.draw_series(self.bars.iter().enumerate().map(|(i, (_, value))| {
            let i = i as i32;
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), value.min(y_max)),
                ],
                BLUE.mix(0.6).filled(),
            );
            bar.set_margin(0, 0, 10, 10);
            bar
        }))?;
        Ok(())
    }
}

/// A value with three significant figures at most, for bar labels.
fn short(value: f64) -> String {
    if value == 0.0 || value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// Every plot the run has data for.
pub fn charts(records: &[QueryRecord], summary: &Summary) -> Vec<BarChart> {
    let mut charts = Vec::new();
    let ms = &summary.metrics.avg_ms;
    let stages: Vec<(String, f64)> = [
        ("retrieval", ms.retrieval),
        ("encode", ms.encode),
        ("rerank", ms.rerank),
        ("pattern-gen", ms.pattern_gen),
        ("refine", ms.refine),
        ("qa", ms.qa),
    ]
    .into_iter()
    .filter(|(_, v)| *v > 0.0)
    .map(|(stage, v)| (stage.to_string(), v / 1e3))
    .collect();
    if !stages.is_empty() {
        charts.push(BarChart {
            file: "time_by_stage.svg",
            title: "Mean time per query by stage",
            y_label: "seconds",
            bars: stages,
            y_max: None,
        });
    }
    let actions = calls_per_query(records);
    if !actions.is_empty() {
        charts.push(BarChart {
            file: "actions_per_query.svg",
            title: "LLM calls per query, by kind",
            y_label: "mean calls per query",
            bars: actions,
            y_max: None,
        });
    }
    if let Some(by_round) = &summary.metrics.top1_hit_by_round {
        charts.push(BarChart {
            file: "top1_by_round.svg",
            title: "Top-1 candidate is a gold table, by refine round",
            y_label: "hit rate",
            bars: by_round
                .iter()
                .enumerate()
                .map(|(round, rate)| (format!("round {round}"), *rate))
                .collect(),
            y_max: Some(1.0),
        });
    }
    let by_format = score_by_format(records);
    if !by_format.is_empty() {
        charts.push(BarChart {
            file: "score_by_format.svg",
            title: "Answer score by the gold table's format",
            y_label: "F1 (table QA) or accuracy (claims)",
            bars: by_format,
            y_max: Some(1.0),
        });
    }
    charts
}

/// Mean calls of each kind per query, over the records with a trajectory; kinds never used are
/// left out.
fn calls_per_query(records: &[QueryRecord]) -> Vec<(String, f64)> {
    let trajectories: Vec<_> = records
        .iter()
        .filter_map(|r| r.trajectory.as_ref())
        .collect();
    if trajectories.is_empty() {
        return Vec::new();
    }
    let kinds = StepKind::ALL;
    let n = trajectories.len() as f64;
    kinds
        .into_iter()
        .map(|kind| {
            let count = trajectories
                .iter()
                .flat_map(|t| &t.calls)
                .filter(|c| c.kind == kind)
                .count();
            (kind.as_str().to_string(), count as f64 / n)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// The gold table's format as its file extension (`1-10.html.csv` → `csv`).
fn format_of(table_id: &str) -> &str {
    table_id
        .rsplit_once('.')
        .map_or("(none)", |(_, extension)| extension)
}

/// Mean answer score per gold-table format, formats in name order.
fn score_by_format(records: &[QueryRecord]) -> Vec<(String, f64)> {
    let mut by_format: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for record in records {
        let (Some(score), Some(gold)) = (record.answer_score(), record.gold.tables.first()) else {
            continue;
        };
        let entry = by_format.entry(format_of(gold)).or_default();
        entry.0 += score;
        entry.1 += 1;
    }
    by_format
        .into_iter()
        .map(|(format, (sum, n))| (format!("{format}, n={n}"), sum / n as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_names_every_bar_with_its_value_and_is_deterministic() {
        let chart = BarChart {
            file: "t.svg",
            title: "Title",
            y_label: "seconds",
            bars: vec![("pattern-gen".into(), 9.57), ("qa".into(), 0.0)],
            y_max: None,
        };
        let svg = chart.to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.contains("pattern-gen (9.57)"), "{svg}");
        assert!(svg.contains("qa (0)"), "{svg}");
        assert!(svg.contains("Title"));
        assert_eq!(svg, chart.to_svg().unwrap());
    }

    #[test]
    fn formats_come_from_the_last_extension() {
        assert_eq!(format_of("1-1013129-10.html.csv"), "csv");
        assert_eq!(format_of("db/table_T0.md"), "md");
        assert_eq!(format_of("noext"), "(none)");
    }

    #[test]
    fn short_labels_keep_three_figures() {
        assert_eq!(short(123.4), "123");
        assert_eq!(short(12.34), "12.3");
        assert_eq!(short(1.234), "1.23");
        assert_eq!(short(0.1234), "0.123");
    }
}
