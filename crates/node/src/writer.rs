//! A SQLite database node's executions, one batch at a time: SQLite has one writer, so chains
//! handed to the executor while a transaction runs would only wait for its lock and then pay a
//! transaction each (BEGIN, progress, COMMIT with its fsync, and a REPLY-COMMIT-DB per group).
//! Held here instead, everything the voter released meanwhile runs as the next transaction.
//! The voter still sees each chain as running from its release, so it releases nothing more of
//! a partition until its chain executed, and the batch keeps release order (the executor runs
//! a batch in order, all or nothing).

use dbvote::executor::Execution;

/// The executions waiting for SQLite's writer, and whether a batch holds it.
#[derive(Debug, Default)]
pub(crate) struct OneWriter {
    waiting: Vec<Execution>,
    running: bool,
}

impl OneWriter {
    /// Executions the voter released, in release order.
    pub(crate) fn release(&mut self, executions: impl IntoIterator<Item = Execution>) {
        self.waiting.extend(executions);
    }

    /// The running batch executed (one that failed is retried, and still runs).
    pub(crate) fn executed(&mut self) {
        self.running = false;
    }

    /// The batch to start now: everything waiting, unless a batch runs.
    pub(crate) fn next(&mut self) -> Option<Vec<Execution>> {
        if self.running || self.waiting.is_empty() {
            return None;
        }
        self.running = true;
        Some(std::mem::take(&mut self.waiting))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execution(order: u64, partition: u32) -> Execution {
        Execution {
            order,
            positions: vec![(partition, order)],
            operation: Vec::new(),
        }
    }

    fn orders(batch: Option<Vec<Execution>>) -> Option<Vec<u64>> {
        batch.map(|b| b.iter().map(|e| e.order).collect())
    }

    #[test]
    fn what_is_released_while_a_batch_runs_goes_in_the_next_in_release_order() {
        let mut writer = OneWriter::default();
        assert_eq!(orders(writer.next()), None, "nothing released");
        writer.release([execution(1, 0), execution(2, 0)]);
        assert_eq!(orders(writer.next()), Some(vec![1, 2]));
        writer.release([execution(3, 1)]);
        writer.release([execution(4, 1), execution(5, 0)]);
        assert_eq!(orders(writer.next()), None, "a batch runs");
        writer.executed();
        assert_eq!(orders(writer.next()), Some(vec![3, 4, 5]));
        assert_eq!(orders(writer.next()), None, "a batch runs");
        writer.executed();
        assert_eq!(orders(writer.next()), None, "nothing waits");
        writer.release([execution(6, 0)]);
        assert_eq!(orders(writer.next()), Some(vec![6]));
    }
}
