//! The twelve consistency conditions of clause 3.3.2, as SQL that runs on SQLite and
//! PostgreSQL.
//!
//! Each condition is a query for the rows that violate it (identified by their key columns, all
//! integers so that they decode through `Any`), so a failure says where it fails. Sums are
//! compared inside SQL: PostgreSQL's `SUM(BIGINT)` is `NUMERIC`, which `Any` cannot decode.

use sqlx::{AnyConnection, AssertSqlSafe, Row};

/// The outcome of one consistency condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// The condition's number in clause 3.3.2 (1 to 12).
    pub number: u8,
    /// What the condition requires.
    pub description: &'static str,
    /// Whether no row violates it.
    pub passed: bool,
    /// The number of violations and the key of the first one, or `ok`.
    pub detail: String,
}

/// A condition's query failed (not: a condition does not hold).
#[derive(Debug, thiserror::Error)]
#[error("consistency condition {number} could not be evaluated: {source}")]
pub struct CheckError {
    /// The condition's number.
    pub number: u8,
    /// The database error.
    #[source]
    pub source: sqlx::Error,
}

/// Delivered order-line amounts per customer, for conditions 10 and 12.
const DELIVERED_PER_CUSTOMER: &str = "SELECT o_w_id, o_d_id, o_c_id, SUM(ol_amount) AS amount
    FROM orders JOIN order_line ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
    WHERE ol_delivery_d IS NOT NULL GROUP BY o_w_id, o_d_id, o_c_id";

struct Condition {
    number: u8,
    description: &'static str,
    /// The key columns of a violating row, named in the query's output.
    key: &'static str,
    /// Selects the violating rows.
    violations: String,
}

fn conditions(delivered_per_district: i64) -> Vec<Condition> {
    vec![
        Condition {
            number: 1,
            description: "W_YTD = sum(D_YTD) for each warehouse",
            key: "w_id",
            violations: "SELECT w_id FROM warehouse LEFT JOIN (SELECT d_w_id, SUM(d_ytd) AS ytd \
                FROM district GROUP BY d_w_id) d ON d.d_w_id = w_id \
                WHERE w_ytd <> COALESCE(d.ytd, 0)"
                .into(),
        },
        Condition {
            number: 2,
            description: "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) for each district",
            key: "d_w_id, d_id",
            violations: "SELECT d_w_id, d_id FROM district d WHERE \
                d_next_o_id - 1 <> COALESCE((SELECT MAX(o_id) FROM orders \
                    WHERE o_w_id = d.d_w_id AND o_d_id = d.d_id), 0) \
                OR d_next_o_id - 1 <> COALESCE((SELECT MAX(no_o_id) FROM new_order \
                    WHERE no_w_id = d.d_w_id AND no_d_id = d.d_id), d_next_o_id - 1)"
                .into(),
        },
        Condition {
            number: 3,
            description: "max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER) for each district",
            key: "no_w_id, no_d_id",
            violations: "SELECT no_w_id, no_d_id FROM new_order GROUP BY no_w_id, no_d_id \
                HAVING MAX(no_o_id) - MIN(no_o_id) + 1 <> COUNT(*)"
                .into(),
        },
        Condition {
            number: 4,
            description: "sum(O_OL_CNT) = count(ORDER-LINE) for each district",
            key: "d_w_id, d_id",
            violations: "SELECT d_w_id, d_id FROM district d WHERE \
                COALESCE((SELECT SUM(o_ol_cnt) FROM orders \
                    WHERE o_w_id = d.d_w_id AND o_d_id = d.d_id), 0) \
                <> (SELECT COUNT(*) FROM order_line \
                    WHERE ol_w_id = d.d_w_id AND ol_d_id = d.d_id)"
                .into(),
        },
        Condition {
            number: 5,
            description: "O_CARRIER_ID is null iff the order has a NEW-ORDER row",
            key: "o_w_id, o_d_id, o_id",
            violations: "SELECT o_w_id, o_d_id, o_id FROM orders o WHERE \
                (o_carrier_id IS NULL) <> EXISTS (SELECT 1 FROM new_order \
                    WHERE no_w_id = o.o_w_id AND no_d_id = o.o_d_id AND no_o_id = o.o_id)"
                .into(),
        },
        Condition {
            number: 6,
            description: "O_OL_CNT = count(ORDER-LINE) for each order",
            key: "o_w_id, o_d_id, o_id",
            violations: "SELECT o_w_id, o_d_id, o_id FROM orders o WHERE o_ol_cnt <> \
                (SELECT COUNT(*) FROM order_line \
                    WHERE ol_w_id = o.o_w_id AND ol_d_id = o.o_d_id AND ol_o_id = o.o_id)"
                .into(),
        },
        Condition {
            number: 7,
            description: "OL_DELIVERY_D is null iff O_CARRIER_ID is null",
            key: "ol_w_id, ol_d_id, ol_o_id, ol_number",
            violations: "SELECT ol_w_id, ol_d_id, ol_o_id, ol_number FROM order_line \
                JOIN orders ON o_w_id = ol_w_id AND o_d_id = ol_d_id AND o_id = ol_o_id \
                WHERE (ol_delivery_d IS NULL) <> (o_carrier_id IS NULL)"
                .into(),
        },
        Condition {
            number: 8,
            description: "W_YTD = sum(H_AMOUNT) for each warehouse",
            key: "w_id",
            violations: "SELECT w_id FROM warehouse LEFT JOIN (SELECT h_w_id, SUM(h_amount) \
                AS amount FROM history GROUP BY h_w_id) h ON h.h_w_id = w_id \
                WHERE w_ytd <> COALESCE(h.amount, 0)"
                .into(),
        },
        Condition {
            number: 9,
            description: "D_YTD = sum(H_AMOUNT) for each district",
            key: "d_w_id, d_id",
            violations: "SELECT d_w_id, d_id FROM district LEFT JOIN (SELECT h_w_id, h_d_id, \
                SUM(h_amount) AS amount FROM history GROUP BY h_w_id, h_d_id) h \
                ON h.h_w_id = d_w_id AND h.h_d_id = d_id \
                WHERE d_ytd <> COALESCE(h.amount, 0)"
                .into(),
        },
        Condition {
            number: 10,
            description: "C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT) for each customer",
            key: "c_w_id, c_d_id, c_id",
            violations: format!(
                "SELECT c_w_id, c_d_id, c_id FROM customer \
                LEFT JOIN ({DELIVERED_PER_CUSTOMER}) ol \
                    ON ol.o_w_id = c_w_id AND ol.o_d_id = c_d_id AND ol.o_c_id = c_id \
                LEFT JOIN (SELECT h_c_w_id, h_c_d_id, h_c_id, SUM(h_amount) AS amount \
                    FROM history GROUP BY h_c_w_id, h_c_d_id, h_c_id) h \
                    ON h.h_c_w_id = c_w_id AND h.h_c_d_id = c_d_id AND h.h_c_id = c_id \
                WHERE c_balance <> COALESCE(ol.amount, 0) - COALESCE(h.amount, 0)"
            ),
        },
        Condition {
            number: 11,
            description: "count(ORDER) - count(NEW-ORDER) = the loaded delivered orders \
                (2100 at standard scale) for each district where no Delivery has run (the \
                specification's condition holds only until then)",
            key: "d_w_id, d_id",
            // A district has seen a Delivery once an order loaded undelivered has a carrier.
            violations: format!(
                "SELECT d_w_id, d_id FROM district d WHERE \
                (SELECT COUNT(*) FROM orders WHERE o_w_id = d.d_w_id AND o_d_id = d.d_id) \
                - (SELECT COUNT(*) FROM new_order WHERE no_w_id = d.d_w_id AND no_d_id = d.d_id) \
                <> {delivered_per_district} \
                AND NOT EXISTS (SELECT 1 FROM orders WHERE o_w_id = d.d_w_id AND o_d_id = d.d_id \
                    AND o_id > {delivered_per_district} AND o_carrier_id IS NOT NULL)"
            ),
        },
        Condition {
            number: 12,
            description: "C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT) for each customer",
            key: "c_w_id, c_d_id, c_id",
            violations: format!(
                "SELECT c_w_id, c_d_id, c_id FROM customer \
                LEFT JOIN ({DELIVERED_PER_CUSTOMER}) ol \
                    ON ol.o_w_id = c_w_id AND ol.o_d_id = c_d_id AND ol.o_c_id = c_id \
                WHERE c_balance + c_ytd_payment <> COALESCE(ol.amount, 0)"
            ),
        },
    ]
}

/// Evaluates the twelve conditions, in order.
///
/// `delivered_per_district` is what condition 11 expects: the scale's
/// [`delivered_per_district`](crate::ScaleConfig::delivered_per_district) (2,100 at the
/// standard scale). As the specification notes, condition 11 holds only until the first
/// Delivery transaction, so it is checked on the districts where none has run.
pub async fn check(
    conn: &mut AnyConnection,
    delivered_per_district: i64,
) -> Result<Vec<CheckResult>, CheckError> {
    let mut results = Vec::new();
    for condition in conditions(delivered_per_district) {
        let number = condition.number;
        let err = |source| CheckError { number, source };
        let count: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM ({}) v",
            condition.violations
        )))
        .fetch_one(&mut *conn)
        .await
        .map_err(err)?;
        let detail = if count == 0 {
            "ok".to_owned()
        } else {
            let first = sqlx::query(AssertSqlSafe(format!(
                "SELECT {key} FROM ({sql}) v ORDER BY {key} LIMIT 1",
                key = condition.key,
                sql = condition.violations
            )))
            .fetch_one(&mut *conn)
            .await
            .map_err(err)?;
            let mut values = Vec::new();
            for (i, name) in condition.key.split(", ").enumerate() {
                let value: i64 = first.try_get(i).map_err(err)?;
                values.push(format!("{name}={value}"));
            }
            format!("{count} violation(s); first at {}", values.join(", "))
        };
        results.push(CheckResult {
            number,
            description: condition.description,
            passed: count == 0,
            detail,
        });
    }
    Ok(results)
}
