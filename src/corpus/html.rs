//! HTML `<table>`s, parsed with an HTML5 parser (so unclosed tags and other real-world damage are
//! repaired the way a browser would), with `colspan`/`rowspan` expanded into a plain grid.
//!
//! Header rows are the rows inside `<thead>` or, without one, the leading rows made only of `<th>`;
//! several header rows merge per column ("Population / 2010"). A table without either uses its first row
//! as the header, like CSV. Each nested table is a table of its own and its rows are not the outer one's.

use scraper::{ElementRef, Html, Node, Selector};

use super::{Location, Parsed, ParsedTable};

/// The HTML standard's caps: they also keep a hostile `colspan="1e9"` from allocating a billion cells.
const MAX_COLSPAN: usize = 1000;
const MAX_ROWSPAN: usize = 65534;

pub(crate) fn parse(text: &str) -> Parsed {
    let document = Html::parse_document(text);
    let (Ok(table_selector), Ok(title_selector)) =
        (Selector::parse("table"), Selector::parse("title"))
    else {
        // Both selectors are constant and valid; this arm only keeps a panic out of library code.
        return Parsed::default();
    };
    let title = document
        .select(&title_selector)
        .next()
        .map(cell_text)
        .filter(|t| !t.is_empty());
    let mut parsed = Parsed::default();
    for table in document.select(&table_selector) {
        let mut parsed_table = parse_table(table);
        parsed_table.title = title.clone();
        parsed.tables.push(parsed_table);
    }
    if parsed.tables.is_empty() {
        parsed
            .problems
            .push((Location::Unknown, "no <table> element".into()));
    }
    parsed
}

struct RawRow<'a> {
    element: ElementRef<'a>,
    in_head: bool,
}

fn parse_table(table: ElementRef<'_>) -> ParsedTable {
    let mut caption = None;
    let mut rows = Vec::new();
    // Explicit stack: a deeply nested document must not overflow the call stack.
    let mut stack: Vec<(ElementRef<'_>, bool)> = element_children(table)
        .rev()
        .map(|child| (child, false))
        .collect();
    while let Some((element, in_head)) = stack.pop() {
        match element.value().name() {
            "table" => {}
            "caption" if caption.is_none() => caption = Some(cell_text(element)),
            "tr" => rows.push(RawRow { element, in_head }),
            name => {
                let in_head = in_head || name == "thead";
                stack.extend(element_children(element).rev().map(|c| (c, in_head)));
            }
        }
    }

    let has_thead = rows.iter().any(|row| row.in_head);
    let mut header_rows = 0;
    for row in &rows {
        let is_header = if has_thead {
            row.in_head
        } else {
            let mut cells = element_children(row.element)
                .filter(|c| is_cell(c))
                .peekable();
            cells.peek().is_some() && cells.all(|c| c.value().name() == "th")
        };
        if !is_header {
            break;
        }
        header_rows += 1;
    }
    let mut grid = expand_spans(&rows);
    let header_rows = if header_rows == 0 && !grid.is_empty() {
        1
    } else {
        header_rows.min(grid.len())
    };
    let body = grid.split_off(header_rows);
    ParsedTable {
        header: merge_header_rows(grid),
        rows: body,
        caption: caption.filter(|c| !c.is_empty()),
        ..ParsedTable::default()
    }
}

fn element_children<'a>(
    element: ElementRef<'a>,
) -> impl DoubleEndedIterator<Item = ElementRef<'a>> + 'a {
    element.children().filter_map(ElementRef::wrap)
}

fn is_cell(element: &ElementRef<'_>) -> bool {
    matches!(element.value().name(), "td" | "th")
}

fn span(element: &ElementRef<'_>, name: &str, max: usize) -> usize {
    element
        .value()
        .attr(name)
        .and_then(|v| v.trim().parse::<usize>().ok())
        // `rowspan="0"` means "to the end of the row group" in HTML; one row is the safe reading.
        .map_or(1, |n| n.clamp(1, max))
}

/// Places every cell at its grid position: a cell spanning k columns or rows is copied into each.
fn expand_spans(rows: &[RawRow<'_>]) -> Vec<Vec<String>> {
    // Per column: rows still covered by a rowspan from above, and the text they repeat.
    let mut carried: Vec<Option<(usize, String)>> = Vec::new();
    let mut grid = Vec::with_capacity(rows.len());
    for row in rows {
        let mut out: Vec<String> = Vec::new();
        let take_carried = |out: &mut Vec<String>, carried: &mut Vec<Option<(usize, String)>>| {
            while let Some(Some((left, text))) = carried.get_mut(out.len()) {
                out.push(text.clone());
                *left -= 1;
                if *left == 0 {
                    carried[out.len() - 1] = None;
                }
            }
        };
        for cell in element_children(row.element).filter(is_cell) {
            take_carried(&mut out, &mut carried);
            let text = cell_text(cell);
            let colspan = span(&cell, "colspan", MAX_COLSPAN);
            let rowspan = span(&cell, "rowspan", MAX_ROWSPAN);
            for _ in 0..colspan {
                if rowspan > 1 {
                    if carried.len() <= out.len() {
                        carried.resize(out.len() + 1, None);
                    }
                    carried[out.len()] = Some((rowspan - 1, text.clone()));
                }
                out.push(text.clone());
            }
        }
        // Rowspans from above that reach past this row's last cell.
        loop {
            take_carried(&mut out, &mut carried);
            if carried[out.len().min(carried.len())..]
                .iter()
                .all(Option::is_none)
            {
                break;
            }
            out.push(String::new());
        }
        grid.push(out);
    }
    grid
}

fn merge_header_rows(rows: Vec<Vec<String>>) -> Vec<String> {
    let mut rows = rows.into_iter();
    let Some(mut header) = rows.next() else {
        return Vec::new();
    };
    for row in rows {
        for (i, cell) in row.into_iter().enumerate() {
            match header.get_mut(i) {
                None => header.push(cell),
                Some(existing) if existing.is_empty() => *existing = cell,
                // A spanning group label repeats over its columns; add the level only when it differs.
                Some(existing) if !cell.is_empty() && *existing != cell => {
                    existing.push_str(" / ");
                    existing.push_str(&cell);
                }
                Some(_) => {}
            }
        }
    }
    header
}

/// The visible text of an element with whitespace runs collapsed; `<br>` counts as a space.
fn cell_text(element: ElementRef<'_>) -> String {
    let mut raw = String::new();
    for node in element.descendants() {
        match node.value() {
            Node::Text(text) => raw.push_str(text),
            Node::Element(el) if el.name() == "br" => raw.push(' '),
            _ => {}
        }
    }
    let mut out = String::with_capacity(raw.len());
    for word in raw.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_expand_into_a_grid() {
        let html = r#"<table>
            <tr><th>a</th><th colspan="2">b</th></tr>
            <tr><td rowspan="2">x</td><td>1</td><td>2</td></tr>
            <tr><td>3</td><td>4</td></tr>
        </table>"#;
        let parsed = parse(html);
        let table = &parsed.tables[0];
        assert_eq!(table.header, vec!["a", "b", "b"]);
        assert_eq!(table.rows, vec![vec!["x", "1", "2"], vec!["x", "3", "4"]]);
    }

    #[test]
    fn rowspan_past_the_last_cell_is_filled() {
        let html = r#"<table><thead><tr><th>a</th><th>b</th></tr></thead>
            <tr><td>1</td><td rowspan="2">y</td></tr><tr><td>2</td></tr></table>"#;
        let table = &parse(html).tables[0];
        assert_eq!(table.rows, vec![vec!["1", "y"], vec!["2", "y"]]);
    }

    #[test]
    fn nested_tables_and_multi_row_headers() {
        let html = r#"<table><caption>Cap</caption>
            <thead><tr><th colspan="2">Population</th></tr><tr><th>2000</th><th>2010</th></tr></thead>
            <tbody><tr><td>5</td><td><table><tr><th>in</th></tr><tr><td>ner</td></tr></table></td></tr></tbody>
        </table>"#;
        let parsed = parse(html);
        assert_eq!(parsed.tables.len(), 2);
        let outer = &parsed.tables[0];
        assert_eq!(outer.header, vec!["Population / 2000", "Population / 2010"]);
        assert_eq!(outer.rows.len(), 1);
        assert_eq!(outer.caption.as_deref(), Some("Cap"));
        assert_eq!(parsed.tables[1].rows, vec![vec!["ner"]]);
    }
}
