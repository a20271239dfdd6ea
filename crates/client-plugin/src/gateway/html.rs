//! The pages the gateway writes itself: the index of forms and error pages. Every other page a
//! browser sees is the replicas', passed through untouched.
//!
//! Plain HTML5 with no scripts, styles or external resources, so the pages work in any browser
//! and a browser test can drive them by `id` and `name`.

use super::forms::{slot, App, Field, Kind, LINE_COLUMNS, LINE_SLOTS};
use std::fmt::Write;

/// The replicas' escaping (`tpcc::pages`), so that gateway and replica pages agree on it.
pub(crate) use tpcc::pages::escape;

fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

/// The index: links to the forms, then one form per operation of `app`. Input ids are
/// `{form}-{name}` (ids are unique per document, and several forms have a `branch`).
pub(crate) fn index(app: App, partitions: u32) -> String {
    let title = format!("CloudBFT {}", app.title());
    let mut body = format!(
        "<h1>{}</h1>\n<p>Each result page is shown only once f+1 replicas of one group \
         sent the same page. {}</p>\n<p><a id=\"cluster-link\" href=\"/cluster\">The \
         cluster live: groups, partitions, throughput, latency, scaling</a></p>\n<nav>\n<ul>\n",
        escape(&title),
        scope(app, partitions)
    );
    for form in app.forms() {
        let _ = writeln!(
            body,
            "<li><a href=\"#{}\">{}</a></li>",
            form.id,
            escape(form.title)
        );
    }
    body.push_str("</ul>\n</nav>\n");
    for form in app.forms() {
        let _ = write!(
            body,
            "<form id=\"{id}\" method=\"post\" action=\"{action}\">\n<fieldset>\n<legend>{title}</legend>\n",
            id = form.id,
            action = form.action,
            title = escape(form.title),
        );
        for field in form.fields {
            match input(form.id, field.name, field, partitions, "") {
                Some(input) => {
                    let _ = writeln!(
                        body,
                        "<p><label for=\"{form}-{name}\">{label}</label>\n{input}</p>",
                        form = form.id,
                        name = field.name,
                        label = escape(field.label),
                    );
                }
                None => order_lines(&mut body, form.id, field, partitions),
            }
        }
        let _ = write!(
            body,
            "<p><button id=\"{id}-submit\" type=\"submit\">{title}</button></p>\n</fieldset>\n</form>\n",
            id = form.id,
            title = escape(form.title),
        );
    }
    document(&title, &body)
}

/// What the forms' partitions are to a person, and their range.
fn scope(app: App, partitions: u32) -> String {
    match app {
        App::Bank | App::Noop => format!(
            "Partitions (branches) are 0 to {}.",
            partitions.saturating_sub(1)
        ),
        App::Tpcc => format!("Warehouses are 1 to {partitions}."),
    }
}

/// The `<input>` for `field`, sent as `name` and with `extra` attributes; `None` for order
/// lines, which are a table of inputs.
fn input(form: &str, name: &str, field: &Field, partitions: u32, extra: &str) -> Option<String> {
    let whole =
        |min: u64, max: u64| format!(" type=\"number\" min=\"{min}\" max=\"{max}\" step=\"1\"");
    let attributes = match field.kind {
        Kind::Partition => whole(0, partitions.saturating_sub(1).into()),
        Kind::Warehouse => whole(1, partitions.into()),
        Kind::Number => whole(0, u32::MAX.into()),
        Kind::Within(min, max) => whole(min.into(), max.into()),
        Kind::Cents => whole(0, u64::MAX),
        // Payment's amount: 1.00 to 5,000.00 (clause 2.5.1.2).
        Kind::Dollars => " type=\"number\" min=\"1\" max=\"5000\" step=\"0.01\"".to_owned(),
        Kind::Text => " type=\"text\"".to_owned(),
        Kind::OrderLines => return None,
    };
    let required = if field.required { " required" } else { "" };
    Some(format!(
        "<input id=\"{form}-{name}\" name=\"{name}\"{attributes}{required}{extra}>"
    ))
}

/// New-Order's line slots as a table, a row per slot and a column per input. A cell has no
/// room for a `<label>`, so each input is named by its column's and row's headers
/// (`aria-labelledby`).
fn order_lines(body: &mut String, form: &str, field: &Field, partitions: u32) {
    let _ = write!(
        body,
        "<table id=\"{form}-{name}\">\n<caption>{label}</caption>\n\
         <thead><tr><th scope=\"col\">Line</th>",
        name = field.name,
        label = escape(field.label),
    );
    for column in &LINE_COLUMNS {
        let _ = write!(
            body,
            "<th scope=\"col\" id=\"{form}-{}\">{}</th>",
            column.name,
            escape(column.label)
        );
    }
    body.push_str("</tr></thead>\n<tbody>\n");
    for n in 1..=LINE_SLOTS {
        let _ = write!(
            body,
            "<tr><th scope=\"row\" id=\"{form}-line_{n}\">{n}</th>"
        );
        for column in &LINE_COLUMNS {
            let labelled_by = format!(
                " aria-labelledby=\"{form}-{} {form}-line_{n}\"",
                column.name
            );
            let cell = input(form, &slot(column, n), column, partitions, &labelled_by);
            let _ = write!(body, "<td>{}</td>", cell.unwrap_or_default());
        }
        body.push_str("</tr>\n");
    }
    body.push_str("</tbody>\n</table>\n");
}

/// An error page: what went wrong and what to do.
pub(crate) fn error(heading: &str, message: &str) -> String {
    let body = format!(
        "<h1>{}</h1>\n<p>{}</p>\n<p><a href=\"/\">Back to the forms</a></p>\n",
        escape(heading),
        escape(message)
    );
    document(heading, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    fn assert_unique_ids(page: &str) {
        let mut ids: Vec<&str> = page
            .split(" id=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), count, "duplicate ids in {page}");
    }

    #[test]
    fn index_has_every_form_and_unique_ids() {
        let page = index(App::Bank, 4);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert_unique_ids(&page);
        for form in App::Bank.forms() {
            assert!(page.contains(&format!("<form id=\"{}\" method=\"post\"", form.id)));
        }
        assert!(page.contains("max=\"3\""));
    }

    #[test]
    fn tpcc_index_links_every_form_and_has_fifteen_line_slots() {
        let page = index(App::Tpcc, 4);
        assert_unique_ids(&page);
        for form in App::Tpcc.forms() {
            assert!(page.contains(&format!("<li><a href=\"#{}\">", form.id)));
            assert!(page.contains(&format!(
                "<form id=\"{}\" method=\"post\" action=\"{}\">",
                form.id, form.action
            )));
        }
        assert!(page.contains("Warehouses are 1 to 4."));
        assert!(page.contains(
            "<input id=\"new_order-w_id\" name=\"w_id\" type=\"number\" min=\"1\" max=\"4\" \
             step=\"1\" required>"
        ));
        assert!(page.contains("<input id=\"payment-c_last\" name=\"c_last\" type=\"text\">"));
        assert!(page.contains(
            "<input id=\"payment-h_amount\" name=\"h_amount\" type=\"number\" min=\"1\" \
             max=\"5000\" step=\"0.01\" required>"
        ));
        // The specification's ranges, checked by the browser before anything is sent.
        assert!(page.contains(
            "<input id=\"stock_level-threshold\" name=\"threshold\" type=\"number\" \
             min=\"10\" max=\"20\" step=\"1\" required>"
        ));
        assert!(page.contains(
            "<input id=\"new_order-ol_quantity_1\" name=\"ol_quantity_1\" type=\"number\" \
             min=\"1\" max=\"10\" step=\"1\""
        ));
        for n in 1..=15 {
            for column in ["ol_i_id", "ol_supply_w_id", "ol_quantity"] {
                assert!(page.contains(&format!(
                    "<input id=\"new_order-{column}_{n}\" name=\"{column}_{n}\""
                )));
            }
        }
        assert!(!page.contains("ol_i_id_16"));
        assert!(page.contains("aria-labelledby=\"new_order-ol_quantity new_order-line_15\">"));
    }
}
