//! The gateway's forms: one per operation of the cluster's application, described once so that
//! the index page, the routes and the parsing cannot disagree on a field name.
//!
//! Parsing is strict and names the field at fault, because a bad value must be refused before
//! anything is signed and sent: the cluster would order and execute whatever the gateway sends.
//!
//! TPC-C's fields are named as [`TpccOp::validate`] names its inputs, so that the specification's
//! range checks (run here, against the cluster's warehouses, one per partition) point at the
//! form's own field. The dates TPC-C reads from a terminal's clock are the gateway's clock at
//! parse time: chosen before ordering and carried in the operation, so every database node runs
//! the transaction with the same inputs.

use dbvote::bank::BankOp;
use dbvote::noop::NoopOp;
use proto::PartitionId;
use std::collections::HashMap;
use std::ops::RangeInclusive;
use tpcc::txn::{
    limits, CustomerSelector, Delivery, InvalidInput, NewOrder, NewOrderLine, OrderStatus, Payment,
    StockLevel, TpccOp,
};

/// Payment and Order-Status select the customer by id or by last name (one of the two).
const C_ID: Field = optional(
    "c_id",
    "Customer id (or last name)",
    Kind::Within(1, u32::MAX),
);
const C_LAST: Field = optional(
    "c_last",
    "Customer last name, such as BARBARBAR (or id)",
    Kind::Text,
);

/// The specification's bounds of a district and a line's quantity, for the browser.
const DISTRICT: Kind = Kind::Within(*limits::DISTRICT.start(), *limits::DISTRICT.end());
const QUANTITY: Kind = Kind::Within(*limits::QUANTITY.start(), *limits::QUANTITY.end());

/// The applications the gateway has forms for (the cluster configuration's `application`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum App {
    Bank,
    Noop,
    Tpcc,
}

impl App {
    pub(crate) fn from_name(name: &str) -> Option<App> {
        match name {
            "bank" => Some(App::Bank),
            "noop" => Some(App::Noop),
            "tpcc" => Some(App::Tpcc),
            _ => None,
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            App::Bank => "bank",
            App::Noop => "no-op",
            App::Tpcc => "TPC-C",
        }
    }

    pub(crate) fn forms(self) -> &'static [FormSpec] {
        match self {
            App::Bank => &BANK,
            App::Noop => &NOOP,
            App::Tpcc => &TPCC,
        }
    }
}

/// What a field holds, which decides its parsing and its `<input>`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A partition of the configuration: `0..partitions`.
    Partition,
    /// A TPC-C warehouse: `1..=partitions` (warehouse `w` is partition `w - 1`).
    Warehouse,
    /// A whole number (u32): an account number, a TPC-C district, customer, item, quantity...
    Number,
    /// A whole number the specification bounds (TPC-C districts, quantities, carriers,
    /// thresholds, ids from 1): the browser checks the range before sending, validation again
    /// after.
    Within(u32, u32),
    /// An amount in cents (u64).
    Cents,
    /// An amount in dollars with at most two decimals (`12.34`, `5000`), as a person types a
    /// payment.
    Dollars,
    /// Free text.
    Text,
    /// New-Order's line slots: [`LINE_SLOTS`] rows of the [`LINE_COLUMNS`] inputs, shown as
    /// one table rather than 45 fields.
    OrderLines,
}

/// One input of a form.
#[derive(Debug)]
pub(crate) struct Field {
    /// The `name` sent with the form (its `id` is `{form}-{name}`).
    pub(crate) name: &'static str,
    pub(crate) label: &'static str,
    pub(crate) kind: Kind,
    /// Whether the form is incomplete without it (the browser checks before sending; parsing
    /// checks again).
    pub(crate) required: bool,
}

/// An operation's bytes and the partitions they declare, ready to invoke.
pub(crate) struct Operation {
    pub(crate) partitions: Vec<PartitionId>,
    pub(crate) bytes: Vec<u8>,
}

/// One form: where it posts, what it asks, and how its fields become an operation.
#[derive(Debug)]
pub(crate) struct FormSpec {
    /// The form's `id`.
    pub(crate) id: &'static str,
    /// Where it posts.
    pub(crate) action: &'static str,
    pub(crate) title: &'static str,
    pub(crate) fields: &'static [Field],
    pub(crate) parse: fn(&Fields<'_>) -> Result<Operation, BadInput>,
}

impl FormSpec {
    /// The operation a submission of this form asks for, or the field to correct: what the
    /// gateway signs and sends for it (`now`: the gateway's clock, see [`Fields`]).
    pub(crate) fn operation(
        &self,
        values: &HashMap<String, String>,
        partitions: u32,
        now: i64,
    ) -> Result<Operation, BadInput> {
        (self.parse)(&Fields::new(values, partitions, now))
    }
}

const fn field(name: &'static str, label: &'static str, kind: Kind) -> Field {
    Field {
        name,
        label,
        kind,
        required: true,
    }
}

const fn optional(name: &'static str, label: &'static str, kind: Kind) -> Field {
    Field {
        name,
        label,
        kind,
        required: false,
    }
}

/// New-Order's line slots: the terminal screen's 15.
pub(crate) const LINE_SLOTS: usize = *limits::LINES.end();

/// The inputs of each line slot. Slot `n`'s are named `{name}_{n}` ([`slot`]), as
/// [`TpccOp::validate`] names line `n`'s inputs. Each is optional: unused slots stay blank.
pub(crate) static LINE_COLUMNS: [Field; 3] = [
    optional("ol_i_id", "Item id", Kind::Within(1, u32::MAX)),
    optional(
        "ol_supply_w_id",
        "Supply warehouse (blank: the home warehouse)",
        Kind::Warehouse,
    ),
    optional("ol_quantity", "Quantity", QUANTITY),
];

/// The name of `column`'s input in line slot `n` (from 1).
pub(crate) fn slot(column: &Field, n: usize) -> String {
    format!("{}_{n}", column.name)
}

static BANK: [FormSpec; 4] = [
    FormSpec {
        id: "open",
        action: "/bank/open",
        title: "Open account",
        fields: &[
            field("branch", "Branch", Kind::Partition),
            field("number", "Account number", Kind::Number),
            field("cents", "Initial balance (cents)", Kind::Cents),
        ],
        parse: |f| {
            bank(BankOp::Open {
                branch: f.partition("branch")?,
                number: f.number("number")?,
                initial_cents: f.cents("cents")?,
            })
        },
    },
    FormSpec {
        id: "deposit",
        action: "/bank/deposit",
        title: "Deposit",
        fields: &[
            field("branch", "Branch", Kind::Partition),
            field("number", "Account number", Kind::Number),
            field("cents", "Amount (cents)", Kind::Cents),
        ],
        parse: |f| {
            bank(BankOp::Deposit {
                branch: f.partition("branch")?,
                number: f.number("number")?,
                cents: f.cents("cents")?,
            })
        },
    },
    FormSpec {
        id: "transfer",
        action: "/bank/transfer",
        title: "Transfer",
        fields: &[
            field("from_branch", "From branch", Kind::Partition),
            field("from_number", "From account number", Kind::Number),
            field("to_branch", "To branch", Kind::Partition),
            field("to_number", "To account number", Kind::Number),
            field("cents", "Amount (cents)", Kind::Cents),
        ],
        parse: |f| {
            bank(BankOp::Transfer {
                from: (f.partition("from_branch")?, f.number("from_number")?),
                to: (f.partition("to_branch")?, f.number("to_number")?),
                cents: f.cents("cents")?,
            })
        },
    },
    FormSpec {
        id: "balance",
        action: "/bank/balance",
        title: "Balance",
        fields: &[
            field("branch", "Branch", Kind::Partition),
            field("number", "Account number", Kind::Number),
        ],
        parse: |f| {
            bank(BankOp::Balance {
                branch: f.partition("branch")?,
                number: f.number("number")?,
            })
        },
    },
];

static NOOP: [FormSpec; 1] = [FormSpec {
    id: "noop",
    action: "/noop",
    title: "No-op",
    fields: &[
        field("partition", "Partition", Kind::Partition),
        optional("payload", "Payload (optional text)", Kind::Text),
    ],
    parse: |f| {
        let op = NoopOp {
            partitions: vec![f.partition("partition")?],
            payload: f.text("payload").as_bytes().to_vec(),
        };
        Ok(Operation {
            partitions: op.partitions.clone(),
            bytes: op.encode(),
        })
    },
}];

static TPCC: [FormSpec; 5] = [
    FormSpec {
        id: "new_order",
        action: "/tpcc/new-order",
        title: "New-Order",
        fields: &[
            field("w_id", "Warehouse", Kind::Warehouse),
            field("d_id", "District", DISTRICT),
            field("c_id", "Customer id", Kind::Within(1, u32::MAX)),
            field("lines", "Items, from line 1", Kind::OrderLines),
        ],
        parse: |f| {
            let w_id = f.number("w_id")?;
            let op = NewOrder {
                w_id,
                d_id: f.number("d_id")?,
                c_id: f.number("c_id")?,
                entry_d: f.now,
                lines: f.order_lines(w_id)?,
            };
            tpcc(f, TpccOp::NewOrder(op))
        },
    },
    FormSpec {
        id: "payment",
        action: "/tpcc/payment",
        title: "Payment",
        fields: &[
            field("w_id", "Warehouse", Kind::Warehouse),
            field("d_id", "District", DISTRICT),
            field("c_w_id", "Customer's warehouse", Kind::Warehouse),
            field("c_d_id", "Customer's district", DISTRICT),
            C_ID,
            C_LAST,
            field(
                "h_amount",
                "Amount in dollars, such as 12.34",
                Kind::Dollars,
            ),
        ],
        parse: |f| {
            let op = Payment {
                w_id: f.number("w_id")?,
                d_id: f.number("d_id")?,
                c_w_id: f.number("c_w_id")?,
                c_d_id: f.number("c_d_id")?,
                customer: f.customer()?,
                h_amount: f.dollars("h_amount", &limits::AMOUNT)?,
                h_date: f.now,
            };
            tpcc(f, TpccOp::Payment(op))
        },
    },
    FormSpec {
        id: "order_status",
        action: "/tpcc/order-status",
        title: "Order-Status",
        fields: &[
            field("w_id", "Warehouse", Kind::Warehouse),
            field("d_id", "District", DISTRICT),
            C_ID,
            C_LAST,
        ],
        parse: |f| {
            let op = OrderStatus {
                w_id: f.number("w_id")?,
                d_id: f.number("d_id")?,
                customer: f.customer()?,
            };
            tpcc(f, TpccOp::OrderStatus(op))
        },
    },
    FormSpec {
        id: "delivery",
        action: "/tpcc/delivery",
        title: "Delivery",
        fields: &[
            field("w_id", "Warehouse", Kind::Warehouse),
            field(
                "o_carrier_id",
                "Carrier",
                Kind::Within(*limits::CARRIER.start(), *limits::CARRIER.end()),
            ),
        ],
        parse: |f| {
            let op = Delivery {
                w_id: f.number("w_id")?,
                o_carrier_id: f.number("o_carrier_id")?,
                delivery_d: f.now,
            };
            tpcc(f, TpccOp::Delivery(op))
        },
    },
    FormSpec {
        id: "stock_level",
        action: "/tpcc/stock-level",
        title: "Stock-Level",
        fields: &[
            field("w_id", "Warehouse", Kind::Warehouse),
            field("d_id", "District", DISTRICT),
            field(
                "threshold",
                "Stock level threshold",
                Kind::Within(*limits::THRESHOLD.start(), *limits::THRESHOLD.end()),
            ),
        ],
        parse: |f| {
            let op = StockLevel {
                w_id: f.number("w_id")?,
                d_id: f.number("d_id")?,
                threshold: f.number("threshold")?,
            };
            tpcc(f, TpccOp::StockLevel(op))
        },
    },
];

/// A TPC-C operation, refused unless [`TpccOp::validate`] accepts it against the cluster's
/// warehouses (one per partition).
fn tpcc(f: &Fields<'_>, op: TpccOp) -> Result<Operation, BadInput> {
    op.validate(f.partitions)?;
    // Only warehouse 0 has no partition, and validate refused it.
    let partitions = op.partitions().map_err(|e| bad("w_id", e.to_string()))?;
    Ok(Operation {
        partitions,
        bytes: op.encode(),
    })
}

fn bank(op: BankOp) -> Result<Operation, BadInput> {
    Ok(Operation {
        partitions: op.partitions(),
        bytes: op.encode(),
    })
}

/// A field the user must correct.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadInput {
    /// The field's `name` (a line slot's carries its line number, so it is not static).
    pub(crate) field: String,
    pub(crate) problem: String,
}

fn bad(field: &str, problem: impl Into<String>) -> BadInput {
    BadInput {
        field: field.to_owned(),
        problem: problem.into(),
    }
}

impl From<InvalidInput> for BadInput {
    fn from(invalid: InvalidInput) -> BadInput {
        BadInput {
            field: invalid.field,
            problem: invalid.problem,
        }
    }
}

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// A submitted form's values, with the configuration's partition count to check against and
/// the gateway's clock.
pub(crate) struct Fields<'a> {
    values: &'a HashMap<String, String>,
    partitions: u32,
    /// Seconds since the Unix epoch: TPC-C's entry, payment and delivery dates.
    now: i64,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(values: &'a HashMap<String, String>, partitions: u32, now: i64) -> Self {
        Fields {
            values,
            partitions,
            now,
        }
    }

    /// The trimmed value of `field`, or `None` if it is blank or absent.
    fn optional(&self, field: &str) -> Option<&'a str> {
        self.values
            .get(field)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn required(&self, field: &str) -> Result<&'a str, BadInput> {
        self.optional(field)
            .ok_or_else(|| bad(field, "is missing; fill it in"))
    }

    fn whole<T: std::str::FromStr + std::fmt::Display>(
        field: &str,
        value: &str,
        max: T,
    ) -> Result<T, BadInput> {
        // Digits only: FromStr would also take a leading '+'.
        let parsed = value
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| value.parse().ok())
            .flatten();
        parsed.ok_or_else(|| {
            bad(
                field,
                format!("{value:?} is not a whole number from 0 to {max}"),
            )
        })
    }

    fn partition(&self, field: &str) -> Result<PartitionId, BadInput> {
        let partition: u32 = Self::whole(field, self.required(field)?, u32::MAX)?;
        if partition >= self.partitions {
            return Err(bad(
                field,
                format!(
                    "{partition} does not exist: this cluster has {} (0 to {})",
                    self.partitions,
                    self.partitions.saturating_sub(1)
                ),
            ));
        }
        Ok(partition)
    }

    fn number(&self, field: &str) -> Result<u32, BadInput> {
        Self::whole(field, self.required(field)?, u32::MAX)
    }

    fn optional_number(&self, field: &str) -> Result<Option<u32>, BadInput> {
        self.optional(field)
            .map(|value| Self::whole(field, value, u32::MAX))
            .transpose()
    }

    fn cents(&self, field: &str) -> Result<u64, BadInput> {
        Self::whole(field, self.required(field)?, u64::MAX)
    }

    /// An amount in dollars with at most two decimals as cents, within `range` (in cents; the
    /// refusal states it in dollars, as the person typed it).
    fn dollars(&self, field: &str, range: &RangeInclusive<i64>) -> Result<i64, BadInput> {
        let value = self.required(field)?;
        let not_dollars = || {
            bad(
                field,
                format!(
                    "{value:?} is not an amount in dollars with at most two decimals, \
                     such as 12.34"
                ),
            )
        };
        let digits = |s: &str, max: usize| {
            (1..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
        };
        let (dollars, fraction) = value.split_once('.').unwrap_or((value, "0"));
        // At most 15 digits of dollars, so that the cents fit an i64.
        if !(digits(dollars, 15) && digits(fraction, 2)) {
            return Err(not_dollars());
        }
        let dollars: i64 = dollars.parse().map_err(|_| not_dollars())?;
        let hundredths: i64 = format!("{fraction:0<2}")
            .parse()
            .map_err(|_| not_dollars())?;
        let cents = dollars * 100 + hundredths;
        if !range.contains(&cents) {
            let in_dollars = |c: &i64| format!("{}.{:02}", c / 100, c % 100);
            return Err(bad(
                field,
                format!(
                    "{value} is out of range: use {} to {}",
                    in_dollars(range.start()),
                    in_dollars(range.end())
                ),
            ));
        }
        Ok(cents)
    }

    fn text(&self, field: &str) -> &'a str {
        self.values.get(field).map_or("", String::as_str)
    }

    /// Payment's and Order-Status's customer: by `c_id` or by `c_last`, exactly one, as the
    /// terminal's operator chooses (clauses 2.5.2.2, 2.6.2.2).
    fn customer(&self) -> Result<CustomerSelector, BadInput> {
        match (self.optional_number("c_id")?, self.optional("c_last")) {
            (Some(id), None) => Ok(CustomerSelector::Id(id)),
            (None, Some(last)) => Ok(CustomerSelector::LastName(last.to_owned())),
            (Some(_), Some(_)) => Err(bad(
                "c_id",
                "and c_last are both filled in: select the customer by id or by last name, \
                 not both",
            )),
            (None, None) => Err(bad(
                "c_id",
                "is missing; fill in the customer id or the last name (c_last)",
            )),
        }
    }

    /// New-Order's lines: slots 1 up to the last one with anything filled in, each with its
    /// item id and quantity; a blank supply warehouse is the home warehouse `w_id`. A blank
    /// slot before a filled one is refused rather than skipped, so that line `n` of the order
    /// is slot `n` of the form and the fields [`TpccOp::validate`] names are the form's.
    fn order_lines(&self, w_id: u32) -> Result<Vec<NewOrderLine>, BadInput> {
        let [item, supply, quantity] = &LINE_COLUMNS;
        let filled = |n| {
            LINE_COLUMNS
                .iter()
                .any(|column| self.optional(&slot(column, n)).is_some())
        };
        let count = (1..=LINE_SLOTS).rev().find(|&n| filled(n)).unwrap_or(0);
        (1..=count)
            .map(|n| {
                Ok(NewOrderLine {
                    i_id: self.number(&slot(item, n))?,
                    supply_w_id: self.optional_number(&slot(supply, n))?.unwrap_or(w_id),
                    quantity: self.number(&slot(quantity, n))?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gateway's clock in the tests.
    const NOW: i64 = 1_767_225_600;

    fn parse<K: ToString, V: ToString>(
        app: App,
        id: &str,
        pairs: &[(K, V)],
    ) -> Result<Operation, BadInput> {
        let spec = app.forms().iter().find(|s| s.id == id).unwrap();
        let values = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (spec.parse)(&Fields::new(&values, 4, NOW))
    }

    fn field_of(result: Result<Operation, BadInput>) -> String {
        match result {
            Ok(_) => panic!("accepted bad input"),
            Err(bad) => bad.field,
        }
    }

    /// A value of `kind` every form accepts (10 is in all of TPC-C's ranges, thresholds
    /// included).
    fn sample(kind: Kind) -> &'static str {
        match kind {
            Kind::Partition | Kind::Warehouse => "1",
            _ => "10",
        }
    }

    /// `spec`'s inputs filled in with accepted values: every field but optional text (a
    /// customer's last name is the alternative to the id), and the first order line.
    fn filled(spec: &FormSpec) -> Vec<(String, &'static str)> {
        spec.fields
            .iter()
            .flat_map(|field| match field.kind {
                Kind::OrderLines => LINE_COLUMNS
                    .iter()
                    .map(|column| (slot(column, 1), sample(column.kind)))
                    .collect(),
                Kind::Text if !field.required => vec![],
                kind => vec![(field.name.to_owned(), sample(kind))],
            })
            .collect()
    }

    #[test]
    fn every_form_field_is_parsed_and_every_parsed_field_is_on_the_form() {
        // Each form parses with only its own fields filled in, and names each missing one.
        for app in [App::Bank, App::Noop, App::Tpcc] {
            for spec in app.forms() {
                let full = filled(spec);
                assert!(parse(app, spec.id, &full).is_ok(), "{}", spec.id);
                let required = spec
                    .fields
                    .iter()
                    .filter(|f| f.required && f.kind != Kind::OrderLines);
                for missing in required {
                    let fewer: Vec<_> = full
                        .iter()
                        .filter(|(k, _)| *k != missing.name)
                        .cloned()
                        .collect();
                    assert_eq!(field_of(parse(app, spec.id, &fewer)), missing.name);
                }
            }
        }
    }

    #[test]
    fn bank_operations_and_their_partitions() {
        let transfer = parse(
            App::Bank,
            "transfer",
            &[
                ("from_branch", "3"),
                ("from_number", " 7 "),
                ("to_branch", "1"),
                ("to_number", "8"),
                ("cents", "18446744073709551615"),
            ],
        )
        .unwrap();
        assert_eq!(transfer.partitions, vec![1, 3]);
        assert_eq!(
            BankOp::decode(&transfer.bytes).unwrap(),
            BankOp::Transfer {
                from: (3, 7),
                to: (1, 8),
                cents: u64::MAX
            }
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |pairs: &[(&str, &str)]| field_of(parse(App::Bank, "open", pairs));
        let ok = [("branch", "0"), ("number", "1"), ("cents", "100")];
        let with = |k: &'static str, v: &'static str| {
            let mut pairs = ok.to_vec();
            pairs.retain(|(name, _)| *name != k);
            pairs.push((k, v));
            pairs
        };
        assert_eq!(bad(&with("branch", "4")), "branch");
        assert_eq!(bad(&with("branch", "-1")), "branch");
        assert_eq!(bad(&with("number", "4294967296")), "number");
        assert_eq!(bad(&with("number", "+1")), "number");
        assert_eq!(bad(&with("cents", "1.5")), "cents");
        assert_eq!(bad(&with("cents", "18446744073709551616")), "cents");
        assert_eq!(bad(&with("cents", "  ")), "cents");
        let noop = parse(App::Noop, "noop", &[("partition", "4")]);
        assert_eq!(field_of(noop), "partition");
    }

    #[test]
    fn noop_payload_is_optional() {
        let op = parse(App::Noop, "noop", &[("partition", "2")]).unwrap();
        assert_eq!(op.partitions, vec![2]);
        let op = parse(
            App::Noop,
            "noop",
            &[("partition", "2"), ("payload", "héllo")],
        )
        .unwrap();
        assert_eq!(
            NoopOp::decode(&op.bytes).unwrap().payload,
            "héllo".as_bytes()
        );
    }

    fn tpcc_op(id: &str, pairs: &[(&str, &str)]) -> (Vec<PartitionId>, TpccOp) {
        let op = parse(App::Tpcc, id, pairs).unwrap_or_else(|bad| panic!("{id}: {bad}"));
        (op.partitions, TpccOp::decode(&op.bytes).unwrap())
    }

    #[test]
    fn new_order_lines_and_their_partitions() {
        let (partitions, op) = tpcc_op(
            "new_order",
            &[
                ("w_id", "2"),
                ("d_id", "3"),
                ("c_id", "4"),
                ("ol_i_id_1", "7"),
                ("ol_quantity_1", "5"),
                ("ol_i_id_2", "8"),
                ("ol_supply_w_id_2", "1"),
                ("ol_quantity_2", "10"),
                ("ol_supply_w_id_3", " "),
            ],
        );
        let line = |i_id, supply_w_id, quantity| NewOrderLine {
            i_id,
            supply_w_id,
            quantity,
        };
        assert_eq!(
            op,
            TpccOp::NewOrder(NewOrder {
                w_id: 2,
                d_id: 3,
                c_id: 4,
                entry_d: NOW,
                lines: vec![line(7, 2, 5), line(8, 1, 10)],
            })
        );
        // The remote supply warehouse 1 makes it a multi-partition operation.
        assert_eq!(partitions, vec![0, 1]);
    }

    #[test]
    fn payment_order_status_delivery_and_stock_level() {
        let (partitions, op) = tpcc_op(
            "payment",
            &[
                ("w_id", "2"),
                ("d_id", "3"),
                ("c_w_id", "1"),
                ("c_d_id", "9"),
                ("c_last", " BARBARBAR "),
                ("h_amount", "12.34"),
            ],
        );
        assert_eq!(
            op,
            TpccOp::Payment(Payment {
                w_id: 2,
                d_id: 3,
                c_w_id: 1,
                c_d_id: 9,
                customer: CustomerSelector::LastName("BARBARBAR".into()),
                h_amount: 1_234,
                h_date: NOW,
            })
        );
        assert_eq!(partitions, vec![0, 1]);
        let amount = |text| {
            let pairs = [
                ("w_id", "1"),
                ("d_id", "1"),
                ("c_w_id", "1"),
                ("c_d_id", "1"),
                ("c_id", "1"),
                ("h_amount", text),
            ];
            match tpcc_op("payment", &pairs).1 {
                TpccOp::Payment(p) => p.h_amount,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(amount("5000"), 500_000);
        assert_eq!(amount("1.5"), 150);
        assert_eq!(amount("0012.05"), 1_205);

        let (partitions, op) = tpcc_op(
            "order_status",
            &[("w_id", "4"), ("d_id", "10"), ("c_id", "2999")],
        );
        assert_eq!(
            op,
            TpccOp::OrderStatus(OrderStatus {
                w_id: 4,
                d_id: 10,
                customer: CustomerSelector::Id(2999),
            })
        );
        assert_eq!(partitions, vec![3]);
        let (_, op) = tpcc_op("delivery", &[("w_id", "1"), ("o_carrier_id", "7")]);
        assert_eq!(
            op,
            TpccOp::Delivery(Delivery {
                w_id: 1,
                o_carrier_id: 7,
                delivery_d: NOW,
            })
        );
        let (_, op) = tpcc_op(
            "stock_level",
            &[("w_id", "3"), ("d_id", "2"), ("threshold", "20")],
        );
        assert_eq!(
            op,
            TpccOp::StockLevel(StockLevel {
                w_id: 3,
                d_id: 2,
                threshold: 20,
            })
        );
    }

    #[test]
    fn bad_tpcc_input_names_its_field() {
        /// `pairs` with `changes` applied (a blank value removes the field).
        fn with<'a>(
            pairs: &[(&'a str, &'a str)],
            changes: &[(&'a str, &'a str)],
        ) -> Vec<(&'a str, &'a str)> {
            let mut out: Vec<_> = pairs
                .iter()
                .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
                .copied()
                .collect();
            out.extend(changes.iter().filter(|(_, v)| !v.is_empty()));
            out
        }
        let order = [
            ("w_id", "1"),
            ("d_id", "1"),
            ("c_id", "1"),
            ("ol_i_id_1", "1"),
            ("ol_quantity_1", "1"),
        ];
        let new_order = |changes: &[(&str, &str)]| {
            field_of(parse(App::Tpcc, "new_order", &with(&order, changes)))
        };
        // 4 partitions: warehouses 1 to 4.
        assert_eq!(new_order(&[("w_id", "5")]), "w_id");
        assert_eq!(new_order(&[("w_id", "0")]), "w_id");
        assert_eq!(new_order(&[("d_id", "11")]), "d_id");
        assert_eq!(
            new_order(&[("ol_i_id_1", ""), ("ol_quantity_1", "")]),
            "ol_cnt"
        );
        assert_eq!(new_order(&[("ol_quantity_1", "11")]), "ol_quantity_1");
        assert_eq!(new_order(&[("ol_quantity_1", "")]), "ol_quantity_1");
        assert_eq!(new_order(&[("ol_supply_w_id_1", "5")]), "ol_supply_w_id_1");
        assert_eq!(new_order(&[("ol_i_id_1", "0")]), "ol_i_id_1");
        // A quantity without an item, and a gap before a filled slot.
        assert_eq!(new_order(&[("ol_quantity_2", "1")]), "ol_i_id_2");
        assert_eq!(
            new_order(&[("ol_i_id_3", "1"), ("ol_quantity_3", "1")]),
            "ol_i_id_2"
        );
        assert_eq!(new_order(&[("ol_i_id_15", "x")]), "ol_i_id_2");

        let payment = [
            ("w_id", "1"),
            ("d_id", "1"),
            ("c_w_id", "1"),
            ("c_d_id", "1"),
            ("c_id", "1"),
            ("h_amount", "1"),
        ];
        let payment =
            |changes: &[(&str, &str)]| parse(App::Tpcc, "payment", &with(&payment, changes));
        for amount in [
            "0.50",
            "12.345",
            "5000.01",
            "-5",
            "1e3",
            "12.",
            ".5",
            "1,000",
            "1234567890123456",
        ] {
            let bad = payment(&[("h_amount", amount)])
                .err()
                .unwrap_or_else(|| panic!("{amount}"));
            assert_eq!(bad.field, "h_amount", "{amount}");
        }
        let small = payment(&[("h_amount", "0.50")]).err().unwrap();
        assert_eq!(small.problem, "0.50 is out of range: use 1.00 to 5000.00");
        assert_eq!(field_of(payment(&[("c_last", "BARBARBAR")])), "c_id");
        assert_eq!(field_of(payment(&[("c_id", "")])), "c_id");
        assert_eq!(
            field_of(payment(&[("c_id", ""), ("c_last", "BARBARBARBARBARBAR")])),
            "c_last"
        );
        assert_eq!(field_of(payment(&[("c_w_id", "9")])), "c_w_id");

        let one = |id, pairs: &[(&str, &str)]| field_of(parse(App::Tpcc, id, pairs));
        assert_eq!(
            one("delivery", &[("w_id", "1"), ("o_carrier_id", "0")]),
            "o_carrier_id"
        );
        assert_eq!(
            one(
                "stock_level",
                &[("w_id", "1"), ("d_id", "1"), ("threshold", "9")]
            ),
            "threshold"
        );
        assert_eq!(one("order_status", &[("w_id", "1"), ("d_id", "1")]), "c_id");
    }
}
