//! The pages the replicas render for TPC-C: each transaction's terminal screen (clauses 2.4.3,
//! 2.5.3, 2.6.3, 2.7.3 and 2.8.3) as an HTML fragment.
//!
//! The gateway accepts a page only when f+1 replicas rendered the same bytes, so rendering is a
//! pure function of the operation and the result: no clock, no locale, nothing replica-specific.
//! Dates are formatted by hand in UTC and amounts from integer fixed point for that reason.
//!
//! Every value a screen shows sits in an element with a stable `id` named after its column
//! (`o_id`, `total_amount`, `c_balance`, `low_stock`...), and every page has an `id="status"`
//! paragraph saying what happened, so that a browser test can read them. Text that comes from the
//! database or the operation (names, addresses, `c_data`) is escaped.

use crate::txn::{
    Address, DeliveryResult, InvalidInput, LastOrder, NewOrderResult, OrderStatusResult,
    PaymentResult, StockLevelResult, TpccOp, TpccResult,
};
use std::fmt::Write;

/// The title and HTML body fragment of the page for `operation` and its `result` (both in
/// [`txn`](crate::txn)'s canonical encoding). Bytes that do not decode, or a result that is not
/// one of the operation's, give an error page rather than a guess.
pub fn render(operation: &[u8], result: &[u8]) -> (&'static str, String) {
    let (Ok(op), Ok(result)) = (TpccOp::decode(operation), TpccResult::decode(result)) else {
        return unreadable();
    };
    let body = match (&op, &result) {
        (TpccOp::NewOrder(_), TpccResult::NewOrder(r)) => new_order(r),
        (
            TpccOp::NewOrder(_),
            TpccResult::NewOrderRolledBack {
                w_id,
                d_id,
                c_id,
                o_id,
                c_last,
                c_credit,
            },
        ) => {
            let mut out = String::new();
            fields(
                &mut out,
                &[
                    ("w_id", "Warehouse", w_id.to_string()),
                    ("d_id", "District", d_id.to_string()),
                    ("c_id", "Customer", c_id.to_string()),
                    ("c_last", "Name", c_last.clone()),
                    ("c_credit", "Credit", c_credit.clone()),
                    ("o_id", "Order number", o_id.to_string()),
                ],
            );
            status(&mut out, ROLLED_BACK);
            out
        }
        (TpccOp::Payment(_), TpccResult::Payment(r)) => payment(r),
        (TpccOp::OrderStatus(_), TpccResult::OrderStatus(r)) => order_status(r),
        (TpccOp::Delivery(_), TpccResult::Delivery(r)) => delivery(r),
        (TpccOp::StockLevel(_), TpccResult::StockLevel(r)) => stock_level(r),
        (_, TpccResult::Invalid(InvalidInput { field, problem })) => {
            let mut out = String::new();
            status(
                &mut out,
                &format!("The input {field} is not valid: {problem}. {NOTHING_CHANGED}"),
            );
            out
        }
        _ => return unreadable(),
    };
    (op.kind().name(), body)
}

/// The status of a New-Order rolled back by its unused item (clause 2.4.3.4).
const ROLLED_BACK: &str = "Execution Status: Item number is not valid";
/// How the Invalid screen ends.
const NOTHING_CHANGED: &str = "Nothing was changed.";

/// What an accepted page says happened, as a load driver reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The transaction ran.
    Done,
    /// A New-Order rolled back by its unused item (about 1% of them, by design).
    RolledBack,
    /// The Invalid screen: the input was refused and nothing changed (generated input never
    /// is).
    Refused,
}

/// Reads which of [`Shown`] a rendered page is.
pub fn shown(page: &[u8]) -> Shown {
    let page = String::from_utf8_lossy(page);
    if page.contains(NOTHING_CHANGED) {
        Shown::Refused
    } else if page.contains(ROLLED_BACK) {
        Shown::RolledBack
    } else {
        Shown::Done
    }
}

fn unreadable() -> (&'static str, String) {
    let mut out = String::new();
    status(
        &mut out,
        "The database nodes returned an unreadable result.",
    );
    ("Error", out)
}

fn new_order(r: &NewOrderResult) -> String {
    let mut out = String::new();
    fields(
        &mut out,
        &[
            ("w_id", "Warehouse", r.w_id.to_string()),
            ("d_id", "District", r.d_id.to_string()),
            ("o_entry_d", "Date", date(r.o_entry_d)),
            ("c_id", "Customer", r.c_id.to_string()),
            ("c_last", "Name", r.c_last.clone()),
            ("c_credit", "Credit", r.c_credit.clone()),
            ("c_discount", "Discount", percent(r.c_discount)),
            ("o_id", "Order number", r.o_id.to_string()),
            ("o_ol_cnt", "Number of lines", r.o_ol_cnt.to_string()),
            ("w_tax", "Warehouse tax", percent(r.w_tax)),
            ("d_tax", "District tax", percent(r.d_tax)),
        ],
    );
    table(
        &mut out,
        "lines",
        &[
            "Supply warehouse",
            "Item id",
            "Item name",
            "Quantity",
            "Stock",
            "B/G",
            "Price ($)",
            "Amount ($)",
        ],
        r.lines.iter().map(|l| {
            vec![
                l.supply_w_id.to_string(),
                l.i_id.to_string(),
                l.i_name.clone(),
                l.quantity.to_string(),
                l.s_quantity.to_string(),
                l.brand_generic.clone(),
                money(l.i_price),
                money(l.ol_amount),
            ]
        }),
    );
    fields(
        &mut out,
        &[("total_amount", "Total ($)", money(r.total_amount))],
    );
    status(&mut out, &format!("Order {} entered.", r.o_id));
    out
}

fn payment(r: &PaymentResult) -> String {
    let mut out = String::new();
    let mut shown = vec![
        ("h_date", "Date", date(r.h_date)),
        ("w_id", "Warehouse", r.w_id.to_string()),
        ("w_address", "Warehouse address", address(&r.w_address)),
        ("d_id", "District", r.d_id.to_string()),
        ("d_address", "District address", address(&r.d_address)),
        ("c_id", "Customer", r.c_id.to_string()),
        ("c_w_id", "Customer warehouse", r.c_w_id.to_string()),
        ("c_d_id", "Customer district", r.c_d_id.to_string()),
        ("c_name", "Name", name(&r.c_first, &r.c_middle, &r.c_last)),
        ("c_since", "Customer since", date(r.c_since)),
        ("c_address", "Customer address", address(&r.c_address)),
        ("c_phone", "Phone", r.c_phone.clone()),
        ("c_credit", "Credit", r.c_credit.clone()),
        ("c_discount", "Discount", percent(r.c_discount)),
        ("h_amount", "Amount paid ($)", money(r.h_amount)),
        ("c_balance", "New balance ($)", money(r.c_balance)),
        ("c_credit_lim", "Credit limit ($)", money(r.c_credit_lim)),
    ];
    // The screen shows customer data for bad-credit customers only, whose c_data is non-empty.
    if !r.c_data.is_empty() {
        shown.push(("c_data", "Customer data", r.c_data.clone()));
    }
    fields(&mut out, &shown);
    status(
        &mut out,
        &format!("Payment of {} entered.", money(r.h_amount)),
    );
    out
}

fn order_status(r: &OrderStatusResult) -> String {
    let mut out = String::new();
    fields(
        &mut out,
        &[
            ("w_id", "Warehouse", r.w_id.to_string()),
            ("d_id", "District", r.d_id.to_string()),
            ("c_id", "Customer", r.c_id.to_string()),
            ("c_name", "Name", name(&r.c_first, &r.c_middle, &r.c_last)),
            ("c_balance", "Balance ($)", money(r.c_balance)),
        ],
    );
    let Some(order) = &r.order else {
        status(&mut out, "The customer has no orders.");
        return out;
    };
    let LastOrder {
        o_id,
        o_entry_d,
        o_carrier_id,
        lines,
    } = order;
    let not_delivered = || "not delivered".to_owned();
    fields(
        &mut out,
        &[
            ("o_id", "Order number", o_id.to_string()),
            ("o_entry_d", "Entry date", date(*o_entry_d)),
            (
                "o_carrier_id",
                "Carrier",
                o_carrier_id.map_or_else(not_delivered, |c| c.to_string()),
            ),
        ],
    );
    table(
        &mut out,
        "lines",
        &[
            "Supply warehouse",
            "Item id",
            "Quantity",
            "Amount ($)",
            "Delivery date",
        ],
        lines.iter().map(|l| {
            vec![
                l.supply_w_id.to_string(),
                l.i_id.to_string(),
                l.quantity.to_string(),
                money(l.amount),
                l.delivery_d.map_or_else(not_delivered, date),
            ]
        }),
    );
    status(
        &mut out,
        &format!("Order {o_id} is the customer's last order."),
    );
    out
}

fn delivery(r: &DeliveryResult) -> String {
    let mut out = String::new();
    fields(
        &mut out,
        &[
            ("w_id", "Warehouse", r.w_id.to_string()),
            ("o_carrier_id", "Carrier", r.o_carrier_id.to_string()),
        ],
    );
    table(
        &mut out,
        "delivered",
        &["District", "Order delivered"],
        r.delivered.iter().map(|(d_id, o_id)| {
            vec![
                d_id.to_string(),
                o_id.map_or_else(
                    || "none: no undelivered order, district skipped".to_owned(),
                    |o| o.to_string(),
                ),
            ]
        }),
    );
    let delivered = r.delivered.iter().filter(|(_, o)| o.is_some()).count();
    status(
        &mut out,
        &format!(
            "Orders delivered: {delivered}. Districts skipped (no undelivered order): {}.",
            r.delivered.len() - delivered
        ),
    );
    out
}

fn stock_level(r: &StockLevelResult) -> String {
    let mut out = String::new();
    fields(
        &mut out,
        &[
            ("w_id", "Warehouse", r.w_id.to_string()),
            ("d_id", "District", r.d_id.to_string()),
            (
                "threshold",
                "Stock level threshold",
                r.threshold.to_string(),
            ),
            ("low_stock", "Low stock", r.low_stock.to_string()),
        ],
    );
    status(
        &mut out,
        &format!(
            "{} items of the district's last 20 orders have fewer than {} in stock.",
            r.low_stock, r.threshold
        ),
    );
    out
}

/// A `<dl>` of labelled values, each `<dd>` with its stable `id`. Values are escaped here, so
/// that no screen can forget to.
fn fields(out: &mut String, fields: &[(&str, &str, String)]) {
    out.push_str("<dl>\n");
    for (id, label, value) in fields {
        let _ = writeln!(
            out,
            "<dt>{label}</dt><dd id=\"{id}\">{}</dd>",
            escape(value)
        );
    }
    out.push_str("</dl>\n");
}

/// A `<table id="{id}">` with a header row; cells are escaped.
fn table(out: &mut String, id: &str, head: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let _ = write!(out, "<table id=\"{id}\">\n<thead><tr>");
    for column in head {
        let _ = write!(out, "<th scope=\"col\">{column}</th>");
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(&cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

fn status(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p id=\"status\">{}</p>", escape(text));
}

fn name(first: &str, middle: &str, last: &str) -> String {
    format!("{first} {middle} {last}")
}

fn address(a: &Address) -> String {
    format!(
        "{}, {}, {}, {} {}",
        a.street_1, a.street_2, a.city, a.state, a.zip
    )
}

/// `text` with the characters that are special in HTML text and attribute values escaped.
pub fn escape(text: &str) -> String {
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

/// A fixed-point value in hundredths with two decimals: cents as dollars, and rates (in
/// 1/10000) as percentages.
fn hundredths(value: i64) -> String {
    let sign = if value < 0 { "-" } else { "" };
    let magnitude = value.unsigned_abs();
    format!("{sign}{}.{:02}", magnitude / 100, magnitude % 100)
}

/// Cents as dollars: `-1234` is `-12.34`.
fn money(cents: i64) -> String {
    hundredths(cents)
}

/// A rate in 1/10000 as a percentage: `1234` (0.1234) is `12.34%`.
fn percent(rate: i64) -> String {
    format!("{}%", hundredths(rate))
}

/// Seconds since the Unix epoch as UTC `YYYY-MM-DD hh:mm:ss`.
fn date(seconds: i64) -> String {
    let (days, time) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        time / 3600,
        time / 60 % 60,
        time % 60
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`:
/// count in 400-year eras of 146,097 days, with years starting on 1 March so that the leap day
/// is the last day of a year).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097); // 0..=146096
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153; // 0 is March
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{
        CustomerSelector, Delivery, NewOrder, NewOrderLine, NewOrderLineResult, OrderStatus,
        OrderStatusLine, Payment, StockLevel,
    };

    fn new_order_op() -> TpccOp {
        TpccOp::NewOrder(NewOrder {
            w_id: 1,
            d_id: 2,
            c_id: 3,
            entry_d: 1_767_225_600,
            lines: vec![NewOrderLine {
                i_id: 7,
                supply_w_id: 1,
                quantity: 5,
            }],
        })
    }

    fn new_order_result(i_name: &str) -> TpccResult {
        TpccResult::NewOrder(NewOrderResult {
            w_id: 1,
            d_id: 2,
            c_id: 3,
            c_last: "BARBARBAR".into(),
            c_credit: "GC".into(),
            c_discount: 1_234,
            o_id: 3_001,
            o_ol_cnt: 1,
            o_entry_d: 1_767_225_600,
            w_tax: 1_000,
            d_tax: 5,
            lines: vec![NewOrderLineResult {
                supply_w_id: 1,
                i_id: 7,
                i_name: i_name.into(),
                quantity: 5,
                s_quantity: 42,
                brand_generic: "B".into(),
                i_price: 1_999,
                ol_amount: 9_995,
            }],
            total_amount: 9_642,
        })
    }

    fn page(op: &TpccOp, result: &TpccResult) -> (&'static str, String) {
        render(&op.encode(), &result.encode())
    }

    /// The text of the element with `id` (the page's markup around it removed).
    fn text_of<'a>(body: &'a str, id: &str) -> &'a str {
        let start = format!(" id=\"{id}\">");
        let rest = &body[body
            .find(&start)
            .unwrap_or_else(|| panic!("no #{id} in {body}"))
            + start.len()..];
        &rest[..rest.find('<').unwrap()]
    }

    #[test]
    fn fixed_point_and_dates_are_formatted_by_hand() {
        assert_eq!(money(1_234), "12.34");
        assert_eq!(money(-1_234), "-12.34");
        assert_eq!(money(-5), "-0.05");
        assert_eq!(money(0), "0.00");
        assert_eq!(money(500_000), "5000.00");
        assert_eq!(money(i64::MIN), "-92233720368547758.08");
        assert_eq!(percent(1_234), "12.34%");
        assert_eq!(percent(5), "0.05%");
        assert_eq!(date(0), "1970-01-01 00:00:00");
        assert_eq!(date(1_767_225_600), "2026-01-01 00:00:00");
        assert_eq!(date(951_825_599), "2000-02-29 11:59:59");
        assert_eq!(date(4_102_444_799), "2099-12-31 23:59:59");
        assert_eq!(date(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn pages_are_deterministic_and_escape_database_text() {
        let op = new_order_op();
        let result = new_order_result("<script>alert('x')</script>");
        let (title, body) = page(&op, &result);
        assert_eq!(title, "New-Order");
        assert_eq!(page(&op, &result), (title, body.clone()));
        assert!(!body.contains("<script>"), "{body}");
        assert!(body.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    }

    #[test]
    fn new_order_shows_its_screen() {
        let (_, body) = page(&new_order_op(), &new_order_result("Widget"));
        for (id, text) in [
            ("o_id", "3001"),
            ("o_entry_d", "2026-01-01 00:00:00"),
            ("c_last", "BARBARBAR"),
            ("c_discount", "12.34%"),
            ("w_tax", "10.00%"),
            ("d_tax", "0.05%"),
            ("o_ol_cnt", "1"),
            ("total_amount", "96.42"),
            ("status", "Order 3001 entered."),
        ] {
            assert_eq!(text_of(&body, id), text, "#{id}");
        }
        assert!(body.contains(
            "<tr><td>1</td><td>7</td><td>Widget</td><td>5</td><td>42</td><td>B</td>\
             <td>19.99</td><td>99.95</td></tr>"
        ));
        let rolled_back = TpccResult::NewOrderRolledBack {
            w_id: 1,
            d_id: 2,
            c_id: 3,
            o_id: 3_002,
            c_last: "OUGHTABLE".into(),
            c_credit: "BC".into(),
        };
        let (title, body) = page(&new_order_op(), &rolled_back);
        assert_eq!(title, "New-Order");
        assert_eq!(
            text_of(&body, "status"),
            "Execution Status: Item number is not valid"
        );
        assert_eq!(text_of(&body, "o_id"), "3002");
        assert_eq!(text_of(&body, "c_credit"), "BC");
        assert_eq!(text_of(&body, "c_last"), "OUGHTABLE");
        assert_eq!(shown(body.as_bytes()), Shown::RolledBack);
        let (_, done) = page(&new_order_op(), &new_order_result("Widget"));
        assert_eq!(shown(done.as_bytes()), Shown::Done);
    }

    #[test]
    fn payment_shows_its_screen() {
        let op = TpccOp::Payment(Payment {
            w_id: 1,
            d_id: 2,
            c_w_id: 1,
            c_d_id: 2,
            customer: CustomerSelector::Id(3),
            h_amount: 1_234,
            h_date: 1_767_225_600,
        });
        let address = |street: &str| Address {
            street_1: street.into(),
            street_2: "Floor 2".into(),
            city: "Springfield".into(),
            state: "IL".into(),
            zip: "123411111".into(),
        };
        let result = TpccResult::Payment(Box::new(PaymentResult {
            w_id: 1,
            d_id: 2,
            c_id: 3,
            c_w_id: 1,
            c_d_id: 2,
            h_date: 1_767_225_600,
            h_amount: 1_234,
            w_address: address("1 Main St"),
            d_address: address("2 Side St"),
            c_first: "Ann".into(),
            c_middle: "OE".into(),
            c_last: "ABLEABLE".into(),
            c_address: address("3 Home & Garden"),
            c_phone: "0123456789012345".into(),
            c_since: 0,
            c_credit: "BC".into(),
            c_credit_lim: 5_000_000,
            c_discount: 4_999,
            c_balance: -2_234,
            c_data: "3 2 1 1 2 12.34 <b>".into(),
        }));
        let (title, body) = page(&op, &result);
        assert_eq!(title, "Payment");
        for (id, text) in [
            ("h_date", "2026-01-01 00:00:00"),
            ("h_amount", "12.34"),
            ("c_balance", "-22.34"),
            ("c_credit_lim", "50000.00"),
            ("c_discount", "49.99%"),
            ("c_name", "Ann OE ABLEABLE"),
            ("c_since", "1970-01-01 00:00:00"),
            (
                "c_address",
                "3 Home &amp; Garden, Floor 2, Springfield, IL 123411111",
            ),
            ("c_data", "3 2 1 1 2 12.34 &lt;b&gt;"),
            ("status", "Payment of 12.34 entered."),
        ] {
            assert_eq!(text_of(&body, id), text, "#{id}");
        }
    }

    #[test]
    fn order_status_delivery_and_stock_level_show_their_screens() {
        let status_op = TpccOp::OrderStatus(OrderStatus {
            w_id: 1,
            d_id: 2,
            customer: CustomerSelector::LastName("ABLEABLE".into()),
        });
        let mut status = OrderStatusResult {
            w_id: 1,
            d_id: 2,
            c_id: 3,
            c_first: "Ann".into(),
            c_middle: "OE".into(),
            c_last: "ABLEABLE".into(),
            c_balance: -1_000,
            order: None,
        };
        let (title, body) = page(&status_op, &TpccResult::OrderStatus(status.clone()));
        assert_eq!(title, "Order-Status");
        assert_eq!(text_of(&body, "c_balance"), "-10.00");
        assert_eq!(text_of(&body, "status"), "The customer has no orders.");
        status.order = Some(LastOrder {
            o_id: 17,
            o_entry_d: 1_767_225_600,
            o_carrier_id: None,
            lines: vec![OrderStatusLine {
                supply_w_id: 1,
                i_id: 9,
                quantity: 2,
                amount: 450,
                delivery_d: None,
            }],
        });
        let (_, body) = page(&status_op, &TpccResult::OrderStatus(status));
        assert_eq!(text_of(&body, "o_id"), "17");
        assert_eq!(text_of(&body, "o_carrier_id"), "not delivered");
        assert!(body.contains(
            "<tr><td>1</td><td>9</td><td>2</td><td>4.50</td><td>not delivered</td></tr>"
        ));

        let delivery_op = TpccOp::Delivery(Delivery {
            w_id: 1,
            o_carrier_id: 4,
            delivery_d: 0,
        });
        let delivered = TpccResult::Delivery(DeliveryResult {
            w_id: 1,
            o_carrier_id: 4,
            delivered: vec![(1, Some(2_101)), (2, None)],
        });
        let (title, body) = page(&delivery_op, &delivered);
        assert_eq!(title, "Delivery");
        assert_eq!(text_of(&body, "o_carrier_id"), "4");
        assert!(body.contains("<tr><td>1</td><td>2101</td></tr>"));
        assert!(body.contains("<tr><td>2</td><td>none: no undelivered order"));
        assert_eq!(
            text_of(&body, "status"),
            "Orders delivered: 1. Districts skipped (no undelivered order): 1."
        );

        let stock_op = TpccOp::StockLevel(StockLevel {
            w_id: 1,
            d_id: 2,
            threshold: 15,
        });
        let low = TpccResult::StockLevel(StockLevelResult {
            w_id: 1,
            d_id: 2,
            threshold: 15,
            low_stock: 6,
        });
        let (title, body) = page(&stock_op, &low);
        assert_eq!(title, "Stock-Level");
        assert_eq!(text_of(&body, "low_stock"), "6");
        assert_eq!(text_of(&body, "threshold"), "15");
    }

    #[test]
    fn refusals_and_unreadable_results_say_so() {
        let invalid = TpccResult::Invalid(InvalidInput {
            field: "ol_quantity_1".into(),
            problem: "11 is out of range: use 1 to 10".into(),
        });
        let (title, body) = page(&new_order_op(), &invalid);
        assert_eq!(title, "New-Order");
        assert_eq!(
            text_of(&body, "status"),
            "The input ol_quantity_1 is not valid: 11 is out of range: use 1 to 10. \
             Nothing was changed."
        );
        assert_eq!(shown(body.as_bytes()), Shown::Refused);
        let unreadable = "The database nodes returned an unreadable result.";
        let (title, body) = render(&new_order_op().encode(), b"\xff\xff");
        assert_eq!((title, text_of(&body, "status")), ("Error", unreadable));
        let (title, body) = render(b"", &invalid.encode());
        assert_eq!((title, text_of(&body, "status")), ("Error", unreadable));
        // A result of another transaction is not shown under this one's title.
        let stock = TpccOp::StockLevel(StockLevel {
            w_id: 1,
            d_id: 2,
            threshold: 15,
        });
        let (title, _) = page(&stock, &new_order_result("Widget"));
        assert_eq!(title, "Error");
    }
}
