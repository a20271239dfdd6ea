//! The pages the gateway writes itself: the index of forms and error pages. Every other page a
//! browser sees is the replicas', passed through untouched.
//!
//! Plain HTML5 with no scripts, styles or external resources, so the pages work in any browser
//! and a browser test can drive them by `id` and `name`.

use super::forms::{App, Kind};
use std::fmt::Write;

/// `text` with the characters that are special in HTML text and attribute values escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

/// The index: one form per operation of `app`. Input ids are `{form}-{name}` (ids are unique
/// per document, and several forms have a `branch`).
pub(crate) fn index(app: App, partitions: u32) -> String {
    let title = format!("CloudBFT {}", app.title());
    let last = partitions.saturating_sub(1);
    let mut body = format!(
        "<h1>{}</h1>\n<p>Each result page is shown only once f+1 replicas of one group \
         sent the same page. Partitions (branches) are 0 to {last}.</p>\n",
        escape(&title)
    );
    for form in app.forms() {
        let _ = write!(
            body,
            "<form id=\"{id}\" method=\"post\" action=\"{action}\">\n<fieldset>\n<legend>{title}</legend>\n",
            id = form.id,
            action = form.action,
            title = escape(form.title),
        );
        for field in form.fields {
            let constraints = match field.kind {
                Kind::Partition => {
                    format!(" type=\"number\" min=\"0\" max=\"{last}\" step=\"1\" required")
                }
                Kind::Number => format!(
                    " type=\"number\" min=\"0\" max=\"{}\" step=\"1\" required",
                    u32::MAX
                ),
                Kind::Cents => format!(
                    " type=\"number\" min=\"0\" max=\"{}\" step=\"1\" required",
                    u64::MAX
                ),
                Kind::Text => " type=\"text\"".to_owned(),
            };
            let _ = writeln!(
                body,
                "<p><label for=\"{form}-{name}\">{label}</label>\n\
                 <input id=\"{form}-{name}\" name=\"{name}\"{constraints}></p>",
                form = form.id,
                name = field.name,
                label = escape(field.label),
            );
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

    #[test]
    fn index_has_every_form_and_unique_ids() {
        let page = index(App::Bank, 4);
        assert!(page.starts_with("<!DOCTYPE html>"));
        let mut ids: Vec<&str> = page
            .split(" id=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), count, "duplicate ids in {page}");
        for form in App::Bank.forms() {
            assert!(page.contains(&format!("<form id=\"{}\" method=\"post\"", form.id)));
        }
        assert!(page.contains("max=\"3\""));
    }
}
