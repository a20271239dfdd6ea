//! The five transaction programs (clauses 2.4 to 2.8).
//!
//! Every database node must reach the same state and return the same result bytes, so the
//! programs read no clock, no randomness and no database default: every value written comes
//! from the operation or from rows read in the same transaction. Rows are ordered only by
//! integer columns; the one ordering by text (customers by first name) is done in Rust on the
//! bytes, because PostgreSQL sorts text by the database's locale and SQLite by bytes.
//!
//! Arithmetic on stored values is checked: a value no run of the benchmark can reach is
//! corrupt state ([`ExecError::Corrupt`]), never a wrap, a panic, or an SQL overflow (which
//! PostgreSQL reports and SQLite turns into a floating-point value).
//!
//! An input that names nothing (an unknown warehouse, district or customer) is refused with
//! [`TpccResult::Invalid`] before the program writes anything, so a refusal leaves the
//! database unchanged. New-Order's unused item is only found while the order is being
//! written; it rolls back to a savepoint, as clause 2.4.2.3 requires.
//!
//! Each statement costs a database node a hand-off to SQLite's thread or a round trip to the
//! PostgreSQL server, so New-Order reads the items and the stock of all its lines, updates the
//! stock and inserts the lines each in one statement (about a dozen statements for an order
//! of ten lines instead of about fifty), and applies the lines to the stock rows in memory in
//! line order.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, AssertSqlSafe, Decode, Row, Type};

use dbvote::ExecError;

use crate::txn::{
    Address, CustomerSelector, Delivery, DeliveryResult, InvalidInput, LastOrder, NewOrder,
    NewOrderLine, NewOrderLineResult, NewOrderResult, OrderStatus, OrderStatusLine,
    OrderStatusResult, Payment, PaymentResult, StockLevel, StockLevelResult, TpccOp, TpccResult,
};

/// Runs `op` inside the executor's open transaction.
///
/// Input out of the specification's ranges or naming nothing is a [`TpccResult::Invalid`]
/// (identical on every node); `Err` only for a failing database or corrupt tables, and the
/// executor then rolls back whatever the program wrote.
pub(crate) async fn run(tx: &mut AnyConnection, op: &TpccOp) -> Result<TpccResult, ExecError> {
    // The program does not know how many warehouses the cluster serves; the ones that do
    // not exist are found in the database.
    if let Err(invalid) = op.validate(u32::MAX) {
        return Ok(TpccResult::Invalid(invalid));
    }
    let outcome = match op {
        TpccOp::NewOrder(o) => new_order(tx, o).await,
        TpccOp::Payment(p) => payment(tx, p).await,
        TpccOp::OrderStatus(o) => order_status(tx, o).await,
        TpccOp::Delivery(d) => delivery(tx, d).await,
        TpccOp::StockLevel(s) => stock_level(tx, s).await,
    };
    match outcome {
        Ok(result) => Ok(result),
        Err(Stop::Refused(invalid)) => Ok(TpccResult::Invalid(invalid)),
        Err(Stop::Failed(error)) => Err(error),
    }
}

/// Why a program ended without its screen.
enum Stop {
    /// An input names nothing. Raised only before the program's first write, so nothing
    /// changed.
    Refused(InvalidInput),
    /// The database failed or holds what the programs never write.
    Failed(ExecError),
}

impl From<ExecError> for Stop {
    fn from(error: ExecError) -> Stop {
        Stop::Failed(error)
    }
}

impl From<sqlx::Error> for Stop {
    fn from(error: sqlx::Error) -> Stop {
        Stop::Failed(ExecError::Sql(error))
    }
}

type Program = Result<TpccResult, Stop>;

fn refuse(field: &str, problem: String) -> Stop {
    Stop::Refused(InvalidInput {
        field: field.to_owned(),
        problem,
    })
}

fn corrupt(what: String) -> Stop {
    Stop::Failed(ExecError::Corrupt(what))
}

/// A column of a row read by a program. A value that does not decode (a `NULL` in a column
/// the programs always fill, text in an integer column) is corrupt state, not a database
/// failure.
fn get<'r, T: Decode<'r, Any> + Type<Any>>(row: &'r AnyRow, column: &str) -> Result<T, Stop> {
    row.try_get(column)
        .map_err(|e| corrupt(format!("column {column}: {e}")))
}

/// `value + delta` for a stored counter or amount.
fn add(value: i64, delta: i64, what: &str) -> Result<i64, Stop> {
    value
        .checked_add(delta)
        .ok_or_else(|| corrupt(format!("{what} {value} + {delta} overflows")))
}

/// The five address columns `{prefix}_street_1` ... `{prefix}_zip`.
fn address(row: &AnyRow, prefix: &str) -> Result<Address, Stop> {
    let text = |suffix: &str| get::<String>(row, &format!("{prefix}_{suffix}"));
    Ok(Address {
        street_1: text("street_1")?,
        street_2: text("street_2")?,
        city: text("city")?,
        state: text("state")?,
        zip: text("zip")?,
    })
}

struct Warehouse {
    name: String,
    address: Address,
    /// 1/10000.
    tax: i64,
    /// Cents.
    ytd: i64,
}

/// Warehouse `w_id`, or a refusal naming `field` (the input that named it) if it does not
/// exist.
async fn read_warehouse(tx: &mut AnyConnection, field: &str, w_id: u32) -> Result<Warehouse, Stop> {
    let row = sqlx::query(
        "SELECT w_name, w_street_1, w_street_2, w_city, w_state, w_zip, w_tax, w_ytd \
         FROM warehouse WHERE w_id = $1",
    )
    .bind(i64::from(w_id))
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| refuse(field, format!("warehouse {w_id} does not exist")))?;
    Ok(Warehouse {
        name: get(&row, "w_name")?,
        address: address(&row, "w")?,
        tax: get(&row, "w_tax")?,
        ytd: get(&row, "w_ytd")?,
    })
}

struct District {
    name: String,
    address: Address,
    /// 1/10000.
    tax: i64,
    /// Cents.
    ytd: i64,
    next_o_id: i64,
}

/// District `d_id` of warehouse `w_id` (known to exist), or a refusal naming `field`.
async fn read_district(
    tx: &mut AnyConnection,
    field: &str,
    w_id: u32,
    d_id: u32,
) -> Result<District, Stop> {
    let row = sqlx::query(
        "SELECT d_name, d_street_1, d_street_2, d_city, d_state, d_zip, d_tax, d_ytd, \
         d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2",
    )
    .bind(i64::from(w_id))
    .bind(i64::from(d_id))
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| {
        refuse(
            field,
            format!("district {d_id} of warehouse {w_id} does not exist"),
        )
    })?;
    Ok(District {
        name: get(&row, "d_name")?,
        address: address(&row, "d")?,
        tax: get(&row, "d_tax")?,
        ytd: get(&row, "d_ytd")?,
        next_o_id: get(&row, "d_next_o_id")?,
    })
}

/// The customer columns that New-Order, Payment, Order-Status and Delivery read.
struct Customer {
    id: i64,
    first: String,
    middle: String,
    last: String,
    address: Address,
    phone: String,
    since: i64,
    credit: String,
    /// Cents.
    credit_lim: i64,
    /// 1/10000.
    discount: i64,
    /// Cents.
    balance: i64,
    /// Cents.
    ytd_payment: i64,
    payment_cnt: i64,
    delivery_cnt: i64,
    data: String,
}

/// Customer `c_id` of district (`w_id`, `d_id`), if it exists.
async fn read_customer(
    tx: &mut AnyConnection,
    w_id: i64,
    d_id: i64,
    c_id: i64,
) -> Result<Option<Customer>, Stop> {
    let row = sqlx::query(
        "SELECT c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, \
         c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance, c_ytd_payment, \
         c_payment_cnt, c_delivery_cnt, c_data \
         FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
    )
    .bind(w_id)
    .bind(d_id)
    .bind(c_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(Customer {
        id: c_id,
        first: get(&row, "c_first")?,
        middle: get(&row, "c_middle")?,
        last: get(&row, "c_last")?,
        address: address(&row, "c")?,
        phone: get(&row, "c_phone")?,
        since: get(&row, "c_since")?,
        credit: get(&row, "c_credit")?,
        credit_lim: get(&row, "c_credit_lim")?,
        discount: get(&row, "c_discount")?,
        balance: get(&row, "c_balance")?,
        ytd_payment: get(&row, "c_ytd_payment")?,
        payment_cnt: get(&row, "c_payment_cnt")?,
        delivery_cnt: get(&row, "c_delivery_cnt")?,
        data: get(&row, "c_data")?,
    }))
}

/// The customer Payment and Order-Status name (clauses 2.5.2.2 and 2.6.2.2), by id or by last
/// name, in district (`w_id`, `d_id`), which is known to exist.
async fn select_customer(
    tx: &mut AnyConnection,
    w_id: u32,
    d_id: u32,
    selector: &CustomerSelector,
) -> Result<Customer, Stop> {
    let c_id = match selector {
        CustomerSelector::Id(c_id) => i64::from(*c_id),
        CustomerSelector::LastName(c_last) => customer_by_last_name(tx, w_id, d_id, c_last).await?,
    };
    read_customer(tx, i64::from(w_id), i64::from(d_id), c_id)
        .await?
        .ok_or_else(|| unknown_customer(w_id, d_id, c_id))
}

fn unknown_customer(w_id: u32, d_id: u32, c_id: i64) -> Stop {
    refuse(
        "c_id",
        format!("customer {c_id} of district {d_id} of warehouse {w_id} does not exist"),
    )
}

/// The id of the customer at position ⌈n/2⌉ of the `n` customers of the district whose last
/// name is `c_last`, sorted by first name (clause 2.5.2.2).
///
/// Sorted here, by the bytes of `c_first` and then by `c_id`, rather than with `ORDER BY
/// c_first`: PostgreSQL would sort by the database's locale and SQLite by bytes, and nodes on
/// the two backends would pick different customers. The id breaks ties between equal first
/// names so that the order is total.
async fn customer_by_last_name(
    tx: &mut AnyConnection,
    w_id: u32,
    d_id: u32,
    c_last: &str,
) -> Result<i64, Stop> {
    let rows = sqlx::query(
        "SELECT c_id, c_first FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3",
    )
    .bind(i64::from(w_id))
    .bind(i64::from(d_id))
    .bind(c_last)
    .fetch_all(&mut *tx)
    .await?;
    let mut customers = rows
        .iter()
        .map(|row| Ok((get::<String>(row, "c_first")?, get::<i64>(row, "c_id")?)))
        .collect::<Result<Vec<_>, Stop>>()?;
    customers.sort_unstable_by(|a, b| (a.0.as_bytes(), a.1).cmp(&(b.0.as_bytes(), b.1)));
    // Position ⌈n/2⌉ counted from 1 is index ⌈n/2⌉ - 1 = (n - 1) / 2.
    match customers.get(customers.len().saturating_sub(1) / 2) {
        Some(&(_, c_id)) => Ok(c_id),
        None => Err(refuse(
            "c_last",
            format!(
                "no customer of district {d_id} of warehouse {w_id} has the last name {c_last:?}"
            ),
        )),
    }
}

/// New-Order (clause 2.4.2.2).
///
/// Everything that can refuse the order (warehouse, district, customer, supply warehouses) is
/// looked up before the first write. The items are looked up while the order is written, as
/// in the specification; an unused item rolls everything back to the savepoint taken before
/// the first write (clause 2.4.2.3).
async fn new_order(tx: &mut AnyConnection, o: &NewOrder) -> Program {
    let warehouse = read_warehouse(tx, "w_id", o.w_id).await?;
    let district = read_district(tx, "d_id", o.w_id, o.d_id).await?;
    let c_id = i64::from(o.c_id);
    let customer = read_customer(tx, i64::from(o.w_id), i64::from(o.d_id), c_id)
        .await?
        .ok_or_else(|| unknown_customer(o.w_id, o.d_id, c_id))?;
    for (n, line) in o.lines.iter().enumerate() {
        if line.supply_w_id != o.w_id {
            let field = format!("ol_supply_w_id_{}", n + 1);
            read_warehouse(tx, &field, line.supply_w_id).await?;
        }
    }

    let o_id = district.next_o_id;
    sqlx::raw_sql("SAVEPOINT tpcc_new_order")
        .execute(&mut *tx)
        .await?;
    let entered = enter_order(tx, o, o_id).await?;
    if entered.is_none() {
        sqlx::raw_sql("ROLLBACK TO SAVEPOINT tpcc_new_order")
            .execute(&mut *tx)
            .await?;
    }
    sqlx::raw_sql("RELEASE SAVEPOINT tpcc_new_order")
        .execute(&mut *tx)
        .await?;
    let Some(lines) = entered else {
        return Ok(TpccResult::NewOrderRolledBack {
            w_id: i64::from(o.w_id),
            d_id: i64::from(o.d_id),
            c_id,
            o_id,
            c_last: customer.last,
            c_credit: customer.credit,
        });
    };

    let amounts = lines.iter().map(|l| i128::from(l.ol_amount)).sum();
    let total_amount = total_amount(amounts, customer.discount, warehouse.tax, district.tax)?;
    Ok(TpccResult::NewOrder(NewOrderResult {
        w_id: i64::from(o.w_id),
        d_id: i64::from(o.d_id),
        c_id,
        c_last: customer.last,
        c_credit: customer.credit,
        c_discount: customer.discount,
        o_id,
        o_ol_cnt: o.lines.len() as i64,
        o_entry_d: o.entry_d,
        w_tax: warehouse.tax,
        d_tax: district.tax,
        lines,
        total_amount,
    }))
}

/// Writes order `o_id`: the district's next order id, the order, its new-order row and its
/// lines with their stock. `None` if an item does not exist; the caller then rolls back what
/// was written.
async fn enter_order(
    tx: &mut AnyConnection,
    o: &NewOrder,
    o_id: i64,
) -> Result<Option<Vec<NewOrderLineResult>>, Stop> {
    let w_id = i64::from(o.w_id);
    let d_id = i64::from(o.d_id);
    sqlx::query("UPDATE district SET d_next_o_id = $1 WHERE d_w_id = $2 AND d_id = $3")
        .bind(add(o_id, 1, "d_next_o_id")?)
        .bind(w_id)
        .bind(d_id)
        .execute(&mut *tx)
        .await?;
    let all_local = o.lines.iter().all(|l| l.supply_w_id == o.w_id);
    sqlx::query(
        "INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, \
         o_all_local) VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
    )
    .bind(o_id)
    .bind(d_id)
    .bind(w_id)
    .bind(i64::from(o.c_id))
    .bind(o.entry_d)
    .bind(o.lines.len() as i64)
    .bind(i64::from(all_local))
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)")
        .bind(o_id)
        .bind(d_id)
        .bind(w_id)
        .execute(&mut *tx)
        .await?;

    let items = read_items(tx, &o.lines).await?;
    if o.lines.iter().any(|l| !items.contains_key(&l.i_id)) {
        return Ok(None);
    }
    order_lines(tx, o, o_id, &items).await.map(Some)
}

/// What New-Order reads of an item.
struct Item {
    /// Cents.
    price: i64,
    name: String,
    data: String,
}

/// The items the lines name that exist, in one statement.
async fn read_items(
    tx: &mut AnyConnection,
    lines: &[NewOrderLine],
) -> Result<BTreeMap<u32, Item>, Stop> {
    let ids: BTreeSet<u32> = lines.iter().map(|l| l.i_id).collect();
    let sql = format!(
        "SELECT i_id, i_price, i_name, i_data FROM item WHERE i_id IN ({})",
        placeholders(1, ids.len())
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for &id in &ids {
        query = query.bind(i64::from(id));
    }
    let mut items = BTreeMap::new();
    for row in query.fetch_all(&mut *tx).await? {
        let id: i64 = get(&row, "i_id")?;
        let id = u32::try_from(id).map_err(|_| corrupt(format!("item id {id} out of range")))?;
        let item = Item {
            price: get(&row, "i_price")?,
            name: get(&row, "i_name")?,
            data: get(&row, "i_data")?,
        };
        items.insert(id, item);
    }
    Ok(items)
}

/// A stock row as the order's lines leave it, line by line.
struct Stock {
    quantity: i64,
    ytd: i64,
    order_cnt: i64,
    remote_cnt: i64,
    dist_info: String,
    data: String,
}

/// The order's lines (every item exists): takes each line's quantity from its supply
/// warehouse's stock, in line order (a line naming the stock an earlier line took from sees
/// what that line left), and writes the lines. Three statements whatever the line count: the
/// stock read, the stock update and the lines' insert, each for all lines at once.
async fn order_lines(
    tx: &mut AnyConnection,
    o: &NewOrder,
    o_id: i64,
    items: &BTreeMap<u32, Item>,
) -> Result<Vec<NewOrderLineResult>, Stop> {
    let mut stock = read_stock(tx, o).await?;
    let mut results = Vec::with_capacity(o.lines.len());
    let mut inserts = Vec::with_capacity(o.lines.len());
    for line in &o.lines {
        let (i_id, supply_w_id) = (i64::from(line.i_id), i64::from(line.supply_w_id));
        let item = &items[&line.i_id];
        let row = stock
            .get_mut(&(line.supply_w_id, line.i_id))
            .ok_or_else(|| {
                corrupt(format!(
                    "item {i_id} has no stock in warehouse {supply_w_id}"
                ))
            })?;
        let quantity = i64::from(line.quantity);
        // Restocked by 91 when fewer than 10 would remain.
        row.quantity = if row.quantity >= add(quantity, 10, "ol_quantity")? {
            row.quantity - quantity
        } else {
            add(row.quantity - quantity, 91, "s_quantity")?
        };
        row.ytd = add(row.ytd, quantity, "s_ytd")?;
        row.order_cnt = add(row.order_cnt, 1, "s_order_cnt")?;
        row.remote_cnt = add(
            row.remote_cnt,
            i64::from(line.supply_w_id != o.w_id),
            "s_remote_cnt",
        )?;
        let ol_amount = quantity
            .checked_mul(item.price)
            .ok_or_else(|| corrupt(format!("i_price {} of item {i_id} overflows", item.price)))?;
        let original = item.data.contains("ORIGINAL") && row.data.contains("ORIGINAL");
        inserts.push((line, quantity, ol_amount, row.dist_info.clone()));
        results.push(NewOrderLineResult {
            supply_w_id,
            i_id,
            i_name: item.name.clone(),
            quantity,
            s_quantity: row.quantity,
            brand_generic: if original { "B" } else { "G" }.to_owned(),
            i_price: item.price,
            ol_amount,
        });
    }
    write_stock(tx, &stock).await?;

    let sql = format!(
        "INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, \
         ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) VALUES {}",
        (0..inserts.len())
            .map(|n| {
                let p = 1 + 9 * n;
                format!("({}, NULL, {})", placeholders(p, 6), placeholders(p + 6, 3))
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut insert = sqlx::query(AssertSqlSafe(sql));
    for (ol_number, (line, quantity, ol_amount, dist_info)) in (1i64..).zip(inserts) {
        insert = insert
            .bind(o_id)
            .bind(i64::from(o.d_id))
            .bind(i64::from(o.w_id))
            .bind(ol_number)
            .bind(i64::from(line.i_id))
            .bind(i64::from(line.supply_w_id))
            .bind(quantity)
            .bind(ol_amount)
            .bind(dist_info);
    }
    insert.execute(&mut *tx).await?;
    Ok(results)
}

/// The stock rows the order's lines take from, by (supply warehouse, item), in one statement.
async fn read_stock(
    tx: &mut AnyConnection,
    o: &NewOrder,
) -> Result<BTreeMap<(u32, u32), Stock>, Stop> {
    let keys: BTreeSet<(u32, u32)> = o.lines.iter().map(|l| (l.supply_w_id, l.i_id)).collect();
    // d_id is in 1..=10 (validated), so this names one of the ten s_dist columns.
    let s_dist = format!("s_dist_{:02}", o.d_id);
    let wanted = (0..keys.len())
        .map(|n| format!("(s_w_id = ${} AND s_i_id = ${})", 1 + 2 * n, 2 + 2 * n))
        .collect::<Vec<_>>()
        .join(" OR ");
    let sql = format!(
        "SELECT s_w_id, s_i_id, s_quantity, {s_dist} AS s_dist, s_data, s_ytd, s_order_cnt, \
         s_remote_cnt FROM stock WHERE {wanted}"
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for &(w, i) in &keys {
        query = query.bind(i64::from(w)).bind(i64::from(i));
    }
    let mut stock = BTreeMap::new();
    for row in query.fetch_all(&mut *tx).await? {
        let key = |column: &str| -> Result<u32, Stop> {
            let v: i64 = get(&row, column)?;
            u32::try_from(v).map_err(|_| corrupt(format!("{column} {v} out of range")))
        };
        let at = (key("s_w_id")?, key("s_i_id")?);
        let row = Stock {
            quantity: get(&row, "s_quantity")?,
            ytd: get(&row, "s_ytd")?,
            order_cnt: get(&row, "s_order_cnt")?,
            remote_cnt: get(&row, "s_remote_cnt")?,
            dist_info: get(&row, "s_dist")?,
            data: get(&row, "s_data")?,
        };
        stock.insert(at, row);
    }
    Ok(stock)
}

/// Writes the stock rows as the lines left them, in one statement.
async fn write_stock(
    tx: &mut AnyConnection,
    stock: &BTreeMap<(u32, u32), Stock>,
) -> Result<(), Stop> {
    let rows = (0..stock.len())
        .map(|n| {
            let casts: Vec<String> = (1 + 6 * n..1 + 6 * (n + 1))
                .map(|p| format!("CAST(${p} AS BIGINT)"))
                .collect();
            format!("({})", casts.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ");
    // VALUES names its columns column1, column2, ... in SQLite and PostgreSQL alike.
    let sql = format!(
        "UPDATE stock SET s_quantity = v.column3, s_ytd = v.column4, s_order_cnt = v.column5, \
         s_remote_cnt = v.column6 FROM (VALUES {rows}) AS v \
         WHERE stock.s_w_id = v.column1 AND stock.s_i_id = v.column2"
    );
    let mut update = sqlx::query(AssertSqlSafe(sql));
    for (&(w, i), row) in stock {
        update = update
            .bind(i64::from(w))
            .bind(i64::from(i))
            .bind(row.quantity)
            .bind(row.ytd)
            .bind(row.order_cnt)
            .bind(row.remote_cnt);
    }
    update.execute(&mut *tx).await?;
    Ok(())
}

/// `$first, $first+1, ...`: `count` placeholders.
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// New-Order's total in cents: `amounts × (1 − c_discount) × (1 + w_tax + d_tax)` with the
/// rates in 1/10000, rounded half up (clause 2.4.2.2), in integers so that every node gets the
/// same cent.
fn total_amount(amounts: i128, c_discount: i64, w_tax: i64, d_tax: i64) -> Result<i64, Stop> {
    const RATE: i128 = 10_000;
    let overflow = || {
        corrupt(format!("total of {amounts} cents at discount {c_discount}, taxes {w_tax} and {d_tax} overflows"))
    };
    let discounted = RATE - i128::from(c_discount);
    let taxed = RATE + i128::from(w_tax) + i128::from(d_tax);
    let exact = amounts
        .checked_mul(discounted)
        .and_then(|x| x.checked_mul(taxed))
        .ok_or_else(overflow)?;
    let cents = (exact + RATE * RATE / 2).div_euclid(RATE * RATE);
    i64::try_from(cents).map_err(|_| overflow())
}

/// Payment (clause 2.5.2.2). Every lookup that can refuse the payment comes before the first
/// write.
async fn payment(tx: &mut AnyConnection, p: &Payment) -> Program {
    let warehouse = read_warehouse(tx, "w_id", p.w_id).await?;
    let district = read_district(tx, "d_id", p.w_id, p.d_id).await?;
    if p.c_w_id != p.w_id {
        read_warehouse(tx, "c_w_id", p.c_w_id).await?;
    }
    read_district(tx, "c_d_id", p.c_w_id, p.c_d_id).await?;
    let customer = select_customer(tx, p.c_w_id, p.c_d_id, &p.customer).await?;

    sqlx::query("UPDATE warehouse SET w_ytd = $1 WHERE w_id = $2")
        .bind(add(warehouse.ytd, p.h_amount, "w_ytd")?)
        .bind(i64::from(p.w_id))
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE district SET d_ytd = $1 WHERE d_w_id = $2 AND d_id = $3")
        .bind(add(district.ytd, p.h_amount, "d_ytd")?)
        .bind(i64::from(p.w_id))
        .bind(i64::from(p.d_id))
        .execute(&mut *tx)
        .await?;

    let c_balance = add(customer.balance, -p.h_amount, "c_balance")?;
    // A bad-credit customer's payment is recorded at the left of c_data, which keeps its first
    // 500 characters; the screen shows the first 200.
    let (c_data, shown) = if customer.credit == "BC" {
        let entry = format!(
            "{} {} {} {} {} {} {}",
            customer.id, p.c_d_id, p.c_w_id, p.d_id, p.w_id, p.h_amount, customer.data
        );
        let c_data: String = entry.chars().take(500).collect();
        let shown = c_data.chars().take(200).collect();
        (c_data, shown)
    } else {
        (customer.data, String::new())
    };
    sqlx::query(
        "UPDATE customer SET c_balance = $1, c_ytd_payment = $2, c_payment_cnt = $3, \
         c_data = $4 WHERE c_w_id = $5 AND c_d_id = $6 AND c_id = $7",
    )
    .bind(c_balance)
    .bind(add(customer.ytd_payment, p.h_amount, "c_ytd_payment")?)
    .bind(add(customer.payment_cnt, 1, "c_payment_cnt")?)
    .bind(c_data)
    .bind(i64::from(p.c_w_id))
    .bind(i64::from(p.c_d_id))
    .bind(customer.id)
    .execute(&mut *tx)
    .await?;

    sqlx::query(
        "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, \
         h_data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(customer.id)
    .bind(i64::from(p.c_d_id))
    .bind(i64::from(p.c_w_id))
    .bind(i64::from(p.d_id))
    .bind(i64::from(p.w_id))
    .bind(p.h_date)
    .bind(p.h_amount)
    .bind(format!("{}    {}", warehouse.name, district.name))
    .execute(&mut *tx)
    .await?;

    Ok(TpccResult::Payment(Box::new(PaymentResult {
        w_id: i64::from(p.w_id),
        d_id: i64::from(p.d_id),
        c_id: customer.id,
        c_w_id: i64::from(p.c_w_id),
        c_d_id: i64::from(p.c_d_id),
        h_date: p.h_date,
        h_amount: p.h_amount,
        w_address: warehouse.address,
        d_address: district.address,
        c_first: customer.first,
        c_middle: customer.middle,
        c_last: customer.last,
        c_address: customer.address,
        c_phone: customer.phone,
        c_since: customer.since,
        c_credit: customer.credit,
        c_credit_lim: customer.credit_lim,
        c_discount: customer.discount,
        c_balance,
        c_data: shown,
    })))
}

/// Order-Status (clause 2.6.2.2): read only.
async fn order_status(tx: &mut AnyConnection, o: &OrderStatus) -> Program {
    read_warehouse(tx, "w_id", o.w_id).await?;
    read_district(tx, "d_id", o.w_id, o.d_id).await?;
    let customer = select_customer(tx, o.w_id, o.d_id, &o.customer).await?;
    let order = last_order(tx, o.w_id, o.d_id, customer.id).await?;
    Ok(TpccResult::OrderStatus(OrderStatusResult {
        w_id: i64::from(o.w_id),
        d_id: i64::from(o.d_id),
        c_id: customer.id,
        c_first: customer.first,
        c_middle: customer.middle,
        c_last: customer.last,
        c_balance: customer.balance,
        order,
    }))
}

/// The customer's order with the largest id (order ids grow with time), with its lines.
async fn last_order(
    tx: &mut AnyConnection,
    w_id: u32,
    d_id: u32,
    c_id: i64,
) -> Result<Option<LastOrder>, Stop> {
    let order = sqlx::query(
        "SELECT o_id, o_entry_d, o_carrier_id FROM orders \
         WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1",
    )
    .bind(i64::from(w_id))
    .bind(i64::from(d_id))
    .bind(c_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(order) = order else { return Ok(None) };
    let o_id: i64 = get(&order, "o_id")?;
    let rows = sqlx::query(
        "SELECT ol_supply_w_id, ol_i_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 ORDER BY ol_number",
    )
    .bind(i64::from(w_id))
    .bind(i64::from(d_id))
    .bind(o_id)
    .fetch_all(&mut *tx)
    .await?;
    let lines = rows
        .iter()
        .map(|row| {
            Ok(OrderStatusLine {
                supply_w_id: get(row, "ol_supply_w_id")?,
                i_id: get(row, "ol_i_id")?,
                quantity: get(row, "ol_quantity")?,
                amount: get(row, "ol_amount")?,
                delivery_d: get(row, "ol_delivery_d")?,
            })
        })
        .collect::<Result<_, Stop>>()?;
    Ok(Some(LastOrder {
        o_id,
        o_entry_d: get(&order, "o_entry_d")?,
        o_carrier_id: get(&order, "o_carrier_id")?,
        lines,
    }))
}

/// Delivery (clause 2.7.4.2): the oldest undelivered order of every district of the
/// warehouse, in district order. The districts are read from the table because a scaled-down
/// database may have fewer than ten.
async fn delivery(tx: &mut AnyConnection, d: &Delivery) -> Program {
    read_warehouse(tx, "w_id", d.w_id).await?;
    let rows = sqlx::query("SELECT d_id FROM district WHERE d_w_id = $1 ORDER BY d_id")
        .bind(i64::from(d.w_id))
        .fetch_all(&mut *tx)
        .await?;
    let mut delivered = Vec::with_capacity(rows.len());
    for row in &rows {
        let d_id: i64 = get(row, "d_id")?;
        delivered.push((d_id, deliver_oldest(tx, d, d_id).await?));
    }
    Ok(TpccResult::Delivery(DeliveryResult {
        w_id: i64::from(d.w_id),
        o_carrier_id: i64::from(d.o_carrier_id),
        delivered,
    }))
}

/// Delivers the district's oldest undelivered order and returns its id; `None` (the district
/// is skipped) if it has none.
async fn deliver_oldest(
    tx: &mut AnyConnection,
    d: &Delivery,
    d_id: i64,
) -> Result<Option<i64>, Stop> {
    let w_id = i64::from(d.w_id);
    let oldest = sqlx::query(
        "SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 \
         ORDER BY no_o_id LIMIT 1",
    )
    .bind(w_id)
    .bind(d_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(oldest) = oldest else {
        return Ok(None);
    };
    let o_id: i64 = get(&oldest, "no_o_id")?;
    sqlx::query("DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3")
        .bind(w_id)
        .bind(d_id)
        .bind(o_id)
        .execute(&mut *tx)
        .await?;

    let order =
        sqlx::query("SELECT o_c_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3")
            .bind(w_id)
            .bind(d_id)
            .bind(o_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| {
                corrupt(format!(
                    "new order {o_id} of district {d_id} of warehouse {w_id} has no order row"
                ))
            })?;
    let c_id: i64 = get(&order, "o_c_id")?;
    sqlx::query(
        "UPDATE orders SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4",
    )
    .bind(i64::from(d.o_carrier_id))
    .bind(w_id)
    .bind(d_id)
    .bind(o_id)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE order_line SET ol_delivery_d = $1 \
         WHERE ol_w_id = $2 AND ol_d_id = $3 AND ol_o_id = $4",
    )
    .bind(d.delivery_d)
    .bind(w_id)
    .bind(d_id)
    .bind(o_id)
    .execute(&mut *tx)
    .await?;
    // Summed here: PostgreSQL's SUM(BIGINT) is NUMERIC, which the Any driver cannot decode.
    let amounts = sqlx::query(
        "SELECT ol_amount FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
    )
    .bind(w_id)
    .bind(d_id)
    .bind(o_id)
    .fetch_all(&mut *tx)
    .await?;
    let mut amount = 0i64;
    for row in &amounts {
        amount = add(amount, get(row, "ol_amount")?, "ol_amount sum")?;
    }

    let customer = read_customer(tx, w_id, d_id, c_id).await?.ok_or_else(|| {
        corrupt(format!(
            "order {o_id} of district {d_id} of warehouse {w_id} names customer {c_id}, \
             who does not exist"
        ))
    })?;
    sqlx::query(
        "UPDATE customer SET c_balance = $1, c_delivery_cnt = $2 \
         WHERE c_w_id = $3 AND c_d_id = $4 AND c_id = $5",
    )
    .bind(add(customer.balance, amount, "c_balance")?)
    .bind(add(customer.delivery_cnt, 1, "c_delivery_cnt")?)
    .bind(w_id)
    .bind(d_id)
    .bind(c_id)
    .execute(&mut *tx)
    .await?;
    Ok(Some(o_id))
}

/// Stock-Level (clause 2.8.2.2): read only.
async fn stock_level(tx: &mut AnyConnection, s: &StockLevel) -> Program {
    read_warehouse(tx, "w_id", s.w_id).await?;
    let district = read_district(tx, "d_id", s.w_id, s.d_id).await?;
    let row = sqlx::query(
        "SELECT COUNT(DISTINCT s_i_id) AS low_stock FROM order_line \
         JOIN stock ON s_w_id = ol_w_id AND s_i_id = ol_i_id \
         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id >= $3 AND ol_o_id < $4 \
         AND s_quantity < $5",
    )
    .bind(i64::from(s.w_id))
    .bind(i64::from(s.d_id))
    .bind(district.next_o_id.saturating_sub(20))
    .bind(district.next_o_id)
    .bind(i64::from(s.threshold))
    .fetch_one(&mut *tx)
    .await?;
    Ok(TpccResult::StockLevel(StockLevelResult {
        w_id: i64::from(s.w_id),
        d_id: i64::from(s.d_id),
        threshold: i64::from(s.threshold),
        low_stock: get(&row, "low_stock")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_amount_rounds_half_up_to_the_cent() {
        // 100.00 at no discount and no tax.
        assert_eq!(total_amount(10_000, 0, 0, 0).ok(), Some(10_000));
        // 0.01 × 0.5 = 0.005: half a cent rounds up; 0.01 × 0.4999 rounds down.
        assert_eq!(total_amount(1, 5_000, 0, 0).ok(), Some(1));
        assert_eq!(total_amount(1, 5_001, 0, 0).ok(), Some(0));
        // 1,107.45 × 0.8766 × 1.15 = 1,116.4092705.
        assert_eq!(total_amount(110_745, 1_234, 1_000, 500).ok(), Some(111_641));
        assert!(total_amount(i128::MAX, 0, 0, 0).is_err());
        assert!(total_amount(i128::from(i64::MAX), 0, 10_000, 0).is_err());
    }
}
