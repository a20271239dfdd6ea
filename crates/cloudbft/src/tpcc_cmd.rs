//! `cloudbft tpcc load|check|digest|run`: populate databases with TPC-C data, check the
//! specification's consistency conditions and compare states on any database, and drive the
//! workload (see [`crate::tpcc_run`]).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use tpcc::ScaleConfig;

#[derive(Args)]
pub struct TpccArgs {
    #[command(subcommand)]
    command: TpccCommand,
}

#[derive(Subcommand)]
enum TpccCommand {
    /// Create the schema and load warehouses 1..=W (deterministic for a seed: every database
    /// node gets identical data), into one database or into every database node of a cluster.
    Load {
        /// sqlx URL: sqlite:PATH (the file is created) or postgres://USER:PASSWORD@HOST/DB (the
        /// database is created if missing; the role needs CREATEDB).
        #[arg(long, required_unless_present = "config", conflicts_with = "config")]
        db: Option<String>,
        /// A cluster.toml: load every database node's database, one warehouse per partition.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Warehouses (with --db).
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
    },
    /// Print the SHA-256 digest of the whole database state (every TPC-C table in key order and
    /// the executor's progress): equal on every correct database node at the same order.
    Digest {
        #[arg(long)]
        db: String,
    },
    /// Drive the specification's mix with closed-loop terminals through a fresh local cluster
    /// (or with --baseline through one unreplicated database) and report tpmC and latencies.
    Run(Box<crate::tpcc_run::RunArgs>),
}

/// The cardinalities (the specification's by default; `--items 1000 --customers 100` is the
/// demo's small scale).
#[derive(Args, Clone, Copy, Debug)]
pub struct ScaleArgs {
    #[arg(long, default_value_t = 100_000)]
    items: i64,
    #[arg(long, default_value_t = 10)]
    districts: i64,
    /// Customers (and initial orders) per district.
    #[arg(long, default_value_t = 3_000)]
    customers: i64,
}

impl ScaleArgs {
    pub fn config(self) -> ScaleConfig {
        ScaleConfig {
            items: self.items,
            districts_per_warehouse: self.districts,
            customers_per_district: self.customers,
            orders_per_district: self.customers,
        }
    }
}

/// A connection to the existing database at `url` (a check or digest of a database that is not
/// there says so instead of creating an empty one).
pub async fn connect(url: &str) -> Result<sqlx::AnyConnection> {
    open(url).await.with_context(|| {
        format!(
            "connecting to {}: is there a database? `cloudbft tpcc load --db URL` creates and \
             loads one",
            redact(url)
        )
    })
}

/// A connection to the database at `url`, created if it is missing: a SQLite file is created
/// (with its directory's permissions), a PostgreSQL database is created on the server (the
/// role needs CREATEDB; the server itself must be running).
pub async fn connect_creating(url: &str) -> Result<sqlx::AnyConnection> {
    dbvote::postgres::create_database_if_missing(url).await?;
    let url = sqlite_creating(url);
    open(&url)
        .await
        .with_context(|| format!("connecting to {}", redact(&url)))
}

/// A SQLite URL that creates its file: sqlx opens SQLite files read-write without creating
/// them unless the URL says `mode=rwc`, which a person asking to load a database should not
/// have to know. Other URLs (and SQLite URLs with a mode of their own) are left as they are.
fn sqlite_creating(url: &str) -> String {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        return url.to_owned();
    };
    let in_memory = rest.starts_with(":memory:") || rest.starts_with("//:memory:");
    let query = rest.split_once('?').map(|(_, query)| query);
    if in_memory || query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("mode="))) {
        return url.to_owned();
    }
    match query {
        Some(_) => format!("{url}&mode=rwc"),
        None => format!("{url}?mode=rwc"),
    }
}

async fn open(url: &str) -> Result<sqlx::AnyConnection> {
    use sqlx::ConnectOptions;
    sqlx::any::install_default_drivers();
    let options: sqlx::any::AnyConnectOptions = url
        .parse()
        .with_context(|| format!("{} is not a database URL", redact(url)))?;
    // Checks and digests read whole tables: slow statements are expected, not news.
    Ok(options
        .log_slow_statements(tracing::log::LevelFilter::Off, Default::default())
        .connect()
        .await?)
}

/// Loads `warehouses` into the empty database at `url`, with a progress line on a terminal.
pub async fn load_database(
    url: &str,
    scale: &ScaleConfig,
    warehouses: i64,
    seed: u64,
) -> Result<()> {
    let mut conn = connect_creating(url).await?;
    // Order lines average 10 per order (5 to 15).
    let order_lines = warehouses * scale.districts_per_warehouse * scale.orders_per_district * 10;
    let expected = (scale.rows_without_order_lines(warehouses) + order_lines).max(1) as u64;
    let show = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let mut last_shown = 0u64;
    tpcc::load(&mut conn, scale, warehouses, seed, |rows| {
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
    eprintln!(
        "loaded {warehouses} warehouse(s) with seed {seed} into {} in {:.1} s",
        redact(url),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A fresh local cluster for a TPC-C run: keys and configuration from `keygen`, every database
/// node loaded at `scale` from `seed`, checked to hold no earlier run's orders. Returns the
/// configuration file and the cluster it describes.
pub fn prepare_loaded(
    keygen: &crate::keygen::KeygenArgs,
    runtime: &tokio::runtime::Runtime,
    scale: &ScaleConfig,
    seed: u64,
) -> Result<(PathBuf, proto::config::Cluster)> {
    let (config, _) = crate::launch::prepare(keygen)?;
    let cluster = proto::config::Cluster::load(&config)?;
    runtime.block_on(load_cluster(&cluster, scale, seed))?;
    crate::bench::empty_databases(&config)?;
    Ok((config, cluster))
}

/// Loads every database node of `cluster` (one warehouse per partition), concurrently.
pub async fn load_cluster(
    cluster: &proto::config::Cluster,
    scale: &ScaleConfig,
    seed: u64,
) -> Result<()> {
    let warehouses = i64::from(cluster.config.partitions);
    let mut loads = tokio::task::JoinSet::new();
    for db in &cluster.config.db_nodes {
        let (url, scale, id) = (db.database.clone(), *scale, db.id);
        loads.spawn(async move {
            load_database(&url, &scale, warehouses, seed)
                .await
                .with_context(|| format!("loading database node {id}"))
        });
    }
    while let Some(done) = loads.join_next().await {
        done??;
    }
    Ok(())
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://…{}", &url[..scheme], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Runs the consistency conditions (printing a line for each) and returns the digest; fails if
/// any condition fails. `what` names the database in messages.
pub async fn verify(conn: &mut sqlx::AnyConnection, what: &str) -> Result<[u8; 32]> {
    let scale = ScaleConfig::of_database(conn).await?;
    let results = tpcc::check(conn, scale.delivered_per_district()).await?;
    let failed: Vec<_> = results.iter().filter(|r| !r.passed).collect();
    for r in &results {
        let verdict = if r.passed { "PASS" } else { "FAIL" };
        println!(
            "{verdict} {:>2}: {} ({})",
            r.number, r.description, r.detail
        );
    }
    if !failed.is_empty() {
        bail!(
            "{what}: {} of {} consistency conditions failed",
            failed.len(),
            results.len()
        );
    }
    let digest = digest(conn).await?;
    println!(
        "{what}: all {} conditions hold; digest {}",
        results.len(),
        hex::encode(digest)
    );
    Ok(digest)
}

async fn digest(conn: &mut sqlx::AnyConnection) -> Result<[u8; 32]> {
    Ok(dbvote::digest::of_database(conn, tpcc::schema::TABLES).await?)
}

pub fn tpcc(args: TpccArgs) -> Result<()> {
    fn block(work: impl std::future::Future<Output = Result<()>>) -> Result<()> {
        tokio::runtime::Runtime::new()?.block_on(work)
    }
    match args.command {
        // The driver starts a cluster, which runs runtimes of its own: not inside one.
        TpccCommand::Run(run) => crate::tpcc_run::run(*run),
        TpccCommand::Load {
            db: Some(db),
            warehouses,
            seed,
            scale,
            ..
        } => block(load_database(&db, &scale.config(), warehouses, seed)),
        TpccCommand::Load {
            config: Some(config),
            seed,
            scale,
            ..
        } => {
            let cluster = proto::config::Cluster::load(&config)?;
            block(load_cluster(&cluster, &scale.config(), seed))
        }
        TpccCommand::Load { .. } => bail!("pass --db URL or --config cluster.toml"),
        TpccCommand::Check { db } => block(async {
            verify(&mut connect(&db).await?, &redact(&db)).await?;
            Ok(())
        }),
        TpccCommand::Digest { db } => block(async {
            println!("{}", hex::encode(digest(&mut connect(&db).await?).await?));
            Ok(())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::sqlite_creating;

    #[test]
    fn sqlite_urls_get_mode_rwc_unless_they_chose_a_mode() {
        assert_eq!(
            sqlite_creating("sqlite://tpcc.db"),
            "sqlite://tpcc.db?mode=rwc"
        );
        assert_eq!(sqlite_creating("sqlite:/a/b.db"), "sqlite:/a/b.db?mode=rwc");
        assert_eq!(
            sqlite_creating("sqlite:x.db?cache=shared"),
            "sqlite:x.db?cache=shared&mode=rwc"
        );
        assert_eq!(
            sqlite_creating("sqlite:x.db?mode=ro"),
            "sqlite:x.db?mode=ro"
        );
        assert_eq!(sqlite_creating("sqlite::memory:"), "sqlite::memory:");
        assert_eq!(sqlite_creating("postgres://u@h/db"), "postgres://u@h/db");
    }
}
