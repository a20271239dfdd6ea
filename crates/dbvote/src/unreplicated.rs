//! The unreplicated baseline: an application's operations on one database, ordered by a local
//! sequencer instead of the BFT protocol.
//!
//! It runs the same transaction programs through the same [`Executor`] (one transaction per
//! operation with the exactly-once bookkeeping, the same per-partition parallelism and the same
//! global lock for multi-partition operations) as a database node does, so that what a
//! benchmark measures against it is the cost of replication and agreement and nothing else.
//!
//! The sequencer takes an operation's partitions (every partition for a multi-partition one, as
//! the primary's order does), locks them in partition order, gives the operation the next order
//! id and its next position on each, and executes it while holding the locks. An operation's
//! predecessors on its partitions have therefore finished, so it is always ready; operations on
//! disjoint partitions run concurrently.

use crate::app::{Application, PartitionId};
use crate::error::DbError;
use crate::executor::{Execution, Executor, Outcome};
use std::sync::Arc;
use tokio::sync::Mutex;

/// One database and a local sequencer.
pub struct Unreplicated<A: Application> {
    executor: Executor<A>,
    /// Per partition: the last position given out.
    partitions: Arc<Vec<Mutex<u64>>>,
    /// The last order id given out.
    order: Arc<Mutex<u64>>,
}

impl<A: Application> Clone for Unreplicated<A> {
    fn clone(&self) -> Self {
        Unreplicated {
            executor: self.executor.clone(),
            partitions: Arc::clone(&self.partitions),
            order: Arc::clone(&self.order),
        }
    }
}

impl<A: Application> Unreplicated<A> {
    /// Continues from where `executor`'s database stands.
    pub async fn new(executor: Executor<A>) -> Result<Self, DbError> {
        let progress = executor.progress().await?;
        let partitions = (0..executor.partitions())
            .map(|p| Mutex::new(progress.last_seq(p).unwrap_or(0)))
            .collect();
        Ok(Unreplicated {
            partitions: Arc::new(partitions),
            order: Arc::new(Mutex::new(progress.highest_order)),
            executor,
        })
    }

    /// The executor (for digests and progress).
    pub fn executor(&self) -> &Executor<A> {
        &self.executor
    }

    /// Orders and executes `operation`, returning its result bytes.
    pub async fn execute(&self, operation: Vec<u8>) -> Result<Vec<u8>, DbError> {
        let declared = self
            .executor
            .app()
            .partitions(&operation)
            // Order 0: refused before it was given an order id.
            .map_err(|source| DbError::Malformed { order: 0, source })?;
        let all = self.partitions.len() as PartitionId;
        let touched: Vec<PartitionId> = if declared.len() > 1 {
            (0..all).collect()
        } else {
            declared
        };
        let mut guards = Vec::with_capacity(touched.len());
        for &p in &touched {
            let lock = self
                .partitions
                .get(p as usize)
                .ok_or(DbError::NoSuchPartition {
                    partition: p,
                    partitions: all,
                })?;
            guards.push(lock.lock().await);
        }
        let order = {
            let mut last = self.order.lock().await;
            *last += 1;
            *last
        };
        let positions = touched
            .iter()
            .zip(guards.iter_mut())
            .map(|(&p, last)| {
                **last += 1;
                (p, **last)
            })
            .collect();
        let execution = Execution {
            order,
            positions,
            operation,
        };
        match self.executor.execute(&execution).await? {
            Outcome::Executed(result) => Ok(result),
            other => Err(DbError::Config(format!(
                "order {order} did not execute ({other:?}): is another process writing to \
                 this database? The baseline needs it to itself"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bank::{Bank, BankOp, BankResult};
    use crate::testing::{fresh, Kind};
    use crate::Application;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_operations_are_sequenced_and_continue_after_reopening() {
        let db = fresh(Kind::Sqlite).await;
        let executor = Executor::open(&db.url, Bank, 2).await.unwrap();
        let baseline = Unreplicated::new(executor).await.unwrap();
        for branch in 0..2 {
            let op = BankOp::Open {
                branch,
                number: 1,
                initial_cents: 1_000,
            };
            baseline.execute(op.encode()).await.unwrap();
        }
        let mut tasks = Vec::new();
        for i in 0..40u32 {
            let baseline = baseline.clone();
            tasks.push(tokio::spawn(async move {
                let (from, to) = if i % 3 == 0 { (0, 1) } else { (i % 2, i % 2) };
                let op = BankOp::Transfer {
                    from: (from, 1),
                    to: (to, 1),
                    cents: 10,
                };
                baseline.execute(op.encode()).await.unwrap()
            }));
        }
        for t in tasks {
            BankResult::decode(&t.await.unwrap()).unwrap();
        }
        let progress = baseline.executor().progress().await.unwrap();
        assert_eq!(progress.highest_order, 42);
        // A tool reading the database directly computes the executor's digest.
        let direct = crate::digest::of_database(&mut db.connect().await, &Bank.state_tables())
            .await
            .unwrap();
        assert_eq!(direct, baseline.executor().digest().await.unwrap());
        baseline.executor().close().await;

        let reopened = Unreplicated::new(Executor::open(&db.url, Bank, 2).await.unwrap())
            .await
            .unwrap();
        let balance = |branch| BankOp::Balance { branch, number: 1 }.encode();
        let mut total = 0;
        for branch in 0..2 {
            match BankResult::decode(&reopened.execute(balance(branch)).await.unwrap()).unwrap() {
                BankResult::Ok { balance_cents } => total += balance_cents,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(total, 2_000);
        assert_eq!(
            reopened.executor().progress().await.unwrap().highest_order,
            44
        );
    }
}
