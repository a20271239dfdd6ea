//! Bad input is an error that names the problem, never a panic or a partial load.

mod common;

use common::{fresh, Kind};
use tpcc::{check, load, schema, LoadError, ScaleConfig};

const TINY: ScaleConfig = ScaleConfig {
    items: 10,
    districts_per_warehouse: 1,
    customers_per_district: 10,
    orders_per_district: 10,
};

#[tokio::test]
async fn invalid_scales_are_refused_before_writing() {
    let db = fresh(Kind::Sqlite).await;
    let mut conn = db.connect().await;
    let cases = [
        (TINY, 0, "warehouses"),
        (ScaleConfig { items: 0, ..TINY }, 1, "items"),
        (
            ScaleConfig {
                districts_per_warehouse: 0,
                ..TINY
            },
            1,
            "districts",
        ),
        (
            ScaleConfig {
                customers_per_district: 0,
                ..TINY
            },
            1,
            "customers",
        ),
        (
            ScaleConfig {
                orders_per_district: 11,
                ..TINY
            },
            1,
            "orders",
        ),
        (
            ScaleConfig {
                items: i64::MAX,
                ..TINY
            },
            1,
            "beyond",
        ),
    ];
    for (scale, warehouses, what) in cases {
        let err = load(&mut conn, &scale, warehouses, 1, |_| {})
            .await
            .unwrap_err();
        assert!(matches!(err, LoadError::Scale(_)), "{err:?}");
        assert!(err.to_string().contains(what), "{err} should name {what}");
    }
    let tables: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(tables, 0, "nothing is written for an invalid scale");
}

#[tokio::test]
async fn schema_is_idempotent_on_both_backends() {
    for kind in [Kind::Sqlite, Kind::Postgres] {
        let db = fresh(kind).await;
        let mut conn = db.connect().await;
        schema::create(&mut conn).await.unwrap();
        schema::create(&mut conn).await.unwrap();
        // An empty database is consistent: every condition is about rows that exist.
        let results = check(&mut conn, 0).await.unwrap();
        assert!(results.iter().all(|r| r.passed), "{results:?}");
    }
}

#[tokio::test]
async fn checking_a_database_without_tables_names_the_condition() {
    let db = fresh(Kind::Sqlite).await;
    let mut conn = db.connect().await;
    let err = check(&mut conn, 2100).await.unwrap_err();
    assert_eq!(err.number, 1);
    assert!(err.to_string().contains("condition 1"), "{err}");
}

#[tokio::test]
async fn loading_twice_is_refused() {
    let db = fresh(Kind::Sqlite).await;
    let mut conn = db.connect().await;
    load(&mut conn, &TINY, 1, 1, |_| {}).await.unwrap();
    let err = load(&mut conn, &TINY, 1, 1, |_| {}).await.unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::NotEmpty {
                table: "warehouse",
                rows: 1
            }
        ),
        "{err:?}"
    );
}
