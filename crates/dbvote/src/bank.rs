//! A small built-in bank: accounts partitioned by branch, for tests and demos until TPC-C lands.
//!
//! An account is `(branch, number)` and its branch is its partition. Operations and results are
//! postcard-encoded serde enums; balances are integer cents (`BIGINT`), never floating point.
//! A transfer between branches is a multi-partition operation.

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;

use crate::app::{Application, Backend, PartitionId};
use crate::canonical::{decode_exact, encode};
use crate::error::{AppError, ExecError};

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
        let result = match BankOp::decode(operation)? {
            BankOp::Open {
                branch,
                number,
                initial_cents,
            } => open(tx, (branch, number), initial_cents).await?,
            BankOp::Deposit {
                branch,
                number,
                cents,
            } => deposit(tx, (branch, number), cents).await?,
            BankOp::Transfer { from, to, cents } => transfer(tx, from, to, cents).await?,
            BankOp::Balance { branch, number } => match balance(tx, (branch, number)).await? {
                Some(balance_cents) => BankResult::Ok { balance_cents },
                None => no_such((branch, number)),
            },
        };
        Ok(result.encode())
    }

    fn state_tables(&self) -> Vec<(&'static str, &'static str)> {
        vec![("bank_account", "branch, number")]
    }
}

fn no_such((branch, number): Account) -> BankResult {
    BankResult::NoSuchAccount { branch, number }
}

async fn open(
    tx: &mut AnyConnection,
    account: Account,
    cents: u64,
) -> Result<BankResult, ExecError> {
    let Ok(stored) = i64::try_from(cents) else {
        return Ok(BankResult::AmountTooLarge);
    };
    let inserted = sqlx::query(
        "INSERT INTO bank_account (branch, number, balance_cents) VALUES ($1, $2, $3) \
         ON CONFLICT (branch, number) DO NOTHING",
    )
    .bind(i64::from(account.0))
    .bind(i64::from(account.1))
    .bind(stored)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(if inserted == 1 {
        BankResult::Ok {
            balance_cents: cents,
        }
    } else {
        BankResult::AlreadyExists
    })
}

async fn deposit(
    tx: &mut AnyConnection,
    account: Account,
    cents: u64,
) -> Result<BankResult, ExecError> {
    let Some(current) = balance(tx, account).await? else {
        return Ok(no_such(account));
    };
    let Some(new) = checked_balance(current.checked_add(cents)) else {
        return Ok(BankResult::AmountTooLarge);
    };
    set_balance(tx, account, new).await?;
    Ok(BankResult::Ok { balance_cents: new })
}

/// Two statements whatever the outcome: one reads both balances, one writes both (each
/// statement is a hand-off to SQLite's thread and back, or a round trip to PostgreSQL).
async fn transfer(
    tx: &mut AnyConnection,
    from: Account,
    to: Account,
    cents: u64,
) -> Result<BankResult, ExecError> {
    let (from_balance, to_balance) = balances(tx, from, to).await?;
    let Some(from_balance) = from_balance else {
        return Ok(no_such(from));
    };
    let Some(to_balance) = to_balance else {
        return Ok(no_such(to));
    };
    if from_balance < cents {
        return Ok(BankResult::InsufficientFunds {
            balance_cents: from_balance,
        });
    }
    if from == to {
        return Ok(BankResult::Ok {
            balance_cents: from_balance,
        });
    }
    let Some(to_new) = checked_balance(to_balance.checked_add(cents)) else {
        return Ok(BankResult::AmountTooLarge);
    };
    let from_new = from_balance - cents;
    let updated = sqlx::query(
        "UPDATE bank_account SET balance_cents = \
         CASE WHEN branch = $1 AND number = $2 THEN $3 ELSE $4 END \
         WHERE (branch = $5 AND number = $6) OR (branch = $7 AND number = $8)",
    )
    .bind(i64::from(from.0))
    .bind(i64::from(from.1))
    .bind(bigint_balance(from_new)?)
    .bind(bigint_balance(to_new)?)
    .bind(i64::from(from.0))
    .bind(i64::from(from.1))
    .bind(i64::from(to.0))
    .bind(i64::from(to.1))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if updated != 2 {
        return Err(ExecError::Corrupt(format!(
            "the transfer from {from:?} to {to:?} updated {updated} accounts, not 2"
        )));
    }
    Ok(BankResult::Ok {
        balance_cents: from_new,
    })
}

/// The balances of `from` and `to` (None: no such account), read in one statement.
async fn balances(
    tx: &mut AnyConnection,
    from: Account,
    to: Account,
) -> Result<(Option<u64>, Option<u64>), ExecError> {
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT branch, number, balance_cents FROM bank_account \
         WHERE (branch = $1 AND number = $2) OR (branch = $3 AND number = $4)",
    )
    .bind(i64::from(from.0))
    .bind(i64::from(from.1))
    .bind(i64::from(to.0))
    .bind(i64::from(to.1))
    .fetch_all(&mut *tx)
    .await?;
    let of = |account: Account| -> Result<Option<u64>, ExecError> {
        let key = (i64::from(account.0), i64::from(account.1));
        rows.iter()
            .find(|(branch, number, _)| (*branch, *number) == key)
            .map(|&(_, _, cents)| stored_balance(account, cents))
            .transpose()
    };
    Ok((of(from)?, of(to)?))
}

/// A balance that fits the `BIGINT` column.
fn checked_balance(balance: Option<u64>) -> Option<u64> {
    balance.filter(|b| i64::try_from(*b).is_ok())
}

async fn balance(tx: &mut AnyConnection, account: Account) -> Result<Option<u64>, ExecError> {
    let stored: Option<i64> = sqlx::query_scalar(
        "SELECT balance_cents FROM bank_account WHERE branch = $1 AND number = $2",
    )
    .bind(i64::from(account.0))
    .bind(i64::from(account.1))
    .fetch_optional(&mut *tx)
    .await?;
    stored
        .map(|cents| stored_balance(account, cents))
        .transpose()
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

async fn set_balance(
    tx: &mut AnyConnection,
    account: Account,
    cents: u64,
) -> Result<(), ExecError> {
    sqlx::query("UPDATE bank_account SET balance_cents = $1 WHERE branch = $2 AND number = $3")
        .bind(bigint_balance(cents)?)
        .bind(i64::from(account.0))
        .bind(i64::from(account.1))
        .execute(&mut *tx)
        .await?;
    Ok(())
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
