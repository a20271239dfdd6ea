//! A small built-in bank: accounts partitioned by branch, for tests and demos until TPC-C lands.
//!
//! An account is `(branch, number)` and its branch is its partition. Operations and results are
//! postcard-encoded serde enums; balances are integer cents (`BIGINT`), never floating point.
//! A transfer between branches is a multi-partition operation.

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;

use crate::app::{Application, Backend, BatchFailure, PartitionId};
use crate::canonical::{decode_exact, encode};
use crate::error::{AppError, ExecError};

mod ledger;

/// An account id: `(branch, number)`; the branch is the partition.
pub type Account = (u32, u32);

/// A bank operation, as ordered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BankOp {
    /// Opens an account with an initial balance.
    Open {
        /// Branch (partition).
        branch: u32,
        /// Account number within the branch.
        number: u32,
        /// Initial balance in cents.
        initial_cents: u64,
    },
    /// Adds money to an account.
    Deposit {
        /// Branch (partition).
        branch: u32,
        /// Account number within the branch.
        number: u32,
        /// Amount in cents.
        cents: u64,
    },
    /// Moves money between two accounts, possibly of different branches.
    Transfer {
        /// Debited account.
        from: Account,
        /// Credited account.
        to: Account,
        /// Amount in cents.
        cents: u64,
    },
    /// Reads a balance.
    Balance {
        /// Branch (partition).
        branch: u32,
        /// Account number within the branch.
        number: u32,
    },
}

/// The result of a bank operation. Business failures are results, identical on every correct
/// node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BankResult {
    /// Done; the balance of the (debited) account afterwards.
    Ok {
        /// Balance in cents.
        balance_cents: u64,
    },
    /// The debited account holds less than the amount; nothing changed.
    InsufficientFunds {
        /// Balance in cents.
        balance_cents: u64,
    },
    /// The named account does not exist; nothing changed.
    NoSuchAccount {
        /// Branch.
        branch: u32,
        /// Number.
        number: u32,
    },
    /// `Open` of an account that exists; nothing changed.
    AlreadyExists,
    /// The amount or the resulting balance does not fit a signed 64-bit number of cents;
    /// nothing changed.
    AmountTooLarge,
}

impl BankOp {
    /// The canonical bytes of this operation.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Decodes operation bytes, rejecting trailing bytes so that an operation has one encoding.
    pub fn decode(bytes: &[u8]) -> Result<BankOp, AppError> {
        decode_exact(Bank::NAME, bytes)
    }

    /// The accounts this operation names.
    pub fn accounts(&self) -> Vec<Account> {
        match *self {
            BankOp::Open { branch, number, .. }
            | BankOp::Deposit { branch, number, .. }
            | BankOp::Balance { branch, number } => vec![(branch, number)],
            BankOp::Transfer { from, to, .. } => vec![from, to],
        }
    }

    /// The partitions (branches) this operation touches, sorted, without duplicates.
    pub fn partitions(&self) -> Vec<PartitionId> {
        match *self {
            BankOp::Open { branch, .. }
            | BankOp::Deposit { branch, .. }
            | BankOp::Balance { branch, .. } => vec![branch],
            BankOp::Transfer { from, to, .. } if from.0 == to.0 => vec![from.0],
            BankOp::Transfer { from, to, .. } => vec![from.0.min(to.0), from.0.max(to.0)],
        }
    }
}

impl BankResult {
    /// The canonical bytes of this result.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Decodes result bytes (as returned by the executor).
    pub fn decode(bytes: &[u8]) -> Result<BankResult, AppError> {
        decode_exact(Bank::NAME, bytes)
    }
}

/// The bank application: one table, `bank_account (branch, number, balance_cents)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bank;

impl Bank {
    /// The name recorded in the database.
    pub const NAME: &'static str = "bank";
}

impl Application for Bank {
    fn name(&self) -> &'static str {
        Bank::NAME
    }

    fn schema(&self, _backend: Backend) -> Vec<String> {
        vec!["CREATE TABLE IF NOT EXISTS bank_account (\
              branch BIGINT NOT NULL, \
              number BIGINT NOT NULL, \
              balance_cents BIGINT NOT NULL, \
              PRIMARY KEY (branch, number))"
            .to_owned()]
    }

    fn partitions(&self, operation: &[u8]) -> Result<Vec<PartitionId>, AppError> {
        Ok(BankOp::decode(operation)?.partitions())
    }

    async fn execute(
        &self,
        tx: &mut AnyConnection,
        operation: &[u8],
    ) -> Result<Vec<u8>, ExecError> {
        let results = (self.execute_all(tx, &[operation]).await).map_err(|f| f.error)?;
        match <[Vec<u8>; 1]>::try_from(results) {
            Ok([result]) => Ok(result),
            Err(results) => Err(ExecError::Corrupt(format!(
                "a batch of one operation answered {} results",
                results.len()
            ))),
        }
    }

    /// One read of every account the batch names, the operations on those balances in memory,
    /// and one write of what they changed ([`ledger`]).
    async fn execute_all(
        &self,
        tx: &mut AnyConnection,
        operations: &[&[u8]],
    ) -> Result<Vec<Vec<u8>>, BatchFailure> {
        let failed = |index| move |error| BatchFailure { index, error };
        let ops = (operations.iter().enumerate())
            .map(|(i, bytes)| BankOp::decode(bytes).map_err(|e| failed(i)(e.into())))
            .collect::<Result<Vec<_>, _>>()?;
        let mut ledger = ledger::Ledger::read(tx, &ops).await.map_err(failed(0))?;
        let results = (ops.iter().enumerate())
            .map(|(i, op)| ledger.apply(op).map(|r| r.encode()).map_err(failed(i)))
            .collect::<Result<Vec<_>, _>>()?;
        ledger.write(tx).await.map_err(failed(0))?;
        Ok(results)
    }

    fn state_tables(&self) -> Vec<(&'static str, &'static str)> {
        vec![("bank_account", "branch, number")]
    }
}

fn no_such((branch, number): Account) -> BankResult {
    BankResult::NoSuchAccount { branch, number }
}

/// A balance that fits the `BIGINT` column.
fn checked_balance(balance: Option<u64>) -> Option<u64> {
    balance.filter(|b| i64::try_from(*b).is_ok())
}

/// A balance to store: [`checked_balance`] already refused what does not fit.
fn bigint_balance(cents: u64) -> Result<i64, ExecError> {
    i64::try_from(cents)
        .map_err(|_| ExecError::Corrupt(format!("balance {cents} does not fit BIGINT")))
}

/// A balance as stored, which is never negative.
fn stored_balance(account: Account, cents: i64) -> Result<u64, ExecError> {
    u64::try_from(cents).map_err(|_| {
        ExecError::Corrupt(format!(
            "account {account:?} has a negative balance of {cents} cents"
        ))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn op() -> impl Strategy<Value = BankOp> {
        let account = (0u32..8, any::<u32>());
        prop_oneof![
            (0u32..8, any::<u32>(), any::<u64>()).prop_map(|(branch, number, initial_cents)| {
                BankOp::Open {
                    branch,
                    number,
                    initial_cents,
                }
            }),
            (0u32..8, any::<u32>(), any::<u64>()).prop_map(|(branch, number, cents)| {
                BankOp::Deposit {
                    branch,
                    number,
                    cents,
                }
            }),
            (account.clone(), account, any::<u64>())
                .prop_map(|(from, to, cents)| BankOp::Transfer { from, to, cents }),
            (0u32..8, any::<u32>()).prop_map(|(branch, number)| BankOp::Balance { branch, number }),
        ]
    }

    proptest! {
        /// Whatever the bytes, declaring partitions returns, never panics.
        #[test]
        fn partitions_of_arbitrary_bytes_do_not_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Bank.partitions(&bytes);
        }

        /// Operations round-trip, trailing bytes are refused, partitions are sorted and unique.
        #[test]
        fn operations_round_trip(op in op(), extra in 1u8..=255) {
            let bytes = op.encode();
            prop_assert_eq!(BankOp::decode(&bytes).unwrap(), op.clone());
            let mut longer = bytes.clone();
            longer.push(extra);
            prop_assert!(BankOp::decode(&longer).is_err());
            let partitions = Bank.partitions(&bytes).unwrap();
            prop_assert!(partitions.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(!partitions.is_empty() && partitions.len() <= 2);
        }
    }
}
