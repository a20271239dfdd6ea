//! The initial database population of clause 4.3.3.1, deterministic for a seed and a scale.
//!
//! Every database node of a cluster runs the loader itself, so the data must be byte-identical
//! everywhere: all values come from [`TpccRng`] streams derived from the seed (one for the items,
//! one per warehouse), dates are the fixed [`LOAD_DATE`], and nothing is read back from the
//! database. Rows are inserted in multi-row `INSERT`s inside one transaction per warehouse.

use sqlx::{AnyConnection, AssertSqlSafe, Connection};

use crate::random::{last_name, NuRandConstants, TpccRng};
use crate::schema;

/// The date of every loaded `c_since`, `h_date`, `o_entry_d` and delivered `ol_delivery_d`:
/// 2026-01-01T00:00:00Z in seconds since the Unix epoch. Fixed (not the loading machine's
/// clock) so that nodes loading at different times hold the same data.
pub const LOAD_DATE: i64 = 1_767_225_600;

/// At most this many bound values per `INSERT` on PostgreSQL (below its limit of 65,535): large
/// statements save round trips.
const MAX_BINDS_POSTGRES: usize = 16_000;

/// At most this many bound values per `INSERT` on SQLite. Measured on 20,000 items with their
/// stock: 16,000 binds per statement took 19 s, 2,000 took 3.3 s, 250 took 1.6 s; the cost of
/// a statement grows faster than linearly in its `$N` placeholders, and there are no round
/// trips to save.
const MAX_BINDS_SQLITE: usize = 250;

/// The cardinalities of the population. The specification's are [`ScaleConfig::standard`];
/// tests and demos use smaller ones, which keep the specification's proportions (30% of each
/// district's orders undelivered) and its consistency: the year-to-date totals are derived
/// from the history rows (see [`district_ytd`](Self::district_ytd)) so that they equal the
/// specification's values at the standard scale and satisfy conditions 1, 8 and 9 at any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleConfig {
    /// Rows of `item` (and of `stock` per warehouse); 100,000 in the specification.
    pub items: i64,
    /// Districts per warehouse; 10 in the specification.
    pub districts_per_warehouse: i64,
    /// Customers per district; 3,000 in the specification.
    pub customers_per_district: i64,
    /// Orders per district (one per customer, at most `customers_per_district`); 3,000 in the
    /// specification.
    pub orders_per_district: i64,
}

impl ScaleConfig {
    /// The specification's cardinalities.
    pub fn standard() -> ScaleConfig {
        ScaleConfig {
            items: 100_000,
            districts_per_warehouse: 10,
            customers_per_district: 3_000,
            orders_per_district: 3_000,
        }
    }

    /// A small population for demos and tests: 1,000 items, 10 districts per warehouse, 100
    /// customers and orders per district (loads in about a second per warehouse).
    pub fn small() -> ScaleConfig {
        ScaleConfig {
            items: 1_000,
            districts_per_warehouse: 10,
            customers_per_district: 100,
            orders_per_district: 100,
        }
    }

    /// The cardinalities of a loaded database, read back from it: items, districts of
    /// warehouse 1, customers of its district 1, and as many initial orders as customers (what
    /// `cloudbft tpcc load` loads). Transactions never add items, districts or customers, so
    /// this holds after any run.
    pub async fn of_database(conn: &mut AnyConnection) -> Result<ScaleConfig, sqlx::Error> {
        let mut count = async |sql: &'static str| -> Result<i64, sqlx::Error> {
            sqlx::query_scalar(sql).fetch_one(&mut *conn).await
        };
        let items = count("SELECT COUNT(*) FROM item").await?;
        let districts = count("SELECT COUNT(*) FROM district WHERE d_w_id = 1").await?;
        let customers =
            count("SELECT COUNT(*) FROM customer WHERE c_w_id = 1 AND c_d_id = 1").await?;
        Ok(ScaleConfig {
            items,
            districts_per_warehouse: districts,
            customers_per_district: customers,
            orders_per_district: customers,
        })
    }

    /// Orders per district that are undelivered (in `new_order`, without carrier): the last
    /// 900 of 3,000 in the specification, 30% in general.
    pub fn new_orders_per_district(&self) -> i64 {
        self.orders_per_district * 900 / 3_000
    }

    /// Orders per district that are delivered at load time (2,100 in the specification); the
    /// value consistency condition 11 expects before any Delivery.
    pub fn delivered_per_district(&self) -> i64 {
        self.orders_per_district - self.new_orders_per_district()
    }

    /// The initial `d_ytd` in cents: the sum of the district's history rows (10.00 per
    /// customer), which condition 9 requires; 30,000.00 at the standard scale.
    pub fn district_ytd(&self) -> i64 {
        self.customers_per_district.saturating_mul(HISTORY_AMOUNT)
    }

    /// The initial `w_ytd` in cents: the sum of its districts' `d_ytd`, which conditions 1 and 8
    /// require; 300,000.00 at the standard scale.
    pub fn warehouse_ytd(&self) -> i64 {
        self.district_ytd()
            .saturating_mul(self.districts_per_warehouse)
    }

    /// Rows loaded except order lines, whose count is random: for sizing a progress bar.
    pub fn rows_without_order_lines(&self, warehouses: i64) -> i64 {
        let per_district = 2 * self.customers_per_district
            + self.orders_per_district
            + self.new_orders_per_district()
            + 1;
        self.items + warehouses * (1 + self.items + self.districts_per_warehouse * per_district)
    }

    fn validate(&self, warehouses: i64) -> Result<(), LoadError> {
        let bad = |what: &'static str| Err(LoadError::Scale(what));
        if warehouses < 1 {
            return bad("warehouses must be at least 1");
        }
        if self.items < 1 {
            return bad("items must be at least 1");
        }
        if self.districts_per_warehouse < 1 {
            return bad("districts_per_warehouse must be at least 1");
        }
        if self.customers_per_district < 1 {
            return bad("customers_per_district must be at least 1");
        }
        if self.orders_per_district < 0 || self.orders_per_district > self.customers_per_district {
            return bad("orders_per_district must be in 0..=customers_per_district");
        }
        if self.items > 100_000_000
            || self.districts_per_warehouse > 1_000
            || self.customers_per_district > 100_000_000
            || warehouses > 1_000_000
        {
            return bad("a cardinality is beyond what the loader supports");
        }
        Ok(())
    }
}

/// `h_amount` of every loaded history row: 10.00.
const HISTORY_AMOUNT: i64 = 1_000;

/// Why loading failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The scale or warehouse count is unusable.
    #[error("invalid TPC-C scale: {0}")]
    Scale(&'static str),
    /// The database already holds TPC-C data; loading twice would duplicate keys.
    #[error("the database already holds TPC-C data ({rows} rows in {table}); load into an empty database")]
    NotEmpty {
        /// The first non-empty table found.
        table: &'static str,
        /// Its row count.
        rows: i64,
    },
    /// A statement failed.
    #[error("loading TPC-C table {table} failed: {source}")]
    Database {
        /// The table being written (or `schema`).
        table: &'static str,
        /// The database error.
        #[source]
        source: sqlx::Error,
    },
}

fn db(table: &'static str) -> impl FnOnce(sqlx::Error) -> LoadError {
    move |source| LoadError::Database { table, source }
}

#[derive(Clone, Debug)]
enum Value {
    Int(i64),
    Null,
    Text(String),
}

/// Buffers rows of one table and writes them as multi-row `INSERT`s.
struct Batch {
    max_binds: usize,
    table: &'static str,
    columns: &'static [&'static str],
    values: Vec<Value>,
    rows: usize,
}

impl Batch {
    fn new(conn: &AnyConnection, table: &'static str, columns: &'static [&'static str]) -> Batch {
        let max_binds = match conn.backend_name() {
            "SQLite" => MAX_BINDS_SQLITE,
            _ => MAX_BINDS_POSTGRES,
        };
        Batch {
            max_binds,
            table,
            columns,
            values: Vec::new(),
            rows: 0,
        }
    }

    async fn push(
        &mut self,
        conn: &mut AnyConnection,
        row: Vec<Value>,
        loaded: &mut u64,
        progress: &mut (impl FnMut(u64) + Send),
    ) -> Result<(), LoadError> {
        debug_assert_eq!(row.len(), self.columns.len());
        self.values.extend(row);
        self.rows += 1;
        if self.values.len() + self.columns.len() > self.max_binds {
            self.flush(conn, loaded, progress).await?;
        }
        Ok(())
    }

    async fn flush(
        &mut self,
        conn: &mut AnyConnection,
        loaded: &mut u64,
        progress: &mut (impl FnMut(u64) + Send),
    ) -> Result<(), LoadError> {
        if self.rows == 0 {
            return Ok(());
        }
        let width = self.columns.len();
        let mut sql = format!(
            "INSERT INTO {} ({}) VALUES ",
            self.table,
            self.columns.join(", ")
        );
        for row in 0..self.rows {
            if row > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            for column in 0..width {
                if column > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("${}", row * width + column + 1));
            }
            sql.push(')');
        }
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in self.values.drain(..) {
            query = match value {
                Value::Int(v) => query.bind(v),
                Value::Null => query.bind(None::<i64>),
                Value::Text(v) => query.bind(v),
            };
        }
        query.execute(&mut *conn).await.map_err(db(self.table))?;
        *loaded += self.rows as u64;
        self.rows = 0;
        progress(*loaded);
        Ok(())
    }
}

const ITEM: &[&str] = &["i_id", "i_im_id", "i_name", "i_price", "i_data"];
const WAREHOUSE: &[&str] = &[
    "w_id",
    "w_name",
    "w_street_1",
    "w_street_2",
    "w_city",
    "w_state",
    "w_zip",
    "w_tax",
    "w_ytd",
];
const STOCK: &[&str] = &[
    "s_i_id",
    "s_w_id",
    "s_quantity",
    "s_dist_01",
    "s_dist_02",
    "s_dist_03",
    "s_dist_04",
    "s_dist_05",
    "s_dist_06",
    "s_dist_07",
    "s_dist_08",
    "s_dist_09",
    "s_dist_10",
    "s_ytd",
    "s_order_cnt",
    "s_remote_cnt",
    "s_data",
];
const DISTRICT: &[&str] = &[
    "d_id",
    "d_w_id",
    "d_name",
    "d_street_1",
    "d_street_2",
    "d_city",
    "d_state",
    "d_zip",
    "d_tax",
    "d_ytd",
    "d_next_o_id",
];
const CUSTOMER: &[&str] = &[
    "c_id",
    "c_d_id",
    "c_w_id",
    "c_first",
    "c_middle",
    "c_last",
    "c_street_1",
    "c_street_2",
    "c_city",
    "c_state",
    "c_zip",
    "c_phone",
    "c_since",
    "c_credit",
    "c_credit_lim",
    "c_discount",
    "c_balance",
    "c_ytd_payment",
    "c_payment_cnt",
    "c_delivery_cnt",
    "c_data",
];
const HISTORY: &[&str] = &[
    "h_c_id", "h_c_d_id", "h_c_w_id", "h_d_id", "h_w_id", "h_date", "h_amount", "h_data",
];
const ORDERS: &[&str] = &[
    "o_id",
    "o_d_id",
    "o_w_id",
    "o_c_id",
    "o_entry_d",
    "o_carrier_id",
    "o_ol_cnt",
    "o_all_local",
];
const ORDER_LINE: &[&str] = &[
    "ol_o_id",
    "ol_d_id",
    "ol_w_id",
    "ol_number",
    "ol_i_id",
    "ol_supply_w_id",
    "ol_delivery_d",
    "ol_quantity",
    "ol_amount",
    "ol_dist_info",
];
const NEW_ORDER: &[&str] = &["no_o_id", "no_d_id", "no_w_id"];

/// Street 1, street 2, city, state and zip (clause 4.3.3.1's address fields).
fn address(rng: &mut TpccRng) -> [Value; 5] {
    [
        Value::Text(rng.a_string(10, 20)),
        Value::Text(rng.a_string(10, 20)),
        Value::Text(rng.a_string(10, 20)),
        Value::Text(rng.a_string(2, 2)),
        Value::Text(rng.zip()),
    ]
}

/// Creates the schema if needed and loads `warehouses` warehouses (ids `1..=warehouses`) at
/// `scale` into an empty database, calling `progress` with the number of rows loaded so far
/// after every batch.
///
/// The same `seed` and `scale` give byte-identical data on every backend and machine. One
/// transaction per warehouse (and one for the items): an interrupted load leaves whole
/// warehouses, and the database must be recreated to load again.
pub async fn load(
    conn: &mut AnyConnection,
    scale: &ScaleConfig,
    warehouses: i64,
    seed: u64,
    mut progress: impl FnMut(u64) + Send,
) -> Result<(), LoadError> {
    scale.validate(warehouses)?;
    schema::create(conn).await.map_err(db("schema"))?;
    for &(table, _) in schema::TABLES {
        let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
            .fetch_one(&mut *conn)
            .await
            .map_err(db(table))?;
        if rows > 0 {
            return Err(LoadError::NotEmpty { table, rows });
        }
    }
    let constants = NuRandConstants::for_load(seed);
    let mut loaded = 0u64;

    let mut tx = conn.begin().await.map_err(db("item"))?;
    let mut rng = TpccRng::stream(seed, 0);
    let mut batch = Batch::new(&tx, "item", ITEM);
    for i_id in 1..=scale.items {
        let row = vec![
            Value::Int(i_id),
            Value::Int(rng.uniform(1, 10_000)),
            Value::Text(rng.a_string(14, 24)),
            Value::Int(rng.uniform(100, 10_000)),
            Value::Text(rng.data(26, 50)),
        ];
        batch.push(&mut tx, row, &mut loaded, &mut progress).await?;
    }
    batch.flush(&mut tx, &mut loaded, &mut progress).await?;
    tx.commit().await.map_err(db("item"))?;

    for w_id in 1..=warehouses {
        let mut tx = conn.begin().await.map_err(db("warehouse"))?;
        let mut rng = TpccRng::stream(seed, w_id as u64);
        load_warehouse(
            &mut tx,
            scale,
            w_id,
            &constants,
            &mut rng,
            &mut loaded,
            &mut progress,
        )
        .await?;
        tx.commit().await.map_err(db("warehouse"))?;
        tracing::debug!(w_id, loaded, "loaded TPC-C warehouse");
    }
    Ok(())
}

async fn load_warehouse(
    conn: &mut AnyConnection,
    scale: &ScaleConfig,
    w_id: i64,
    constants: &NuRandConstants,
    rng: &mut TpccRng,
    loaded: &mut u64,
    progress: &mut (impl FnMut(u64) + Send),
) -> Result<(), LoadError> {
    let mut row = vec![Value::Int(w_id), Value::Text(rng.a_string(6, 10))];
    row.extend(address(rng));
    row.push(Value::Int(rng.uniform(0, 2_000)));
    row.push(Value::Int(scale.warehouse_ytd()));
    let mut batch = Batch::new(conn, "warehouse", WAREHOUSE);
    batch.push(conn, row, loaded, progress).await?;
    batch.flush(conn, loaded, progress).await?;

    let mut batch = Batch::new(conn, "stock", STOCK);
    for s_i_id in 1..=scale.items {
        let mut row = vec![
            Value::Int(s_i_id),
            Value::Int(w_id),
            Value::Int(rng.uniform(10, 100)),
        ];
        row.extend((0..10).map(|_| Value::Text(rng.a_string(24, 24))));
        row.extend([Value::Int(0), Value::Int(0), Value::Int(0)]);
        row.push(Value::Text(rng.data(26, 50)));
        batch.push(conn, row, loaded, progress).await?;
    }
    batch.flush(conn, loaded, progress).await?;

    let undelivered_from = scale.delivered_per_district() + 1;
    for d_id in 1..=scale.districts_per_warehouse {
        let mut row = vec![
            Value::Int(d_id),
            Value::Int(w_id),
            Value::Text(rng.a_string(6, 10)),
        ];
        row.extend(address(rng));
        row.push(Value::Int(rng.uniform(0, 2_000)));
        row.push(Value::Int(scale.district_ytd()));
        row.push(Value::Int(scale.orders_per_district + 1));
        let mut batch = Batch::new(conn, "district", DISTRICT);
        batch.push(conn, row, loaded, progress).await?;
        batch.flush(conn, loaded, progress).await?;

        let mut customers = Batch::new(conn, "customer", CUSTOMER);
        let mut history = Batch::new(conn, "history", HISTORY);
        for c_id in 1..=scale.customers_per_district {
            let c_last = if c_id <= 1_000 {
                last_name(c_id - 1)
            } else {
                last_name(rng.nurand(255, 0, 999, constants.c_last))
            };
            let mut row = vec![
                Value::Int(c_id),
                Value::Int(d_id),
                Value::Int(w_id),
                Value::Text(rng.a_string(8, 16)),
                Value::Text("OE".to_owned()),
                Value::Text(c_last),
            ];
            row.extend(address(rng));
            row.push(Value::Text(rng.n_string(16, 16)));
            row.push(Value::Int(LOAD_DATE));
            let credit = if rng.percent(10) { "BC" } else { "GC" };
            row.push(Value::Text(credit.to_owned()));
            row.push(Value::Int(5_000_000));
            row.push(Value::Int(rng.uniform(0, 5_000)));
            row.extend([
                Value::Int(-1_000),
                Value::Int(1_000),
                Value::Int(1),
                Value::Int(0),
            ]);
            row.push(Value::Text(rng.a_string(300, 500)));
            customers.push(conn, row, loaded, progress).await?;

            let row = vec![
                Value::Int(c_id),
                Value::Int(d_id),
                Value::Int(w_id),
                Value::Int(d_id),
                Value::Int(w_id),
                Value::Int(LOAD_DATE),
                Value::Int(HISTORY_AMOUNT),
                Value::Text(rng.a_string(12, 24)),
            ];
            history.push(conn, row, loaded, progress).await?;
        }
        customers.flush(conn, loaded, progress).await?;
        history.flush(conn, loaded, progress).await?;

        let mut orders = Batch::new(conn, "orders", ORDERS);
        let mut lines = Batch::new(conn, "order_line", ORDER_LINE);
        let mut new_orders = Batch::new(conn, "new_order", NEW_ORDER);
        let permutation = rng.permutation(scale.customers_per_district);
        for (o_id, &o_c_id) in (1..=scale.orders_per_district).zip(&permutation) {
            let delivered = o_id < undelivered_from;
            let ol_cnt = rng.uniform(5, 15);
            let carrier = if delivered {
                Value::Int(rng.uniform(1, 10))
            } else {
                Value::Null
            };
            let row = vec![
                Value::Int(o_id),
                Value::Int(d_id),
                Value::Int(w_id),
                Value::Int(o_c_id),
                Value::Int(LOAD_DATE),
                carrier,
                Value::Int(ol_cnt),
                Value::Int(1),
            ];
            orders.push(conn, row, loaded, progress).await?;
            for ol_number in 1..=ol_cnt {
                let (delivery, amount) = if delivered {
                    (Value::Int(LOAD_DATE), 0)
                } else {
                    (Value::Null, rng.uniform(1, 999_999))
                };
                let row = vec![
                    Value::Int(o_id),
                    Value::Int(d_id),
                    Value::Int(w_id),
                    Value::Int(ol_number),
                    Value::Int(rng.uniform(1, scale.items)),
                    Value::Int(w_id),
                    delivery,
                    Value::Int(5),
                    Value::Int(amount),
                    Value::Text(rng.a_string(24, 24)),
                ];
                lines.push(conn, row, loaded, progress).await?;
            }
            if !delivered {
                let row = vec![Value::Int(o_id), Value::Int(d_id), Value::Int(w_id)];
                new_orders.push(conn, row, loaded, progress).await?;
            }
        }
        orders.flush(conn, loaded, progress).await?;
        lines.flush(conn, loaded, progress).await?;
        new_orders.flush(conn, loaded, progress).await?;
    }
    Ok(())
}
