//! The PostgreSQL databases of database nodes: created when a node first opens its URL, and
//! dropped when a benchmark that made them is asked to clean up after itself (and by the test
//! suites). SQLite files need neither: [`crate::Executor::open`] creates them, and they live in
//! the cluster's directory.

use sqlx::{AssertSqlSafe, Connection};
use tracing::info;

use crate::app::Backend;
use crate::error::DbError;
use crate::executor::redact;

/// Creates the PostgreSQL database a node URL names if it does not exist yet (connecting to
/// the server's `postgres` database; the role needs CREATEDB). Does nothing for SQLite URLs.
pub async fn create_database_if_missing(url: &str) -> Result<(), DbError> {
    let Some((server, name)) = server_and_name(url)? else {
        return Ok(());
    };
    let shown = redact(url);
    let connect_error = |source| DbError::Connect {
        url: shown.clone(),
        source,
    };
    let mut admin = sqlx::AnyConnection::connect(&format!("{server}/postgres"))
        .await
        .map_err(connect_error)?;
    let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut admin)
        .await
        .map_err(connect_error)?;
    if exists == 0 {
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .map_err(connect_error)?;
        info!(url = %shown, "created database");
    }
    let _ = admin.close().await;
    Ok(())
}

/// Drops the PostgreSQL database a node URL names, if it exists (connecting to the server's
/// `postgres` database; the role must own it). Does nothing for SQLite URLs.
pub async fn drop_database(url: &str) -> Result<(), DbError> {
    let Some((server, name)) = server_and_name(url)? else {
        return Ok(());
    };
    drop_databases(&format!("{server}/postgres"), &[name.to_owned()])
        .await
        .map_err(|source| DbError::Drop {
            url: redact(url),
            source,
        })?;
    info!(url = %redact(url), "dropped database");
    Ok(())
}

/// How long [`drop_databases`] keeps trying while other sessions hold a database.
const DROP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Drops the databases `names` on the server of `admin_url`, retrying while the server refuses
/// because other sessions are connected to one of them.
///
/// `DROP DATABASE ... WITH (FORCE)` terminates the other sessions, but only those the role may
/// signal: an autovacuum worker that starts on the fresh database between the last statement
/// and the drop is refused with SQLSTATE 42501 ("must be a member of the role whose process is
/// being terminated or member of pg_signal_backend") unless the role is a member of
/// `pg_signal_backend` (`.ci/postgres-up` grants it), and a session that is still closing gives
/// 55006 ("being accessed by other users"). Both go away by themselves within moments, so they
/// are retried for [`DROP_PATIENCE`]; any other error is returned at once.
pub async fn drop_databases(admin_url: &str, names: &[String]) -> Result<(), sqlx::Error> {
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(admin_url).await?;
    let started = std::time::Instant::now();
    for name in names {
        let statement = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        loop {
            match sqlx::raw_sql(AssertSqlSafe(statement.clone()))
                .execute(&mut admin)
                .await
            {
                Ok(_) => break,
                Err(e) if transient_drop_error(&e) && started.elapsed() < DROP_PATIENCE => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    admin.close().await
}

/// Whether a failed `DROP DATABASE` was refused only because of other sessions.
fn transient_drop_error(error: &sqlx::Error) -> bool {
    let code = error
        .as_database_error()
        .and_then(|e| e.code())
        .unwrap_or_default();
    matches!(code.as_ref(), "42501" | "55006")
}

/// The server part and the database name of a PostgreSQL URL (`None` for other backends),
/// with the name checked to be one that needs no quoting.
fn server_and_name(url: &str) -> Result<Option<(&str, &str)>, DbError> {
    if Backend::from_url(url) != Some(Backend::Postgres) {
        return Ok(None);
    }
    sqlx::any::install_default_drivers();
    let (server, rest) = url.rsplit_once('/').unwrap_or((url, ""));
    let name = rest.split('?').next().unwrap_or_default();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(DbError::Config(format!(
            "{}: the database name must be lower-case letters, digits and _",
            redact(url)
        )));
    }
    Ok(Some((server, name)))
}
