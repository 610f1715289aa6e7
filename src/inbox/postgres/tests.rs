use super::*;

#[test]
fn the_password_is_never_shown() {
    let t = Target::parse("postgres://alice:s3cret@db.example:5433/edi", "edi_inbox").unwrap();
    assert_eq!(
        t.shown(),
        "postgres://alice@db.example:5433/edi (schema edi_inbox)"
    );
    let t = Target::parse("host=db.example user=bob password=hunter2 dbname=x", "s").unwrap();
    assert!(!t.shown().contains("hunter2"), "{}", t.shown());
    assert!(!format!("{t:?}").contains("hunter2"));
    assert!(Target::parse("postgres://u@h/db", "Bad-Name").is_err());
    for text in [
        "postgres://alice:p@zq@db.example/edi",
        "postgres://alice:p:zq@db.example/edi",
    ] {
        match Target::parse(text, "s") {
            Ok(t) => assert!(!t.shown().contains("zq"), "{}", t.shown()),
            Err(e) => assert!(!e.to_string().contains("zq"), "{e}"),
        }
    }
    let e = Target::parse("password='top secret' oops", "s").unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}
