//! The five TPC-C transactions as ordered operations, and their results.
//!
//! Everything the specification draws at random or reads from a clock (items, quantities,
//! supply warehouses, the customer by id or by last name, dates, the 1% unused item that rolls
//! a New-Order back) is chosen by the client before ordering and carried here, so that every
//! database node runs the same program on the same inputs. Operations and results use
//! [`dbvote::canonical`]'s encoding, so correct nodes return identical bytes.
//!
//! Warehouse `w` (numbered from 1, as in the specification) is partition `w - 1`: a cluster
//! configured with `n` partitions serves warehouses `1..=n`. An operation declares the
//! warehouses it touches ([`TpccOp::warehouses`]); one that touches a remote warehouse is a
//! multi-partition operation.
//!
//! Money is in cents and rates in 1/10000, as in the [schema](crate::schema).

use dbvote::canonical::{decode_exact, encode};
use dbvote::{AppError, PartitionId};
use serde::{Deserialize, Serialize};

/// The name of the application, recorded in each database node's database.
pub const NAME: &str = "tpcc";

/// The specification's ranges for inputs (clauses 2.4.1 to 2.8.1), enforced by
/// [`TpccOp::validate`] at the gateway and again by the programs.
pub mod limits {
    /// Order lines of a New-Order: the generator draws 5 to 15; a terminal accepts 1 to 15
    /// (the screen has 15 line slots).
    pub const LINES: std::ops::RangeInclusive<usize> = 1..=15;
    /// Quantity of an order line.
    pub const QUANTITY: std::ops::RangeInclusive<u32> = 1..=10;
    /// Districts per warehouse.
    pub const DISTRICT: std::ops::RangeInclusive<u32> = 1..=10;
    /// Payment amount in cents: 1.00 to 5,000.00.
    pub const AMOUNT: std::ops::RangeInclusive<i64> = 100..=500_000;
    /// Carrier of a Delivery.
    pub const CARRIER: std::ops::RangeInclusive<u32> = 1..=10;
    /// Stock-Level threshold.
    pub const THRESHOLD: std::ops::RangeInclusive<u32> = 10..=20;
    /// Length of a customer's last name (`c_last` is `VARCHAR(16)`).
    pub const LAST_NAME_LEN: std::ops::RangeInclusive<usize> = 1..=16;
}

/// The five transaction types, for the mix, metrics and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TxnKind {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

impl TxnKind {
    /// All five, in the specification's order.
    pub const ALL: [TxnKind; 5] = [
        TxnKind::NewOrder,
        TxnKind::Payment,
        TxnKind::OrderStatus,
        TxnKind::Delivery,
        TxnKind::StockLevel,
    ];

    /// The specification's name.
    pub fn name(self) -> &'static str {
        match self {
            TxnKind::NewOrder => "New-Order",
            TxnKind::Payment => "Payment",
            TxnKind::OrderStatus => "Order-Status",
            TxnKind::Delivery => "Delivery",
            TxnKind::StockLevel => "Stock-Level",
        }
    }
}

/// A TPC-C transaction with all of its inputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TpccOp {
    NewOrder(NewOrder),
    Payment(Payment),
    OrderStatus(OrderStatus),
    Delivery(Delivery),
    StockLevel(StockLevel),
}

/// New-Order (clause 2.4): enter an order of `lines` for customer `c_id` of district `d_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrder {
    pub w_id: u32,
    pub d_id: u32,
    pub c_id: u32,
    /// `o_entry_d`, seconds since the Unix epoch, read from the client's clock.
    pub entry_d: i64,
    pub lines: Vec<NewOrderLine>,
}

/// One item of a New-Order. An `i_id` that names no item rolls the whole transaction back
/// (the specification's 1% of New-Orders whose last item is unused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderLine {
    pub i_id: u32,
    pub supply_w_id: u32,
    pub quantity: u32,
}

/// How Payment and Order-Status select a customer (clauses 2.5.2.2, 2.6.2.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CustomerSelector {
    /// By `c_id`.
    Id(u32),
    /// By `c_last`: the customer at position ⌈n/2⌉ of those with this last name in the
    /// district, sorted by `c_first` (byte order, so that every backend picks the same one).
    LastName(String),
}

/// Payment (clause 2.5): customer (`c_w_id`, `c_d_id`, `customer`) pays `h_amount` through
/// district `d_id` of warehouse `w_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub w_id: u32,
    pub d_id: u32,
    pub c_w_id: u32,
    pub c_d_id: u32,
    pub customer: CustomerSelector,
    /// Cents.
    pub h_amount: i64,
    /// `h_date`, seconds since the Unix epoch.
    pub h_date: i64,
}

/// Order-Status (clause 2.6): a customer's last order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatus {
    pub w_id: u32,
    pub d_id: u32,
    pub customer: CustomerSelector,
}

/// Delivery (clause 2.7): deliver the oldest undelivered order of each district of `w_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub w_id: u32,
    pub o_carrier_id: u32,
    /// `ol_delivery_d`, seconds since the Unix epoch.
    pub delivery_d: i64,
}

/// Stock-Level (clause 2.8): items of the district's last 20 orders with stock below
/// `threshold`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevel {
    pub w_id: u32,
    pub d_id: u32,
    pub threshold: u32,
}

/// An input outside the specification's ranges, or naming something that does not exist
/// (unknown warehouse, district, customer). Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidInput {
    /// The input at fault, as the gateway's form names it (`w_id`, `d_id`, `ol_quantity_3`...).
    pub field: String,
    /// What is wrong and what is allowed.
    pub problem: String,
}

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for InvalidInput {}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> InvalidInput {
    InvalidInput {
        field: field.into(),
        problem: problem.into(),
    }
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    value: T,
    range: &std::ops::RangeInclusive<T>,
) -> Result<(), InvalidInput> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "{value} is out of range: use {} to {}",
                range.start(),
                range.end()
            ),
        ))
    }
}

fn warehouse(field: &str, w_id: u32, warehouses: u32) -> Result<(), InvalidInput> {
    if (1..=warehouses).contains(&w_id) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "warehouse {w_id} does not exist: this database has warehouses 1 to {warehouses}"
            ),
        ))
    }
}

fn customer(selector: &CustomerSelector) -> Result<(), InvalidInput> {
    match selector {
        CustomerSelector::Id(0) => Err(invalid("c_id", "customer ids start at 1")),
        CustomerSelector::Id(_) => Ok(()),
        CustomerSelector::LastName(name) => {
            in_range("c_last", name.chars().count(), &limits::LAST_NAME_LEN)
        }
    }
}

impl TpccOp {
    /// The canonical bytes of this operation.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Decodes operation bytes.
    pub fn decode(bytes: &[u8]) -> Result<TpccOp, AppError> {
        decode_exact(NAME, bytes)
    }

    /// The transaction type.
    pub fn kind(&self) -> TxnKind {
        match self {
            TpccOp::NewOrder(_) => TxnKind::NewOrder,
            TpccOp::Payment(_) => TxnKind::Payment,
            TpccOp::OrderStatus(_) => TxnKind::OrderStatus,
            TpccOp::Delivery(_) => TxnKind::Delivery,
            TpccOp::StockLevel(_) => TxnKind::StockLevel,
        }
    }

    /// The warehouses the transaction touches, sorted and distinct: the home warehouse, plus
    /// New-Order's supply warehouses and Payment's customer warehouse.
    pub fn warehouses(&self) -> Vec<u32> {
        let mut ws = match self {
            TpccOp::NewOrder(o) => std::iter::once(o.w_id)
                .chain(o.lines.iter().map(|l| l.supply_w_id))
                .collect(),
            TpccOp::Payment(p) => vec![p.w_id, p.c_w_id],
            TpccOp::OrderStatus(o) => vec![o.w_id],
            TpccOp::Delivery(d) => vec![d.w_id],
            TpccOp::StockLevel(s) => vec![s.w_id],
        };
        ws.sort_unstable();
        ws.dedup();
        ws
    }

    /// The partitions of [`warehouses`](Self::warehouses) (warehouse `w` is partition `w - 1`).
    /// Warehouse 0 does not exist and makes the operation malformed.
    pub fn partitions(&self) -> Result<Vec<PartitionId>, AppError> {
        self.warehouses()
            .into_iter()
            .map(|w| {
                w.checked_sub(1).ok_or_else(|| AppError::Malformed {
                    app: NAME,
                    len: 0,
                    reason: "warehouse ids start at 1".into(),
                })
            })
            .collect()
    }

    /// Checks every input against the specification's ranges and `warehouses` (the number of
    /// warehouses the cluster serves), naming the first field at fault. Whether the district,
    /// customer and items exist is for the program to find out.
    pub fn validate(&self, warehouses: u32) -> Result<(), InvalidInput> {
        match self {
            TpccOp::NewOrder(o) => {
                warehouse("w_id", o.w_id, warehouses)?;
                in_range("d_id", o.d_id, &limits::DISTRICT)?;
                customer(&CustomerSelector::Id(o.c_id))?;
                if !limits::LINES.contains(&o.lines.len()) {
                    return Err(invalid(
                        "ol_cnt",
                        format!(
                            "an order has {} to {} items, not {}",
                            limits::LINES.start(),
                            limits::LINES.end(),
                            o.lines.len()
                        ),
                    ));
                }
                for (n, line) in o.lines.iter().enumerate() {
                    let n = n + 1;
                    if line.i_id == 0 {
                        return Err(invalid(format!("ol_i_id_{n}"), "item ids start at 1"));
                    }
                    warehouse(&format!("ol_supply_w_id_{n}"), line.supply_w_id, warehouses)?;
                    in_range(
                        &format!("ol_quantity_{n}"),
                        line.quantity,
                        &limits::QUANTITY,
                    )?;
                }
                Ok(())
            }
            TpccOp::Payment(p) => {
                warehouse("w_id", p.w_id, warehouses)?;
                in_range("d_id", p.d_id, &limits::DISTRICT)?;
                warehouse("c_w_id", p.c_w_id, warehouses)?;
                in_range("c_d_id", p.c_d_id, &limits::DISTRICT)?;
                customer(&p.customer)?;
                in_range("h_amount", p.h_amount, &limits::AMOUNT)
            }
            TpccOp::OrderStatus(o) => {
                warehouse("w_id", o.w_id, warehouses)?;
                in_range("d_id", o.d_id, &limits::DISTRICT)?;
                customer(&o.customer)
            }
            TpccOp::Delivery(d) => {
                warehouse("w_id", d.w_id, warehouses)?;
                in_range("o_carrier_id", d.o_carrier_id, &limits::CARRIER)
            }
            TpccOp::StockLevel(s) => {
                warehouse("w_id", s.w_id, warehouses)?;
                in_range("d_id", s.d_id, &limits::DISTRICT)?;
                in_range("threshold", s.threshold, &limits::THRESHOLD)
            }
        }
    }
}

/// What a transaction returned: the data of its terminal screen (clauses 2.4.3 to 2.8.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TpccResult {
    NewOrder(NewOrderResult),
    /// An item number was not valid: the transaction was rolled back (clause 2.4.2.3) and
    /// only these fields are shown.
    NewOrderRolledBack {
        w_id: i64,
        d_id: i64,
        c_id: i64,
        /// The order number the transaction would have had.
        o_id: i64,
        c_last: String,
        c_credit: String,
    },
    Payment(Box<PaymentResult>),
    OrderStatus(OrderStatusResult),
    Delivery(DeliveryResult),
    StockLevel(StockLevelResult),
    /// Refused: nothing changed.
    Invalid(InvalidInput),
}

impl TpccResult {
    /// The canonical bytes of this result.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Decodes result bytes.
    pub fn decode(bytes: &[u8]) -> Result<TpccResult, AppError> {
        decode_exact(NAME, bytes)
    }
}

/// A street address as the screens show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    pub street_1: String,
    pub street_2: String,
    pub city: String,
    pub state: String,
    pub zip: String,
}

/// New-Order's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderResult {
    pub w_id: i64,
    pub d_id: i64,
    pub c_id: i64,
    pub c_last: String,
    pub c_credit: String,
    /// 1/10000.
    pub c_discount: i64,
    pub o_id: i64,
    pub o_ol_cnt: i64,
    pub o_entry_d: i64,
    /// 1/10000.
    pub w_tax: i64,
    /// 1/10000.
    pub d_tax: i64,
    pub lines: Vec<NewOrderLineResult>,
    /// Cents: sum(ol_amount) × (1 − c_discount) × (1 + w_tax + d_tax), rounded half up.
    pub total_amount: i64,
}

/// One line of New-Order's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderLineResult {
    pub supply_w_id: i64,
    pub i_id: i64,
    pub i_name: String,
    pub quantity: i64,
    /// After the order.
    pub s_quantity: i64,
    /// `B` if both `i_data` and `s_data` contain "ORIGINAL", else `G`.
    pub brand_generic: String,
    /// Cents.
    pub i_price: i64,
    /// Cents.
    pub ol_amount: i64,
}

/// Payment's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentResult {
    pub w_id: i64,
    pub d_id: i64,
    pub c_id: i64,
    pub c_w_id: i64,
    pub c_d_id: i64,
    pub h_date: i64,
    /// Cents.
    pub h_amount: i64,
    pub w_address: Address,
    pub d_address: Address,
    pub c_first: String,
    pub c_middle: String,
    pub c_last: String,
    pub c_address: Address,
    pub c_phone: String,
    pub c_since: i64,
    pub c_credit: String,
    /// Cents.
    pub c_credit_lim: i64,
    /// 1/10000.
    pub c_discount: i64,
    /// Cents, after the payment.
    pub c_balance: i64,
    /// The first 200 characters of `c_data` for bad-credit (`BC`) customers, else empty.
    pub c_data: String,
}

/// Order-Status's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatusResult {
    pub w_id: i64,
    pub d_id: i64,
    pub c_id: i64,
    pub c_first: String,
    pub c_middle: String,
    pub c_last: String,
    /// Cents.
    pub c_balance: i64,
    /// The customer's most recent order, if any.
    pub order: Option<LastOrder>,
}

/// The last order on Order-Status's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastOrder {
    pub o_id: i64,
    pub o_entry_d: i64,
    pub o_carrier_id: Option<i64>,
    pub lines: Vec<OrderStatusLine>,
}

/// One line of Order-Status's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatusLine {
    pub supply_w_id: i64,
    pub i_id: i64,
    pub quantity: i64,
    /// Cents.
    pub amount: i64,
    pub delivery_d: Option<i64>,
}

/// Delivery's result: per district, the order delivered (`None`: no undelivered order, the
/// district was skipped, clause 2.7.4.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryResult {
    pub w_id: i64,
    pub o_carrier_id: i64,
    pub delivered: Vec<(i64, Option<i64>)>,
}

/// Stock-Level's screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevelResult {
    pub w_id: i64,
    pub d_id: i64,
    pub threshold: i64,
    /// Distinct items of the district's last 20 orders with `s_quantity` below the threshold.
    pub low_stock: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_order(lines: Vec<NewOrderLine>) -> TpccOp {
        TpccOp::NewOrder(NewOrder {
            w_id: 2,
            d_id: 3,
            c_id: 4,
            entry_d: 1,
            lines,
        })
    }

    fn line(i_id: u32, supply_w_id: u32, quantity: u32) -> NewOrderLine {
        NewOrderLine {
            i_id,
            supply_w_id,
            quantity,
        }
    }

    #[test]
    fn remote_supply_makes_a_multi_partition_operation() {
        let local = new_order(vec![line(1, 2, 1), line(2, 2, 5)]);
        assert_eq!(local.partitions().unwrap(), vec![1]);
        let remote = new_order(vec![line(1, 2, 1), line(2, 1, 5), line(3, 1, 5)]);
        assert_eq!(remote.partitions().unwrap(), vec![0, 1]);
        assert_eq!(TpccOp::decode(&remote.encode()).unwrap(), remote);
    }

    #[test]
    fn out_of_range_inputs_name_their_field() {
        let field = |op: TpccOp| op.validate(2).unwrap_err().field;
        assert_eq!(field(new_order(vec![])), "ol_cnt");
        assert_eq!(field(new_order(vec![line(1, 2, 11)])), "ol_quantity_1");
        assert_eq!(
            field(new_order(vec![line(1, 2, 1), line(0, 2, 1)])),
            "ol_i_id_2"
        );
        assert_eq!(field(new_order(vec![line(1, 3, 1)])), "ol_supply_w_id_1");
        assert!(new_order(vec![line(1, 1, 10)]).validate(2).is_ok());
        let payment = |w_id, amount| {
            TpccOp::Payment(Payment {
                w_id,
                d_id: 1,
                c_w_id: 1,
                c_d_id: 1,
                customer: CustomerSelector::LastName("BARBARBAR".into()),
                h_amount: amount,
                h_date: 0,
            })
        };
        assert_eq!(field(payment(3, 100)), "w_id");
        assert_eq!(field(payment(1, 99)), "h_amount");
        assert!(payment(1, 500_000).validate(2).is_ok());
        let stock = TpccOp::StockLevel(StockLevel {
            w_id: 1,
            d_id: 11,
            threshold: 10,
        });
        assert_eq!(field(stock), "d_id");
    }

    #[test]
    fn warehouse_zero_is_malformed_and_trailing_bytes_are_refused() {
        assert!(new_order(vec![line(1, 0, 1)]).partitions().is_err());
        let mut bytes = new_order(vec![line(1, 2, 1)]).encode();
        bytes.push(0);
        assert!(TpccOp::decode(&bytes).is_err());
    }
}
