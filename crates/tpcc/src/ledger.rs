//! What the clients were told, checked against what the databases hold: nothing a client was
//! acknowledged may be lost, and nothing may be executed twice.
//!
//! A load driver records every accepted page in a [`Ledger`]: each New-Order that was not
//! rolled back stands for one row of `orders` (the page names its order number), each Payment
//! for one row of `history`. After the run, [`Rows::read`] reads those rows from a database
//! node and [`Ledger::compare`] counts what is missing (lost although acknowledged) and what is
//! there that no client was told of (executed twice, or a request whose reply never came).
//! The consistency conditions cannot see either: a New-Order executed twice is two valid
//! orders.

use crate::pages::{shown, Shown};
use crate::txn::TpccOp;
use crate::ScaleConfig;
use serde::Serialize;
use sqlx::AnyConnection;
use std::collections::BTreeMap;

/// New orders by (`o_w_id`, `o_d_id`, `o_id`): (`o_c_id`, `o_ol_cnt`).
pub type Orders = BTreeMap<(i64, i64, i64), (i64, i64)>;

/// A `history` row: `h_c_w_id`, `h_c_d_id`, `h_c_id`, `h_w_id`, `h_d_id`, `h_amount`, `h_date`.
pub type HistoryRow = [i64; 7];

/// The acknowledged transactions that change rows one can count.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// Accepted New-Orders that were not rolled back.
    pub new_orders: Orders,
    /// Accepted Payments as the history rows they add.
    pub payments: Vec<HistoryRow>,
}

/// An accepted page the ledger cannot account for.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The Invalid screen: generated input is never refused.
    #[error("the cluster refused {op}: {page}")]
    Refused { op: String, page: String },
    /// The page lacks the field that names the row.
    #[error("no {field} in the accepted page {page}")]
    Unreadable { field: &'static str, page: String },
    /// Two accepted New-Orders were given the same order number.
    #[error("two accepted New-Orders got order {0:?}")]
    Duplicate((i64, i64, i64)),
}

/// The number shown in the page element with id `id`.
fn field(page: &str, id: &str) -> Option<i64> {
    page.split(&format!("id=\"{id}\">"))
        .nth(1)?
        .split('<')
        .next()?
        .trim()
        .parse()
        .ok()
}

impl Ledger {
    /// Records the page the cluster accepted for `op`.
    pub fn record(&mut self, op: &TpccOp, page: &[u8]) -> Result<(), LedgerError> {
        let shown = shown(page);
        let page = String::from_utf8_lossy(page);
        let unreadable = |field| LedgerError::Unreadable {
            field,
            page: page.to_string(),
        };
        if shown == Shown::Refused {
            return Err(LedgerError::Refused {
                op: format!("{op:?}"),
                page: page.to_string(),
            });
        }
        match op {
            TpccOp::NewOrder(o) if shown == Shown::Done => {
                let o_id = field(&page, "o_id").ok_or_else(|| unreadable("o_id"))?;
                let key = (i64::from(o.w_id), i64::from(o.d_id), o_id);
                let row = (i64::from(o.c_id), o.lines.len() as i64);
                if self.new_orders.insert(key, row).is_some() {
                    return Err(LedgerError::Duplicate(key));
                }
            }
            TpccOp::Payment(p) => {
                let c_id = field(&page, "c_id").ok_or_else(|| unreadable("c_id"))?;
                self.payments.push([
                    i64::from(p.c_w_id),
                    i64::from(p.c_d_id),
                    c_id,
                    i64::from(p.w_id),
                    i64::from(p.d_id),
                    p.h_amount,
                    p.h_date,
                ]);
            }
            _ => {}
        }
        Ok(())
    }

    /// What `rows` (one database node's, read after the load) lack of the acknowledged
    /// transactions and hold beyond them; `loaded` is the history the database was loaded with.
    pub fn compare(&self, loaded: &[HistoryRow], rows: &Rows) -> Discrepancy {
        let (lost_orders, extra_orders) = differences(
            self.new_orders.iter().map(|(k, v)| (*k, *v)),
            rows.orders.iter().map(|(k, v)| (*k, *v)),
        );
        let (lost_payments, extra_payments) = differences(
            loaded.iter().chain(&self.payments).copied(),
            rows.history.iter().copied(),
        );
        Discrepancy {
            lost_orders,
            extra_orders,
            lost_payments,
            extra_payments,
        }
    }
}

/// How many of `expected` are missing from `found` and how many of `found` are beyond
/// `expected`, counting repeated items (multisets).
fn differences<T: Ord>(
    expected: impl Iterator<Item = T>,
    found: impl Iterator<Item = T>,
) -> (usize, usize) {
    let mut counts: BTreeMap<T, i64> = BTreeMap::new();
    for item in expected {
        *counts.entry(item).or_default() += 1;
    }
    for item in found {
        *counts.entry(item).or_default() -= 1;
    }
    let missing = counts.values().filter(|&&c| c > 0).sum::<i64>();
    let extra = -counts.values().filter(|&&c| c < 0).sum::<i64>();
    (missing as usize, extra as usize)
}

/// What a database holds of the rows a [`Ledger`] counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rows {
    /// The orders added since the load (order numbers above the loaded ones).
    pub orders: Orders,
    /// Every history row, sorted.
    pub history: Vec<HistoryRow>,
}

impl Rows {
    /// Reads them from a database loaded at `scale`.
    pub async fn read(conn: &mut AnyConnection, scale: &ScaleConfig) -> Result<Rows, sqlx::Error> {
        let orders: Vec<(i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT o_w_id, o_d_id, o_id, o_c_id, o_ol_cnt FROM orders WHERE o_id > $1",
        )
        .bind(scale.orders_per_district)
        .fetch_all(&mut *conn)
        .await?;
        Ok(Rows {
            orders: orders
                .into_iter()
                .map(|(w, d, o, c, lines)| ((w, d, o), (c, lines)))
                .collect(),
            history: history(conn).await?,
        })
    }
}

/// Every history row of a database, sorted: what a driver reads after the load, before any
/// transaction, to compare the history with later.
pub async fn history(conn: &mut AnyConnection) -> Result<Vec<HistoryRow>, sqlx::Error> {
    let rows: Vec<(i64, i64, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT h_c_w_id, h_c_d_id, h_c_id, h_w_id, h_d_id, h_amount, h_date FROM history",
    )
    .fetch_all(conn)
    .await?;
    let mut rows: Vec<HistoryRow> = rows
        .into_iter()
        .map(|(a, b, c, d, e, f, g)| [a, b, c, d, e, f, g])
        .collect();
    rows.sort_unstable();
    Ok(rows)
}

/// What one database node lacks of the acknowledged transactions and holds beyond them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Discrepancy {
    /// Acknowledged New-Orders whose order is missing.
    pub lost_orders: usize,
    /// Orders no client was acknowledged.
    pub extra_orders: usize,
    /// Acknowledged Payments whose history row is missing.
    pub lost_payments: usize,
    /// History rows no client was acknowledged.
    pub extra_payments: usize,
}

impl Discrepancy {
    /// Nothing lost and nothing beyond the acknowledged transactions.
    pub fn is_exact(&self) -> bool {
        *self == Discrepancy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_count_repeats() {
        assert_eq!(
            differences([1, 2, 2, 3].into_iter(), [2, 3, 3].into_iter()),
            (2, 1)
        );
        assert_eq!(differences([1].into_iter(), [1].into_iter()), (0, 0));
    }

    #[test]
    fn field_reads_a_number() {
        let page = "<dd id=\"o_id\">3001</dd>";
        assert_eq!(field(page, "o_id"), Some(3001));
        assert_eq!(field(page, "c_id"), None);
    }
}
