//! The accounts a batch of bank operations touches: read in one statement before the batch,
//! changed in memory by each operation in turn, and written in one statement after it.
//!
//! Each statement is a hand-off to SQLite's thread and back, or a round trip to PostgreSQL. A
//! transfer cost two (read both balances, write both) and a balance query one, so a chain of
//! operations cost about one or two per operation; now it costs one read, at most one UPDATE,
//! and an INSERT if it opens accounts. Each operation still decides on the balances that the
//! operations before it left, with the same checks in the same order, so the results and the
//! final state are those of running the operations one by one. Nobody else writes these rows
//! meanwhile: the batch runs inside the executor's transaction, which holds its partitions
//! (docs/protocol.md, "Global order and partitions").

use std::collections::BTreeMap;

use sqlx::AnyConnection;

use super::BankResult;
use super::{bigint_balance, checked_balance, no_such, stored_balance, Account, BankOp};
use crate::app::Backend;
use crate::bookkeeping::Texts;
use crate::error::ExecError;

/// Most accounts one statement reads or writes; a batch that touches more takes several.
const MOST_PER_STATEMENT: usize = 64;

/// The accounts of a batch.
#[derive(Debug)]
pub(super) struct Ledger {
    backend: Backend,
    /// Each account's balance as stored before the batch (None: no such account) and now.
    accounts: BTreeMap<Account, (Option<i64>, Option<i64>)>,
}

impl Ledger {
    /// Reads every account that `ops` name.
    pub(super) async fn read(tx: &mut AnyConnection, ops: &[BankOp]) -> Result<Ledger, ExecError> {
        // `$N` parameters, which every backend takes, where the connection does not say which.
        let backend = Backend::of(tx).unwrap_or(Backend::Postgres);
        let mut accounts: BTreeMap<Account, (Option<i64>, Option<i64>)> = (ops.iter())
            .flat_map(BankOp::accounts)
            .map(|account| (account, (None, None)))
            .collect();
        let named: Vec<Account> = accounts.keys().copied().collect();
        for chunk in named.chunks(MOST_PER_STATEMENT) {
            let mut query = sqlx::query_as::<_, (i64, i64, i64)>(select(backend, chunk.len()));
            for (branch, number) in padded(chunk) {
                query = query.bind(i64::from(branch)).bind(i64::from(number));
            }
            for (branch, number, cents) in query.fetch_all(&mut *tx).await? {
                let (Ok(branch), Ok(number)) = (u32::try_from(branch), u32::try_from(number))
                else {
                    continue;
                };
                if let Some(balances) = accounts.get_mut(&(branch, number)) {
                    *balances = (Some(cents), Some(cents));
                }
            }
        }
        Ok(Ledger { backend, accounts })
    }

    /// Runs `op` on the balances as the operations before it left them.
    pub(super) fn apply(&mut self, op: &BankOp) -> Result<BankResult, ExecError> {
        Ok(match *op {
            BankOp::Open {
                branch,
                number,
                initial_cents,
            } => {
                let Ok(stored) = i64::try_from(initial_cents) else {
                    return Ok(BankResult::AmountTooLarge);
                };
                if self.stored((branch, number)).is_some() {
                    return Ok(BankResult::AlreadyExists);
                }
                self.set((branch, number), stored);
                BankResult::Ok {
                    balance_cents: initial_cents,
                }
            }
            BankOp::Deposit {
                branch,
                number,
                cents,
            } => {
                let account = (branch, number);
                let Some(current) = self.balance(account)? else {
                    return Ok(no_such(account));
                };
                let Some(new) = checked_balance(current.checked_add(cents)) else {
                    return Ok(BankResult::AmountTooLarge);
                };
                self.set(account, bigint_balance(new)?);
                BankResult::Ok { balance_cents: new }
            }
            BankOp::Transfer { from, to, cents } => self.transfer(from, to, cents)?,
            BankOp::Balance { branch, number } => match self.balance((branch, number))? {
                Some(balance_cents) => BankResult::Ok { balance_cents },
                None => no_such((branch, number)),
            },
        })
    }

    fn transfer(
        &mut self,
        from: Account,
        to: Account,
        cents: u64,
    ) -> Result<BankResult, ExecError> {
        let (from_balance, to_balance) = (self.balance(from)?, self.balance(to)?);
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
        self.set(from, bigint_balance(from_new)?);
        self.set(to, bigint_balance(to_new)?);
        Ok(BankResult::Ok {
            balance_cents: from_new,
        })
    }

    /// Writes what the batch changed: the accounts it opened, then the balances it moved.
    pub(super) async fn write(self, tx: &mut AnyConnection) -> Result<(), ExecError> {
        let (mut opened, mut moved) = (Vec::new(), Vec::new());
        for (account, balances) in self.accounts {
            match balances {
                (None, Some(cents)) => opened.push((account, cents)),
                (Some(before), Some(now)) if before != now => moved.push((account, now)),
                _ => {}
            }
        }
        for chunk in opened.chunks(MOST_PER_STATEMENT) {
            let mut query = sqlx::query(insert(self.backend, chunk.len()));
            for &((branch, number), cents) in chunk {
                query = query
                    .bind(i64::from(branch))
                    .bind(i64::from(number))
                    .bind(cents);
            }
            let inserted = query.execute(&mut *tx).await?.rows_affected();
            written("opened", inserted, chunk.len())?;
        }
        for chunk in moved.chunks(MOST_PER_STATEMENT) {
            let mut query = sqlx::query(update(self.backend, chunk.len()));
            for ((branch, number), cents) in padded(chunk) {
                query = query
                    .bind(i64::from(branch))
                    .bind(i64::from(number))
                    .bind(cents);
            }
            for ((branch, number), _) in padded(chunk) {
                query = query.bind(i64::from(branch)).bind(i64::from(number));
            }
            let updated = query.execute(&mut *tx).await?.rows_affected();
            written("updated", updated, chunk.len())?;
        }
        Ok(())
    }

    /// The account's balance now, as stored (None: no such account).
    fn stored(&self, account: Account) -> Option<i64> {
        self.accounts.get(&account).and_then(|&(_, now)| now)
    }

    /// The account's balance now (None: no such account); a negative one is corrupt state.
    fn balance(&self, account: Account) -> Result<Option<u64>, ExecError> {
        self.stored(account)
            .map(|cents| stored_balance(account, cents))
            .transpose()
    }

    fn set(&mut self, account: Account, cents: i64) {
        self.accounts.entry(account).or_default().1 = Some(cents);
    }
}

/// That a statement wrote one row per account, as the ledger read them.
fn written(what: &str, rows: u64, accounts: usize) -> Result<(), ExecError> {
    if rows == accounts as u64 {
        return Ok(());
    }
    Err(ExecError::Corrupt(format!(
        "a batch {what} {rows} accounts, not the {accounts} it read"
    )))
}

/// `items` and then its last item again up to the next power of two, the size of the statement
/// that takes them: seven statement texts cover every size, so that SQLite's prepared
/// statements stay in sqlx's cache. Asking for an account twice reads it once, and an UPDATE
/// takes an account's first `WHEN`, which a repeat only repeats.
fn padded<T: Copy>(items: &[T]) -> impl Iterator<Item = T> + '_ {
    let last = items.last().copied();
    let size = items.len().next_power_of_two();
    items
        .iter()
        .copied()
        .chain(std::iter::repeat_n(last, size - items.len()).flatten())
}

/// Which of the padded sizes 1, 2, 4, ..., [`MOST_PER_STATEMENT`] takes `n` accounts.
fn size_index(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

const SIZES: usize = MOST_PER_STATEMENT.trailing_zeros() as usize + 1;

/// `(branch = $p AND number = $p+1) OR ...` for `n` accounts from parameter `$first`.
fn accounts_where(n: usize, first: usize) -> String {
    (0..n)
        .map(|i| {
            let p = first + 2 * i;
            format!("(branch = ${p} AND number = ${})", p + 1)
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// Reads the balances of `n` accounts (padded, see [`padded`]).
fn select(backend: Backend, n: usize) -> &'static str {
    static TEXTS: Texts = Texts::new();
    &TEXTS.get(backend, SIZES, |i| {
        format!(
            "SELECT branch, number, balance_cents FROM bank_account WHERE {}",
            accounts_where(1 << i, 1)
        )
    })[size_index(n)]
}

/// Sets the balances of `n` accounts (padded): (branch, number, balance) for each, then
/// (branch, number) for each again.
fn update(backend: Backend, n: usize) -> &'static str {
    static TEXTS: Texts = Texts::new();
    &TEXTS.get(backend, SIZES, |i| {
        let n = 1 << i;
        let cases: String = (0..n)
            .map(|i| {
                let p = 1 + 3 * i;
                format!(
                    " WHEN branch = ${p} AND number = ${} THEN ${}",
                    p + 1,
                    p + 2
                )
            })
            .collect();
        format!(
            "UPDATE bank_account SET balance_cents = CASE{cases} END WHERE {}",
            accounts_where(n, 1 + 3 * n)
        )
    })[size_index(n)]
}

/// Opens `n` accounts: (branch, number, balance) for each.
fn insert(backend: Backend, n: usize) -> &'static str {
    static TEXTS: Texts = Texts::new();
    &TEXTS.get(backend, MOST_PER_STATEMENT, |i| {
        let values: Vec<String> = (0..=i)
            .map(|row| {
                let p = 1 + 3 * row;
                format!("(${p}, ${}, ${})", p + 1, p + 2)
            })
            .collect();
        format!(
            "INSERT INTO bank_account (branch, number, balance_cents) VALUES {}",
            values.join(", ")
        )
    })[n - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_repeats_the_last_item_up_to_a_power_of_two() {
        let padded = |items: &[u32]| padded(items).collect::<Vec<_>>();
        assert_eq!(padded(&[7]), [7]);
        assert_eq!(padded(&[1, 2, 3]), [1, 2, 3, 3]);
        assert_eq!(padded(&[1, 2, 3, 4, 5]), [1, 2, 3, 4, 5, 5, 5, 5]);
        assert_eq!(padded(&[1; 64]).len(), 64);
        assert_eq!(size_index(1), 0);
        assert_eq!(size_index(3), 2);
        assert_eq!(size_index(MOST_PER_STATEMENT), SIZES - 1);
    }

    #[test]
    fn statements_number_their_parameters_in_order() {
        // `text_for` panics on SQLite when the numbering is not $1, $2, ... in order.
        for n in 1..=MOST_PER_STATEMENT {
            for backend in [Backend::Sqlite, Backend::Postgres] {
                assert!(select(backend, n).starts_with("SELECT"));
                assert!(update(backend, n).starts_with("UPDATE"));
                assert!(insert(backend, n).starts_with("INSERT"));
            }
        }
        assert_eq!(
            update(Backend::Postgres, 2),
            "UPDATE bank_account SET balance_cents = CASE \
             WHEN branch = $1 AND number = $2 THEN $3 WHEN branch = $4 AND number = $5 THEN $6 \
             END WHERE (branch = $7 AND number = $8) OR (branch = $9 AND number = $10)"
        );
    }
}
