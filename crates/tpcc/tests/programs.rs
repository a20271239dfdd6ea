//! The five transaction programs against the specification (clauses 2.4 to 2.8), on SQLite
//! and PostgreSQL, through the executor as database nodes run them.
//!
//! Expected values are computed here, independently of the programs: from the loader's
//! known cardinalities, from rows set up by the test, and from SQL or Rust counts.

mod common;

use common::{dump, fresh, Kind, TestDb};
use dbvote::testing::Sequencer;
use dbvote::{Application, Execution, Executor, Outcome};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Connection, FromRow};
use std::collections::BTreeSet;
use tpcc::random::{last_name, TpccRng};
use tpcc::txn::{
    CustomerSelector, Delivery, DeliveryResult, NewOrder, NewOrderLine, NewOrderLineResult,
    NewOrderResult, OrderStatus, OrderStatusLine, Payment, StockLevel, TpccOp, TpccResult,
};
use tpcc::{check, load, ScaleConfig, Tpcc};

/// Two thirds of each district's customers have an order; 6 of its 20 orders are
/// undelivered (15 to 20), so the next order id is 21.
const TINY: ScaleConfig = ScaleConfig {
    items: 100,
    districts_per_warehouse: 3,
    customers_per_district: 30,
    orders_per_district: 20,
};
const WAREHOUSES: u32 = 2;
const SEED: u64 = 5;
/// An item id that names no item.
const UNUSED_ITEM: u32 = 101;
/// Dates of the operations: after the load's.
const DAY: i64 = 1_800_000_000;

/// A loaded database, an executor on it, and a connection to look at it.
struct Node {
    exec: Executor<Tpcc>,
    conn: AnyConnection,
    seq: Sequencer,
    _db: TestDb,
}

impl Node {
    /// A tiny database with [`shared_names`].
    async fn new(kind: Kind) -> Node {
        let db = fresh(kind).await;
        let mut conn = db.connect().await;
        load(&mut conn, &TINY, i64::from(WAREHOUSES), SEED, |_| {})
            .await
            .unwrap();
        shared_names(&mut conn).await;
        let exec = Executor::open(&db.url, Tpcc, WAREHOUSES).await.unwrap();
        Node {
            exec,
            conn,
            seq: Sequencer::new(WAREHOUSES),
            _db: db,
        }
    }

    /// Orders and executes `op`, returning its result bytes.
    async fn execute_bytes(&mut self, op: &TpccOp) -> Vec<u8> {
        let execution = self.seq.next(op.partitions().unwrap(), op.encode());
        match self.exec.execute(&execution).await.unwrap() {
            Outcome::Executed(bytes) => bytes,
            other => panic!("{op:?}: expected Executed, got {other:?}"),
        }
    }

    async fn execute(&mut self, op: &TpccOp) -> TpccResult {
        let bytes = self.execute_bytes(op).await;
        TpccResult::decode(&bytes).unwrap()
    }

    /// Executes `ops` in one database transaction (one executor batch).
    async fn execute_batch(&mut self, ops: &[TpccOp]) -> Vec<TpccResult> {
        let executions: Vec<Execution> = ops
            .iter()
            .map(|op| self.seq.next(op.partitions().unwrap(), op.encode()))
            .collect();
        self.exec
            .execute_batch(&executions)
            .await
            .unwrap()
            .into_iter()
            .map(|outcome| match outcome {
                Outcome::Executed(bytes) => TpccResult::decode(&bytes).unwrap(),
                other => panic!("expected Executed, got {other:?}"),
            })
            .collect()
    }

    async fn sql(&mut self, sql: &'static str, args: &[i64]) {
        let mut query = sqlx::query(sql);
        for arg in args {
            query = query.bind(*arg);
        }
        query
            .execute(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The rows of a query with integer arguments.
    async fn all<T>(&mut self, sql: &'static str, args: &[i64]) -> Vec<T>
    where
        T: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
    {
        let mut query = sqlx::query_as(sql);
        for arg in args {
            query = query.bind(*arg);
        }
        query
            .fetch_all(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The one row of a query with integer arguments.
    async fn one<T>(&mut self, sql: &'static str, args: &[i64]) -> T
    where
        T: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
    {
        let mut rows = self.all(sql, args).await;
        assert_eq!(rows.len(), 1, "{sql} {args:?}");
        rows.remove(0)
    }

    async fn int(&mut self, sql: &'static str, args: &[i64]) -> i64 {
        self.one::<(i64,)>(sql, args).await.0
    }

    async fn text(&mut self, sql: &'static str, args: &[i64]) -> String {
        self.one::<(String,)>(sql, args).await.0
    }

    /// Every row of every application table, for "nothing changed".
    async fn dump(&mut self) -> Vec<String> {
        dump(&mut self.conn).await
    }

    /// Consistency conditions 1 to 10 and 12 hold (11 holds only until the first Delivery).
    async fn assert_consistent(&mut self) {
        for result in check(&mut self.conn, TINY.delivered_per_district())
            .await
            .unwrap()
        {
            if result.number != 11 {
                assert!(
                    result.passed,
                    "condition {} ({}) failed: {}",
                    result.number, result.description, result.detail
                );
            }
        }
    }
}

/// Customers who share a last name (the loader gives the first 1,000 customers of a district
/// distinct ones). `SAMENAME` in district (1, 1): customers 1 "Bob", 5 "alice", 9 "Bob" and
/// 13 "Zed"; by bytes that is Bob(1), Bob(9), Zed(13), alice(5), and position ⌈4/2⌉ = 2 is
/// customer 9 (a case-insensitive locale would put alice first and pick customer 1).
/// `ODDNAME` in district (1, 3): customers 2 "b", 4 "a", 6 "c"; position ⌈3/2⌉ = 2 is
/// customer 2.
async fn shared_names(conn: &mut AnyConnection) {
    let names = [
        (1, 1, "SAMENAME", "Bob"),
        (1, 5, "SAMENAME", "alice"),
        (1, 9, "SAMENAME", "Bob"),
        (1, 13, "SAMENAME", "Zed"),
        (3, 2, "ODDNAME", "b"),
        (3, 4, "ODDNAME", "a"),
        (3, 6, "ODDNAME", "c"),
    ];
    for (d_id, c_id, last, first) in names {
        sqlx::query(
            "UPDATE customer SET c_last = $1, c_first = $2 \
             WHERE c_w_id = 1 AND c_d_id = $3 AND c_id = $4",
        )
        .bind(last)
        .bind(first)
        .bind(d_id)
        .bind(c_id)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
}

fn line(i_id: u32, supply_w_id: u32, quantity: u32) -> NewOrderLine {
    NewOrderLine {
        i_id,
        supply_w_id,
        quantity,
    }
}

fn new_order(w_id: u32, d_id: u32, c_id: u32, entry_d: i64, lines: Vec<NewOrderLine>) -> TpccOp {
    TpccOp::NewOrder(NewOrder {
        w_id,
        d_id,
        c_id,
        entry_d,
        lines,
    })
}

fn payment(
    (w_id, d_id): (u32, u32),
    (c_w_id, c_d_id): (u32, u32),
    customer: CustomerSelector,
    h_amount: i64,
    h_date: i64,
) -> TpccOp {
    TpccOp::Payment(Payment {
        w_id,
        d_id,
        c_w_id,
        c_d_id,
        customer,
        h_amount,
        h_date,
    })
}

fn order_status(w_id: u32, d_id: u32, customer: CustomerSelector) -> TpccOp {
    TpccOp::OrderStatus(OrderStatus {
        w_id,
        d_id,
        customer,
    })
}

fn delivery(w_id: u32, o_carrier_id: u32, delivery_d: i64) -> TpccOp {
    TpccOp::Delivery(Delivery {
        w_id,
        o_carrier_id,
        delivery_d,
    })
}

fn stock_level(w_id: u32, d_id: u32, threshold: u32) -> TpccOp {
    TpccOp::StockLevel(StockLevel {
        w_id,
        d_id,
        threshold,
    })
}

fn by_name(name: &str) -> CustomerSelector {
    CustomerSelector::LastName(name.to_owned())
}

/// (ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info).
type OrderLineRow = (i64, i64, i64, Option<i64>, i64, i64, String);

/// (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_amount, h_data).
type HistoryRow = (i64, i64, i64, i64, i64, i64, String);

/// (s_quantity, s_ytd, s_order_cnt, s_remote_cnt, s_dist_02) of a stock row.
type StockRow = (i64, i64, i64, i64, String);

async fn stock(node: &mut Node, w_id: i64, i_id: i64) -> StockRow {
    node.one(
        "SELECT s_quantity, s_ytd, s_order_cnt, s_remote_cnt, s_dist_02 FROM stock \
         WHERE s_w_id = $1 AND s_i_id = $2",
        &[w_id, i_id],
    )
    .await
}

/// New-Order (clause 2.4.2.2) with a remote line, a line restocked by the 91 rule, a line
/// exactly at the rule's boundary, and brand-generic flags; then an all-local order.
async fn new_order_follows_the_specification(kind: Kind) {
    let mut node = Node::new(kind).await;
    // Rates and prices that make the total a known number, and stock that hits each branch
    // of the restocking rule: 12 < 5 + 10 restocks, 50 >= 3 + 10 does not, 20 >= 10 + 10
    // does not (boundary).
    node.sql("UPDATE warehouse SET w_tax = 1000 WHERE w_id = 1", &[])
        .await;
    node.sql(
        "UPDATE district SET d_tax = 500 WHERE d_w_id = 1 AND d_id = 2",
        &[],
    )
    .await;
    node.sql(
        "UPDATE customer SET c_discount = 1234, c_credit = 'BC' \
         WHERE c_w_id = 1 AND c_d_id = 2 AND c_id = 3",
        &[],
    )
    .await;
    node.sql(
        "UPDATE item SET i_price = 1999, i_data = 'an ORIGINAL item' WHERE i_id = 11",
        &[],
    )
    .await;
    node.sql(
        "UPDATE item SET i_price = 250, i_data = 'a plain item' WHERE i_id = 12",
        &[],
    )
    .await;
    node.sql(
        "UPDATE item SET i_price = 10000, i_data = 'ORIGINAL' WHERE i_id = 13",
        &[],
    )
    .await;
    node.sql(
        "UPDATE stock SET s_quantity = 12, s_data = 'xORIGINALx' WHERE s_w_id = 1 AND s_i_id = 11",
        &[],
    )
    .await;
    node.sql(
        "UPDATE stock SET s_quantity = 50, s_data = 'ORIGINAL' WHERE s_w_id = 2 AND s_i_id = 12",
        &[],
    )
    .await;
    node.sql(
        "UPDATE stock SET s_quantity = 20, s_data = 'generic' WHERE s_w_id = 1 AND s_i_id = 13",
        &[],
    )
    .await;
    let before = [
        stock(&mut node, 1, 11).await,
        stock(&mut node, 2, 12).await,
        stock(&mut node, 1, 13).await,
    ];
    let mut names = Vec::new();
    for i_id in [11, 12, 13] {
        names.push(
            node.text("SELECT i_name FROM item WHERE i_id = $1", &[i_id])
                .await,
        );
    }
    assert_eq!(
        node.int(
            "SELECT d_next_o_id FROM district WHERE d_w_id = 1 AND d_id = 2",
            &[]
        )
        .await,
        21
    );

    let op = new_order(
        1,
        2,
        3,
        DAY,
        vec![line(11, 1, 5), line(12, 2, 3), line(13, 1, 10)],
    );
    assert_eq!(op.partitions().unwrap(), vec![0, 1], "a remote line");
    let result = node.execute(&op).await;
    let expected_lines = vec![
        NewOrderLineResult {
            supply_w_id: 1,
            i_id: 11,
            i_name: names[0].clone(),
            quantity: 5,
            s_quantity: 12 - 5 + 91,
            brand_generic: "B".into(),
            i_price: 1999,
            ol_amount: 9995,
        },
        NewOrderLineResult {
            supply_w_id: 2,
            i_id: 12,
            i_name: names[1].clone(),
            quantity: 3,
            s_quantity: 47,
            brand_generic: "G".into(),
            i_price: 250,
            ol_amount: 750,
        },
        NewOrderLineResult {
            supply_w_id: 1,
            i_id: 13,
            i_name: names[2].clone(),
            quantity: 10,
            s_quantity: 10,
            brand_generic: "G".into(),
            i_price: 10000,
            ol_amount: 100_000,
        },
    ];
    // 1,107.45 × (1 − 0.1234) × (1 + 0.1000 + 0.0500) = 1,116.4092705 → 1,116.41.
    let expected = TpccResult::NewOrder(NewOrderResult {
        w_id: 1,
        d_id: 2,
        c_id: 3,
        c_last: last_name(2),
        c_credit: "BC".into(),
        c_discount: 1234,
        o_id: 21,
        o_ol_cnt: 3,
        o_entry_d: DAY,
        w_tax: 1000,
        d_tax: 500,
        lines: expected_lines,
        total_amount: 111_641,
    });
    assert_eq!(result, expected);

    assert_eq!(
        node.int(
            "SELECT d_next_o_id FROM district WHERE d_w_id = 1 AND d_id = 2",
            &[]
        )
        .await,
        22
    );
    let order: (i64, i64, Option<i64>, i64, i64) = node
        .one(
            "SELECT o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local FROM orders \
             WHERE o_w_id = 1 AND o_d_id = 2 AND o_id = 21",
            &[],
        )
        .await;
    assert_eq!(order, (3, DAY, None, 3, 0));
    assert_eq!(
        node.int(
            "SELECT COUNT(*) FROM new_order WHERE no_w_id = 1 AND no_d_id = 2 AND no_o_id = 21",
            &[]
        )
        .await,
        1
    );
    let lines: Vec<OrderLineRow> = node
        .all(
            "SELECT ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, \
             ol_dist_info FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 2 AND ol_o_id = 21 \
             ORDER BY ol_number",
            &[],
        )
        .await;
    assert_eq!(
        lines,
        vec![
            (1, 11, 1, None, 5, 9995, before[0].4.clone()),
            (2, 12, 2, None, 3, 750, before[1].4.clone()),
            (3, 13, 1, None, 10, 100_000, before[2].4.clone()),
        ]
    );
    let (q, ytd, cnt, remote, _) = &before[0];
    assert_eq!(q - 5 + 91, 98);
    assert_eq!(
        stock(&mut node, 1, 11).await,
        (98, ytd + 5, cnt + 1, *remote, before[0].4.clone())
    );
    let (_, ytd, cnt, remote, _) = &before[1];
    assert_eq!(
        stock(&mut node, 2, 12).await,
        (47, ytd + 3, cnt + 1, remote + 1, before[1].4.clone())
    );
    let (_, ytd, cnt, remote, _) = &before[2];
    assert_eq!(
        stock(&mut node, 1, 13).await,
        (10, ytd + 10, cnt + 1, *remote, before[2].4.clone())
    );

    // All lines from the home warehouse: o_all_local = 1, a single-partition operation.
    let op = new_order(1, 2, 3, DAY + 1, vec![line(12, 1, 1), line(12, 1, 2)]);
    assert_eq!(op.partitions().unwrap(), vec![0]);
    let TpccResult::NewOrder(result) = node.execute(&op).await else {
        panic!("expected a New-Order screen")
    };
    assert_eq!((result.o_id, result.o_ol_cnt), (22, 2));
    assert_eq!(
        node.int(
            "SELECT o_all_local FROM orders WHERE o_w_id = 1 AND o_d_id = 2 AND o_id = 22",
            &[]
        )
        .await,
        1
    );
    node.assert_consistent().await;
}

/// An unused item as the last line rolls the whole New-Order back (clause 2.4.2.3), also
/// inside a batch whose next operation then takes the order id.
async fn unused_item_rolls_back(kind: Kind) {
    let mut node = Node::new(kind).await;
    let c_credit = node
        .text(
            "SELECT c_credit FROM customer WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 5",
            &[],
        )
        .await;
    let before = node.dump().await;
    let rolled_back = new_order(
        1,
        1,
        5,
        DAY,
        vec![line(1, 1, 1), line(2, 2, 1), line(UNUSED_ITEM, 1, 1)],
    );
    let expected = TpccResult::NewOrderRolledBack {
        w_id: 1,
        d_id: 1,
        c_id: 5,
        o_id: 21,
        c_last: "SAMENAME".into(),
        c_credit: c_credit.clone(),
    };
    assert_eq!(node.execute(&rolled_back).await, expected);
    assert_eq!(
        node.dump().await,
        before,
        "the application state is unchanged"
    );

    let taken = new_order(1, 1, 5, DAY, vec![line(1, 1, 1)]);
    let results = node.execute_batch(&[rolled_back, taken]).await;
    assert_eq!(results[0], expected);
    let TpccResult::NewOrder(result) = &results[1] else {
        panic!("expected a New-Order screen, got {:?}", results[1])
    };
    assert_eq!(result.o_id, 21, "the rolled back order used no order id");
    assert_eq!(
        node.int(
            "SELECT COUNT(*) FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_o_id = 21",
            &[]
        )
        .await,
        1
    );
    node.assert_consistent().await;
}

/// An order naming one item twice from one warehouse takes both quantities from the same
/// stock row in line order (the second line sees what the first left, including a restock),
/// and the same item from another warehouse from that warehouse's row.
async fn an_item_named_twice_takes_from_its_stock_in_line_order(kind: Kind) {
    let mut node = Node::new(kind).await;
    node.sql(
        "UPDATE stock SET s_quantity = 20, s_ytd = 0, s_order_cnt = 0, s_remote_cnt = 0 \
         WHERE s_i_id = 7 AND s_w_id IN (1, 2)",
        &[],
    )
    .await;
    let price = node
        .int("SELECT i_price FROM item WHERE i_id = 7", &[])
        .await;
    // Warehouse 1's row: 20 >= 6 + 10 leaves 14, then 14 < 5 + 10 restocks: 14 - 5 + 91 = 100.
    // Warehouse 2's: 20 - 4 = 16.
    let op = new_order(
        1,
        2,
        3,
        DAY,
        vec![line(7, 1, 6), line(7, 2, 4), line(7, 1, 5)],
    );
    let TpccResult::NewOrder(result) = node.execute(&op).await else {
        panic!("expected a New-Order screen");
    };
    let after: Vec<(i64, i64)> = result
        .lines
        .iter()
        .map(|l| (l.supply_w_id, l.s_quantity))
        .collect();
    assert_eq!(after, [(1, 14), (2, 16), (1, 100)]);
    assert_eq!(stock(&mut node, 1, 7).await.0, 100);
    assert_eq!(stock(&mut node, 1, 7).await.1, 11, "s_ytd");
    assert_eq!(stock(&mut node, 1, 7).await.2, 2, "s_order_cnt");
    assert_eq!(stock(&mut node, 1, 7).await.3, 0, "s_remote_cnt");
    assert_eq!(stock(&mut node, 2, 7).await.0, 16);
    assert_eq!(stock(&mut node, 2, 7).await.3, 1, "s_remote_cnt");
    let amounts: Vec<i64> = result.lines.iter().map(|l| l.ol_amount).collect();
    assert_eq!(amounts, [6 * price, 4 * price, 5 * price]);
    let lines: Vec<(i64, i64, i64)> = node
        .all(
            "SELECT ol_number, ol_supply_w_id, ol_quantity FROM order_line \
             WHERE ol_w_id = 1 AND ol_d_id = 2 AND ol_o_id = $1 ORDER BY ol_number",
            &[result.o_id],
        )
        .await;
    assert_eq!(lines, [(1, 1, 6), (2, 2, 4), (3, 1, 5)]);
    node.assert_consistent().await;
}

/// (c_balance, c_ytd_payment, c_payment_cnt, c_data) of a customer.
type CustomerMoney = (i64, i64, i64, String);

async fn customer_money(node: &mut Node, w_id: i64, d_id: i64, c_id: i64) -> CustomerMoney {
    node.one(
        "SELECT c_balance, c_ytd_payment, c_payment_cnt, c_data FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        &[w_id, d_id, c_id],
    )
    .await
}

/// Payment (clause 2.5.2.2) by id, by last name, and of a bad-credit customer of another
/// warehouse.
async fn payment_follows_the_specification(kind: Kind) {
    let mut node = Node::new(kind).await;
    let w_ytd = "SELECT w_ytd FROM warehouse WHERE w_id = $1";
    let d_ytd = "SELECT d_ytd FROM district WHERE d_w_id = $1 AND d_id = $2";
    let h_data = "SELECT w_name || '    ' || d_name FROM warehouse \
                  JOIN district ON d_w_id = w_id WHERE w_id = $1 AND d_id = $2";

    // By id, good credit.
    node.sql(
        "UPDATE customer SET c_credit = 'GC' WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 4",
        &[],
    )
    .await;
    let w_before = node.int(w_ytd, &[1]).await;
    let d_before = node.int(d_ytd, &[1, 1]).await;
    let c_before = customer_money(&mut node, 1, 1, 4).await;
    let result = node
        .execute(&payment(
            (1, 1),
            (1, 1),
            CustomerSelector::Id(4),
            12_345,
            DAY,
        ))
        .await;
    let TpccResult::Payment(screen) = result else {
        panic!("expected a Payment screen, got {result:?}")
    };
    assert_eq!(
        (
            screen.c_id,
            screen.c_last.as_str(),
            screen.c_credit.as_str()
        ),
        (4, last_name(3).as_str(), "GC")
    );
    assert_eq!(screen.c_balance, c_before.0 - 12_345);
    assert_eq!(screen.c_data, "", "good credit: no c_data on the screen");
    assert_eq!((screen.h_amount, screen.h_date), (12_345, DAY));
    let w_street: String = node
        .text("SELECT w_street_1 FROM warehouse WHERE w_id = 1", &[])
        .await;
    assert_eq!(screen.w_address.street_1, w_street);
    assert_eq!(node.int(w_ytd, &[1]).await, w_before + 12_345);
    assert_eq!(node.int(d_ytd, &[1, 1]).await, d_before + 12_345);
    assert_eq!(
        customer_money(&mut node, 1, 1, 4).await,
        (
            c_before.0 - 12_345,
            c_before.1 + 12_345,
            c_before.2 + 1,
            c_before.3.clone()
        )
    );
    let expected_h_data = node.text(h_data, &[1, 1]).await;
    let history: Vec<HistoryRow> = node
        .all(
            "SELECT h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_amount, h_data FROM history \
             WHERE h_date = $1",
            &[DAY],
        )
        .await;
    assert_eq!(history, vec![(4, 1, 1, 1, 1, 12_345, expected_h_data)]);

    // By last name: SAMENAME picks customer 9 (see `shared_names`).
    let c_before = customer_money(&mut node, 1, 1, 9).await;
    let result = node
        .execute(&payment((1, 1), (1, 1), by_name("SAMENAME"), 100, DAY + 1))
        .await;
    let TpccResult::Payment(screen) = result else {
        panic!("expected a Payment screen, got {result:?}")
    };
    assert_eq!((screen.c_id, screen.c_first.as_str()), (9, "Bob"));
    assert_eq!(customer_money(&mut node, 1, 1, 9).await.0, c_before.0 - 100);

    // A bad-credit customer of warehouse 2 pays through district 2 of warehouse 1: c_data
    // gets the payment at its left and keeps 500 characters (not bytes).
    let old_data = "é".repeat(495);
    sqlx::query(
        "UPDATE customer SET c_credit = 'BC', c_data = $1 \
         WHERE c_w_id = 2 AND c_d_id = 3 AND c_id = 7",
    )
    .bind(&old_data)
    .execute(&mut node.conn)
    .await
    .unwrap();
    let w1_before = node.int(w_ytd, &[1]).await;
    let w2_before = node.int(w_ytd, &[2]).await;
    let c_before = customer_money(&mut node, 2, 3, 7).await;
    let op = payment((1, 2), (2, 3), CustomerSelector::Id(7), 500, DAY + 2);
    assert_eq!(op.partitions().unwrap(), vec![0, 1]);
    let TpccResult::Payment(screen) = node.execute(&op).await else {
        panic!("expected a Payment screen")
    };
    let new_data: String = format!("7 3 2 2 1 500 {old_data}")
        .chars()
        .take(500)
        .collect();
    assert_eq!(new_data.chars().count(), 500);
    assert!(new_data.len() > 500, "multi-byte characters");
    assert_eq!(
        screen.c_data,
        new_data.chars().take(200).collect::<String>()
    );
    assert_eq!(
        customer_money(&mut node, 2, 3, 7).await,
        (c_before.0 - 500, c_before.1 + 500, c_before.2 + 1, new_data)
    );
    assert_eq!(node.int(w_ytd, &[1]).await, w1_before + 500);
    assert_eq!(
        node.int(w_ytd, &[2]).await,
        w2_before,
        "the customer's warehouse"
    );
    let expected_h_data = node.text(h_data, &[1, 2]).await;
    let history: Vec<HistoryRow> = node
        .all(
            "SELECT h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_amount, h_data FROM history \
             WHERE h_date = $1",
            &[DAY + 2],
        )
        .await;
    assert_eq!(history, vec![(7, 3, 2, 2, 1, 500, expected_h_data)]);
    node.assert_consistent().await;
}

/// Order-Status (clause 2.6.2.2): the customer's last order and its lines.
async fn order_status_shows_the_last_order(kind: Kind) {
    let mut node = Node::new(kind).await;
    node.execute(&new_order(1, 2, 3, DAY, vec![line(5, 1, 1)]))
        .await;
    node.execute(&new_order(
        1,
        2,
        3,
        DAY + 1,
        vec![line(7, 1, 2), line(8, 2, 4)],
    ))
    .await;
    let balance = node
        .int(
            "SELECT c_balance FROM customer WHERE c_w_id = 1 AND c_d_id = 2 AND c_id = 3",
            &[],
        )
        .await;
    let price = "SELECT i_price FROM item WHERE i_id = $1";
    let (p7, p8) = (node.int(price, &[7]).await, node.int(price, &[8]).await);
    let TpccResult::OrderStatus(screen) = node
        .execute(&order_status(1, 2, CustomerSelector::Id(3)))
        .await
    else {
        panic!("expected an Order-Status screen")
    };
    assert_eq!(
        (screen.c_id, screen.c_last.as_str(), screen.c_balance),
        (3, last_name(2).as_str(), balance)
    );
    let order = screen.order.expect("customer 3 has orders");
    assert_eq!(
        (order.o_id, order.o_entry_d, order.o_carrier_id),
        (22, DAY + 1, None)
    );
    assert_eq!(
        order.lines,
        vec![
            OrderStatusLine {
                supply_w_id: 1,
                i_id: 7,
                quantity: 2,
                amount: 2 * p7,
                delivery_d: None,
            },
            OrderStatusLine {
                supply_w_id: 2,
                i_id: 8,
                quantity: 4,
                amount: 4 * p8,
                delivery_d: None,
            },
        ]
    );

    // By last name, a loaded order: ODDNAME picks customer 2 of district (1, 3).
    let TpccResult::OrderStatus(screen) =
        node.execute(&order_status(1, 3, by_name("ODDNAME"))).await
    else {
        panic!("expected an Order-Status screen")
    };
    assert_eq!((screen.c_id, screen.c_first.as_str()), (2, "b"));
    let last: Vec<(i64, Option<i64>)> = node
        .all(
            "SELECT o_id, o_carrier_id FROM orders WHERE o_w_id = 1 AND o_d_id = 3 \
             AND o_c_id = 2 ORDER BY o_id DESC",
            &[],
        )
        .await;
    match (last.first(), &screen.order) {
        (None, None) => {}
        (Some(&(o_id, carrier)), Some(order)) => {
            assert_eq!((order.o_id, order.o_carrier_id), (o_id, carrier));
            let lines: Vec<(i64, i64, i64, i64, Option<i64>)> = node
                .all(
                    "SELECT ol_supply_w_id, ol_i_id, ol_quantity, ol_amount, ol_delivery_d \
                     FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 3 AND ol_o_id = $1 \
                     ORDER BY ol_number",
                    &[o_id],
                )
                .await;
            let shown: Vec<_> = order
                .lines
                .iter()
                .map(|l| (l.supply_w_id, l.i_id, l.quantity, l.amount, l.delivery_d))
                .collect();
            assert_eq!(shown, lines);
            assert!(!lines.is_empty());
        }
        (expected, shown) => panic!("expected {expected:?}, shown {shown:?}"),
    }

    // A customer without orders (a third of each district's customers).
    let without = node
        .int(
            "SELECT MIN(c_id) FROM customer WHERE c_w_id = 2 AND c_d_id = 1 AND NOT EXISTS \
             (SELECT 1 FROM orders WHERE o_w_id = 2 AND o_d_id = 1 AND o_c_id = c_id)",
            &[],
        )
        .await;
    let TpccResult::OrderStatus(screen) = node
        .execute(&order_status(2, 1, CustomerSelector::Id(without as u32)))
        .await
    else {
        panic!("expected an Order-Status screen")
    };
    assert_eq!((screen.c_id, screen.order), (without, None));
}

/// (o_c_id, sum of ol_amount, c_balance, c_delivery_cnt) of an order and its customer.
async fn delivery_facts(node: &mut Node, w_id: i64, d_id: i64, o_id: i64) -> (i64, i64, i64, i64) {
    let c_id = node
        .int(
            "SELECT o_c_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3",
            &[w_id, d_id, o_id],
        )
        .await;
    let amounts: Vec<(i64,)> = node
        .all(
            "SELECT ol_amount FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
            &[w_id, d_id, o_id],
        )
        .await;
    let (balance, count): (i64, i64) = node
        .one(
            "SELECT c_balance, c_delivery_cnt FROM customer \
             WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
            &[w_id, d_id, c_id],
        )
        .await;
    (c_id, amounts.iter().map(|a| a.0).sum(), balance, count)
}

/// Delivery (clause 2.7.4.2): the oldest new order of each district; a district without one
/// is skipped.
async fn delivery_follows_the_specification(kind: Kind) {
    let mut node = Node::new(kind).await;
    let mut facts = Vec::new();
    for d_id in 1..=3 {
        let oldest = node
            .int(
                "SELECT MIN(no_o_id) FROM new_order WHERE no_w_id = 2 AND no_d_id = $1",
                &[d_id],
            )
            .await;
        assert_eq!(oldest, 15, "orders 15 to 20 are undelivered");
        facts.push((
            d_id,
            oldest,
            delivery_facts(&mut node, 2, d_id, oldest).await,
        ));
    }
    let result = node.execute(&delivery(2, 7, DAY)).await;
    assert_eq!(
        result,
        TpccResult::Delivery(DeliveryResult {
            w_id: 2,
            o_carrier_id: 7,
            delivered: vec![(1, Some(15)), (2, Some(15)), (3, Some(15))],
        })
    );
    for (d_id, o_id, (c_id, amount, balance, count)) in facts {
        let args = [2, d_id, o_id];
        assert_eq!(
            node.int(
                "SELECT COUNT(*) FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3",
                &args
            )
            .await,
            0
        );
        assert_eq!(
            node.int(
                "SELECT o_carrier_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3",
                &args
            )
            .await,
            7
        );
        let dates: Vec<(Option<i64>,)> = node
            .all(
                "SELECT ol_delivery_d FROM order_line \
                 WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
                &args,
            )
            .await;
        assert!(!dates.is_empty());
        assert!(dates.iter().all(|d| d.0 == Some(DAY)), "{dates:?}");
        let after = delivery_facts(&mut node, 2, d_id, o_id).await;
        assert!(amount > 0, "undelivered loaded lines have amounts");
        assert_eq!(after, (c_id, amount, balance + amount, count + 1));
        // The next order of the district is still undelivered.
        let next: Option<i64> = node
            .one::<(Option<i64>,)>(
                "SELECT o_carrier_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3",
                &[2, d_id, o_id + 1],
            )
            .await
            .0;
        assert_eq!(next, None);
    }
    // Warehouse 1 is untouched.
    assert_eq!(
        node.int("SELECT COUNT(*) FROM new_order WHERE no_w_id = 1", &[])
            .await,
        18
    );

    // Deliver the rest, then one new order in district 2: the other districts are skipped.
    for o_id in 16..=20 {
        let result = node.execute(&delivery(2, 1, DAY + o_id)).await;
        let expected = vec![(1, Some(o_id)), (2, Some(o_id)), (3, Some(o_id))];
        assert_eq!(
            result,
            TpccResult::Delivery(DeliveryResult {
                w_id: 2,
                o_carrier_id: 1,
                delivered: expected
            })
        );
    }
    node.execute(&new_order(2, 2, 4, DAY, vec![line(3, 2, 1)]))
        .await;
    let result = node.execute(&delivery(2, 10, DAY + 30)).await;
    assert_eq!(
        result,
        TpccResult::Delivery(DeliveryResult {
            w_id: 2,
            o_carrier_id: 10,
            delivered: vec![(1, None), (2, Some(21)), (3, None)],
        })
    );
    let before = node.dump().await;
    let result = node.execute(&delivery(2, 10, DAY + 31)).await;
    assert_eq!(
        result,
        TpccResult::Delivery(DeliveryResult {
            w_id: 2,
            o_carrier_id: 10,
            delivered: vec![(1, None), (2, None), (3, None)],
        })
    );
    assert_eq!(
        node.dump().await,
        before,
        "nothing to deliver changes nothing"
    );
    node.assert_consistent().await;
}

/// Stock-Level's count computed here: distinct items of the district's orders in
/// [d_next_o_id − 20, d_next_o_id) whose home-warehouse stock is below the threshold.
async fn low_stock(node: &mut Node, w_id: i64, d_id: i64, threshold: i64) -> i64 {
    let next = node
        .int(
            "SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2",
            &[w_id, d_id],
        )
        .await;
    let lines: Vec<(i64, i64)> = node
        .all(
            "SELECT ol_o_id, ol_i_id FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2",
            &[w_id, d_id],
        )
        .await;
    let stock: Vec<(i64, i64)> = node
        .all(
            "SELECT s_i_id, s_quantity FROM stock WHERE s_w_id = $1",
            &[w_id],
        )
        .await;
    let low: BTreeSet<i64> = stock
        .iter()
        .filter(|s| s.1 < threshold)
        .map(|s| s.0)
        .collect();
    lines
        .iter()
        .filter(|(o_id, i_id)| (next - 20..next).contains(o_id) && low.contains(i_id))
        .map(|l| l.1)
        .collect::<BTreeSet<_>>()
        .len() as i64
}

async fn stock_level_of(node: &mut Node, w_id: u32, d_id: u32, threshold: u32) -> i64 {
    match node.execute(&stock_level(w_id, d_id, threshold)).await {
        TpccResult::StockLevel(screen) => {
            assert_eq!(
                (screen.w_id, screen.d_id, screen.threshold),
                (i64::from(w_id), i64::from(d_id), i64::from(threshold))
            );
            screen.low_stock
        }
        other => panic!("expected a Stock-Level screen, got {other:?}"),
    }
}

/// Stock-Level (clause 2.8.2.2) against an independent count, and at the edges of its
/// window of 20 orders and of its threshold.
async fn stock_level_counts_low_stock(kind: Kind) {
    let mut node = Node::new(kind).await;
    let mut nonzero = 0;
    for (w_id, d_id) in [(1, 1), (2, 3)] {
        for threshold in 10..=20 {
            let expected = low_stock(&mut node, w_id.into(), d_id.into(), threshold.into()).await;
            assert_eq!(
                stock_level_of(&mut node, w_id, d_id, threshold).await,
                expected,
                "w_id {w_id} d_id {d_id} threshold {threshold}"
            );
            nonzero += i64::from(expected > 0);
        }
    }
    assert!(nonzero > 0, "the loaded stock has some below 20");

    // Item 100 only in order 1 of district (1, 1), with 5 in stock; item X of order 20 with
    // 15; everything else of warehouse 1 with 50.
    node.sql("UPDATE stock SET s_quantity = 50 WHERE s_w_id = 1", &[])
        .await;
    node.sql(
        "UPDATE order_line SET ol_i_id = 99 WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_i_id = 100",
        &[],
    )
    .await;
    node.sql(
        "UPDATE order_line SET ol_i_id = 100 \
         WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_o_id = 1 AND ol_number = 1",
        &[],
    )
    .await;
    node.sql(
        "UPDATE stock SET s_quantity = 5 WHERE s_w_id = 1 AND s_i_id = 100",
        &[],
    )
    .await;
    let x = node
        .int(
            "SELECT ol_i_id FROM order_line \
             WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_o_id = 20 AND ol_number = 1",
            &[],
        )
        .await;
    assert_ne!(x, 100);
    node.sql(
        "UPDATE stock SET s_quantity = 15 WHERE s_w_id = 1 AND s_i_id = $1",
        &[x],
    )
    .await;
    // Orders 1 to 20 are the last 20: item 100 counts; X counts only below a threshold above 15.
    assert_eq!(stock_level_of(&mut node, 1, 1, 14).await, 1);
    assert_eq!(stock_level_of(&mut node, 1, 1, 15).await, 1);
    assert_eq!(stock_level_of(&mut node, 1, 1, 16).await, 2);
    // Order 21 (one of X: 15 → 14) pushes order 1 out of the window.
    node.execute(&new_order(1, 1, 2, DAY, vec![line(x as u32, 1, 1)]))
        .await;
    assert_eq!(stock_level_of(&mut node, 1, 1, 14).await, 0);
    assert_eq!(stock_level_of(&mut node, 1, 1, 15).await, 1);
    assert_eq!(low_stock(&mut node, 1, 1, 15).await, 1);
}

/// Inputs out of range or naming nothing are refused naming the field, and change nothing.
async fn invalid_inputs_change_nothing(kind: Kind) {
    let mut node = Node::new(kind).await;
    let id = CustomerSelector::Id;
    let cases = [
        (new_order(3, 1, 1, DAY, vec![line(1, 3, 1)]), "w_id"),
        (new_order(1, 4, 1, DAY, vec![line(1, 1, 1)]), "d_id"),
        (new_order(1, 1, 31, DAY, vec![line(1, 1, 1)]), "c_id"),
        (
            new_order(1, 1, 1, DAY, vec![line(1, 1, 1), line(2, 3, 1)]),
            "ol_supply_w_id_2",
        ),
        (new_order(1, 1, 1, DAY, vec![]), "ol_cnt"),
        (
            new_order(1, 1, 1, DAY, vec![line(1, 1, 11)]),
            "ol_quantity_1",
        ),
        (payment((1, 1), (1, 1), id(1), 99, DAY), "h_amount"),
        (payment((1, 1), (1, 1), id(1), 500_001, DAY), "h_amount"),
        (payment((3, 1), (1, 1), id(1), 100, DAY), "w_id"),
        (payment((1, 5), (1, 1), id(1), 100, DAY), "d_id"),
        (payment((1, 1), (3, 1), id(1), 100, DAY), "c_w_id"),
        (payment((1, 1), (2, 4), id(1), 100, DAY), "c_d_id"),
        (payment((1, 1), (2, 1), id(31), 100, DAY), "c_id"),
        (payment((1, 1), (1, 1), id(0), 100, DAY), "c_id"),
        (
            payment((1, 1), (1, 1), by_name("NOSUCHNAME"), 100, DAY),
            "c_last",
        ),
        (payment((1, 1), (1, 1), by_name(""), 100, DAY), "c_last"),
        // Customer 1 of district (1, 1) was BARBARBAR before `shared_names`.
        (order_status(1, 1, by_name("BARBARBAR")), "c_last"),
        (order_status(1, 4, id(1)), "d_id"),
        (order_status(3, 1, id(1)), "w_id"),
        (delivery(3, 1, DAY), "w_id"),
        (delivery(1, 0, DAY), "o_carrier_id"),
        (stock_level(1, 4, 10), "d_id"),
        (stock_level(1, 1, 21), "threshold"),
        (stock_level(3, 1, 10), "w_id"),
    ];
    let before = node.dump().await;
    // Warehouse 3 is outside the executor's configuration, so the program runs directly, in a
    // transaction that is committed.
    for (op, field) in &cases {
        let mut tx = node.conn.begin().await.unwrap();
        let bytes = Tpcc.execute(&mut tx, &op.encode()).await.unwrap();
        tx.commit().await.unwrap();
        match TpccResult::decode(&bytes).unwrap() {
            TpccResult::Invalid(invalid) => assert_eq!(invalid.field, *field, "{op:?}"),
            other => panic!("{op:?}: expected Invalid, got {other:?}"),
        }
    }
    assert_eq!(node.dump().await, before);
    // And through the executor, where the warehouses exist.
    let served = |op: &TpccOp| op.warehouses().iter().all(|&w| w <= WAREHOUSES);
    for (op, field) in cases.iter().filter(|(op, _)| served(op)) {
        match node.execute(op).await {
            TpccResult::Invalid(invalid) => assert_eq!(invalid.field, *field, "{op:?}"),
            other => panic!("{op:?}: expected Invalid, got {other:?}"),
        }
    }
    assert_eq!(node.dump().await, before);
}

/// A customer of district (`w_id`, `d_id`) by id or by a loaded last name (which some
/// districts no longer have after `shared_names`: refused), or by a shared name where
/// `shared_names` put it.
fn some_customer(rng: &mut TpccRng, w_id: u32, d_id: u32) -> CustomerSelector {
    match (rng.uniform(0, 2), w_id, d_id) {
        (0, ..) => CustomerSelector::Id(rng.uniform(1, 30) as u32),
        (1, 1, 1) => by_name("SAMENAME"),
        (1, 1, 3) => by_name("ODDNAME"),
        _ => by_name(&last_name(rng.uniform(0, 29))),
    }
}

/// A few dozen operations of every kind, drawn from a seed: some remote, some by last name,
/// some rolled back, some refused.
fn mixed_operations(count: i64) -> Vec<TpccOp> {
    let mut rng = TpccRng::new(2026);
    let mut ops = Vec::new();
    for n in 0..count {
        let w_id = rng.uniform(1, 2) as u32;
        let other = 3 - w_id;
        let d_id = rng.uniform(1, 3) as u32;
        let date = DAY + n;
        let op = match rng.uniform(1, 100) {
            1..=40 => {
                let mut lines: Vec<NewOrderLine> = (0..rng.uniform(5, 15))
                    .map(|_| {
                        let supply = if rng.percent(10) { other } else { w_id };
                        line(
                            rng.uniform(1, 100) as u32,
                            supply,
                            rng.uniform(1, 10) as u32,
                        )
                    })
                    .collect();
                if rng.percent(15) {
                    if let Some(last) = lines.last_mut() {
                        last.i_id = UNUSED_ITEM;
                    }
                }
                new_order(w_id, d_id, rng.uniform(1, 30) as u32, date, lines)
            }
            41..=70 => {
                let (c_w_id, c_d_id) = if rng.percent(15) {
                    (other, rng.uniform(1, 3) as u32)
                } else {
                    (w_id, d_id)
                };
                let customer = some_customer(&mut rng, c_w_id, c_d_id);
                payment(
                    (w_id, d_id),
                    (c_w_id, c_d_id),
                    customer,
                    rng.uniform(100, 500_000),
                    date,
                )
            }
            71..=80 => order_status(w_id, d_id, some_customer(&mut rng, w_id, d_id)),
            81..=88 => delivery(w_id, rng.uniform(1, 10) as u32, date),
            89..=96 => stock_level(w_id, d_id, rng.uniform(10, 20) as u32),
            _ => order_status(w_id, 4, CustomerSelector::Id(1)),
        };
        ops.push(op);
    }
    ops
}

/// The same operations on SQLite and PostgreSQL: identical result bytes and state digests,
/// and the consistency conditions hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_agree_on_a_mixed_run() {
    let ops = mixed_operations(48);
    let mut results = Vec::new();
    let mut digests = Vec::new();
    for kind in [Kind::Sqlite, Kind::Postgres] {
        let mut node = Node::new(kind).await;
        let mut bytes = Vec::new();
        for op in &ops {
            bytes.push(node.execute_bytes(op).await);
        }
        node.assert_consistent().await;
        digests.push(node.exec.digest().await.unwrap());
        results.push(bytes);
    }
    assert_eq!(
        results[0], results[1],
        "result bytes differ between backends"
    );
    assert_eq!(
        digests[0], digests[1],
        "state digests differ between backends"
    );

    let decoded: Vec<TpccResult> = results[0]
        .iter()
        .map(|b| TpccResult::decode(b).unwrap())
        .collect();
    let count = |f: fn(&TpccResult) -> bool| decoded.iter().filter(|r| f(r)).count();
    assert!(count(|r| matches!(r, TpccResult::NewOrder(_))) > 0);
    assert!(count(|r| matches!(r, TpccResult::NewOrderRolledBack { .. })) > 0);
    assert!(count(|r| matches!(r, TpccResult::Payment(_))) > 0);
    assert!(count(|r| matches!(r, TpccResult::OrderStatus(_))) > 0);
    assert!(count(|r| matches!(r, TpccResult::Delivery(_))) > 0);
    assert!(count(|r| matches!(r, TpccResult::StockLevel(_))) > 0);
    assert!(count(|r| matches!(r, TpccResult::Invalid(_))) > 0);
    let remote = ops.iter().filter(|op| op.partitions().unwrap().len() > 1);
    assert!(remote.count() > 0, "some operations are multi-partition");
}

common::on_both_backends!(
    new_order_follows_the_specification,
    unused_item_rolls_back,
    an_item_named_twice_takes_from_its_stock_in_line_order,
    payment_follows_the_specification,
    order_status_shows_the_last_order,
    delivery_follows_the_specification,
    stock_level_counts_low_stock,
    invalid_inputs_change_nothing,
);
