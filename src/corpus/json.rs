//! JSON tables: a `.json` file holds one `{header, rows}` object or an array of them; a `.jsonl` file holds
//! one object per line, optionally with an `id`. `caption` and `title` go to metadata. Cells may be any
//! JSON scalar (numbers keep their JSON spelling, `null` is empty); nested values keep their JSON text.
//!
//! One bad line of a JSONL file costs that line only.

use serde_json::Value;

use super::{Location, Parsed, ParsedTable};

pub(crate) fn parse_json(text: &str) -> Parsed {
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(err) => return syntax_error(&err, 0),
    };
    let mut parsed = Parsed::default();
    match value {
        Value::Array(items) => {
            for (i, item) in items.into_iter().enumerate() {
                match table_from_value(item) {
                    Ok(table) => parsed.tables.push(table),
                    Err(reason) => parsed
                        .problems
                        .push((Location::Unknown, format!("table {i}: {reason}"))),
                }
            }
        }
        value => match table_from_value(value) {
            Ok(table) => parsed.tables.push(table),
            Err(reason) => parsed.problems.push((Location::Unknown, reason)),
        },
    }
    parsed
}

pub(crate) fn parse_jsonl(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line_number = i + 1;
        match serde_json::from_str::<Value>(line) {
            Ok(value) => match table_from_value(value) {
                Ok(table) => parsed.tables.push(table),
                Err(reason) => parsed.problems.push((Location::Line(line_number), reason)),
            },
            Err(err) => {
                let mut one = syntax_error(&err, i);
                parsed.problems.append(&mut one.problems);
            }
        }
    }
    if parsed.tables.is_empty() && parsed.problems.is_empty() {
        parsed
            .problems
            .push((Location::Unknown, "no JSON lines".into()));
    }
    parsed
}

fn syntax_error(err: &serde_json::Error, line_offset: usize) -> Parsed {
    Parsed {
        tables: Vec::new(),
        problems: vec![(
            Location::Line(err.line() + line_offset),
            format!("invalid JSON at column {}: {err}", err.column()),
        )],
    }
}

fn table_from_value(value: Value) -> Result<ParsedTable, String> {
    let Value::Object(mut object) = value else {
        return Err("expected an object with \"header\" and \"rows\"".into());
    };
    let header = match object.remove("header") {
        Some(Value::Array(cells)) => cells.into_iter().map(cell).collect(),
        Some(_) => return Err("\"header\" is not an array".into()),
        None => return Err("missing \"header\"".into()),
    };
    let rows = match object.remove("rows") {
        Some(Value::Array(rows)) => rows
            .into_iter()
            .enumerate()
            .map(|(i, row)| match row {
                Value::Array(cells) => Ok(cells.into_iter().map(cell).collect()),
                _ => Err(format!("row {i} is not an array")),
            })
            .collect::<Result<Vec<Vec<String>>, String>>()?,
        Some(_) => return Err("\"rows\" is not an array".into()),
        None => return Err("missing \"rows\"".into()),
    };
    let text_field = |value: Option<Value>| match value {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Ok(ParsedTable {
        local_id: text_field(object.remove("id")),
        header,
        rows,
        caption: text_field(object.remove("caption")),
        title: text_field(object.remove("title")),
    })
}

fn cell(value: Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s,
        other => other.to_string(),
    }
}
