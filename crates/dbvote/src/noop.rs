//! The no-op application: operations declare partitions and carry an opaque payload, and
//! execute no SQL of their own. It measures the protocol and the executor's exactly-once
//! bookkeeping (one transaction per operation) without application work.

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;

use crate::app::{Application, Backend, BatchFailure, PartitionId};
use crate::canonical::{decode_exact, encode};
use crate::error::{AppError, ExecError};

/// A no-op operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoopOp {
    /// The partitions it declares, sorted, without duplicates, at least one.
    pub partitions: Vec<PartitionId>,
    /// Bytes that only make the request bigger (to measure message sizes).
    #[serde(with = "wire::bytes")]
    pub payload: Vec<u8>,
}

impl NoopOp {
    /// The canonical bytes of this operation.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Decodes operation bytes; partitions must be sorted, distinct and not empty.
    pub fn decode(bytes: &[u8]) -> Result<NoopOp, AppError> {
        let op: NoopOp = decode_exact(Noop::NAME, bytes)?;
        let canonical = !op.partitions.is_empty() && op.partitions.windows(2).all(|w| w[0] < w[1]);
        if !canonical {
            return Err(AppError::Malformed {
                app: Noop::NAME,
                len: bytes.len(),
                reason: "partitions must be sorted, distinct and at least one".into(),
            });
        }
        Ok(op)
    }
}

/// The no-op application. Its result is the payload's length (8 bytes, big-endian).
#[derive(Clone, Copy, Debug, Default)]
pub struct Noop;

impl Noop {
    /// The name recorded in the database.
    pub const NAME: &'static str = "noop";
}

impl Application for Noop {
    fn name(&self) -> &'static str {
        Noop::NAME
    }

    fn schema(&self, _backend: Backend) -> Vec<String> {
        Vec::new()
    }

    fn partitions(&self, operation: &[u8]) -> Result<Vec<PartitionId>, AppError> {
        Ok(NoopOp::decode(operation)?.partitions)
    }

    async fn execute(
        &self,
        _tx: &mut AnyConnection,
        operation: &[u8],
    ) -> Result<Vec<u8>, ExecError> {
        result(operation)
    }

    fn results_without_database(
        &self,
        operations: &[&[u8]],
    ) -> Option<Result<Vec<Vec<u8>>, BatchFailure>> {
        let results = operations.iter().enumerate().map(|(index, operation)| {
            result(operation).map_err(|error| BatchFailure { index, error })
        });
        Some(results.collect())
    }

    fn state_tables(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
}

/// A no-op operation's result: its payload's length.
fn result(operation: &[u8]) -> Result<Vec<u8>, ExecError> {
    let op = NoopOp::decode(operation)?;
    Ok((op.payload.len() as u64).to_be_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_must_be_canonical() {
        let op = |partitions: Vec<u32>| {
            NoopOp {
                partitions,
                payload: vec![1, 2],
            }
            .encode()
        };
        assert_eq!(Noop.partitions(&op(vec![0, 3])).unwrap(), vec![0, 3]);
        for bad in [vec![], vec![3, 0], vec![1, 1]] {
            assert!(Noop.partitions(&op(bad)).is_err());
        }
        let mut trailing = op(vec![1]);
        trailing.push(0);
        assert!(Noop.partitions(&trailing).is_err());
    }
}
