//! The places `consume --from`, `publish --to` and `consume --dead-letter` name by URL (the
//! brokers, and a folder), each described once: its schemes, the Cargo feature that builds it,
//! the forms of its URLs on each side it serves and the function of its module that reads each,
//! which of the run's TLS settings its connections take. Everything that lists them is made
//! from [`BROKERS`]: which parser reads a URL, the "not available in this build" answer where the
//! feature is left out, whether `--tls-ca` and the rest apply to a run's URLs, and the sides'
//! `--help` texts. A new broker is one line here and its modules.
//!
//! `broker/` is what a broker's source and sink share (connecting, naming, settings); this table
//! stands above `consume/` and `publish/`, whose parsers it names.

use crate::broker::Settings;
use crate::consume::Source;
use crate::publish::Destination;

/// What reads a URL of one side into a `T`, with the run's settings; the error never holds the
/// URL.
pub type Parse<T> = fn(&str, &Settings) -> Result<Box<T>, String>;

/// One side a broker serves: the forms of its URLs (as errors and `--help` show them), what
/// `--help` says of it, and the parser (`None` where this build left the broker's feature out).
pub struct Side<T: ?Sized> {
    pub forms: &'static [&'static str],
    pub note: &'static str,
    pub parse: Option<Parse<T>>,
}

/// Which of the run's TLS settings a broker's connections take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsUse {
    /// When its connections are TLS, as `--help` says it: `amqps://`.
    pub when: &'static str,
    /// `--tls-ca`: the roots its server's certificate is checked against.
    pub ca: bool,
    /// `--tls-cert` and `--tls-key`: a client certificate.
    pub client_cert: bool,
    /// `--nats-creds` and `--nats-nkey`.
    pub nats_credentials: bool,
}

/// A broker (or a folder) as the command line names it.
pub struct Broker {
    /// How `--help` names it: `NATS JetStream`.
    pub name: &'static str,
    /// The Cargo feature that builds it.
    pub feature: &'static str,
    /// What its URLs start with.
    pub schemes: &'static [&'static str],
    /// Whether a URL of one of its schemes is its own: SQS takes `http://` and `https://` URLs
    /// only of a queue's form, so that another HTTP destination is never taken for a queue.
    pub claims: fn(&str) -> bool,
    /// The settings its connections take, where its URL asks for TLS.
    pub tls: TlsUse,
    pub from: Option<Side<dyn Source>>,
    pub to: Option<Side<dyn Destination>>,
    pub dead_letter: Option<Side<dyn Destination>>,
}

/// The parser `$f` where the feature `$feature` is built, else `None`.
macro_rules! built {
    ($feature:literal, $t:ty, $f:path) => {{
        #[cfg(feature = $feature)]
        let parse: Option<Parse<$t>> = Some($f as Parse<$t>);
        #[cfg(not(feature = $feature))]
        let parse: Option<Parse<$t>> = None;
        parse
    }};
}

/// Every broker, in the order `--help` and errors name them.
pub const BROKERS: &[Broker] = &[
    Broker {
        name: "NATS JetStream",
        feature: "nats",
        schemes: &["nats://", "tls://"],
        claims: any,
        tls: TlsUse {
            when: "tls://, or a server that requires TLS",
            ca: true,
            client_cert: true,
            nats_credentials: true,
        },
        from: Some(Side {
            forms: &[
                "nats://HOST:PORT/STREAM/CONSUMER",
                "tls://HOST:PORT/STREAM/CONSUMER",
            ],
            note: "a durable pull consumer, made where missing; each delivery named nats:STREAM/SEQUENCE, terminated where rejected; tls:// for TLS",
            parse: built!("nats", dyn Source, crate::consume::nats::parse),
        }),
        to: Some(Side {
            forms: &[
                "nats://HOST:PORT[/SUBJECT-PREFIX]",
                "tls://HOST:PORT[/SUBJECT-PREFIX]",
            ],
            note: "a republish dropped by the stream's duplicate window; tls:// for TLS",
            parse: built!("nats", dyn Destination, crate::publish::nats::parse),
        }),
        dead_letter: Some(Side {
            forms: &["nats://HOST:PORT/SUBJECT", "tls://HOST:PORT/SUBJECT"],
            note: "a JetStream stream must capture the subject",
            parse: built!("nats", dyn Destination, crate::publish::nats::dead_letter),
        }),
    },
    Broker {
        name: "RabbitMQ",
        feature: "amqp",
        schemes: &["amqp://", "amqps://"],
        claims: any,
        tls: TlsUse {
            when: "amqps://",
            ca: true,
            client_cert: true,
            nats_credentials: false,
        },
        from: Some(Side {
            forms: &[
                "amqp://USER:PASS@HOST:PORT/VHOST/QUEUE",
                "amqps://USER:PASS@HOST:PORT/VHOST/QUEUE",
            ],
            note: "a queue, manual acknowledgements, a prefetch of --batch; each delivery named amqp:QUEUE/MESSAGE-ID, rejected without requeue (to the queue's dead-letter exchange) where rejected; %2f for the vhost /; amqps:// for TLS",
            parse: built!("amqp", dyn Source, crate::consume::amqp::parse),
        }),
        to: Some(Side {
            forms: &[
                "amqp://USER:PASS@HOST:PORT/VHOST",
                "amqps://USER:PASS@HOST:PORT/VHOST",
            ],
            note: "amqps:// for TLS; the exchange is --exchange; a consumer drops a republish by its message_id",
            parse: built!("amqp", dyn Destination, crate::publish::amqp::parse),
        }),
        dead_letter: Some(Side {
            forms: &[
                "amqp://USER:PASS@HOST:PORT/VHOST/EXCHANGE",
                "amqps://USER:PASS@HOST:PORT/VHOST/EXCHANGE",
            ],
            note: "a topic exchange, declared if missing; the delivery's routing key kept",
            parse: built!("amqp", dyn Destination, crate::publish::amqp::dead_letter),
        }),
    },
    Broker {
        name: "Kafka",
        feature: "kafka",
        schemes: &["kafka://"],
        claims: any,
        tls: TlsUse {
            when: "TLS, which these files turn on",
            ca: true,
            client_cert: true,
            nats_credentials: false,
        },
        from: Some(Side {
            forms: &["kafka://HOST:PORT/TOPIC?group=NAME"],
            note: "HOST:PORT[,HOST:PORT...] and TOPIC[,TOPIC...]; the group's positions kept in the inbox, moved in the decisions' transaction, past a rejected record too; &partitions=0,1 assigns those by hand; each record named kafka:TOPIC/PARTITION/OFFSET",
            parse: built!("kafka", dyn Source, crate::consume::kafka::parse),
        }),
        to: Some(Side {
            forms: &["kafka://HOST:PORT/TOPIC"],
            note: "TOPIC a template like --subject, which it replaces; a consumer drops a republish by its ce_id",
            parse: built!("kafka", dyn Destination, crate::publish::kafka::parse),
        }),
        dead_letter: Some(Side {
            forms: &["kafka://HOST:PORT/TOPIC"],
            note: "one topic",
            parse: built!("kafka", dyn Destination, crate::publish::kafka::dead_letter),
        }),
    },
    Broker {
        name: "Amazon SQS",
        feature: "sqs",
        schemes: &["sqs://", "https://", "http://"],
        claims: is_sqs_url,
        // SQS over HTTPS checks AWS's (or the endpoint's) certificate; it signs its requests
        // with the AWS credentials, not a client certificate.
        tls: TlsUse {
            when: "https://",
            ca: true,
            client_cert: false,
            nats_credentials: false,
        },
        from: Some(Side {
            forms: SQS_FORMS,
            note: "or the queue's URL; each message named sqs:QUEUE/MESSAGE-ID, kept invisible until it is deleted after the commit, rejected or not",
            parse: built!("sqs", dyn Source, crate::consume::sqs::parse),
        }),
        to: Some(Side {
            forms: SQS_FORMS,
            note: "or the queue's URL; a FIFO queue drops a republish, a standard queue's consumer by its ce-id",
            parse: built!("sqs", dyn Destination, crate::publish::sqs::parse),
        }),
        dead_letter: Some(Side {
            forms: SQS_FORMS,
            note: "or the queue's URL",
            parse: built!("sqs", dyn Destination, crate::publish::sqs::dead_letter),
        }),
    },
    Broker {
        name: "a folder",
        feature: "cli",
        schemes: &["dir:"],
        claims: any,
        tls: TlsUse {
            when: "",
            ca: false,
            client_cert: false,
            nats_credentials: false,
        },
        from: None,
        to: Some(Side {
            forms: &["dir:PATH"],
            note: "one file per event; a republish found there",
            parse: built!("cli", dyn Destination, crate::publish::dir::parse),
        }),
        dead_letter: None,
    },
];

/// The forms of an SQS queue's URL.
const SQS_FORMS: &[&str] = &[
    "sqs://REGION/ACCOUNT/QUEUE",
    "https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE",
    "http://HOST:PORT/ACCOUNT/QUEUE",
];

fn any(_: &str) -> bool {
    true
}

/// True for `sqs://...`, and for an HTTP(S) URL of a queue's form: a host, then exactly
/// `/ACCOUNT/QUEUE` with ACCOUNT twelve digits (an AWS account, or a local endpoint's made-up
/// one), the form SQS gives its queues' URLs.
pub fn is_sqs_url(text: &str) -> bool {
    if text.starts_with("sqs://") {
        return true;
    }
    let Some(rest) = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))
    else {
        return false;
    };
    let mut parts = rest.split('/');
    let (Some(host), Some(account), Some(_queue), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !host.is_empty() && account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())
}

/// A side of the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    From,
    To,
    DeadLetter,
}

impl Flag {
    pub fn name(self) -> &'static str {
        match self {
            Flag::From => "--from",
            Flag::To => "--to",
            Flag::DeadLetter => "--dead-letter",
        }
    }
}

/// The broker whose URL `text` is, where one claims it.
fn broker_of(text: &str) -> Option<&'static Broker> {
    BROKERS
        .iter()
        .find(|b| b.schemes.iter().any(|s| text.starts_with(s)) && (b.claims)(text))
}

/// Reads `--from`: the source its URL names, with the run's settings; the error says what is
/// taken (never the text, which may hold a password).
pub fn source(text: &str, settings: &Settings) -> Result<Box<dyn Source>, String> {
    read(Flag::From, text, settings, |b| b.from.as_ref())
}

/// Reads `--to`: the destination its URL names.
pub fn destination(text: &str, settings: &Settings) -> Result<Box<dyn Destination>, String> {
    read(Flag::To, text, settings, |b| b.to.as_ref())
}

/// Reads `--dead-letter`: the destination of rejected deliveries its URL names.
pub fn dead_letter(text: &str, settings: &Settings) -> Result<Box<dyn Destination>, String> {
    read(Flag::DeadLetter, text, settings, |b| b.dead_letter.as_ref())
}

fn read<T: ?Sized>(
    flag: Flag,
    text: &str,
    settings: &Settings,
    side: fn(&'static Broker) -> Option<&'static Side<T>>,
) -> Result<Box<T>, String> {
    let Some(broker) = broker_of(text) else {
        return Err(unknown(flag, text));
    };
    match side(broker) {
        Some(Side {
            parse: Some(parse), ..
        }) => parse(text, settings),
        Some(Side { parse: None, .. }) => Err(format!(
            "{} {} is not available in this build (it was built without the `{}` feature)",
            flag.name(),
            scheme_of(broker, text),
            broker.feature
        )),
        None => Err(format!(
            "{} does not take {} URLs ({}); {}",
            flag.name(),
            scheme_of(broker, text),
            broker.name,
            usage(flag)
        )),
    }
}

/// The scheme of `broker` that `text` starts with.
fn scheme_of(broker: &Broker, text: &str) -> &'static str {
    broker
        .schemes
        .iter()
        .find(|s| text.starts_with(*s))
        .copied()
        .unwrap_or("")
}

/// The error of a URL no broker claims: what it looks like it is, and what is taken.
fn unknown(flag: Flag, text: &str) -> String {
    if text.starts_with("http://") || text.starts_with("https://") {
        format!(
            "{} takes no HTTP(S) URL but an Amazon SQS queue's ({}, ACCOUNT twelve digits); {}",
            flag.name(),
            SQS_FORMS[1..].join(" or "),
            usage(flag)
        )
    } else {
        usage(flag)
    }
}

/// The forms `flag` takes, in order, of every broker (built or not).
pub fn forms(flag: Flag) -> Vec<&'static str> {
    BROKERS
        .iter()
        .filter_map(|b| match flag {
            Flag::From => b.from.as_ref().map(|s| s.forms),
            Flag::To => b.to.as_ref().map(|s| s.forms),
            Flag::DeadLetter => b.dead_letter.as_ref().map(|s| s.forms),
        })
        .flatten()
        .copied()
        .collect()
}

/// What `flag` takes, for an error: `--to takes a, b or c`.
pub fn usage(flag: Flag) -> String {
    format!("{} takes {}", flag.name(), sentence(&forms(flag)))
}

/// The names of the brokers a side serves, as a sentence (`A, B or C`).
pub fn names(flag: Flag) -> String {
    let names: Vec<&str> = BROKERS
        .iter()
        .filter(|b| match flag {
            Flag::From => b.from.is_some(),
            Flag::To => b.to.is_some(),
            Flag::DeadLetter => b.dead_letter.is_some(),
        })
        .map(|b| b.name)
        .collect();
    sentence(&names)
}

/// What `--help` says of `flag`'s URLs: each broker's forms, name and note, in the table's
/// order.
pub fn help(flag: Flag) -> String {
    let sides: Vec<String> = BROKERS
        .iter()
        .filter_map(|b| {
            let side = match flag {
                Flag::From => b.from.as_ref().map(|s| (s.forms, s.note)),
                Flag::To => b.to.as_ref().map(|s| (s.forms, s.note)),
                Flag::DeadLetter => b.dead_letter.as_ref().map(|s| (s.forms, s.note)),
            };
            side.map(|(forms, note)| format!("{} ({}: {note})", sentence(forms), b.name))
        })
        .collect();
    sentence(&sides.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The brokers a TLS setting is for (`wanted` says which setting), each with when its
/// connections are TLS, for `--help`: `NAME (WHEN), NAME (WHEN) or NAME (WHEN)`.
pub fn tls_brokers(wanted: fn(&TlsUse) -> bool) -> String {
    let brokers: Vec<String> = BROKERS
        .iter()
        .filter(|b| wanted(&b.tls))
        .map(|b| format!("{} ({})", b.name, b.tls.when))
        .collect();
    sentence(&brokers.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `a, b or c`.
fn sentence(items: &[&str]) -> String {
    match items.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A usage error for a TLS or credential setting given that none of `urls` (the run's
/// `--from`, `--to` and `--dead-letter`) takes.
pub fn check_tls_applies(tls: &crate::broker::settings::Tls, urls: &[&str]) -> Result<(), String> {
    let taking = |wanted: fn(&TlsUse) -> bool| -> Vec<&'static str> {
        BROKERS
            .iter()
            .filter(|b| wanted(&b.tls))
            .flat_map(|b| b.schemes.iter().copied())
            .collect()
    };
    for flag in tls.given() {
        let wanted: fn(&TlsUse) -> bool = if flag.starts_with("--nats") {
            |t| t.nats_credentials
        } else if flag == "--tls-ca" {
            |t| t.ca
        } else {
            |t| t.client_cert
        };
        let applies = urls
            .iter()
            .filter_map(|u| broker_of(u).map(|b| (u, b)))
            .any(|(u, b)| {
                wanted(&b.tls)
                    // Plain AMQP is never TLS: amqps:// is.
                    && !u.starts_with("amqp://")
            });
        if !applies {
            let schemes = taking(wanted);
            return Err(format!(
                "{flag} is for {} URLs, and none is given here{}",
                sentence(&schemes),
                if flag.starts_with("--tls") {
                    " (amqp:// is plain AMQP: write amqps:// for TLS)"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_goes_to_its_broker_and_an_unknown_one_is_said() {
        let e = source("ftp://user:s3cret@h/x", &Settings::default()).unwrap_err();
        assert!(
            e.starts_with("--from takes nats://") && !e.contains("s3cret"),
            "{e}"
        );
        // An HTTP(S) URL is an SQS queue's only where it has a queue's form.
        assert!(is_sqs_url(
            "https://sqs.eu-west-1.amazonaws.com/123456789012/q"
        ));
        assert!(is_sqs_url("http://127.0.0.1:9324/000000000000/q.fifo"));
        assert!(!is_sqs_url("https://example.com/as2/inbound"));
        assert!(!is_sqs_url("https://example.com/123456789012/q/more"));
        let e = destination("https://example.com/edi", &Settings::default()).unwrap_err();
        assert!(
            e.starts_with("--to takes no HTTP(S) URL but an Amazon SQS queue's"),
            "{e}"
        );
        let e = source("dir:/tmp", &Settings::default()).unwrap_err();
        assert!(
            e.starts_with("--from does not take dir: URLs (a folder)"),
            "{e}"
        );
    }

    #[test]
    fn the_forms_and_names_come_from_the_table() {
        assert_eq!(
            names(Flag::To),
            "NATS JetStream, RabbitMQ, Kafka, Amazon SQS or a folder"
        );
        assert_eq!(
            names(Flag::From),
            "NATS JetStream, RabbitMQ, Kafka or Amazon SQS"
        );
        assert!(usage(Flag::DeadLetter).ends_with("or http://HOST:PORT/ACCOUNT/QUEUE"));
    }

    #[test]
    fn tls_settings_apply_to_the_brokers_that_take_them() {
        let ca = crate::broker::settings::Tls {
            ca: Some("ca.pem".into()),
            ..Default::default()
        };
        assert!(check_tls_applies(&ca, &["kafka://h:9092/t"]).is_ok());
        assert!(check_tls_applies(&ca, &["sqs://r/123456789012/q"]).is_ok());
        let e = check_tls_applies(&ca, &["amqp://u@h/%2f/q"]).unwrap_err();
        assert!(e.contains("write amqps://"), "{e}");
        let cert = crate::broker::settings::Tls {
            cert: Some("c.pem".into()),
            ..Default::default()
        };
        assert!(check_tls_applies(&cert, &["sqs://r/123456789012/q"]).is_err());
        assert!(check_tls_applies(&cert, &["amqps://u@h/%2f/q"]).is_ok());
        let creds = crate::broker::settings::Tls {
            nats_creds: Some("u.creds".into()),
            ..Default::default()
        };
        assert!(check_tls_applies(&creds, &["kafka://h:9092/t"]).is_err());
        assert!(check_tls_applies(&creds, &["tls://h:4222/s/c"]).is_ok());
    }

    #[test]
    fn each_source_is_read_by_its_module_and_shown_without_a_password() {
        for (url, shown) in [
            ("nats://edi:s3cret@h:4222/S/C", "nats://h:4222/S/C"),
            ("amqp://edi:s3cret@h:5672/vh/q", "amqp://edi@h:5672/vh/q"),
            ("tls://edi:s3cret@h:4222/S/C", "tls://h:4222/S/C"),
            ("amqps://edi:s3cret@h/vh/q", "amqps://edi@h/vh/q"),
            (
                "kafka://h:9092/edi.in?group=hub",
                "kafka://h:9092/edi.in (group hub)",
            ),
            (
                "sqs://eu-west-1/123456789012/edi-in",
                "sqs://eu-west-1/123456789012/edi-in",
            ),
        ] {
            match crate::brokers::source(url, &Default::default()) {
                Ok(s) => assert_eq!(s.shown(), shown),
                // A build without the broker says so, and names the feature.
                Err(e) => assert!(e.contains("not available in this build"), "{e}"),
            }
        }
        let e = crate::brokers::source("file:x", &Default::default()).unwrap_err();
        assert_eq!(
            e,
            "--from takes nats://HOST:PORT/STREAM/CONSUMER, tls://HOST:PORT/STREAM/CONSUMER, amqp://USER:PASS@HOST:PORT/VHOST/QUEUE, amqps://USER:PASS@HOST:PORT/VHOST/QUEUE, kafka://HOST:PORT/TOPIC?group=NAME, sqs://REGION/ACCOUNT/QUEUE, https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE or http://HOST:PORT/ACCOUNT/QUEUE"
        );
        assert!(
            !crate::brokers::source("ftp://u:s3cret@h", &Default::default())
                .unwrap_err()
                .contains("s3cret")
        );
    }

    #[test]
    fn destinations_are_read_by_their_modules_and_shown_without_passwords() {
        for (url, shown) in [
            ("nats://alice:s3cret@h:4222/acme", "nats://h:4222/acme"),
            ("amqp://guest:s3cret@h:5672/%2f", "amqp://guest@h:5672/%2f"),
            ("tls://alice:s3cret@h:4222/acme", "tls://h:4222/acme"),
            ("amqps://guest:s3cret@h/vh", "amqps://guest@h/vh"),
            ("kafka://h:9092/edi.out", "kafka://h:9092/edi.out"),
            ("dir:/srv/out", "dir:/srv/out"),
        ] {
            match crate::brokers::destination(url, &Default::default()) {
                Ok(d) => assert_eq!(d.shown(), shown),
                Err(e) => assert!(e.contains("not available in this build"), "{e}"),
            }
        }
        let e =
            crate::brokers::destination("ftp://user:s3cret@h", &Default::default()).unwrap_err();
        assert_eq!(
            e,
            "--to takes nats://HOST:PORT[/SUBJECT-PREFIX], tls://HOST:PORT[/SUBJECT-PREFIX], amqp://USER:PASS@HOST:PORT/VHOST, amqps://USER:PASS@HOST:PORT/VHOST, kafka://HOST:PORT/TOPIC, sqs://REGION/ACCOUNT/QUEUE, https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE, http://HOST:PORT/ACCOUNT/QUEUE or dir:PATH"
        );
        assert!(crate::brokers::destination("dir:", &Default::default()).is_err());
    }
}
