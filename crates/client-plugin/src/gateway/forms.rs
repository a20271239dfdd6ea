//! The gateway's forms: one per operation of the cluster's application, described once so that
//! the index page, the routes and the parsing cannot disagree on a field name.
//!
//! Parsing is strict and names the field at fault, because a bad value must be refused before
//! anything is signed and sent: the cluster would order and execute whatever the gateway sends.

use dbvote::bank::BankOp;
use dbvote::noop::NoopOp;
use proto::PartitionId;
use std::collections::HashMap;

/// The applications the gateway has forms for (the cluster configuration's `application`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum App {
    Bank,
    Noop,
}

impl App {
    pub(crate) fn from_name(name: &str) -> Option<App> {
        match name {
            "bank" => Some(App::Bank),
            "noop" => Some(App::Noop),
            _ => None,
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            App::Bank => "bank",
            App::Noop => "no-op",
        }
    }

    pub(crate) fn forms(self) -> &'static [FormSpec] {
        match self {
            App::Bank => &BANK,
            App::Noop => &NOOP,
        }
    }
}

/// What a field holds, which decides its parsing and its `<input>`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A partition of the configuration: `0..partitions`.
    Partition,
    /// An account number (u32).
    Number,
    /// An amount in cents (u64).
    Cents,
    /// Optional free text.
    Text,
}

/// One input of a form.
#[derive(Debug)]
pub(crate) struct Field {
    /// The `name` sent with the form (its `id` is `{form}-{name}`).
    pub(crate) name: &'static str,
    pub(crate) label: &'static str,
    pub(crate) kind: Kind,
}

/// An operation's bytes and the partitions they declare, ready to invoke.
pub(crate) struct Operation {
    pub(crate) partitions: Vec<PartitionId>,
    pub(crate) bytes: Vec<u8>,
}

/// One form: where it posts, what it asks, and how its fields become an operation.
#[derive(Debug)]
pub(crate) struct FormSpec {
    /// The form's `id`.
    pub(crate) id: &'static str,
    /// Where it posts.
    pub(crate) action: &'static str,
    pub(crate) title: &'static str,
    pub(crate) fields: &'static [Field],
    pub(crate) parse: fn(&Fields<'_>) -> Result<Operation, BadInput>,
}

const fn field(name: &'static str, label: &'static str, kind: Kind) -> Field {
    Field { name, label, kind }
}

static BANK: [FormSpec; 4] = [
    FormSpec {
        id: "open",
        action: "/bank/open",
        title: "Open account",
        fields: &[
            field("branch", "Branch", Kind::Partition),
            field("number", "Account number", Kind::Number),
            field("cents", "Initial balance (cents)", Kind::Cents),
        ],
        parse: |f| {
            bank(BankOp::Open {
                branch: f.partition("branch")?,
                number: f.number("number")?,
                initial_cents: f.cents("cents")?,
            })
        },
    },
    FormSpec {
        id: "deposit",
        action: "/bank/deposit",
        title: "Deposit",
        fields: &[
            field("branch", "Branch", Kind::Partition),
            field("number", "Account number", Kind::Number),
            field("cents", "Amount (cents)", Kind::Cents),
        ],
        parse: |f| {
            bank(BankOp::Deposit {
                branch: f.partition("branch")?,
                number: f.number("number")?,
                cents: f.cents("cents")?,
            })
        },
    },
    FormSpec {
        id: "transfer",
        action: "/bank/transfer",
        title: "Transfer",
        fields: &[
            field("from_branch", "From branch", Kind::Partition),
            field("from_number", "From account number", Kind::Number),
            field("to_branch", "To branch", Kind::Partition),
            field("to_number", "To account number", Kind::Number),
            field("cents", "Amount (cents)", Kind::Cents),
        ],
        parse: |f| {
            bank(BankOp::Transfer {
                from: (f.partition("from_branch")?, f.number("from_number")?),
                to: (f.partition("to_branch")?, f.number("to_number")?),
                cents: f.cents("cents")?,
            })
        },
    },
    FormSpec {
        id: "balance",
        action: "/bank/balance",
        title: "Balance",
        fields: &[
            field("branch", "Branch", Kind::Partition),
            field("number", "Account number", Kind::Number),
        ],
        parse: |f| {
            bank(BankOp::Balance {
                branch: f.partition("branch")?,
                number: f.number("number")?,
            })
        },
    },
];

static NOOP: [FormSpec; 1] = [FormSpec {
    id: "noop",
    action: "/noop",
    title: "No-op",
    fields: &[
        field("partition", "Partition", Kind::Partition),
        field("payload", "Payload (optional text)", Kind::Text),
    ],
    parse: |f| {
        let op = NoopOp {
            partitions: vec![f.partition("partition")?],
            payload: f.text("payload").as_bytes().to_vec(),
        };
        Ok(Operation {
            partitions: op.partitions.clone(),
            bytes: op.encode(),
        })
    },
}];

fn bank(op: BankOp) -> Result<Operation, BadInput> {
    Ok(Operation {
        partitions: op.partitions(),
        bytes: op.encode(),
    })
}

/// A field the user must correct.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadInput {
    pub(crate) field: &'static str,
    pub(crate) problem: String,
}

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// A submitted form's values, with the configuration's partition count to check against.
pub(crate) struct Fields<'a> {
    values: &'a HashMap<String, String>,
    partitions: u32,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(values: &'a HashMap<String, String>, partitions: u32) -> Self {
        Fields { values, partitions }
    }

    fn required(&self, field: &'static str) -> Result<&'a str, BadInput> {
        match self.values.get(field).map(|v| v.trim()) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(BadInput {
                field,
                problem: "is missing; fill it in".into(),
            }),
        }
    }

    fn whole<T: std::str::FromStr + std::fmt::Display>(
        &self,
        field: &'static str,
        max: T,
    ) -> Result<T, BadInput> {
        let value = self.required(field)?;
        // Digits only: FromStr would also take a leading '+'.
        let parsed = value
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| value.parse().ok())
            .flatten();
        parsed.ok_or_else(|| BadInput {
            field,
            problem: format!("{value:?} is not a whole number from 0 to {max}"),
        })
    }

    fn partition(&self, field: &'static str) -> Result<PartitionId, BadInput> {
        let partition: u32 = self.whole(field, u32::MAX)?;
        if partition >= self.partitions {
            return Err(BadInput {
                field,
                problem: format!(
                    "{partition} does not exist: this cluster has {} (0 to {})",
                    self.partitions,
                    self.partitions.saturating_sub(1)
                ),
            });
        }
        Ok(partition)
    }

    fn number(&self, field: &'static str) -> Result<u32, BadInput> {
        self.whole(field, u32::MAX)
    }

    fn cents(&self, field: &'static str) -> Result<u64, BadInput> {
        self.whole(field, u64::MAX)
    }

    fn text(&self, field: &'static str) -> &'a str {
        self.values.get(field).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(app: App, id: &str, pairs: &[(&str, &str)]) -> Result<Operation, BadInput> {
        let spec = app.forms().iter().find(|s| s.id == id).unwrap();
        let values = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (spec.parse)(&Fields::new(&values, 4))
    }

    fn field_of(result: Result<Operation, BadInput>) -> &'static str {
        match result {
            Ok(_) => panic!("accepted bad input"),
            Err(bad) => bad.field,
        }
    }

    #[test]
    fn every_form_field_is_parsed_and_every_parsed_field_is_on_the_form() {
        // Each form parses with exactly its own fields filled in with 1.
        for app in [App::Bank, App::Noop] {
            for spec in app.forms() {
                let ones: Vec<(&str, &str)> = spec.fields.iter().map(|f| (f.name, "1")).collect();
                assert!(parse(app, spec.id, &ones).is_ok(), "{}", spec.id);
                for missing in spec.fields.iter().filter(|f| f.kind != Kind::Text) {
                    let fewer: Vec<_> = ones
                        .iter()
                        .copied()
                        .filter(|(k, _)| *k != missing.name)
                        .collect();
                    assert_eq!(field_of(parse(app, spec.id, &fewer)), missing.name);
                }
            }
        }
    }

    #[test]
    fn bank_operations_and_their_partitions() {
        let transfer = parse(
            App::Bank,
            "transfer",
            &[
                ("from_branch", "3"),
                ("from_number", " 7 "),
                ("to_branch", "1"),
                ("to_number", "8"),
                ("cents", "18446744073709551615"),
            ],
        )
        .unwrap();
        assert_eq!(transfer.partitions, vec![1, 3]);
        assert_eq!(
            BankOp::decode(&transfer.bytes).unwrap(),
            BankOp::Transfer {
                from: (3, 7),
                to: (1, 8),
                cents: u64::MAX
            }
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |pairs: &[(&str, &str)]| field_of(parse(App::Bank, "open", pairs));
        let ok = [("branch", "0"), ("number", "1"), ("cents", "100")];
        let with = |k: &'static str, v: &'static str| {
            let mut pairs = ok.to_vec();
            pairs.retain(|(name, _)| *name != k);
            pairs.push((k, v));
            pairs
        };
        assert_eq!(bad(&with("branch", "4")), "branch");
        assert_eq!(bad(&with("branch", "-1")), "branch");
        assert_eq!(bad(&with("number", "4294967296")), "number");
        assert_eq!(bad(&with("number", "+1")), "number");
        assert_eq!(bad(&with("cents", "1.5")), "cents");
        assert_eq!(bad(&with("cents", "18446744073709551616")), "cents");
        assert_eq!(bad(&with("cents", "  ")), "cents");
        let noop = parse(App::Noop, "noop", &[("partition", "4")]);
        assert_eq!(field_of(noop), "partition");
    }

    #[test]
    fn noop_payload_is_optional() {
        let op = parse(App::Noop, "noop", &[("partition", "2")]).unwrap();
        assert_eq!(op.partitions, vec![2]);
        let op = parse(
            App::Noop,
            "noop",
            &[("partition", "2"), ("payload", "héllo")],
        )
        .unwrap();
        assert_eq!(
            NoopOp::decode(&op.bytes).unwrap().payload,
            "héllo".as_bytes()
        );
    }
}
