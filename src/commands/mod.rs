//! The commands: each a short function over the parser ([`crate::edifact`]) and the inbox
//! ([`crate::inbox`]), and [`main`], which runs the one the command line names.
//!
//! Where a new thing goes: a new command in a file of its name here (a folder where it has
//! parts of its own, as `ingest/`), its options in `crate::cli`; what a long-running command
//! does between connecting and stopping, a `service::Service` run by `service.rs`; what every
//! input needs whatever brought it, `crate::intake`.

mod consume;
mod drift;
mod effects;
mod ingest;
mod inspect;
mod migrate;
mod publish;
mod purge;
mod reapply;
#[cfg(feature = "as4")]
mod receive;
mod reports;
mod service;

use std::process::ExitCode;

use crate::exit::ExitStatus;
use crate::output::one_message;
use crate::{cli, inbox, output};

/// The operator's side effects as a command installs them on each inbox it opens to decide.
pub struct EffectPlan {
    dir: std::path::PathBuf,
    effects: std::sync::Arc<crate::effects::Effects>,
    settings: inbox::effects::EffectSettings,
}

impl EffectPlan {
    /// The same, installed in `mode`, traced or not.
    fn installed(mut self, mode: inbox::effects::InstallMode, trace: bool) -> EffectPlan {
        self.settings.mode = mode;
        self.settings.trace = trace;
        self
    }
}

/// The side effects `--effects` names, read and checked before anything else (a file that
/// does not parse, an unknown parameter: exit 1, nothing read); `None` without `--effects`.
fn effect_plan(args: &cli::EffectArgs) -> anyhow::Result<Option<EffectPlan>> {
    use anyhow::Context as _;
    let Some(dir) = &args.effects else {
        return Ok(None);
    };
    let effects = crate::effects::Effects::load(dir).with_context(|| {
        format!(
            "cannot read the side effects in --effects {}",
            dir.display()
        )
    })?;
    Ok(Some(EffectPlan {
        dir: dir.clone(),
        effects: std::sync::Arc::new(effects),
        settings: inbox::effects::EffectSettings {
            timeout: args.effects_timeout,
            role: args.effects_role.clone(),
            mode: inbox::effects::InstallMode::Keep,
            trace: false,
        },
    }))
}

/// Opens the inbox for a command that decides, with the side effects of `plan` installed.
fn open_deciding(
    db: &inbox::Location,
    busy_timeout: std::time::Duration,
    plan: Option<&EffectPlan>,
) -> anyhow::Result<Box<dyn inbox::Inbox>> {
    open_with_effects(db, inbox::Access::Create, busy_timeout, plan)
}

/// Opens the inbox with `access`, with the side effects of `plan` installed.
fn open_with_effects(
    db: &inbox::Location,
    access: inbox::Access,
    busy_timeout: std::time::Duration,
    plan: Option<&EffectPlan>,
) -> anyhow::Result<Box<dyn inbox::Inbox>> {
    use anyhow::Context as _;
    let mut inbox = open_inbox(db, access, busy_timeout)?;
    if let Some(plan) = plan {
        inbox
            .install_effects(plan.effects.clone(), &plan.settings, &crate::clock::now())
            .with_context(|| {
                format!(
                    "cannot install the side effects of --effects {} in the inbox database {}",
                    plan.dir.display(),
                    db.shown()
                )
            })?;
    }
    Ok(inbox)
}

/// Opens the inbox for a command; the backend's own errors (which do not name it) are told
/// which inbox they concern, the others already do.
fn open_inbox(
    db: &inbox::Location,
    access: inbox::Access,
    busy_timeout: std::time::Duration,
) -> anyhow::Result<Box<dyn inbox::Inbox>> {
    inbox::open(db, access, busy_timeout).map_err(|e| match e {
        inbox::InboxError::Backend(_)
        | inbox::InboxError::Busy(_)
        | inbox::InboxError::Conflict(_)
        | inbox::InboxError::Refused { .. } => {
            let verb = if access == inbox::Access::Read {
                "read"
            } else {
                "open"
            };
            anyhow::Error::new(e)
                .context(format!("cannot {verb} the inbox database {}", db.shown()))
        }
        other => other.into(),
    })
}

/// A flag set by the first SIGTERM or SIGINT, for a long run to finish its batch and stop; a
/// second signal ends the process at once (for a batch stuck on a broker that does not answer).
fn stop_on_signals() -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use anyhow::Context as _;
    use std::sync::Arc;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))
            .context("cannot watch for SIGTERM and SIGINT")?;
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot watch for SIGTERM and SIGINT")?;
    }
    Ok(stop)
}

/// A usage error found after clap's own checks: said on standard error, exit 2.
fn usage(text: &str) -> anyhow::Result<ExitStatus> {
    output::warn(&format!("error: {text}"));
    Ok(ExitStatus::Usage)
}

/// A usage error about `flag`'s value: named by the flag once (most readers of a URL name it
/// themselves, "--from takes ...").
fn usage_of(flag: &str, text: &str) -> anyhow::Result<ExitStatus> {
    usage(&flagged(flag, text))
}

/// `text`, led by `flag` where it does not name it first.
fn flagged(flag: &str, text: &str) -> String {
    if text.starts_with(flag) {
        text.to_string()
    } else {
        format!("{flag}: {text}")
    }
}

/// The run's settings for every broker connection (the `--from`, `--to` and `--dead-letter` of
/// `urls`): its TLS and credential files, its Kafka settings file and `EDI_INBOX_KAFKA_*`
/// variables (the one place they are read from the environment), its SQS endpoint. An error (a
/// usage error, exit 2) where a TLS setting applies to none of the URLs, or a file cannot be
/// read, before anything connects.
fn broker_settings(
    args: &cli::BrokerArgs,
    urls: &[&str],
) -> Result<crate::broker::Settings, String> {
    let cli::BrokerArgs { tls, kafka, sqs } = args;
    let settings = crate::broker::Settings {
        tls: crate::broker::settings::Tls {
            ca: tls.tls_ca.clone(),
            cert: tls.tls_cert.clone(),
            key: tls.tls_key.clone(),
            nats_creds: tls.nats_creds.clone(),
            nats_nkey: tls.nats_nkey.clone(),
        },
        kafka_config: kafka.kafka_config.clone(),
        kafka_variables: crate::broker::settings::KafkaVariables::of(std::env::vars_os()),
        sqs_endpoint: sqs.sqs_endpoint.clone(),
    };
    #[cfg(feature = "broker")]
    {
        let s = &settings.tls;
        crate::brokers::check_tls_applies(s, urls)?;
        if s.wants_tls() {
            s.client_config()?;
        }
        s.nats_creds_text()?;
        s.nats_nkey_seed()?;
    }
    #[cfg(not(feature = "broker"))]
    {
        let _ = urls;
        if !settings.tls.given().is_empty() {
            return Err("the TLS and NATS credential settings are not available in this build (it was built without any broker)".into());
        }
    }
    Ok(settings)
}

/// The CONTRL answering policy of `--contrl` and `--contrl-duplicates`.
fn ack_policy(args: &cli::AckArgs, effects: &cli::EffectArgs) -> crate::intake::AckPolicy {
    use crate::edifact::contrl::Mode;
    crate::intake::AckPolicy::new(
        match args.contrl {
            cli::ContrlWhen::Requested => Mode::Requested,
            cli::ContrlWhen::Always => Mode::Always,
            cli::ContrlWhen::Never => Mode::Never,
        },
        args.contrl_duplicates == cli::ContrlDuplicates::Reject,
    )
    .halting(effects.on_effect_error == cli::OnEffectError::Halt)
}

/// Sleeps `d`, waking early when `stop` is set.
fn sleep_unless(stop: &std::sync::atomic::AtomicBool, d: std::time::Duration) {
    use std::sync::atomic::Ordering;
    let until = std::time::Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
    }
}

/// Prints a completion script for the shell.
fn completions(args: &cli::CompletionsArgs) -> anyhow::Result<ExitStatus> {
    use clap_complete::Shell;
    let shell = match args.shell {
        cli::CompletionShell::Bash => Shell::Bash,
        cli::CompletionShell::Zsh => Shell::Zsh,
        cli::CompletionShell::Fish => Shell::Fish,
    };
    let mut cmd = cli::command();
    // Generated into memory first: written straight to a closed pipe (`| head`), the generator
    // panics.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "edi-inbox", &mut script);
    let mut out = output::Out::default();
    out.raw(&script);
    out.flush();
    Ok(ExitStatus::from_problems(usize::from(out.failed())))
}

/// Writes one manual page per command, as ripgrep generates its own: from the clap definitions,
/// so that a page never says other than `--help`.
fn man(args: &cli::ManArgs) -> anyhow::Result<ExitStatus> {
    use anyhow::Context as _;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    clap_mangen::generate_to(cli::command(), &args.out)
        .with_context(|| format!("cannot write the manual pages into {}", args.out.display()))?;
    Ok(ExitStatus::Success)
}

/// Parses the command line, runs the command and turns its outcome into an exit status.
pub fn main() -> ExitCode {
    #[cfg(feature = "failpoints")]
    let _scenario = fail::FailScenario::setup();
    let cli = {
        use clap::FromArgMatches as _;
        let matches = cli::command().get_matches();
        let mut cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        if let Some(dir) = cli.metrics_dir.clone() {
            cli.command.default_metrics_file(&dir);
        }
        cli
    };
    let named = cli.db.is_some();
    let db = cli
        .db
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(cli::DEFAULT_DB));
    let db = match inbox::Location::parse(db.as_os_str(), &cli.pg_schema) {
        Ok(db) => db,
        Err(e) => {
            output::warn(&format!("error: {e}"));
            return ExitStatus::Usage.into();
        }
    };
    let result = match &cli.command {
        cli::Command::Inspect(args) => inspect::run(args),
        cli::Command::Ingest(args) => ingest::run(&db, named, cli.busy_timeout, args),
        cli::Command::Reprocess(args) => ingest::reprocess::run(&db, named, cli.busy_timeout, args),
        cli::Command::Purge(args) => purge::run(&db, cli.busy_timeout, args),
        cli::Command::Migrate(args) => migrate::run(&cli.pg_schema, cli.busy_timeout, args),
        cli::Command::Stats(args) => reports::stats(&db, cli.busy_timeout, args),
        cli::Command::List(args) => reports::list(&db, cli.busy_timeout, args),
        cli::Command::Show(args) => reports::show(&db, cli.busy_timeout, args),
        cli::Command::Reapply(args) => reapply::run(&db, cli.busy_timeout, args),
        cli::Command::Effects(args) => effects::run(&db, cli.busy_timeout, args),
        cli::Command::Publish(args) => publish::run(&db, cli.busy_timeout, args),
        cli::Command::Consume(args) => consume::run(&db, named, cli.busy_timeout, args),
        #[cfg(feature = "as4")]
        cli::Command::Receive(args) => receive::run(&db, named, cli.busy_timeout, args),
        #[cfg(not(feature = "as4"))]
        cli::Command::Receive(_) => {
            usage("receive is not available in this build (it was built without the `as4` feature)")
        }
        cli::Command::Completions(args) => completions(args),
        cli::Command::Man(args) => man(args),
    };
    let status = match result {
        Ok(status) => status,
        Err(e) => {
            // Whatever failed in the inbox is named with it: "connection closed" alone does
            // not say which server, database or file to look at.
            let mut text = one_message(&e);
            let shown = db.shown();
            let from_inbox = e
                .chain()
                .any(|c| c.downcast_ref::<inbox::InboxError>().is_some());
            // (migrate names its own two inboxes, and --db is none of them.)
            let own_inboxes = matches!(cli.command, cli::Command::Migrate(_));
            if from_inbox && !own_inboxes && !text.contains(&shown) {
                text = format!("{text} (the inbox {shown})");
            }
            // No inbox where one was looked for: where nothing named it, a usage error for
            // every command (as ingest's, consume's and receive's check before reading), else
            // the path (or schema) named is the thing to check.
            let missing = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<inbox::InboxError>(),
                    Some(inbox::InboxError::Missing { .. })
                )
            });
            if missing && !named {
                output::warn(&format!(
                    "error: {text}: name one with --db or EDI_INBOX_DB (without either, {} in the current folder is used where it exists)",
                    cli::DEFAULT_DB
                ));
                return stamp_metrics(&cli.command, ExitStatus::Usage).into();
            }
            if missing {
                text = format!(
                    "{text}: check the path named by --db or EDI_INBOX_DB (and --pg-schema, for PostgreSQL), or run ingest once to create it"
                );
            }
            output::warn(&format!("error: {text}"));
            let busy = e.chain().any(|c| {
                c.downcast_ref::<inbox::InboxError>()
                    .is_some_and(inbox::InboxError::is_busy)
            });
            if busy {
                output::warn(&format!(
                    "another process held the database longer than --busy-timeout ({}); nothing was left half-done",
                    humantime::format_duration(cli.busy_timeout)
                ));
            }
            ExitStatus::Fatal
        }
    };
    stamp_metrics(&cli.command, status).into()
}

/// Ends a run by recording its exit status in its metrics file (also when it failed before
/// writing any figures), for the alert on runs that exit non-zero.
fn stamp_metrics(command: &cli::Command, status: ExitStatus) -> ExitStatus {
    let Some((name, path)) = command.metrics_file() else {
        return status;
    };
    match crate::metrics::stamp_run(path, name, status as u8) {
        Ok(()) => status,
        Err(e) => {
            output::warn(&format!(
                "cannot record the exit status in the metrics file {}: {e}",
                path.display()
            ));
            if status == ExitStatus::Success {
                ExitStatus::Problems
            } else {
                status
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_usage_error_names_its_flag_once() {
        assert_eq!(super::flagged("--from", "--from takes X"), "--from takes X");
        assert_eq!(
            super::flagged("--to", "nats:// needs a server"),
            "--to: nats:// needs a server"
        );
    }
}
