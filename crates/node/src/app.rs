//! The cluster's application, as named by `application` in cluster.toml: the partition rule the
//! primary, replicas and voters apply, the pages the replicas render, and the transaction
//! programs the database nodes run.

use crate::NodeError;
use dbvote::bank::{Bank, BankOp, BankResult};
use dbvote::noop::{Noop, NoopOp};
use dbvote::AppRule;
use group::render::Renderer;
use proto::{PartitionRule, RequestBody};
use std::fmt::Write;
use std::sync::Arc;

/// The applications a cluster can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppKind {
    Bank,
    Noop,
    Tpcc,
}

impl AppKind {
    /// The application named by the cluster configuration.
    pub fn of(cluster: &proto::config::Cluster) -> Result<AppKind, NodeError> {
        match cluster.config.application.as_str() {
            "bank" => Ok(AppKind::Bank),
            "noop" => Ok(AppKind::Noop),
            "tpcc" => Ok(AppKind::Tpcc),
            other => Err(NodeError::Config {
                field: "application".into(),
                fix: format!(
                    "\"{other}\" is not an application: use \"bank\", \"noop\" or \"tpcc\""
                ),
            }),
        }
    }

    /// The partition rule every role applies.
    pub fn rule(self) -> Arc<dyn PartitionRule> {
        match self {
            AppKind::Bank => Arc::new(AppRule(Bank)),
            AppKind::Noop => Arc::new(AppRule(Noop)),
            AppKind::Tpcc => Arc::new(AppRule(tpcc::Tpcc)),
        }
    }

    /// The pages the replicas render.
    pub fn renderer(self) -> Arc<dyn Renderer> {
        Arc::new(Pages(self))
    }
}

/// Deterministic HTML pages: the same request and result give the same bytes on every replica,
/// and nothing replica-specific (id, time) goes into them.
///
/// The application's body goes into `<div id="result">`, a block that may hold the paragraphs
/// of the bank and no-op pages as well as TPC-C's lists and tables (a `<p>` may not).
struct Pages(AppKind);

impl Renderer for Pages {
    fn render(&self, request: &RequestBody, result: &[u8]) -> Vec<u8> {
        let (title, body) = match self.0 {
            AppKind::Bank => paragraph(bank_page(&request.operation, result)),
            AppKind::Noop => paragraph(noop_page(&request.operation, result)),
            AppKind::Tpcc => tpcc::pages::render(&request.operation, result),
        };
        let mut page = String::new();
        let _ = write!(
            page,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>cloudbft: {title}</title></head>\n<body>\n<h1 id=\"title\">{title}</h1>\n\
             <div id=\"result\">\n{body}</div>\n\
             <p id=\"request\">Client {} request {}, agreed by the replicas of the group.</p>\n\
             <p><a href=\"/\">Back</a></p>\n</body></html>\n",
            request.client.0, request.timestamp
        );
        page.into_bytes()
    }
}

/// A one-sentence page body as its paragraph.
fn paragraph((title, text): (&'static str, String)) -> (&'static str, String) {
    (title, format!("<p>{text}</p>\n"))
}

fn cents(c: u64) -> String {
    format!("{}.{:02}", c / 100, c % 100)
}

fn bank_page(operation: &[u8], result: &[u8]) -> (&'static str, String) {
    let (Ok(op), Ok(result)) = (BankOp::decode(operation), BankResult::decode(result)) else {
        return (
            "Error",
            "The database nodes returned an unreadable result.".into(),
        );
    };
    let title = match op {
        BankOp::Open { .. } => "Open account",
        BankOp::Deposit { .. } => "Deposit",
        BankOp::Transfer { .. } => "Transfer",
        BankOp::Balance { .. } => "Balance",
    };
    let body = match (&op, result) {
        (BankOp::Open { branch, number, .. }, BankResult::Ok { balance_cents }) => format!(
            "Account {branch}/{number} opened with balance {}.",
            cents(balance_cents)
        ),
        (BankOp::Transfer { from, to, cents: c }, BankResult::Ok { balance_cents }) => format!(
            "Transferred {} from {}/{} to {}/{}; balance of {}/{} is now {}.",
            cents(*c),
            from.0,
            from.1,
            to.0,
            to.1,
            from.0,
            from.1,
            cents(balance_cents)
        ),
        (
            BankOp::Deposit { branch, number, .. } | BankOp::Balance { branch, number },
            BankResult::Ok { balance_cents },
        ) => format!(
            "Balance of account {branch}/{number}: {}.",
            cents(balance_cents)
        ),
        (_, BankResult::InsufficientFunds { balance_cents }) => format!(
            "Insufficient funds: the balance is {}; nothing changed.",
            cents(balance_cents)
        ),
        (_, BankResult::NoSuchAccount { branch, number }) => {
            format!("There is no account {branch}/{number}; nothing changed.")
        }
        (_, BankResult::AlreadyExists) => "That account exists already; nothing changed.".into(),
        (_, BankResult::AmountTooLarge) => "The amount is too large; nothing changed.".into(),
    };
    (title, body)
}

fn noop_page(operation: &[u8], result: &[u8]) -> (&'static str, String) {
    let partitions = NoopOp::decode(operation)
        .map(|op| format!("{:?}", op.partitions))
        .unwrap_or_default();
    let len = <[u8; 8]>::try_from(result).map_or(0, u64::from_be_bytes);
    (
        "No-op",
        format!("Executed on partitions {partitions} ({len} payload bytes)."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::ClientId;

    fn request(operation: Vec<u8>, partitions: Vec<u32>) -> RequestBody {
        RequestBody {
            client: ClientId(1),
            timestamp: 5,
            partitions,
            operation,
        }
    }

    #[test]
    fn bank_pages_are_deterministic_and_say_what_happened() {
        let op = BankOp::Transfer {
            from: (0, 1),
            to: (1, 2),
            cents: 250,
        };
        let r = request(op.encode(), op.partitions());
        let result = BankResult::Ok {
            balance_cents: 1050,
        }
        .encode();
        let pages = AppKind::Bank.renderer();
        let page = String::from_utf8(pages.render(&r, &result)).unwrap();
        assert_eq!(page.as_bytes(), pages.render(&r, &result));
        assert!(page.contains(
            "<div id=\"result\">\n<p>Transferred 2.50 from 0/1 to 1/2; balance of 0/1 is now \
             10.50.</p>\n</div>"
        ));
        let garbage = String::from_utf8(pages.render(&r, b"\xff\xff")).unwrap();
        assert!(garbage.contains("unreadable"));
    }

    #[test]
    fn tpcc_pages_hold_the_transaction_screen() {
        use tpcc::txn::{StockLevel, StockLevelResult, TpccOp, TpccResult};
        let op = TpccOp::StockLevel(StockLevel {
            w_id: 2,
            d_id: 3,
            threshold: 12,
        });
        let r = request(op.encode(), op.partitions().unwrap());
        let result = TpccResult::StockLevel(StockLevelResult {
            w_id: 2,
            d_id: 3,
            threshold: 12,
            low_stock: 4,
        })
        .encode();
        let mut cluster = proto::testing::TestCluster::new(1, 1, 1, 1).cluster;
        cluster.config.application = "tpcc".into();
        let kind = AppKind::of(&cluster).unwrap();
        assert_eq!(kind, AppKind::Tpcc);
        assert_eq!(kind.rule().partitions(&r.operation), Some(vec![1]));
        let pages = kind.renderer();
        let page = String::from_utf8(pages.render(&r, &result)).unwrap();
        assert_eq!(page.as_bytes(), pages.render(&r, &result));
        assert!(
            page.contains("<title>cloudbft: Stock-Level</title>"),
            "{page}"
        );
        assert!(page.contains("<div id=\"result\">\n<dl>"), "{page}");
        assert!(page.contains("<dd id=\"low_stock\">4</dd>"), "{page}");
    }

    #[test]
    fn unknown_application_is_a_config_error() {
        let mut cluster = proto::testing::TestCluster::new(1, 1, 1, 1).cluster;
        cluster.config.application = "chess".into();
        let e = AppKind::of(&cluster).unwrap_err().to_string();
        assert!(
            e.contains("application") && e.contains("bank") && e.contains("tpcc"),
            "{e}"
        );
    }
}
