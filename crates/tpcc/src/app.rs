//! TPC-C as a cloudbft [`Application`]: what the database nodes execute in the global order.

use crate::txn::{TpccOp, TpccResult, NAME};
use crate::{programs, schema};
use dbvote::{AnyConnection, AppError, Application, Backend, ExecError, PartitionId};

/// The TPC-C application: the five transactions of [`txn`](crate::txn) over the
/// [schema](crate::schema), partitioned by warehouse (warehouse `w` is partition `w - 1`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tpcc;

impl Application for Tpcc {
    fn name(&self) -> &'static str {
        NAME
    }

    fn schema(&self, _backend: Backend) -> Vec<String> {
        schema::STATEMENTS.iter().map(|s| s.to_string()).collect()
    }

    fn partitions(&self, operation: &[u8]) -> Result<Vec<PartitionId>, AppError> {
        TpccOp::decode(operation)?.partitions()
    }

    async fn execute(
        &self,
        tx: &mut AnyConnection,
        operation: &[u8],
    ) -> Result<Vec<u8>, ExecError> {
        let op = TpccOp::decode(operation)?;
        let result: TpccResult = programs::run(tx, &op).await?;
        Ok(result.encode())
    }

    fn state_tables(&self) -> Vec<(&'static str, &'static str)> {
        schema::TABLES.to_vec()
    }
}
