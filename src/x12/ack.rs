//! The acknowledgements of ASC X12 that answer an interchange, as one interchange of ours: a TA1
//! (X12.56, the interchange acknowledgement) after the ISA where one is due, and one functional
//! group `FA` holding a 997 (functional acknowledgment, versions up to 004010) or a 999
//! (implementation acknowledgment, 005010 on, X231A1) per functional group answered.
//!
//! Pure, like the rest of this module: the caller supplies what is answered (as the reader
//! found it), the acknowledgement's own control number (ISA13, from the partner's counter) and
//! the time. The answer's envelope swaps sender and receiver, states the partner's own version
//! (ISA12) and usage (ISA15) and is written with the partner's delimiters, so that the
//! partner's translator reads it with the settings it sends with.

/// What an acknowledgement states of an interchange (TA104), a group (AK901) or a set (AK501,
/// IK501).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `A`: accepted.
    Accepted,
    /// `E`: accepted, with errors noted.
    AcceptedWithErrors,
    /// `R`: rejected.
    Rejected,
}

impl Status {
    pub const fn code(self) -> &'static str {
        match self {
            Status::Accepted => "A",
            Status::AcceptedWithErrors => "E",
            Status::Rejected => "R",
        }
    }
}

/// TA105 `000`: no error.
pub const NO_ERROR: &str = "000";
/// TA105 `024`: invalid interchange content (such as an invalid GS segment): an interchange
/// rejected for an error in one of its groups or sets.
pub const INVALID_CONTENT: &str = "024";
/// TA105 `025`: duplicate interchange control number (a drift: the same ISA13 from the same
/// sender with other content, or a duplicate answered as one).
pub const DUPLICATE_CONTROL_NUMBER: &str = "025";

/// AK502 (997) / IK502 (999) `23`: transaction set control number not unique within the
/// functional group. The reader tolerates a repeated ST02 in a group (partners' translators
/// number sets so): the set is applied, and its answer says `E`, accepted with this error noted.
pub const SET_CONTROL_NUMBER_NOT_UNIQUE: &str = "23";

/// The answered interchange's ISA as far as an answer needs it, text as the reader gave it
/// (ISA06 and ISA08 trimmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered<'a> {
    /// ISA05, ISA06.
    pub sender_qualifier: &'a str,
    pub sender: &'a str,
    /// ISA07, ISA08.
    pub receiver_qualifier: &'a str,
    pub receiver: &'a str,
    /// ISA09 (YYMMDD), ISA10 (HHMM): TA102 and TA103 repeat them.
    pub date: &'a str,
    pub time: &'a str,
    /// ISA12, such as `00401`.
    pub version: &'a str,
    /// ISA13.
    pub control_number: &'a str,
    /// ISA15, `P` or `T`.
    pub usage: &'a str,
    /// The element separator, component separator (ISA16), repetition separator (ISA11 from
    /// 00402 on; `None` where the partner wrote `U`) and segment terminator it was written with.
    pub element: u8,
    pub component: u8,
    pub repetition: Option<u8>,
    pub terminator: u8,
}

/// One functional group answered by a 997 or 999.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAnswer<'a> {
    /// GS01 (AK101), GS02, GS03 (the answer's GS03 and GS02), GS06 (AK102), GS08 (AK103 in a
    /// 999; which of the two answers it: see [`Functional::for_version`]).
    pub functional_id: &'a str,
    pub application_sender: &'a str,
    pub application_receiver: &'a str,
    pub control_number: &'a str,
    pub version: &'a str,
    pub sets: Vec<SetAnswer<'a>>,
    /// AK901.
    pub status: Status,
    /// AK905: the group's syntax error code, where one is reported.
    pub error: Option<&'a str>,
    /// AK902: the number of sets GE01 declared (those received, where it was not read).
    pub included: usize,
    /// AK903: the number of sets received (a rejected group may list only the set in error
    /// in AK2, of more received).
    pub received: usize,
}

/// One transaction set in AK2..AK5 (IK5 in a 999).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetAnswer<'a> {
    /// ST01 (AK201), ST02 (AK202), ST03 (AK203 in a 999).
    pub id: &'a str,
    pub control_number: &'a str,
    pub implementation: Option<&'a str>,
    pub status: Status,
    /// AK502 / IK502: the set's syntax error code, where one is reported.
    pub error: Option<&'a str>,
}

/// Which functional acknowledgement answers a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Functional {
    /// 997, for versions up to 004010.
    Ack997,
    /// 999 (005010X231A1), for 005010 on.
    Ack999,
}

impl Functional {
    /// The answer to a group of version GS08 (`004010`, `005010X222A1`): a 999 from 005010
    /// on, a 997 before; a version that does not start with six digits is answered by a 997,
    /// which every version reads.
    pub fn for_version(gs08: &str) -> Functional {
        match gs08.get(..6).and_then(|v| v.parse::<u32>().ok()) {
            Some(v) if v >= 5010 => Functional::Ack999,
            _ => Functional::Ack997,
        }
    }

    pub const fn id(self) -> &'static str {
        match self {
            Functional::Ack997 => "997",
            Functional::Ack999 => "999",
        }
    }

    /// GS08 of the group that carries it.
    fn gs08(self, answered: &str) -> &str {
        match self {
            Functional::Ack997 => answered,
            Functional::Ack999 => IMPLEMENTATION_999,
        }
    }
}

/// The 999's implementation guide (ST03, GS08).
pub const IMPLEMENTATION_999: &str = "005010X231A1";

/// What the answer holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer<'a> {
    /// TA104 and TA105, where a TA1 is due.
    pub ta1: Option<(Status, &'a str)>,
    /// The groups a 997 or 999 answers, in the order received.
    pub groups: Vec<GroupAnswer<'a>>,
}

impl Answer<'_> {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.ta1.is_none() && self.groups.is_empty()
    }

    /// The set identifiers it holds: `TA1`, `997`, `999`, in that order, each once.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        if self.ta1.is_some() {
            kinds.push("TA1");
        }
        for g in &self.groups {
            let id = Functional::for_version(g.version).id();
            if !kinds.contains(&id) {
                kinds.push(id);
            }
        }
        kinds
    }
}

/// When the answer is prepared: the date CCYYMMDD (GS04; ISA09 is its YYMMDD) and the time
/// HHMM (ISA10, GS05), in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared<'a> {
    pub ccyymmdd: &'a str,
    pub hhmm: &'a str,
}

/// Our ISA13 for the `n`th answer to a partner: nine digits, 000000001 to 999999999, then
/// round again (a partner keeps ISA13s for days or months, not for a billion interchanges).
pub fn control_number(n: i64) -> String {
    let n = (n.max(1) - 1).rem_euclid(999_999_999) + 1;
    format!("{n:09}")
}

/// The bytes of the answer: ISA, the TA1 where due, a group `FA` per version answered holding
/// a 997 or 999 per group, IEA. `own` is the answer's ISA13 (see [`control_number`]).
pub fn build(to: &Answered<'_>, answer: &Answer<'_>, own: &str, prepared: Prepared<'_>) -> Vec<u8> {
    let mut w = Writer {
        out: Vec::with_capacity(256 + 128 * answer.groups.len()),
        to,
        segments: 0,
    };
    let ccyymmdd = prepared.ccyymmdd;
    let yymmdd = ccyymmdd.get(2..).unwrap_or(ccyymmdd);
    let hhmm = prepared.hhmm;
    let isa11 = to.repetition.map(|b| (b as char).to_string());
    let isa16 = (to.component as char).to_string();
    // The fixed widths of the ISA (X12.5): ISA02 and ISA04 ten spaces, ISA06 and ISA08
    // fifteen, the qualifiers two.
    w.segment(&[
        "ISA",
        "00",
        "          ",
        "00",
        "          ",
        &fixed(to.receiver_qualifier, 2),
        &fixed(to.receiver, 15),
        &fixed(to.sender_qualifier, 2),
        &fixed(to.sender, 15),
        yymmdd,
        hhmm,
        isa11.as_deref().unwrap_or("U"),
        to.version,
        own,
        "0",
        to.usage,
        &isa16,
    ]);
    if let Some((status, note)) = answer.ta1 {
        w.segment(&[
            "TA1",
            to.control_number,
            to.date,
            to.time,
            status.code(),
            note,
        ]);
    }
    // One FA group per kind of answer (a 997 group and a 999 group where the partner mixed
    // versions), each numbered after our ISA13, so that GS06 is as unique as it is.
    let own_number = own.trim_start_matches('0');
    let mut fa_groups = 0usize;
    for kind in [Functional::Ack997, Functional::Ack999] {
        let answered: Vec<&GroupAnswer<'_>> = answer
            .groups
            .iter()
            .filter(|g| Functional::for_version(g.version) == kind)
            .collect();
        let Some(first) = answered.first() else {
            continue;
        };
        fa_groups += 1;
        let gs06 = if fa_groups == 1 {
            own_number.to_string()
        } else {
            format!("{own_number}{fa_groups}")
        };
        w.segment(&[
            "GS",
            "FA",
            first.application_receiver,
            first.application_sender,
            ccyymmdd,
            hhmm,
            &gs06,
            "X",
            kind.gs08(first.version),
        ]);
        for (k, g) in answered.iter().enumerate() {
            let st02 = format!("{:04}", k + 1);
            w.segments = 0;
            match kind {
                Functional::Ack997 => w.segment(&["ST", "997", &st02]),
                Functional::Ack999 => w.segment(&["ST", "999", &st02, IMPLEMENTATION_999]),
            }
            match kind {
                Functional::Ack997 => w.segment(&["AK1", g.functional_id, g.control_number]),
                Functional::Ack999 => {
                    w.segment(&["AK1", g.functional_id, g.control_number, g.version])
                }
            }
            for s in &g.sets {
                let mut ak2 = vec!["AK2", s.id, s.control_number];
                if kind == Functional::Ack999
                    && let Some(st03) = s.implementation
                {
                    ak2.push(st03);
                }
                w.segment(&ak2);
                let tag = match kind {
                    Functional::Ack997 => "AK5",
                    Functional::Ack999 => "IK5",
                };
                match s.error {
                    Some(code) => w.segment(&[tag, s.status.code(), code]),
                    None => w.segment(&[tag, s.status.code()]),
                }
            }
            let included = g.included.to_string();
            let received = g.received.to_string();
            let accepted = g
                .sets
                .iter()
                .filter(|s| s.status != Status::Rejected)
                .count()
                .to_string();
            match g.error {
                Some(code) => w.segment(&[
                    "AK9",
                    g.status.code(),
                    &included,
                    &received,
                    &accepted,
                    code,
                ]),
                None => w.segment(&["AK9", g.status.code(), &included, &received, &accepted]),
            }
            // SE01 counts ST through SE.
            let se01 = (w.segments + 1).to_string();
            w.segment(&["SE", &se01, &st02]);
        }
        w.segment(&["GE", &answered.len().to_string(), &gs06]);
    }
    w.segment(&["IEA", &fa_groups.to_string(), own]);
    w.out
}

/// `value` cut or padded with spaces to `width` bytes, as the ISA's fixed widths need (ISA06
/// and ISA08 were read trimmed).
fn fixed(value: &str, width: usize) -> String {
    let mut s: String = value.chars().take(width).collect();
    while s.len() < width {
        s.push(' ');
    }
    s
}

struct Writer<'a> {
    out: Vec<u8>,
    to: &'a Answered<'a>,
    /// Segments written since the last ST, for SE01.
    segments: usize,
}

impl Writer<'_> {
    /// One segment: its elements joined by the partner's element separator, then its terminator.
    fn segment(&mut self, elements: &[&str]) {
        for (k, e) in elements.iter().enumerate() {
            if k > 0 {
                self.out.push(self.to.element);
            }
            self.out.extend_from_slice(e.as_bytes());
        }
        self.out.push(self.to.terminator);
        self.segments += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Prepared<'static> = Prepared {
        ccyymmdd: "20261205",
        hhmm: "0907",
    };

    fn answered() -> Answered<'static> {
        Answered {
            sender_qualifier: "ZZ",
            sender: "ACMERETAIL",
            receiver_qualifier: "12",
            receiver: "5551234567",
            date: "261201",
            time: "0930",
            version: "00401",
            control_number: "000001001",
            usage: "P",
            element: b'*',
            component: b'>',
            repetition: None,
            terminator: b'~',
        }
    }

    fn group(version: &'static str, sets: Vec<SetAnswer<'static>>) -> GroupAnswer<'static> {
        GroupAnswer {
            functional_id: "PO",
            application_sender: "ACMERETAIL",
            application_receiver: "5551234567",
            control_number: "1001",
            version,
            included: sets.len(),
            received: sets.len(),
            sets,
            status: Status::Accepted,
            error: None,
        }
    }

    fn set(id: &'static str, st02: &'static str) -> SetAnswer<'static> {
        SetAnswer {
            id,
            control_number: st02,
            implementation: None,
            status: Status::Accepted,
            error: None,
        }
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap().replace('~', "~\n")
    }

    #[test]
    fn a_ta1_alone_swaps_the_parties_and_repeats_isa09_isa10_isa13() {
        let answer = Answer {
            ta1: Some((Status::Accepted, NO_ERROR)),
            groups: Vec::new(),
        };
        let b = build(&answered(), &answer, "000000007", AT);
        assert_eq!(
            text(b),
            "ISA*00*          *00*          *12*5551234567     *ZZ*ACMERETAIL     *261205*0907*U*00401*000000007*0*P*>~\n\
             TA1*000001001*261201*0930*A*000~\n\
             IEA*0*000000007~\n"
        );
    }

    #[test]
    fn the_answers_isa_is_106_bytes_with_its_fixed_widths() {
        let mut to = answered();
        to.receiver = "A-RECEIVER-LONGER-THAN-FIFTEEN";
        let b = build(&to, &Answer::default(), "000000001", AT);
        let isa_end = b.iter().position(|&c| c == b'~').unwrap();
        assert_eq!(isa_end, 105, "{}", String::from_utf8_lossy(&b));
        // And our own reader takes it (an interchange with no group is valid).
        let read: Vec<_> = crate::x12::interchanges(&b).collect();
        assert!(read[0].is_ok(), "{read:?}");
    }

    #[test]
    fn a_997_answers_an_004010_group_set_by_set() {
        let answer = Answer {
            ta1: None,
            groups: vec![group(
                "004010",
                vec![set("850", "0001"), set("850", "0002")],
            )],
        };
        let b = build(&answered(), &answer, "000000012", AT);
        assert_eq!(
            text(b),
            "ISA*00*          *00*          *12*5551234567     *ZZ*ACMERETAIL     *261205*0907*U*00401*000000012*0*P*>~\n\
             GS*FA*5551234567*ACMERETAIL*20261205*0907*12*X*004010~\n\
             ST*997*0001~\n\
             AK1*PO*1001~\n\
             AK2*850*0001~\n\
             AK5*A~\n\
             AK2*850*0002~\n\
             AK5*A~\n\
             AK9*A*2*2*2~\n\
             SE*8*0001~\n\
             GE*1*12~\n\
             IEA*1*000000012~\n"
        );
    }

    #[test]
    fn a_999_answers_a_005010_group_with_its_implementation_references() {
        let mut to = answered();
        to.version = "00501";
        to.repetition = Some(b'^');
        to.component = b':';
        to.usage = "T";
        let mut s = set("837", "0001");
        s.implementation = Some("005010X222A1");
        let mut g = group("005010X222A1", vec![s]);
        g.functional_id = "HC";
        let answer = Answer {
            ta1: Some((Status::Accepted, NO_ERROR)),
            groups: vec![g],
        };
        let b = build(&to, &answer, "000000003", AT);
        assert_eq!(
            text(b),
            "ISA*00*          *00*          *12*5551234567     *ZZ*ACMERETAIL     *261205*0907*^*00501*000000003*0*T*:~\n\
             TA1*000001001*261201*0930*A*000~\n\
             GS*FA*5551234567*ACMERETAIL*20261205*0907*3*X*005010X231A1~\n\
             ST*999*0001*005010X231A1~\n\
             AK1*HC*1001*005010X222A1~\n\
             AK2*837*0001*005010X222A1~\n\
             IK5*A~\n\
             AK9*A*1*1*1~\n\
             SE*6*0001~\n\
             GE*1*3~\n\
             IEA*1*000000003~\n"
        );
    }

    #[test]
    fn a_rejected_set_and_group_carry_their_codes_and_the_accepted_count() {
        let mut bad = set("850", "0002");
        bad.status = Status::Rejected;
        bad.error = Some("4");
        let mut g = group("004010", vec![set("850", "0001"), bad]);
        g.status = Status::Rejected;
        g.error = Some("5");
        g.included = 3;
        let answer = Answer {
            ta1: Some((Status::Rejected, DUPLICATE_CONTROL_NUMBER)),
            groups: vec![g],
        };
        let b = text(build(&answered(), &answer, "000000004", AT));
        assert!(b.contains("TA1*000001001*261201*0930*R*025~"), "{b}");
        assert!(b.contains("AK2*850*0002~\nAK5*R*4~"), "{b}");
        assert!(b.contains("AK9*R*3*2*1*5~"), "{b}");
    }

    #[test]
    fn a_rejected_group_lists_the_set_in_error_of_more_received() {
        // An interchange rejected for the SE01 of its third set: a TA1 `R` `024`, the group
        // rejected with the three sets read as included and received, none accepted.
        let mut bad = set("850", "0003");
        bad.status = Status::Rejected;
        bad.error = Some("4");
        let mut g = group("004010", vec![bad]);
        g.status = Status::Rejected;
        (g.included, g.received) = (3, 3);
        let answer = Answer {
            ta1: Some((Status::Rejected, INVALID_CONTENT)),
            groups: vec![g],
        };
        let b = text(build(&answered(), &answer, "000000005", AT));
        assert!(b.contains("TA1*000001001*261201*0930*R*024~"), "{b}");
        assert!(
            b.contains("AK1*PO*1001~\nAK2*850*0003~\nAK5*R*4~\nAK9*R*3*3*0~"),
            "{b}"
        );
    }

    #[test]
    fn mixed_versions_get_a_997_group_and_a_999_group_each_counted_by_iea01() {
        let answer = Answer {
            ta1: None,
            groups: vec![
                group("004010", vec![set("850", "1")]),
                group("005010", vec![set("810", "1")]),
            ],
        };
        assert_eq!(answer.kinds(), ["997", "999"]);
        let b = build(&answered(), &answer, "000000020", AT);
        let t = text(b.clone());
        assert!(
            t.contains("GS*FA*5551234567*ACMERETAIL*20261205*0907*20*X*004010~"),
            "{t}"
        );
        assert!(
            t.contains("GS*FA*5551234567*ACMERETAIL*20261205*0907*202*X*005010X231A1~"),
            "{t}"
        );
        assert!(t.ends_with("IEA*2*000000020~\n"), "{t}");
        // Our own reader checks every count and control number of it.
        let read: Vec<_> = crate::x12::interchanges(&b)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].groups.len(), 2);
        assert_eq!(read[0].sets.len(), 2);
        assert_eq!(read[0].isa.control_number, "000000020");
        assert_eq!(read[0].isa.sender, "5551234567");
        assert_eq!(read[0].outside, Vec::<compact_str::CompactString>::new());
    }

    #[test]
    fn the_version_decides_997_or_999() {
        assert_eq!(Functional::for_version("004010"), Functional::Ack997);
        assert_eq!(Functional::for_version("003040"), Functional::Ack997);
        assert_eq!(Functional::for_version("005010X222A1"), Functional::Ack999);
        assert_eq!(Functional::for_version("006020"), Functional::Ack999);
        assert_eq!(Functional::for_version("X"), Functional::Ack997);
    }

    #[test]
    fn our_control_numbers_are_nine_digits_and_go_round_after_999999999() {
        assert_eq!(control_number(1), "000000001");
        assert_eq!(control_number(999_999_999), "999999999");
        assert_eq!(control_number(1_000_000_000), "000000001");
        assert_eq!(control_number(0), "000000001");
    }
}
