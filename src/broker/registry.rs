//! The kinds of URL a side takes (`--from`, `--to`, `--dead-letter`), one line each: the
//! scheme, the form its error shows, the feature that builds it, and the function of its module
//! that reads it. A build without the feature keeps the line, so that such a URL is told "not
//! available in this build" rather than "not a URL this takes".

/// What reads a URL of one kind into a `T`; the error never holds the URL.
pub type Parse<T> = fn(&str) -> Result<Box<T>, String>;

/// One kind of URL, read into a `T` (a source, a destination).
pub struct Kind<T: ?Sized> {
    /// What the URL starts with: `nats://`.
    pub scheme: &'static str,
    /// What the error of an unknown URL shows: `nats://HOST:PORT/STREAM/CONSUMER`.
    pub form: &'static str,
    /// The Cargo feature that builds it.
    pub feature: &'static str,
    /// Reads the URL; `None` where this build left the feature out.
    pub parse: Option<Parse<T>>,
}

/// A table of [`Kind`]s, each line `"feature", "scheme", "form", path::to::parse;`, the line
/// kept (without its parser) where the feature is left out.
macro_rules! registry {
    ($( $feature:literal, $scheme:literal, $form:literal, $parse:path; )*) => {
        &[ $(
            #[cfg(feature = $feature)]
            $crate::broker::registry::Kind {
                scheme: $scheme,
                form: $form,
                feature: $feature,
                parse: Some($parse),
            },
            #[cfg(not(feature = $feature))]
            $crate::broker::registry::Kind {
                scheme: $scheme,
                form: $form,
                feature: $feature,
                parse: None,
            },
        )* ]
    };
}

/// Reads `text` (given as `flag`) with the kind its scheme names; the error says what is
/// accepted, never the text (which may hold a password).
pub fn parse<T: ?Sized>(kinds: &[Kind<T>], flag: &str, text: &str) -> Result<Box<T>, String> {
    match kinds.iter().find(|k| text.starts_with(k.scheme)) {
        Some(Kind {
            parse: Some(parse), ..
        }) => parse(text),
        Some(k) => Err(format!(
            "{flag} {} is not available in this build (it was built without the `{}` feature)",
            k.scheme, k.feature
        )),
        None => Err(usage(kinds, flag)),
    }
}

/// What `flag` takes, for an error: `--to takes a, b or c`.
pub fn usage<T: ?Sized>(kinds: &[Kind<T>], flag: &str) -> String {
    format!("{flag} takes {}", forms(kinds))
}

/// The forms, as a sentence: `a, b or c`.
fn forms<T: ?Sized>(kinds: &[Kind<T>]) -> String {
    let forms: Vec<&str> = kinds.iter().map(|k| k.form).collect();
    match forms.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn length(text: &str) -> Result<Box<usize>, String> {
        Ok(Box::new(text.len()))
    }

    const KINDS: &[Kind<usize>] = &[
        Kind {
            scheme: "a://",
            form: "a://HOST",
            feature: "a",
            parse: Some(length),
        },
        Kind {
            scheme: "b://",
            form: "b://HOST",
            feature: "b",
            parse: None,
        },
        Kind {
            scheme: "c:",
            form: "c:PATH",
            feature: "c",
            parse: Some(length),
        },
    ];

    #[test]
    fn each_url_goes_to_its_kind_and_a_left_out_one_says_so() {
        assert_eq!(parse(KINDS, "--to", "a://h"), Ok(Box::new(5)));
        assert_eq!(parse(KINDS, "--to", "c:/x"), Ok(Box::new(4)));
        assert_eq!(
            parse(KINDS, "--to", "b://user:s3cret@h"),
            Err(
                "--to b:// is not available in this build (it was built without the `b` feature)"
                    .into()
            )
        );
        let e = parse(KINDS, "--to", "ftp://user:s3cret@h").unwrap_err();
        assert_eq!(e, "--to takes a://HOST, b://HOST or c:PATH");
    }
}
