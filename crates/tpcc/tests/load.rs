//! The loader and the consistency checks on SQLite and PostgreSQL.

mod common;

use common::{dump, fresh, Kind};
use sqlx::{AnyConnection, AssertSqlSafe};
use tpcc::{check, load, ScaleConfig};

const TINY: ScaleConfig = ScaleConfig {
    items: 100,
    districts_per_warehouse: 3,
    customers_per_district: 30,
    orders_per_district: 30,
};
const WAREHOUSES: i64 = 2;

async fn loaded(kind: Kind, seed: u64) -> (common::TestDb, Vec<String>) {
    let db = fresh(kind).await;
    let mut conn = db.connect().await;
    let mut last = 0;
    load(&mut conn, &TINY, WAREHOUSES, seed, |n| {
        assert!(n > last, "progress must grow");
        last = n;
    })
    .await
    .unwrap();
    let rows = dump(&mut conn).await;
    assert_eq!(rows.len() as u64, last, "progress counts every row");
    (db, rows)
}

async fn count(conn: &mut AnyConnection, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&mut *conn).await.unwrap()
}

async fn deterministic_per_seed(kind: Kind) {
    let (_a, first) = loaded(kind, 42).await;
    let (_b, again) = loaded(kind, 42).await;
    assert_eq!(first, again, "the same seed must load identical data");
    let (_c, other) = loaded(kind, 43).await;
    assert_ne!(first, other, "a different seed must load different data");
    let expected = TINY.rows_without_order_lines(WAREHOUSES) as usize;
    let lines = first
        .iter()
        .filter(|r| r.starts_with("order_line:"))
        .count();
    assert_eq!(first.len(), expected + lines);
}

async fn cardinalities_follow_the_specification(kind: Kind) {
    let db = fresh(kind).await;
    let mut conn = db.connect().await;
    load(&mut conn, &TINY, WAREHOUSES, 7, |_| {}).await.unwrap();
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM item").await, 100);
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM stock").await, 200);
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM district").await, 6);
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM customer").await, 180);
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM history").await, 180);
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM orders").await, 180);
    // 30% of each district's 30 orders are undelivered.
    assert_eq!(count(&mut conn, "SELECT COUNT(*) FROM new_order").await, 54);
    assert_eq!(
        count(&mut conn, "SELECT MIN(no_o_id) FROM new_order").await,
        22
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT COUNT(*) FROM orders WHERE o_carrier_id IS NULL"
        )
        .await,
        54
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT COUNT(*) FROM order_line WHERE ol_o_id < 22 AND ol_amount <> 0"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT COUNT(*) FROM order_line WHERE ol_o_id >= 22 AND ol_amount = 0"
        )
        .await,
        0
    );
    // Every order has 5 to 15 lines.
    let lines = "SELECT COUNT(*) AS n FROM order_line GROUP BY ol_w_id, ol_d_id, ol_o_id";
    let (min, max): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT MIN(n), MAX(n) FROM ({lines}) v"
    )))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(5 <= min && max <= 15, "{min}..{max} lines per order");
    // The first 1,000 customers of a district have the last names of their index.
    let last: String = sqlx::query_scalar(
        "SELECT c_last FROM customer WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 30",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(last, "BARABLEEING");
    let first: String = sqlx::query_scalar(
        "SELECT c_last FROM customer WHERE c_w_id = 2 AND c_d_id = 3 AND c_id = 1",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(first, "BARBARBAR");
    // Loading again is refused rather than duplicating keys.
    let again = load(&mut conn, &TINY, WAREHOUSES, 7, |_| {}).await;
    assert!(
        matches!(again, Err(tpcc::LoadError::NotEmpty { .. })),
        "{again:?}"
    );
}

async fn fresh_database_is_consistent(kind: Kind) {
    let db = fresh(kind).await;
    let mut conn = db.connect().await;
    load(&mut conn, &TINY, WAREHOUSES, 11, |_| {})
        .await
        .unwrap();
    let results = check(&mut conn, TINY.delivered_per_district())
        .await
        .unwrap();
    assert_eq!(
        results.iter().map(|r| r.number).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<_>>()
    );
    for r in &results {
        assert!(r.passed, "condition {} failed: {}", r.number, r.detail);
    }
}

async fn failed(conn: &mut AnyConnection) -> Vec<u8> {
    check(conn, TINY.delivered_per_district())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.passed)
        .map(|r| r.number)
        .collect()
}

async fn broken_database_fails_the_right_conditions(kind: Kind) {
    let db = fresh(kind).await;
    let mut conn = db.connect().await;
    load(&mut conn, &TINY, WAREHOUSES, 13, |_| {})
        .await
        .unwrap();

    sqlx::query("UPDATE district SET d_ytd = d_ytd + 1 WHERE d_w_id = 2 AND d_id = 3")
        .execute(&mut conn)
        .await
        .unwrap();
    let results = check(&mut conn, TINY.delivered_per_district())
        .await
        .unwrap();
    let one = results.iter().find(|r| r.number == 1).unwrap();
    assert_eq!(one.detail, "1 violation(s); first at w_id=2");
    assert_eq!(failed(&mut conn).await, vec![1, 9]);
    sqlx::query("UPDATE district SET d_ytd = d_ytd - 1 WHERE d_w_id = 2 AND d_id = 3")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(failed(&mut conn).await, Vec::<u8>::new());

    // An undelivered order that claims a carrier, with its new_order row gone: the order and
    // its lines disagree, and the district's new_order range has a hole.
    sqlx::query("UPDATE orders SET o_carrier_id = 3 WHERE o_w_id = 1 AND o_d_id = 2 AND o_id = 25")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(failed(&mut conn).await, vec![5, 7]);
    sqlx::query("DELETE FROM new_order WHERE no_w_id = 1 AND no_d_id = 2 AND no_o_id = 25")
        .execute(&mut conn)
        .await
        .unwrap();
    // Condition 11 no longer applies to that district: it looks like a Delivery ran there.
    assert_eq!(failed(&mut conn).await, vec![3, 7]);

    // The oldest undelivered order of another district loses its new_order row but has no
    // carrier: no Delivery ran there, so condition 11 applies and fails.
    let oldest = TINY.delivered_per_district() + 1;
    sqlx::query("DELETE FROM new_order WHERE no_w_id = 2 AND no_d_id = 2 AND no_o_id = $1")
        .bind(oldest)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(failed(&mut conn).await, vec![3, 5, 7, 11]);

    // A customer's balance that does not match its history and deliveries.
    sqlx::query("UPDATE customer SET c_balance = 0 WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 5")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(failed(&mut conn).await, vec![3, 5, 7, 10, 11, 12]);

    // A lost order line.
    sqlx::query(
        "DELETE FROM order_line WHERE ol_w_id = 2 AND ol_d_id = 1 AND ol_o_id = 1 AND ol_number = 1",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(failed(&mut conn).await, vec![3, 4, 5, 6, 7, 10, 11, 12]);
}

async fn sqlite_and_postgres_load_the_same_data() {
    let (_a, sqlite) = loaded(Kind::Sqlite, 99).await;
    let (_b, postgres) = loaded(Kind::Postgres, 99).await;
    assert_eq!(sqlite, postgres);
}

common::on_both_backends!(
    deterministic_per_seed,
    cardinalities_follow_the_specification,
    fresh_database_is_consistent,
    broken_database_fails_the_right_conditions,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_load_identical_data() {
    sqlite_and_postgres_load_the_same_data().await;
}
