//! `cloudbft tpcc load|check`: populate a database with TPC-C data and check the
//! specification's consistency conditions on any database.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sqlx::Connection;
use std::io::{IsTerminal, Write};
use tpcc::ScaleConfig;

#[derive(Args)]
pub struct TpccArgs {
    #[command(subcommand)]
    command: TpccCommand,
}

#[derive(Subcommand)]
enum TpccCommand {
    /// Create the schema and load warehouses 1..=W (deterministic for a seed: every database
    /// node gets identical data).
    Load {
        /// sqlx URL: sqlite:PATH?mode=rwc or postgres://USER:PASSWORD@HOST/DB (created if missing).
        #[arg(long)]
        db: String,
        #[arg(long, default_value_t = 1)]
        warehouses: i64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        scale: ScaleArgs,
    },
    /// Run the twelve consistency conditions of clause 3.3.2 and print each with pass/fail;
    /// exits non-zero if any fails.
    Check {
        #[arg(long)]
        db: String,
        #[command(flatten)]
        scale: ScaleArgs,
    },
}

/// The cardinalities (the specification's by default; smaller ones for tests and demos).
#[derive(Args, Clone, Copy)]
struct ScaleArgs {
    #[arg(long, default_value_t = 100_000)]
    items: i64,
    #[arg(long, default_value_t = 10)]
    districts: i64,
    /// Customers (and initial orders) per district.
    #[arg(long, default_value_t = 3_000)]
    customers: i64,
}

impl ScaleArgs {
    fn config(self) -> ScaleConfig {
        ScaleConfig {
            items: self.items,
            districts_per_warehouse: self.districts,
            customers_per_district: self.customers,
            orders_per_district: self.customers,
        }
    }
}

async fn connect(url: &str) -> Result<sqlx::AnyConnection> {
    sqlx::any::install_default_drivers();
    dbvote::executor::create_database_if_missing(url).await?;
    sqlx::AnyConnection::connect(url)
        .await
        .with_context(|| format!("connecting to {url} (for SQLite add ?mode=rwc to create it)"))
}

pub fn tpcc(args: TpccArgs) -> Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match args.command {
            TpccCommand::Load {
                db,
                warehouses,
                seed,
                scale,
            } => {
                let scale = scale.config();
                let mut conn = connect(&db).await?;
                // Order lines average 10 per order (5 to 15).
                let order_lines =
                    warehouses * scale.districts_per_warehouse * scale.orders_per_district * 10;
                let expected =
                    (scale.rows_without_order_lines(warehouses) + order_lines).max(1) as u64;
                let show = std::io::stderr().is_terminal();
                let started = std::time::Instant::now();
                let mut last_shown = 0u64;
                tpcc::load(&mut conn, &scale, warehouses, seed, |rows| {
                    if show && rows >= last_shown + expected / 100 {
                        last_shown = rows;
                        eprint!(
                            "\rloading: {rows} rows (~{}%)",
                            (rows * 100 / expected).min(99)
                        );
                        let _ = std::io::stderr().flush();
                    }
                })
                .await?;
                if show {
                    eprintln!();
                }
                println!(
                    "loaded {warehouses} warehouse(s) with seed {seed} in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                Ok(())
            }
            TpccCommand::Check { db, scale } => {
                let mut conn = connect(&db).await?;
                let results =
                    tpcc::check(&mut conn, scale.config().delivered_per_district()).await?;
                let mut failed = 0;
                for r in &results {
                    let verdict = if r.passed { "PASS" } else { "FAIL" };
                    failed += usize::from(!r.passed);
                    println!(
                        "{verdict} {:>2}: {} ({})",
                        r.number, r.description, r.detail
                    );
                }
                if failed > 0 {
                    bail!(
                        "{failed} of {} consistency conditions failed",
                        results.len()
                    );
                }
                Ok(())
            }
        }
    })
}
