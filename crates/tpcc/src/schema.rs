//! The nine TPC-C tables, with the specification's table and column names.
//!
//! # Types
//!
//! sqlx's `Any` driver decodes only integers, text, byte strings and booleans on both backends,
//! and determinism forbids floating point and database clocks, so:
//! - every integer is `BIGINT`;
//! - money (`w_ytd`, `d_ytd`, `c_credit_lim`, `c_balance`, `c_ytd_payment`, `h_amount`,
//!   `ol_amount`, `i_price`) is in integer **cents**: the specification's `DECIMAL(…, 2)`
//!   values times 100 (`c_credit_lim` 50,000.00 is `5_000_000`);
//! - rates (`w_tax`, `d_tax`, `c_discount`) are in integer **1/10000** (basis points): the
//!   specification's `DECIMAL(4, 4)` values times 10,000 (a tax of 0.1234 is `1234`), which is
//!   exact because those values have four decimal digits;
//! - dates (`c_since`, `h_date`, `o_entry_d`, `ol_delivery_d`) are `BIGINT` seconds since the
//!   Unix epoch, taken from the operation (or the loader's fixed [`LOAD_DATE`](crate::load::LOAD_DATE)),
//!   never from the database clock;
//! - strings are `TEXT`; `o_carrier_id` and `ol_delivery_d` are nullable (undelivered orders).
//!
//! Every statement is idempotent and valid on SQLite and PostgreSQL.

use sqlx::AnyConnection;

/// `CREATE TABLE IF NOT EXISTS` and `CREATE INDEX IF NOT EXISTS` statements, in order.
///
/// Besides the primary keys, two indexes serve the transactions: customers by last name
/// (Payment and Order-Status select a customer by `c_last`, ordered by `c_first`) and orders
/// by customer (Order-Status reads a customer's most recent order).
pub const STATEMENTS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS warehouse (
        w_id BIGINT NOT NULL,
        w_name TEXT NOT NULL,
        w_street_1 TEXT NOT NULL,
        w_street_2 TEXT NOT NULL,
        w_city TEXT NOT NULL,
        w_state TEXT NOT NULL,
        w_zip TEXT NOT NULL,
        w_tax BIGINT NOT NULL,
        w_ytd BIGINT NOT NULL,
        PRIMARY KEY (w_id)
    )",
    "CREATE TABLE IF NOT EXISTS district (
        d_id BIGINT NOT NULL,
        d_w_id BIGINT NOT NULL,
        d_name TEXT NOT NULL,
        d_street_1 TEXT NOT NULL,
        d_street_2 TEXT NOT NULL,
        d_city TEXT NOT NULL,
        d_state TEXT NOT NULL,
        d_zip TEXT NOT NULL,
        d_tax BIGINT NOT NULL,
        d_ytd BIGINT NOT NULL,
        d_next_o_id BIGINT NOT NULL,
        PRIMARY KEY (d_w_id, d_id)
    )",
    "CREATE TABLE IF NOT EXISTS customer (
        c_id BIGINT NOT NULL,
        c_d_id BIGINT NOT NULL,
        c_w_id BIGINT NOT NULL,
        c_first TEXT NOT NULL,
        c_middle TEXT NOT NULL,
        c_last TEXT NOT NULL,
        c_street_1 TEXT NOT NULL,
        c_street_2 TEXT NOT NULL,
        c_city TEXT NOT NULL,
        c_state TEXT NOT NULL,
        c_zip TEXT NOT NULL,
        c_phone TEXT NOT NULL,
        c_since BIGINT NOT NULL,
        c_credit TEXT NOT NULL,
        c_credit_lim BIGINT NOT NULL,
        c_discount BIGINT NOT NULL,
        c_balance BIGINT NOT NULL,
        c_ytd_payment BIGINT NOT NULL,
        c_payment_cnt BIGINT NOT NULL,
        c_delivery_cnt BIGINT NOT NULL,
        c_data TEXT NOT NULL,
        PRIMARY KEY (c_w_id, c_d_id, c_id)
    )",
    "CREATE INDEX IF NOT EXISTS customer_by_name ON customer (c_w_id, c_d_id, c_last, c_first)",
    "CREATE TABLE IF NOT EXISTS history (
        h_c_id BIGINT NOT NULL,
        h_c_d_id BIGINT NOT NULL,
        h_c_w_id BIGINT NOT NULL,
        h_d_id BIGINT NOT NULL,
        h_w_id BIGINT NOT NULL,
        h_date BIGINT NOT NULL,
        h_amount BIGINT NOT NULL,
        h_data TEXT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS new_order (
        no_o_id BIGINT NOT NULL,
        no_d_id BIGINT NOT NULL,
        no_w_id BIGINT NOT NULL,
        PRIMARY KEY (no_w_id, no_d_id, no_o_id)
    )",
    "CREATE TABLE IF NOT EXISTS orders (
        o_id BIGINT NOT NULL,
        o_d_id BIGINT NOT NULL,
        o_w_id BIGINT NOT NULL,
        o_c_id BIGINT NOT NULL,
        o_entry_d BIGINT NOT NULL,
        o_carrier_id BIGINT,
        o_ol_cnt BIGINT NOT NULL,
        o_all_local BIGINT NOT NULL,
        PRIMARY KEY (o_w_id, o_d_id, o_id)
    )",
    "CREATE INDEX IF NOT EXISTS orders_by_customer ON orders (o_w_id, o_d_id, o_c_id, o_id)",
    "CREATE TABLE IF NOT EXISTS order_line (
        ol_o_id BIGINT NOT NULL,
        ol_d_id BIGINT NOT NULL,
        ol_w_id BIGINT NOT NULL,
        ol_number BIGINT NOT NULL,
        ol_i_id BIGINT NOT NULL,
        ol_supply_w_id BIGINT NOT NULL,
        ol_delivery_d BIGINT,
        ol_quantity BIGINT NOT NULL,
        ol_amount BIGINT NOT NULL,
        ol_dist_info TEXT NOT NULL,
        PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)
    )",
    "CREATE TABLE IF NOT EXISTS item (
        i_id BIGINT NOT NULL,
        i_im_id BIGINT NOT NULL,
        i_name TEXT NOT NULL,
        i_price BIGINT NOT NULL,
        i_data TEXT NOT NULL,
        PRIMARY KEY (i_id)
    )",
    "CREATE TABLE IF NOT EXISTS stock (
        s_i_id BIGINT NOT NULL,
        s_w_id BIGINT NOT NULL,
        s_quantity BIGINT NOT NULL,
        s_dist_01 TEXT NOT NULL,
        s_dist_02 TEXT NOT NULL,
        s_dist_03 TEXT NOT NULL,
        s_dist_04 TEXT NOT NULL,
        s_dist_05 TEXT NOT NULL,
        s_dist_06 TEXT NOT NULL,
        s_dist_07 TEXT NOT NULL,
        s_dist_08 TEXT NOT NULL,
        s_dist_09 TEXT NOT NULL,
        s_dist_10 TEXT NOT NULL,
        s_ytd BIGINT NOT NULL,
        s_order_cnt BIGINT NOT NULL,
        s_remote_cnt BIGINT NOT NULL,
        s_data TEXT NOT NULL,
        PRIMARY KEY (s_w_id, s_i_id)
    )",
];

/// Every table with the `ORDER BY` columns that make its rows' order total, for dumps and for
/// the application's state digest. `history` has no key in the specification, so all its
/// columns order it.
pub const TABLES: &[(&str, &str)] = &[
    ("warehouse", "w_id"),
    ("district", "d_w_id, d_id"),
    ("customer", "c_w_id, c_d_id, c_id"),
    (
        "history",
        "h_w_id, h_d_id, h_c_w_id, h_c_d_id, h_c_id, h_date, h_amount, h_data",
    ),
    ("new_order", "no_w_id, no_d_id, no_o_id"),
    ("orders", "o_w_id, o_d_id, o_id"),
    ("order_line", "ol_w_id, ol_d_id, ol_o_id, ol_number"),
    ("item", "i_id"),
    ("stock", "s_w_id, s_i_id"),
];

/// Creates the tables and indexes that do not exist yet.
pub async fn create(conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
    for statement in STATEMENTS {
        sqlx::query(*statement).execute(&mut *conn).await?;
    }
    Ok(())
}
